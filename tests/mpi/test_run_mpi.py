"""2-rank runs under mpiexec: both strategies with --verify, and a rank that fails mid-run."""

import json

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("strategy,extra", [("naive", []), ("prefetch", ["--num-workers", "1"])])
def test_two_ranks_verify(tiny, tmp_path, run_mpi, strategy, extra):
    out = tmp_path / "res"
    r = run_mpi(["run", "--ceiling-steps", 0, "--workload", "hep_cnn", "--strategy", strategy, *extra, "--data-dir",
                 tiny, "--epochs", 2, "--compute-time", "0.001", "--barrier", "--verify", "--out", out])
    assert r.returncode == 0, r.stdout + r.stderr
    runs = list(out.rglob("run.json"))
    assert len(runs) == 1  # only rank 0 writes
    s = json.loads(runs[0].read_text())["summary"]
    assert s["ranks"] == 2 and s["verified_samples"] == 2 * 64
    assert s["read_bytes"] == 2 * 64 * 12292
    assert len(s["per_rank"]["read_bytes"]) == 2
    ioc = s["io_counters"]  # Darshan-style counters: per rank, workers' reads included
    assert len(ioc["by_rank"]) == 2 and ioc["slowest_rank"]["rank"] in (0, 1)
    assert ioc["by_class"]["shared"]["POSIX_READS"] == 2 * 64 * 2  # two arrays per sample
    assert sum(r["POSIX_BYTES_READ"] for r in ioc["by_rank"]) == s["read_bytes"]


def test_rank_failure_aborts_job_and_is_recorded(tiny, tmp_path, run_mpi):
    # break one file: whichever rank reads it first raises; the job must end (no hang) with its message
    victim = sorted(tiny.rglob("*.h5"))[2]
    victim.write_bytes(victim.read_bytes()[:64])
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "hep_cnn", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
                 "--out", out], timeout=120)
    assert r.returncode != 0
    assert "dlbench: error: rank" in r.stderr
    run = json.loads(next(out.rglob("run.json")).read_text())
    assert run["error"] and run["error"].startswith("rank ")
