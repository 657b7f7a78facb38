"""The run's ceiling under MPI (dlbench/run/ceiling.py): every rank replays the same truncated plan (pls: its
exchange between ranks cut to the replayed steps), samples summed over ranks; the measured counters untouched."""
import json

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("strategy", ["pls", "lbann"])
def test_two_ranks_ceiling(tiny, tmp_path, run_mpi, strategy):
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", strategy, "--data-dir", tiny, "--epochs", 2,
                 "--batch-size", 4, "--compute-time", "0.001", "--ceiling-steps", 2, "--out", out], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["ceiling"]["steps"] == 2 and s["ceiling"]["samples"] == 2 * 2 * 4
    assert s["headroom"] == pytest.approx(s["ceiling_samples_per_s"] / s["samples_per_s"])
    # the replay reads through its own counters: the run's shared-tier bytes are the epochs' reads only
    shared = s["io_counters"]["by_class"]["shared"]["POSIX_BYTES_READ"]
    assert shared == s["bytes_by_tier"]["shared"] + s["prologue_bytes_by_tier"]["shared"]
