"""`dlbench checkpoint` on 2 ranks: llama3-8b scaled down (TP 1 x PP 1 x DP 2, ZeRO-3), every layout."""

import json

import pytest


@pytest.mark.parametrize("layout, mode", [("stream", "sync"), ("shards", "async"), ("dcp", "async")])
def test_checkpoint_two_ranks(run_mpi, tmp_path, layout, mode):
    r = run_mpi(["checkpoint", "--model", "llama3-8b", "--scale", "2e-5", "--dp", "2", "--layout", layout,
                 "--mode", mode, "--checkpoints", "2", "--steps", "2", "--compute-time", "0.02",
                 "--ranks-per-node", "1", "--out", tmp_path / "o"])
    assert r.returncode == 0, r.stderr
    (f,) = (tmp_path / "o").glob("checkpoint/*/checkpoint.json")
    res = json.loads(f.read_text())
    s = res["summary"]
    assert res["config"]["ranks"] == 2 and s["checkpoints"] == 2
    assert s["files_per_checkpoint"] == {"stream": 2, "shards": 4, "dcp": 3}[layout]
    for c in res["per_checkpoint"]:
        assert c["bandwidth_bytes_per_s"] == pytest.approx(c["bytes"] / c["durable_s"])
    assert s["mlperf_mean_of_rates_bytes_per_s"] > 0 and s["bandwidth_bytes_per_s"] > 0
    own, cross = res["restore"]["own"], res["restore"]["cross"]
    assert [p["as_rank"] for p in own["per_rank"]] == [0, 1]
    assert [p["as_rank"] for p in cross["per_rank"]] == [1, 0]      # each rank reads the other node's files
    assert own["bytes"] == cross["bytes"] == s["bytes_per_checkpoint"]
    if layout != "dcp":
        re = res["restore"]["reshard"]
        assert re["per_rank"][0]["to"] == {"tp": 2, "pp": 1, "dp": 1}
        assert re["missing_bytes"] < 1e-3 * re["needed_bytes"]     # --scale's rounding only
        assert own["resident_before_bytes"] == 0
    if mode == "async":
        assert s["step_inflation"] is not None
