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


def test_a_runs_schedule_is_costed_per_epoch_and_llm_ranks_are_the_engines():
    from dlbench.checkpoint.engine import Saver
    from dlbench.comm import SerialComm

    b, f = S.run_ranks(1000, 4)                      # rank 0 writes the model size in one file
    assert b.tolist() == [1000, 0, 0, 0] and f.tolist() == [1, 0, 0, 0]
    kw = {"layers": 2, "hidden": 64, "ffn": 128, "vocab": 500, "heads": 4, "kv_heads": 2, "tp": 2, "pp": 1,
          "zero": 1}
    b, f = S.run_ranks(0, 4, kw)                     # an LLM: every rank its shards, DP = 4 / (TP x PP) = 2
    m = get_model(None, dp=2, **kw)
    assert b.tolist() == [Saver(SerialComm(), m, r, "shards", "/nonexistent").nbytes for r in range(4)]
    assert f.tolist() == [2, 2, 1, 1]                # data-parallel rank 1 of ZeRO-1: optimizer states only
    with pytest.raises(ConfigError, match="does not divide the 3 ranks"):
        S.run_ranks(0, 3, kw)
    ck = S.run_schedule(*S.run_ranks(10**9, 2), nodes=2, ranks_per_node=1, steps_per_epoch=[5, 5, 5], every=4,
                        first=0, curve=S.parse_curve("1:1,2:1.5"), link_gbps=2.0, file_s=0.5)
    assert ck["steps"] == [4, 8, 12] and ck["count"] == 3 and ck["bytes"] == 3 * 10**9
    assert ck["durable_s"] == pytest.approx(1.0 + 0.5)     # one writing node: t(1) = 1 GB/s binds, + a file
    assert ck["per_epoch_s"] == pytest.approx([1.5, 1.5, 1.5]) and ck["time_s"] == pytest.approx(4.5)


def test_the_write_side_comes_from_the_calibration():
    class P:
        name = "p"
        calibration = {"nodes": 2, "shared_write": {"small_file_s": 0.002, "mb_per_s": {"2": [300.0, 500.0]}}}

    link, file_s, curve, what = S.write_side(P())
    assert (link, file_s, curve) == (pytest.approx(0.2), 0.002, [(2.0, pytest.approx(0.4))])
    assert "flat beyond" in what
    assert S.write_side(P(), "1:3")[2] == [(1.0, 3.0)]

    class Q:
        name = "q"
        calibration = None

    with pytest.raises(ConfigError, match="calibration.shared_write"):
        S.write_side(Q())
