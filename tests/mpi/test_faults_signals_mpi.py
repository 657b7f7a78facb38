"""issue 15 under mpiexec (2 ranks, tiny data): a signal to ONE rank of staging/local/pls, ranks killed outright, and
memory an aborted MPI job leaves in /dev/shm."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, mpiexec

pytestmark = pytest.mark.mpi


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"PMI_RANK="):
            return int(kv.split(b"=", 1)[1])
    return None


def _wait_empty(d: Path, timeout: float = 20.0) -> list:
    """What is left under ``d`` once clean-up (and the reaper of a rank killed by MPI_Abort) had its time."""
    deadline = time.monotonic() + timeout
    while list(d.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return sorted(str(p) for p in d.rglob("*"))


@pytest.mark.parametrize("strategy,victim", [("staging", 1), ("local", 1), ("pls", 1), ("staging", 0)])
def test_sigterm_to_one_rank_is_an_interrupt_not_a_data_failure(tiny, tmp_path, strategy, victim):
    """Regression (4 of 5 tries): SIGTERM to one rank deleted the other rank's local copies while it read
    them; the run was recorded as a FileNotFoundError failure (exit 5). Now no rank removes files another
    live rank uses, the job ends "interrupted by SIGTERM on rank R" (exit 143, one line, run.json
    interrupted) and nothing stays in --local-dir. Batches of 1 and 20 ms steps: the survivor reads its
    copies every step, not only between barriers."""
    if mpiexec() is None:
        pytest.skip("mpiexec not found")
    loc, out = tmp_path / "loc", tmp_path / "res"
    loc.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DLBENCH_NO_MPI", None)
    p = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn",
                          "--strategy", strategy, "--data-dir", str(tiny), "--epochs", "2000", "--batch-size", "1",
                          "--compute-time", "0.02", "--out", str(out), "--local-dir", str(loc), "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                         start_new_session=True)
    try:
        # the marker: both owner markers in the run directory and copies on disk (the epochs have begun)
        deadline = time.monotonic() + 90
        pids: dict = {}
        while time.monotonic() < deadline:
            owners = list(loc.glob("run-*/.owner-*"))
            pids = {_rank_of(int(m.name.rpartition("-")[2])): int(m.name.rpartition("-")[2]) for m in owners}
            if len(pids) == 2 and None not in pids and len(list(loc.glob("run-*/node0/**/*.row"))) >= 8:
                break
            time.sleep(0.05)
        assert len(pids) == 2, (pids, p.poll())
        time.sleep(0.3)
        os.kill(pids[victim], signal.SIGTERM)
        _out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 143, err
    ours = [ln for ln in err.splitlines() if ln.startswith("dlbench:")]
    assert len(ours) == 1 and ours[0].startswith(f"dlbench: interrupted by SIGTERM on rank {victim}; "), err
    assert "FileNotFoundError" not in err and "Traceback" not in err, err
    run = json.loads(next(out.rglob("run.json")).read_text())
    assert run["status"] == "interrupted" and run["error"] == f"interrupted by SIGTERM on rank {victim}", run["error"]
    assert _wait_empty(loc) == []


def test_aborted_job_leaves_no_mpich_shm_segment(tiny, tmp_path, run_mpi):
    """Regression: every aborted MPI job left a 2 MB /dev/shm/mpich_shm_* (MPI_Abort kills the ranks before
    MPI_Finalize removes it). Induced failure: a broken data file; the probe records the job's own segment."""
    victim = sorted(tiny.rglob("*.h5"))[2]
    victim.write_bytes(victim.read_bytes()[:64])
    probe = tmp_path / "probe"
    probe.mkdir()
    r = run_mpi([probe, "run", "--workload", "hep_cnn", "--strategy", "naive", "--data-dir", tiny, "--epochs", 1,
                 "--compute-time", "0", "--out", tmp_path / "res", "--no-progress"], timeout=120,
                python_args=(str(Path(__file__).with_name("shm_probe.py")),))
    assert r.returncode != 0 and "dlbench: error: rank" in r.stderr, r.stderr
    segs = {s for f in probe.glob("shm-*") for s in f.read_text().split()}
    if not segs:
        pytest.skip("this MPI maps no /dev/shm/mpich_shm_* segment")
    assert [s for s in segs if os.path.exists(s)] == []


def test_normal_end_leaves_no_mpich_shm_segment(tiny, tmp_path, run_mpi):
    """The control: a job that ends normally (MPI_Finalize) leaves none either."""
    probe = tmp_path / "probe"
    probe.mkdir()
    r = run_mpi([probe, "run", "--workload", "hep_cnn", "--strategy", "naive", "--data-dir", tiny, "--epochs", 1,
                 "--compute-time", "0", "--out", tmp_path / "res", "--no-progress"], timeout=120,
                python_args=(str(Path(__file__).with_name("shm_probe.py")),))
    assert r.returncode == 0, r.stderr
    segs = {s for f in probe.glob("shm-*") for s in f.read_text().split()}
    assert [s for s in segs if os.path.exists(s)] == []


def test_ranks_killed_outright_leave_no_local_copies(tiny, tmp_path):
    """Regression (two quick Ctrl-C under mpiexec: the launcher's "Ctrl-C again to force abort" SIGKILLs the
    ranks in their clean-up, leaking the copies): the node's guardian removes the run directory once every
    rank that owned it is dead. Here both ranks are SIGKILLed while they hold copies."""
    if mpiexec() is None:
        pytest.skip("mpiexec not found")
    loc = tmp_path / "loc"
    loc.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DLBENCH_NO_MPI", None)
    p = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn",
                          "--strategy", "staging", "--data-dir", str(tiny), "--epochs", "2000", "--compute-time",
                          "0.002", "--out", str(tmp_path / "res"), "--local-dir", str(loc), "--no-progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        owners: list = []
        while time.monotonic() < deadline:
            owners = [int(m.name.rpartition("-")[2]) for m in loc.glob("run-*/.owner-*")]
            if len(owners) == 2 and len(list(loc.glob("run-*/node0/*.row"))) >= 8:
                break
            time.sleep(0.05)
        assert len(owners) == 2
        for pid in owners:
            os.kill(pid, signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert _wait_empty(loc, timeout=15) == []
