"""dlbench.simulate.checkpoint: checkpoints at node count against an aggregate write curve; Young/Daly."""

import math

import pytest

from dlbench.checkpoint.models import PRESETS, get_model, rank_bytes
from dlbench.errors import ConfigError
from dlbench.simulate import checkpoint as S


def test_uneven_zero1_nodes_set_the_time():
    m = PRESETS["llama3-405b"]
    curve = S.parse_curve("1:10,64:10000")          # the aggregate never binds: the 25 GB/s link does
    r = S.cost(m, 64, 8, curve, 25.0)
    node0 = sum(rank_bytes(m, k) for k in range(8))                 # data-parallel rank 0: model + optimizer
    node_dp1 = sum(rank_bytes(m, k) for k in range(256, 264))       # optimizer only
    assert r["node_bytes_max"] == node0 > node_dp1 == r["node_bytes_min"]
    assert r["durable_s"] == pytest.approx(node0 / 25e9)
    assert r["bandwidth_bytes_per_s"] == pytest.approx(r["bytes"] / r["durable_s"])


def test_aggregate_curve_is_shared_by_the_writing_nodes():
    m = get_model("llama3-70b")
    r = S.cost(m, 8, 8, S.parse_curve("1:5,8:40"), 25.0, file_s=0.01)
    assert r["node_rate_bytes_per_s"] == pytest.approx(40e9 / 8)
    assert r["durable_s"] == pytest.approx(r["node_bytes_max"] / 5e9 + 2 * 0.01)   # 2 shard files per rank
    with pytest.raises(ConfigError, match="--nodes=4"):
        S.cost(m, 4, 8, S.parse_curve("1:5"), 25.0)


def test_young_daly():
    yd = S.young_daly(60.0, 50_000, 1000)
    m = 50_000 * 3600 / 1000
    assert yd["interval_s"] == pytest.approx(math.sqrt(2 * 60 * m))
    assert yd["goodput"] == pytest.approx(1 - 60 / yd["interval_s"] - yd["interval_s"] / 2 / m)
    with pytest.raises(ConfigError, match="--mtbf-hours=0"):
        S.young_daly(1.0, 0, 8)


def test_scale_benchmark_smoke():
    import importlib.util
    from pathlib import Path

    p = Path(__file__).resolve().parents[2] / "benchmarks" / "checkpoint_scale.py"
    spec = importlib.util.spec_from_file_location("checkpoint_scale", p)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--models", "llama3-70b"])
    assert rows[0]["ranks"] == 64 and rows[0]["goodput"] < 1
