"""Under mpiexec every rank writes its own interval files into the run folder (nothing gathered to rank 0
but per-rank figures), and the summary rebuilds from them."""

import json

import pytest

pytestmark = pytest.mark.mpi


def test_each_rank_writes_its_own_intervals(tmp_path, run_mpi):
    d = tmp_path / "hep"
    r = run_mpi(["generate", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.returncode == 0, r.stderr
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "hep_cnn", "--data-dir", d, "--epochs", 2, "--compute-time", "0.001",
                 "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    rd = next(out.rglob("run.json")).parent
    metas = [json.loads(p.read_text()) for p in rd.glob("intervals-rank*.json")]
    assert sorted(m["rank"] for m in metas) == [0, 1] and len({m["pid"] for m in metas}) == 2
    from dlbench.metrics import summarize
    from dlbench.results import read_intervals
    from dlbench.timeline import load_spilled

    s = json.loads((rd / "run.json").read_text())["summary"]
    per_rank = load_spilled(rd)
    again = summarize(per_rank, workload="hep_cnn", strategy="naive", epochs=2)
    assert again["per_rank"]["total_epoch_time_s"] == pytest.approx(s["per_rank"]["total_epoch_time_s"])
    assert again["read_bytes"] == s["read_bytes"] == 2 * 64 * 12292
    assert len(read_intervals(rd / "intervals.npz")) == 2
