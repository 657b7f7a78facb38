"""issue 26 ("Trust"), what a new user hit: generate --force under a running run, first-use generation, HOME="",
duplicate YAML keys, and output-side failures (a full device, a full disk, a name too long). Each one line,
exit != 0, nothing partial left."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["DLBENCH_NO_MPI"] = "1"
    env.update(extra)
    return env


def _dlbench(args, cwd, timeout=120, **kw):
    return subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=_env(**kw.pop("env", {})), cwd=cwd, timeout=timeout, **kw)


# ----- generate --force while a run reads the dataset ------------------------------------------------------

def test_generate_force_refuses_while_a_run_reads_the_dataset(tiny, tmp_path, cli):
    """Regression: `generate --force` deleted the dataset a `run` was reading (the run died with "damaged or
    truncated"). Now every process of a run holds a shared lock on the dataset; generate refuses in one line
    naming the run (pid, host, command), and the run finishes untouched."""
    from dlbench.data.generate import READERS_DIR

    before = {p.name: p.stat().st_mtime_ns for p in tiny.iterdir() if p.is_file()}
    p = subprocess.Popen([sys.executable, "-m", "dlbench.cli", "run", "--workload", "cosmoflow", "--data-dir", tiny,
                          "--epochs", "1000", "--batch-size", "1", "--compute-time", "0.002", "--out",
                          tmp_path / "res", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env(), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("res/*/*/*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.05)   # the run folder's first record: the run is past its set-up, reading
        assert list((tiny / READERS_DIR).iterdir()), "no reader record"
        r = cli(["generate", "--workload", "cosmoflow", "--scale", "small", "--data-dir", tiny, "--force",
                 "--no-progress"])
        assert p.poll() is None, "the run stopped"
    finally:
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=60)
    assert r.exit_code == 3, r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith(f"dlbench: error: --data-dir {tiny}: a `dlbench run` is reading this dataset (pid "
                           f"{p.pid} on "), line
    assert "dlbench run --workload cosmoflow" in line, line
    assert {q.name: q.stat().st_mtime_ns for q in tiny.iterdir() if q.is_file()} == before
    assert p.returncode == 143 and "damaged" not in err, err
    assert not (tiny / READERS_DIR).exists()   # the run's record went with it
    r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", tiny, "--no-progress"])
    assert r.exit_code == 0, r.output       # nobody reads it now: generate goes on


def test_run_refuses_a_dataset_being_generated(tiny, tmp_path, cli):
    """The other side of the lock: a run started while a generation writes the directory stops at once, naming
    the generation, instead of reading files that are being replaced."""
    from dlbench.data.generate import GenerateLock

    held = GenerateLock(tiny)
    try:
        r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", "1", "--compute-time", "0",
                 "--out", tmp_path / "res", "--no-progress"])
    finally:
        held.release()
    assert r.exit_code == 3, r.output
    assert r.output.strip() == (f"dlbench: error: --data-dir {tiny}: a `dlbench generate` is writing this dataset "
                                f"(pid {os.getpid()} on {os.uname().nodename}, since "
                                + r.output.strip().split(", since ", 1)[1]), r.output
    assert "wait for it to finish, then run" in r.output
