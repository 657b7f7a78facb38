"""One byte formatter (issue 27): ``dlbench.units.format_bytes`` prints what each of the formatters it replaced
printed, to the character, and refuses a unit it does not know."""

import pytest

from dlbench.units import GiB, MiB, format_bytes


@pytest.mark.parametrize("n", [0, 1, 1023, 1024, 1536, 5 * MiB + 7, 3 * GiB + 12345, 2 ** 41 + 5, 123456789.5])
def test_auto_unit_is_the_cli_listing_text(n):
    """None: the largest unit n reaches, one digit; whole bytes below 1 KiB (what the CLI's show and verify print)."""
    old = next((f"{n / k:.1f} {u}" for u, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                                                  ("KiB", 1 << 10)) if n >= k), f"{int(n)} B")
    assert format_bytes(n) == old


@pytest.mark.parametrize("n", [0, 999, 5200, 1_000_000, 73_400_320_123, 2.5e12])
def test_exact_is_the_capacity_errors_text(n):
    """exact: the count of bytes then decimal GB (storage/tiers.py's, and with group strategies/localcopy's)."""
    assert format_bytes(n, exact=True) == f"{int(n)} bytes ({n / 1e9:.3g} GB)"
    assert format_bytes(n, exact=True, group=True) == f"{int(n):,} bytes ({n / 1e9:.3g} GB)"


@pytest.mark.parametrize("n", [0, 4096, 8 << 20, 1234567890123, 0.5])
def test_fixed_unit_digits_and_grouping(n):
    assert format_bytes(n, "MiB") == f"{n / 2**20:.1f} MiB"
    assert format_bytes(n, "MiB", digits=3) == f"{n / 2**20:.3f} MiB"
    assert format_bytes(n, "MiB", digits=0) == f"{n / 2**20:.0f} MiB"
    assert format_bytes(n, "GiB", digits=2, group=True) == f"{n / 2**30:,.2f} GiB"
    assert format_bytes(n, "MiB", group=True) == f"{n / 2**20:,.1f} MiB"


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match=r"unit='MB': allowed: KiB, MiB, GiB, TiB or None"):
        format_bytes(1, "MB")
