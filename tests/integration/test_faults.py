"""issue 15: faults that lost or misreported data, each pinned by a regression test that failed before."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["DLBENCH_NO_MPI"] = "1"
    return env


@pytest.fixture
def keep_handlers():
    """A command stopped by a real signal leaves its handlers installed (later signals stay deferred until the
    process exits): put the test process's own back."""
    from dlbench import stop

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in old.items():
        signal.signal(s, h)
    stop._S.active = False


# ----- two quick Ctrl-C ------------------------------------------------------------------------------------

def test_second_ctrl_c_does_not_skip_the_clean_up(tiny, tmp_path, cli, monkeypatch, keep_handlers):
    """Regression (7 of 43 tries leaked 400-600 MB): a second Ctrl-C landing in the clean-up of the first
    stopped the removal of the local copies. Here the second SIGINT arrives just as the copies are removed:
    the removal finishes, exit 130, nothing left."""
    from dlbench.compute.sleep import SleepCompute
    from dlbench.storage import localtier

    real_step, real_rmtree = SleepCompute.step, localtier.shutil.rmtree
    n = {"step": 0, "second": 0}

    def step(self, *a, **k):
        n["step"] += 1
        if n["step"] == 3:
            os.kill(os.getpid(), signal.SIGINT)     # the first Ctrl-C, as a real signal
        return real_step(self, *a, **k)

    def rmtree(path, *a, **k):
        if n["second"] == 0:
            n["second"] = 1
            os.kill(os.getpid(), signal.SIGINT)     # the second one, in the middle of the clean-up
        return real_rmtree(path, *a, **k)

    monkeypatch.setattr(SleepCompute, "step", step)
    monkeypatch.setattr(localtier.shutil, "rmtree", rmtree)
    loc = tmp_path / "loc"
    r = cli(["run", "--workload", "cosmoflow", "--strategy", "staging", "--data-dir", tiny, "--epochs", 2,
             "--compute-time", "0", "--out", tmp_path / "res", "--local-dir", loc])
    assert r.exit_code == 130, r.output
    assert n["second"] == 1
    assert "dlbench: interrupted by SIGINT; results (status interrupted)" in r.output, r.output
    assert "Traceback" not in r.output
    assert list(loc.iterdir()) == []
    assert json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["status"] == "interrupted"


def test_sigint_stops_a_run_that_inherited_an_ignored_sigint(tiny, tmp_path):
    """Regression ("both signals were ignored and the run finished"): a run started with SIGINT ignored (a
    shell's background job, some launchers) ignored Ctrl-C / kill -INT. Now: two quick SIGINTs stop it with
    exit 130, one "interrupted" line, the copies removed."""
    loc = tmp_path / "loc"
    p = subprocess.Popen([sys.executable, "-m", "dlbench.cli", "run", "--workload", "cosmoflow", "--strategy",
                          "staging", "--data-dir", tiny, "--epochs", "1000", "--compute-time", "0.002",
                          "--out", tmp_path / "res", "--local-dir", loc, "--no-progress"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 60
        while not list(loc.glob("run-*/node0/*.row")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        time.sleep(0.005)
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.startswith("dlbench: interrupted")], err
    assert "Traceback" not in err, err
    assert list(loc.iterdir()) == []


def test_clean_up_is_idempotent(tiny, tmp_path):
    """remove_local_tier twice (a clean-up re-run after an interrupted one) is harmless and leaves nothing."""
    from dlbench.storage.localtier import owner_marker, remove_local_tier

    root = tmp_path / "loc" / "run-x"
    (root / "node0" / "rank0").mkdir(parents=True)
    (root / "node0" / "rank0" / "1.row").write_bytes(b"x")
    (root / owner_marker()).touch()
    for _ in range(2):
        note = remove_local_tier(root, node=0, rank=0, private=True, done=False, interrupted=True)
        assert "removed" in note
    assert not root.exists()


# ----- generate: a lock; SIGTERM to generate / simulate / calibrate ----------------------------------------

def test_second_generate_into_one_dir_names_the_holder(tmp_path, cli):
    """Regression: two `generate` into one data dir both failed with "free space and re-run". Now the second
    fails at once, in one line naming who holds the lock, and writes nothing; the first one is unaffected."""
    from dlbench.data.generate import LOCK_NAME, GenerateLock

    d = tmp_path / "d"
    d.mkdir()
    held = GenerateLock(d)            # another generation in progress
    try:
        r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"])
        assert r.exit_code == 3, r.output
        line = r.output.strip()
        assert len(line.splitlines()) == 1 and "another `dlbench generate` is writing this dataset" in line
        assert f"pid {os.getpid()} on " in line and "free space" not in line, line
        assert sorted(p.name for p in d.iterdir()) == [LOCK_NAME]
    finally:
        held.release()
    r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.exit_code == 0, r.output
    assert not (d / LOCK_NAME).exists()


def _run_patched(tmp_path, patch: str, args: list) -> subprocess.CompletedProcess:
    """The CLI in a child process after ``patch`` (Python) ran: a real SIGTERM reaches a real process."""
    code = ("import os, signal, sys\n" + patch + "\nfrom dlbench.cli import main\nsys.argv = ['dlbench'] + "
            + repr([str(a) for a in args]) + "\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=tmp_path,
                          timeout=120)


def test_sigterm_to_generate_says_what_is_left(tmp_path):
    """Regression: SIGTERM to `generate` exited 143 without a word. Now one line (what is complete, nothing
    partial kept, how to resume), exit 143, no .part file; a re-run completes the dataset."""
    d = tmp_path / "d"
    patch = ("import dlbench.data.generate as g\nreal = g._Writer.write_file\nn = [0]\n"
             "def wf(self, f):\n    n[0] += 1\n    if n[0] == 2:\n        os.kill(os.getpid(), signal.SIGTERM)\n"
             "    return real(self, f)\ng._Writer.write_file = wf")
    args = ["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"]
    r = _run_patched(tmp_path, patch, args)
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip().startswith("dlbench: interrupted by SIGTERM while generating"), r.stderr
    assert "re-run the same command to resume" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(d.rglob("*.part")) and not (d / ".dlbench-generate.lock").exists()
    assert json.loads((d / "dlbench-manifest.json").read_text())["complete"] is False
    r = _run_patched(tmp_path, "", args)
    assert r.returncode == 0, r.stderr


def test_sigterm_to_simulate_and_calibrate_says_so(tmp_path):
    """Regression: SIGTERM to `simulate` or `calibrate` exited 143 without a word."""
    patch = ("import dlbench.simulate.core as s\nreal = s.simulate\n"
             "def sim(*a, **k):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return real(*a, **k)\n"
             "s.simulate = sim")
    r = _run_patched(tmp_path, patch, ["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes",
                                       "2", "--compute-time", "0.01", "--out", tmp_path / "sim"])
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip() == "dlbench: interrupted by SIGTERM during simulate: nothing written (the model had not " \
                               "finished)", r.stderr
    patch = ("import dlbench.calibrate.compute as c\n"
             "def cal(*a, **k):\n    os.kill(os.getpid(), signal.SIGTERM)\n    raise AssertionError('not stopped')\n"
             "c.calibrate = cal")
    r = _run_patched(tmp_path, patch, ["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "-o",
                                       tmp_path / "p.yaml"])
    assert r.returncode == 143, r.stderr
    assert r.stderr.strip().startswith("dlbench: interrupted by SIGTERM during the calibration"), r.stderr
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("bad", ["unwritable", "under-a-file"])
def test_calibrate_out_checked_before_measuring(tmp_path, cli, monkeypatch, bad):
    """Regression: `calibrate -o` was checked only after the measurement (41 s). Now before it, one line."""
    import dlbench.calibrate.compute as c

    def measured(*a, **k):
        raise AssertionError("measured before checking -o")

    monkeypatch.setattr(c, "calibrate", measured)
    f = tmp_path / "afile"
    f.write_text("x")
    out = tmp_path / "new" / "p.yaml" if bad == "unwritable" else f / "p.yaml"
    if bad == "unwritable":   # tests may run as root: simulated
        monkeypatch.setattr(os, "access", lambda *a, **k: False)
    r = cli(["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "-o", out])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"dlbench: error: --out {out}: ") and len(r.output.strip().splitlines()) == 1, r.output


# ----- a full disk while checkpointing ---------------------------------------------------------------------

def test_full_disk_during_checkpoint_names_the_path(tiny, tmp_path, cli, monkeypatch):
    """Regression: ENOSPC while checkpointing was a raw `OSError: [Errno 28]` without the path. Now one line
    with the checkpoint file, the free space there and that nothing was published; no checkpoint left."""
    import errno as _errno

    real_pwrite = os.pwrite

    def pwrite(fd, data, offset):
        if ".incomplete/" in os.readlink(f"/proc/self/fd/{fd}") and offset > 0:   # mid-file, mid-checkpoint
            raise OSError(_errno.ENOSPC, "No space left on device")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
             "--checkpoint-every", 1, "--out", out])
    assert r.exit_code == 6, r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert "checkpoint 0: disk full writing" in line and "ckpt_0000.incomplete/model_states.pt" in line, line
    assert "MiB free" in line and "nothing was published" in line, line
    assert not list(out.rglob("*.incomplete")) and not list(out.rglob("ckpt_*"))


# ----- prefetch: the worker's root error -------------------------------------------------------------------

def test_prefetch_data_error_is_the_root_error(tiny, tmp_path, cli):
    """Regression: prefetch printed a whole DataLoader worker traceback (~1,200 characters) as its "one line"
    for any data error. Now the root error: the file, what is wrong, what to do."""
    victim = sorted(tiny.rglob("*.h5"))[2]
    victim.write_bytes(victim.read_bytes()[:100])
    r = cli(["run", "--workload", "cosmoflow", "--strategy", "prefetch", "--data-dir", tiny, "--epochs", 1,
             "--compute-time", "0", "--out", tmp_path / "res"])
    assert r.exit_code == 3, r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1, line
    assert "DataLoader worker" not in line and "Traceback" not in line and 'File "' not in line, line
    assert line.startswith(f"dlbench: error: {victim}: cannot read sample"), line
    # short apart from the paths it names (any number of times): no bound that depends on how long TMPDIR is
    assert len(line.replace(str(victim), "").replace(str(tmp_path), "")) < 400, line


# ----- page-cache warning ----------------------------------------------------------------------------------

def test_page_cache_check_counts_prefetch_reads_once(tiny, tmp_path, cli):
    """Regression: the page-cache figures counted prefetch's reads twice (the DataLoader workers' I/O is in
    the trainer's /proc/self/io once they are reaped, and was added again from the workers' own counters):
    2 epochs read ~4x the dataset. Now ~2x, as with no workers."""
    ratios = {}
    for nw in (0, 2):
        out = tmp_path / f"res{nw}"
        r = cli(["run", "--workload", "cosmoflow", "--strategy", "prefetch", "--num-workers", nw, "--data-dir", tiny,
                 "--epochs", 2, "--compute-time", "0", "--out", out])
        assert r.exit_code == 0, r.output
        pc = json.loads(next(out.rglob("run.json")).read_text())["summary"]["page_cache"]
        ratios[nw] = pc["rchar_bytes"] / pc["dataset_bytes"]
    assert 1.9 < ratios[0] < 2.6, ratios
    # the workers' start-up reads (Python modules: a few MB against this 8 MB dataset) come on top; counted
    # twice the workers' reads gave ~4.2x
    assert 1.9 < ratios[2] < 3.4, ratios


# ----- non-regular data files ------------------------------------------------------------------------------

def test_run_refuses_a_fifo_instead_of_hanging(tiny, tmp_path):
    """Regression: `run` hung forever in open() when a data file was a FIFO. Now one line naming the file,
    exit 3, before anything is read."""
    victim = sorted(tiny.rglob("*.h5"))[1]
    victim.unlink()
    os.mkfifo(victim)
    try:
        r = subprocess.run([sys.executable, "-m", "dlbench.cli", "run", "--workload", "cosmoflow", "--data-dir", tiny,
                            "--epochs", "1", "--compute-time", "0", "--out", tmp_path / "res"],
                           capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("run hung on a FIFO")
    assert r.returncode == 3, r.stderr
    assert r.stderr.strip() == (f"dlbench: error: --data-dir {tiny}: {victim}: is a FIFO (named pipe), not a regular "
                                f"file; replace it with the data file (`dlbench generate` rewrites it); check it "
                                f"with `dlbench verify --data-dir {tiny}`"), r.stderr


def test_symlink_loop_is_one_line_in_verify_and_run(tiny, tmp_path, cli):
    """Regression: a symbolic link loop in the dataset gave a traceback in `verify`. Now a problem line in
    verify (exit 3) and one line in run (exit 3)."""
    victim = sorted(tiny.rglob("*.h5"))[1]
    victim.unlink()
    victim.symlink_to(victim.name)          # points at itself: ELOOP
    r = cli(["verify", "--data-dir", tiny])
    assert r.exit_code == 3, r.output
    assert f"{victim}: a symbolic link loop" in r.output and "Traceback" not in r.output, r.output
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
             "--out", tmp_path / "res"])
    assert r.exit_code == 3, r.output
    assert len(r.output.strip().splitlines()) == 1 and f"{victim}: a symbolic link loop" in r.output, r.output
