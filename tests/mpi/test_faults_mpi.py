"""Issue 15, faults that lost data: a SIGTERM to one rank of staging/local/pls deleted the other rank's local
copies while it still read them (the run ended as a FileNotFoundError failure, exit 5); aborted jobs left
/dev/shm/mpich_shm_* behind. Now the node's ranks are told, each removes only what it holds, the last one out
removes the rest, the run records "interrupted" (exit 143) and no shared-memory file is left."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi
ROOT = Path(__file__).resolve().parents[2]


def _mpiexec():
    cand = Path(sys.executable).parent / "mpiexec"
    if cand.exists():
        return str(cand)
    import shutil

    return shutil.which("mpiexec") or pytest.skip("mpiexec not found")


def _rank_pid(cmd_part: str, rank: int) -> int | None:
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = (p / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd_part in cmd and "dlbench.cli" in cmd and f"PMI_RANK={rank}".encode() in env:
            return int(p.name)
    return None


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    d = tmp_path_factory.mktemp("faults") / "hep"
    generate(load("hep_cnn", scale="tiny"), d, seed=0, progress=False)
    return d


@pytest.mark.parametrize("strategy,rank", [("staging", 1), ("pls", 1), ("local", 0)])
def test_sigterm_to_one_rank_interrupts_the_run_and_loses_no_live_rank_files(data, tmp_path, strategy, rank):
    shm0 = {p.name for p in Path("/dev/shm").glob("mpich_shm_*")}
    loc, res = tmp_path / "loc", tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_PFS_STATE": str(tmp_path)}
    env.pop("DLBENCH_NO_MPI", None)
    p = subprocess.Popen([_mpiexec(), "-n", "2", sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn",
                          "--strategy", strategy, "--data-dir", str(data), "--local-dir", str(loc),
                          "--ranks-per-node", "2", "--epochs", "200", "--compute-time", "0.02", "-o", str(res),
                          "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not list(loc.glob("run-*/node*/*")):
            time.sleep(0.1)
        time.sleep(0.5)                         # training from the local copies
        pid = _rank_pid(str(loc), rank)
        assert pid is not None, "rank process not found"
        os.kill(pid, signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err[-1500:]
    assert "FileNotFoundError" not in err and "interrupted by SIGTERM" in err
    run = json.loads(next(res.rglob("run.json")).read_text())
    assert run["status"] == "interrupted"
    assert not [f for f in loc.rglob("*") if f.is_file()]          # nothing left, nothing lost early
    assert {p.name for p in Path("/dev/shm").glob("mpich_shm_*")} <= shm0
