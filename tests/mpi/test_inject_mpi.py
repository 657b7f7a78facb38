"""--inject under mpiexec: a slow rank shows up in the summary's imbalance; injected read failures are
retried and counted on every rank."""

import json

import pytest

pytestmark = pytest.mark.mpi


def test_inject_slow_rank_shows_in_imbalance(tiny, tmp_path, run_mpi):
    out = tmp_path / "res"
    # rank 1 computes 6x longer (5 ms -> 30 ms a step, 4 steps an epoch); no barrier: ranks run apart
    r = run_mpi(["run", "--workload", "hep_cnn", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0.005",
                 "--batch-size", 8, "--inject", "slow-rank=1:6", "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    t = s["per_rank"]["total_epoch_time_s"]
    # expected ratio ~ (4 x 30 ms + reads) / (4 x 5 ms + reads): far above 2 even on a loaded machine
    assert t[1] > 2 * t[0]
    assert s["imbalance"] > 0.3   # 6x on one of 2 ranks: max/mean - 1 ~ 0.7
    assert s["injected"]["slow_rank"] == 1 and s["injected"]["slow_factor"] == 6
    assert "faults injected" in r.stderr


def test_inject_fail_read_retries_counted_over_ranks(tiny, tmp_path, run_mpi):
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "hep_cnn", "--data-dir", tiny, "--epochs", 2, "--compute-time", "0",
                 "--inject", "fail-read=0.3", "--verify", "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["verified_samples"] == 2 * 64      # every sample still delivered, right bytes
    assert s["injected"]["read_retries"] > 0
