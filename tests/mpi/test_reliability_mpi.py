"""issue 12 under mpiexec (2 ranks): Ctrl-C says so once (exit 130, run.json "interrupted"), and no rank leaves
local copies behind, whether interrupted or failing."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, mpiexec

pytestmark = pytest.mark.mpi


def test_ctrl_c_under_mpi_one_line_exit_130(tiny, tmp_path, run_mpi):
    """Regression: Ctrl-C during `mpiexec -n 2 dlbench run` printed KeyboardInterrupt twice."""
    loc, out = tmp_path / "loc", tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DLBENCH_NO_MPI", None)
    p = subprocess.Popen([mpiexec(), "-n", "2", sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn",
                          "--strategy", "pls", "--data-dir", str(tiny), "--epochs", "2000", "--compute-time", "0.002",
                          "--out", str(out), "--local-dir", str(loc)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                         preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL), os.setpgrp()))
    deadline = time.monotonic() + 90
    while len(list(loc.glob("run-*/node0/rank*/*.row"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the launcher and both ranks
    _out, err = p.communicate(timeout=90)
    assert p.returncode == 130, err
    ours = [ln for ln in err.splitlines() if ln.startswith("dlbench:")]
    assert len(ours) == 1 and ours[0].startswith("dlbench: interrupted by SIGINT"), err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err, err
    run = json.loads(next(out.rglob("run.json")).read_text())
    assert run["status"] == "interrupted"
    # the ranks remove their copies; a rank the launcher kills mid-clean-up (MPI_Abort of its peer on a loaded
    # machine) leaves them to the node's guardian (spawn_reaper), which looks every REAPER_POLL_S: allow it that
    deadline = time.monotonic() + 10
    while list(loc.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(loc.iterdir()) == [], [str(x) for x in loc.rglob("*")]


def test_failing_rank_leaves_no_local_copies(tiny, tmp_path, run_mpi):
    """A rank fails (a broken file) while staging: the failing rank removes its copies before MPI_Abort; a peer
    killed by the abort before it could clean up leaves a run dir whose owners are dead, which the next run
    removes."""
    victim = sorted(tiny.rglob("*.h5"))[2]
    good = victim.read_bytes()
    victim.write_bytes(good[:64])
    loc = tmp_path / "loc"
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", "local", "--data-dir", tiny, "--epochs", 1,
                 "--compute-time", "0", "--out", tmp_path / "res", "--local-dir", loc], timeout=120)
    assert r.returncode != 0 and "dlbench: error: rank" in r.stderr
    leftover = [p for p in loc.rglob("*.row")]
    victim.write_bytes(good)
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", "local", "--data-dir", tiny, "--epochs", 1,
                 "--compute-time", "0", "--out", tmp_path / "res", "--local-dir", loc], timeout=120)
    assert r.returncode == 0, r.stderr
    assert list(loc.iterdir()) == [], leftover
