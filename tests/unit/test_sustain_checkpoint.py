"""sustain with checkpoints included (issue 28): AU x the Young/Daly goodput at n accelerators."""

from dlbench import sustain as S
from dlbench.simulate.checkpoint import young_daly


def test_checkpoints_lower_the_sustained_count():
    def data_only(n):            # storage that keeps every world at AU 0.95
        return S.Point(n, 0.95, 100.0 * n, 1e6 * n, "modelled")

    n0, _ = S.largest_sustained(data_only, 0.9, 1, 1 << 16)
    with_ck = S.with_checkpoints(data_only, 60.0, 20_000.0)
    n1, pts = S.largest_sustained(with_ck, 0.9, 1, 1 << 16)
    assert n0 == 1 << 16 and 1 <= n1 < n0
    assert with_ck(n1).au >= 0.9 > with_ck(n1 + 1).au
    assert with_ck(64).au == 0.95 * young_daly(60.0, 20_000.0, 64)["goodput"]
    assert "checkpoint goodput" in with_ck(8).note
