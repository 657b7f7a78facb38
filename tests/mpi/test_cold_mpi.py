"""`--cache drop` on 2 ranks (issue 17): one rank per node evicts the dataset and the node's local copies
before every epoch; bytes per epoch are summed over ranks."""

import json

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("rpn,nodes", [(None, 1), (1, 2)])
def test_two_ranks_cache_drop_staging(tiny, tmp_path, run_mpi, rpn, nodes):
    out = tmp_path / "res"
    extra = ["--ranks-per-node", rpn] if rpn else []
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", "staging", "--data-dir", tiny, "--epochs", 2,
                 "--compute-time", "0", "--verify", "--cache", "drop", "--local-dir", tmp_path / "local",
                 "--out", out, *extra])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    c = s["cache"]
    assert s["nodes"] == nodes and s["verified_samples"] == 2 * 64
    assert [x["before_epoch"] for x in c["evictions"]] == [-1, 0, 1]
    n_data = c["evictions"][0]["files"] // nodes
    assert c["evictions"][0]["files"] == nodes * n_data          # one evicting rank per node
    # before the epochs each node's staged copies are evicted too (staging: the whole dataset per node)
    assert c["evictions"][1]["files"] == nodes * (n_data + 64)
    ep = {d["epoch"]: d for d in c["per_epoch"]}
    assert ep[0]["requested_bytes"] == ep[1]["requested_bytes"] == s["read_bytes"] // 2   # both ranks summed
    if c["device_bytes"]["available"]:
        assert c["verdict"] == "cold", c["verdict_line"]
    lat = s["read_latency"]
    assert [p["rank"] for p in lat["per_rank"]] == [0, 1] and lat["all"]["local"]["count"] == 2 * 64
