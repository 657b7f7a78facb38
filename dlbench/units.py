"""Byte sizes as dlbench prints them: one formatter, binary units (KiB, MiB, GiB, TiB: powers of 1,024, as MLPerf
Storage reports them). At the bottom of the package (it imports nothing of dlbench), so storage/ and everything
above it can use it.

``format_bytes(n)`` picks the largest unit ``n`` reaches (``"1.5 GiB"``; under 1 KiB ``"512 B"``);
``format_bytes(n, "MiB", digits=2, group=True)`` fixes the unit, the digits after the point and the thousands
separator (``"1,234.50 MiB"``); a rate is the same text and ``"/s"``. ``exact=True`` is the capacity errors' style:
the exact count of bytes, then its size in decimal gigabytes (``"5,200 bytes (5.2e-06 GB)"``)."""

from __future__ import annotations

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
UNITS = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB}


def format_bytes(n: float, unit: str | None = None, *, digits: int = 1, group: bool = False,
                 exact: bool = False) -> str:
    """``n`` bytes as text: in ``unit`` (one of ``UNITS``; None: the largest unit ``n`` reaches, or whole bytes
    "B" below 1 KiB) with ``digits`` after the point and, with ``group``, a thousands separator; ``exact``: the
    count of bytes (grouped with ``group``) and its decimal-GB size to three significant digits."""
    sep = "," if group else ""
    if exact:
        return f"{int(n):{sep}} bytes ({n / 1e9:.3g} GB)"
    if unit is None:
        unit = next((u for u in ("TiB", "GiB", "MiB", "KiB") if n >= UNITS[u]), None)
        if unit is None:
            return f"{int(n):{sep}} B"
    if unit not in UNITS:
        raise ValueError(f"unit={unit!r}: allowed: {', '.join(UNITS)} or None (the largest unit n reaches)")
    return f"{n / UNITS[unit]:{sep}.{digits}f} {unit}"
