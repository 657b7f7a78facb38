"""Issue 26: an MPI job fails as one job. Ranks started with different arguments (an MPMD command line, as a node
with another environment would), one rank's configuration error, a SIGTERM to a rank blocked in a collective and a
--ranks-per-node larger than the job: one line, every rank exits != 0, no hang. Every launch has a timeout that
kills its whole process group, so a regression fails instead of hanging the suite."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, mpiexec

pytestmark = pytest.mark.mpi

LIMIT_S = 60   # each launch; today's code ends these in a few seconds, the old code never


def _env(extra=None):
    e = dict(os.environ)
    e.pop("DLBENCH_NO_MPI", None)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.update(extra or {})
    return e


def _launch(segments, cwd, env=None):
    """``mpiexec SEG0 : SEG1 ...``, each segment ``(ranks, argv)`` (argv after the Python executable), in its
    own session so a hang can be killed whole."""
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found")
    pytest.importorskip("mpi4py")
    cmd = [exe]
    for i, (n, argv) in enumerate(segments):
        cmd += ([":"] if i else []) + ["-n", str(n), sys.executable, *map(str, argv)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env),
                            cwd=cwd, start_new_session=True)


def _kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (Hydra's proxy puts the ranks in process groups of their
    own: killing the launcher's group leaves them spinning)."""
    children: dict = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    todo, tree = [pid], []
    while todo:
        q = todo.pop()
        tree.append(q)
        todo += children.get(q, [])
    for q in reversed(tree):
        try:
            os.kill(q, signal.SIGKILL)
        except OSError:
            pass


def _finish(p, timeout=LIMIT_S):
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(p.pid)
        p.communicate()
        pytest.fail(f"the job hung (> {timeout} s): killed")
    return p.returncode, out, err


def _errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("dlbench:")]


def _run_args(data, out, *extra):
    return ["-m", "dlbench.cli", "run", "--workload", "hep_cnn", "--data-dir", data, "--compute-time", "0",
            "--out", out, "--no-progress", *extra]


@pytest.mark.parametrize("a,b,setting", [
    (("--epochs", "3"), ("--epochs", "5"), "'epochs': 3 on rank 0, 5 on rank 1"),
    (("--seed", "0"), ("--seed", "1"), "'seed': 0 on rank 0, 1 on rank 1"),
    (("--strategy", "naive"), ("--strategy", "prefetch"), "'strategy': 'naive' on rank 0, 'prefetch' on rank 1"),
    (("--batch-size", "4"), ("--batch-size", "8"), "'batch_size': 4 on rank 0, 8 on rank 1"),
    (("--ranks-per-node", "1"), (), "'--ranks-per-node': 1 on rank 0, None on rank 1"),
])
def test_ranks_with_different_arguments_stop_together(hep, tmp_path, a, b, setting):
    """Regression: `mpiexec -n 1 dlbench run --epochs 3 : -n 1 dlbench run --epochs 5` hung forever (10 min, only
    SIGKILL ended it); a different --strategy/--batch-size on one rank silently ran rank 0's; --seed 1 on one
    rank left the other spinning. Now the ranks agree on the configuration first: one line naming the first
    differing setting, every rank exits 2, no results folder."""
    out = tmp_path / "res"
    p = _launch([(1, _run_args(hep, out, *a)), (1, _run_args(hep, out, *b))], tmp_path)
    rc, _, err = _finish(p)
    assert rc == 2, err
    lines = _errors(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dlbench: error: ranks were started with different arguments") and setting in lines[0]
    assert not out.exists() or not list(out.rglob("run.json"))


def test_one_rank_without_the_dataset_ends_the_job(tmp_path):
    """Regression: a configuration error on one rank only (its node does not see the dataset: here its own
    DLBENCH_DATA_DIR, same arguments) left the other rank spinning in a collective. Now every rank stops with
    that rank's message (once), exit 3."""
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    r = subprocess.run([sys.executable, "-m", "dlbench.cli", "generate", "--workload", "hep_cnn", "--scale", "tiny",
                        "--data-dir", good / "hep_cnn-tiny-seed0", "--no-progress"], capture_output=True, text=True,
                       env=_env({"DLBENCH_NO_MPI": "1"}), cwd=tmp_path, timeout=LIMIT_S)
    assert r.returncode == 0, r.stderr
    bad.mkdir()
    os.chmod(bad, 0o500)   # nothing can be generated there either
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found")
    argv = ["run", "--workload", "hep_cnn", "--compute-time", "0", "--epochs", "1", "--out", tmp_path / "res",
            "--no-progress"]
    cmd = [exe, "-n", "1", "-env", "DLBENCH_DATA_DIR", str(good), sys.executable, "-m", "dlbench.cli", *map(str, argv),
           ":", "-n", "1", "-env", "DLBENCH_DATA_DIR", str(bad), sys.executable, "-m", "dlbench.cli",
           *map(str, argv)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
                         start_new_session=True)
    rc, _, err = _finish(p)
    assert rc == 3, err
    lines = _errors(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dlbench: error: rank 1: --data-dir ") and str(bad) in lines[0], lines


def test_sigterm_ends_a_rank_blocked_in_a_collective(tmp_path):
    """Regression: a rank waiting in an MPI collective for a peer that never comes ignored SIGTERM (Python runs
    its handler only between bytecodes; the scheduler's cancel did nothing until SIGKILL). Now a watcher thread
    sees the signal, and when the main thread has not taken it within a few seconds, aborts the job: one line,
    exit 143. Rank 1 here is a bare MPI process that joins dlbench's first collective (MPIComm's allgather of
    (--ranks-per-node, start-up error)) and then never another."""
    peer = ("import sys, time; from mpi4py import MPI; MPI.COMM_WORLD.allgather((1, None)); "
            "print('ready', flush=True); "
            "time.sleep(600)")
    p = _launch([(1, _run_args(tmp_path / "none", tmp_path / "res", "--ranks-per-node", "1")),
                 (1, ["-c", peer])], tmp_path)
    try:
        import select

        ready, _, _ = select.select([p.stdout], [], [], LIMIT_S)   # the peer's line, bounded
        assert ready and p.stdout.readline().strip() == "ready", "the peer never got past the first collective"
        rank0 = _pid_of_rank(str(tmp_path), 0)
        assert rank0 is not None
        time.sleep(2.0)   # rank 0 is in the agreement's collective by now, waiting for rank 1
        os.kill(rank0, signal.SIGTERM)
    except BaseException:
        _kill_tree(p.pid)
        raise
    rc, _, err = _finish(p)
    assert rc == 143, err
    assert "dlbench: interrupted by SIGTERM on rank 0 while it waited for other ranks" in err, err
    assert "Traceback" not in err, err


def _pid_of_rank(tag: str, rank: int, timeout: float = 20.0) -> int | None:
    """The dlbench process whose command line holds ``tag`` (the test's folder) and whose PMI_RANK is ``rank``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                env = (d / "environ").read_bytes().split(b"\0")
                cmdline = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if f"PMI_RANK={rank}".encode() in env and b"dlbench" in cmdline and tag.encode() in cmdline:
                return int(d.name)
        time.sleep(0.1)
    return None


def test_ranks_per_node_beyond_the_job_is_refused(hep, tmp_path):
    """Regression: --ranks-per-node 3 with 2 ranks was accepted without a word (one emulated node of 2)."""
    p = _launch([(2, _run_args(hep, tmp_path / "res", "--ranks-per-node", "3"))], tmp_path)
    rc, _, err = _finish(p)
    assert rc == 2, err
    lines = _errors(err)
    assert lines == ["dlbench: error: --ranks-per-node=3: more than the job's 2 rank(s); allowed: 1 to 2 (ranks per "
                     "emulated node), or leave it out to use MPI's shared-memory split"], err


@pytest.mark.parametrize("bad,message", [
    (("--epochs", "0"), "dlbench: error: rank 0: --epochs=0: must be >= 1"),
    (("--epochs", "x"), "Error: Invalid value for '--epochs' / '-e': 'x' is not a valid integer."),  # click's usage
])
def test_a_bad_flag_on_one_rank_before_mpi_starts_ends_the_job(hep, tmp_path, bad, message):
    """Regression: a flag refused before MPI starts (dlbench's bounds, click's parsing) on one rank only left
    the other ranks waiting in MPI's first collective forever. Now the failed rank joins that collective with
    its error: every rank stops (exit 2), the reason said once."""
    out = tmp_path / "res"
    p = _launch([(1, _run_args(hep, out, *bad)), (1, _run_args(hep, out, "--epochs", "3"))], tmp_path)
    rc, _, err = _finish(p)
    assert rc == 2, err
    assert message in err.splitlines(), err
    assert "Traceback" not in err, err


def test_ranks_with_a_different_dlbench_environment_stop_together(hep, tmp_path):
    """A DLBENCH_* variable that changes how a rank reads (here DLBENCH_READ_CALL) set on one rank only is a
    configuration mismatch too: one line naming it, every rank exits 2."""
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found")
    argv = [sys.executable, *map(str, _run_args(hep, tmp_path / "res", "--epochs", "1"))]
    p = subprocess.Popen([exe, "-n", "1", "-env", "DLBENCH_READ_CALL", "preadv", *argv, ":", "-n", "1", *argv],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
                         start_new_session=True)
    rc, _, err = _finish(p)
    assert rc == 2, err
    assert _errors(err) == ["dlbench: error: ranks were started with different arguments: the run's configuration "
                            "differs at 'environment.DLBENCH_READ_CALL': 'preadv' on rank 0, unset on rank 1; start "
                            "every rank with the same command line"], err
