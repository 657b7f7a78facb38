"""issue 12: tracebacks turned into one clear line (exit != 0), nothing left behind. One regression test per case."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _one_line(r, needle, code=None):
    assert r.exit_code != 0 if code is None else r.exit_code == code, (r.exit_code, r.output)
    assert needle in r.output, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output


def _run(cli, tiny, out, *extra):
    return cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0.001",
                "--out", out, *extra])


# ----- run -o ----------------------------------------------------------------------------------------------

def test_out_is_a_file(tiny, tmp_path, cli):
    """Regression: `run -o FILE` raised NotADirectoryError after the run."""
    f = tmp_path / "afile"
    f.write_text("x")
    _one_line(_run(cli, tiny, f), "--out", code=2)
    _one_line(_run(cli, tiny, f), "it is a file, not a directory")
    _one_line(_run(cli, tiny, f / "sub"), "Not a directory", code=2)
    assert f.read_text() == "x"


def test_out_unwritable(tiny, tmp_path, cli, monkeypatch):
    """Regression: an unwritable --out raised PermissionError (simulated: tests may run as root)."""
    real_open = open

    def deny(path, *a, **k):
        if ".dlbench-write-test" in str(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", deny)
    _one_line(_run(cli, tiny, tmp_path / "ro"), "--out", code=2)
    _one_line(_run(cli, tiny, tmp_path / "ro"), "cannot write results there: Permission denied")
    assert not list((tmp_path / "ro").rglob("*"))


def test_full_disk_keeps_the_figures(tiny, tmp_path, cli, monkeypatch):
    """Regression: ENOSPC while writing the results lost the finished run in a traceback. Now: the summary is
    printed, one line says nothing could be written there, exit 6, no half-written files."""
    from dlbench import results

    real_dump = results._dump_json
    calls = {"n": 0}

    def dump(path, obj):
        calls["n"] += 1
        if calls["n"] > 1:  # the first run.json ("incomplete") fits, then the disk is full
            with open(results._tmp_for(path), "w") as f:  # a partial write, as on a full disk
                f.write("{")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_dump(path, obj)

    monkeypatch.setattr(results, "_dump_json", dump)
    monkeypatch.setattr(results, "write_intervals",
                        lambda p, iv: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
    out = tmp_path / "res"
    r = _run(cli, tiny, out)
    assert r.exit_code == 6, r.output
    assert "exposed I/O share" in r.output and "epoch time" in r.output   # the figures
    assert "the results could not be written" in r.output and "No space left on device" in r.output
    assert "summary above is the only record" in r.output and "Traceback" not in r.output
    assert not [p for p in out.rglob("*") if p.is_file()]                  # nothing half-written


def test_results_write_failure_leaves_no_temp_file(tmp_path, monkeypatch):
    from dlbench import results

    def boom(obj, f, **k):
        f.write("{")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results.json, "dump", boom)
    with pytest.raises(OSError):
        results._dump_json(tmp_path / "run.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


# ----- report / compare ------------------------------------------------------------------------------------

@pytest.mark.parametrize("content,needle", [
    (None, "no run.json"),
    (b"", "empty"),
    (b'{"schema": "dlbench.run/1", "summ', "not valid JSON"),
    (b'{"schema": "dlbench.run/2", "x": ' + b"9" * 5000 + b"}", "integer string conversion"),  # was AttributeError
    (bytes(range(256)) * 4, "binary content"),
    (b"[1, 2]", "not a dlbench run"),
    (b'{"schema": "other/1"}', "schema 'other/1'"),
    (b'{"schema": "dlbench.run/1", "summary": [1]}', "not a mapping"),
])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_report_compare_on_a_bad_run_folder(tmp_path, cli, command, content, needle):
    """Regression: report/compare raised FileNotFoundError, JSONDecodeError, UnicodeDecodeError, TypeError."""
    d = tmp_path / "notarun"
    d.mkdir()
    if content is not None:
        (d / "run.json").write_bytes(content)
    _one_line(cli([command, d]), needle, code=3)


# ----- binary YAML -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag,what", [("--workload", "workload file"), ("--system", "system profile"),
                                       ("--compute-profile", "compute profile")])
def test_binary_yaml_is_one_line(tiny, tmp_path, cli, flag, what):
    """Regression: a binary workload/system YAML raised UnicodeDecodeError."""
    y = tmp_path / "bin.yaml"
    y.write_bytes(b"\xa5\x00\xff" + os.urandom(200))
    r = cli(["run", "--data-dir", tiny, "--out", tmp_path / "res", "--epochs", 1, flag, y])
    _one_line(r, f"{what} '{y}' is not a text YAML file", code=2)
    assert not (tmp_path / "res").exists()


# ----- dataset damage --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "verify"])
def test_manifest_with_edited_sample_count(tiny, tmp_path, cli, command):
    """Regression: a manifest whose sample count was edited raised IndexError at run; verify said ok."""
    m = tiny / "dlbench-manifest.json"
    m.write_text(m.read_text().replace('"samples": 32,', '"samples": 40,'))
    args = (["run", "--data-dir", tiny, "--compute-time", "0", "--out", tmp_path / "res"] if command == "run"
            else ["verify", "--data-dir", tiny])
    r = cli(args)
    _one_line(r, "inconsistent manifest: samples=40", code=3)
    assert "files hold 32 samples" in r.output
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("workload,victim", [("cosmoflow", "data-00000005.h5"), ("ptychonn", "train.h5"),
                                             ("hep_cnn", "block-000001.h5")])
def test_truncated_data_file_is_named(tmp_path, cli, workload, victim):
    """Regression: a truncated HDF5 file gave h5py's message without the file's name."""
    d = tmp_path / workload
    assert cli(["generate", "--workload", workload, "--data-dir", d, "--no-progress"]).exit_code == 0
    f = d / victim
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size // 3)
    r = cli(["run", "--workload", workload, "--data-dir", d, "--epochs", 1, "--compute-time", "0",
             "--out", tmp_path / "res"])
    _one_line(r, str(f), code=3)
    assert "truncated" in r.output and "dlbench verify" in r.output


# ----- interrupts ------------------------------------------------------------------------------------------

def _interrupt_at_step(monkeypatch, n, exc=KeyboardInterrupt):
    from dlbench.compute.sleep import SleepCompute

    real = SleepCompute.step
    count = {"n": 0}

    def step(self, *a, **k):
        count["n"] += 1
        if count["n"] == n:
            raise exc()
        return real(self, *a, **k)

    monkeypatch.setattr(SleepCompute, "step", step)


@pytest.mark.parametrize("strategy", ["naive", "staging", "local", "pls"])
def test_ctrl_c_during_run(tiny, tmp_path, cli, monkeypatch, strategy):
    """Regression: Ctrl-C during run printed KeyboardInterrupt (exit 5 as a failed run). Now: one line, exit
    130, run.json status "interrupted", no local copies left."""
    _interrupt_at_step(monkeypatch, 3)
    loc = tmp_path / "loc"
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--strategy", strategy, "--data-dir", tiny, "--epochs", 2,
             "--compute-time", "0", "--out", out, "--local-dir", loc])
    _one_line(r, "dlbench: interrupted by SIGINT; results (status interrupted): ", code=130)
    run = json.loads(next(out.rglob("run.json")).read_text())
    assert run["status"] == "interrupted" and run["error"] == "interrupted by SIGINT"
    if strategy != "naive":
        assert "local copies under" in r.output and "removed" in r.output
        assert list(loc.iterdir()) == []


def test_real_sigint_and_sigterm(tiny, tmp_path):
    """The real signals, in a child process: one line, exit 130 / 143, nothing left in --local-dir."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DLBENCH_NO_MPI", None)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        loc = tmp_path / f"loc{code}"
        p = subprocess.Popen([sys.executable, "-m", "dlbench.cli", "run", "--workload", "cosmoflow", "--strategy",
                              "local", "--data-dir", tiny, "--epochs", "1000", "--compute-time", "0.002",
                              "--out", tmp_path / "res", "--local-dir", loc],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 60
        while not list(loc.glob("run-*/node0/rank0/*.row")) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        assert p.returncode == code, (out, err)
        assert err.strip().splitlines() == [err.strip()] and "Traceback" not in err, err
        assert f"interrupted by {signal.Signals(sig).name}" in err and "local copies under" in err
        assert list(loc.iterdir()) == []


# ----- failures and early checks leave nothing behind ------------------------------------------------------

@pytest.mark.parametrize("strategy", ["staging", "local", "pls"])
def test_failed_run_removes_local_copies(tiny, tmp_path, cli, monkeypatch, strategy):
    """Regression: a failed staging/local/pls run left its copies in --local-dir (a new run-<tag> each time)."""
    _interrupt_at_step(monkeypatch, 2, exc=lambda: RuntimeError("boom"))
    loc = tmp_path / "loc"
    r = cli(["run", "--workload", "cosmoflow", "--strategy", strategy, "--data-dir", tiny, "--epochs", 1,
             "--compute-time", "0", "--out", tmp_path / "res", "--local-dir", loc])
    _one_line(r, "run failed: RuntimeError: boom", code=5)
    assert "local copies under" in r.output and "removed" in r.output
    assert list(loc.iterdir()) == []


def test_stale_local_copies_of_a_dead_run_are_removed(tiny, tmp_path, cli):
    """A rank killed before it could clean up (MPI_Abort by a peer, SIGKILL): the next run removes run dirs
    whose owners are all dead processes on this host, and leaves live or foreign ones alone."""
    import socket

    from dlbench.storage.localtier import remove_stale_run_dirs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    loc = tmp_path / "loc"
    host = socket.gethostname()
    for name, owner in (("run-dead", f".owner-{host}-{dead}"), ("run-live", f".owner-{host}-{os.getpid()}"),
                        ("run-other", f".owner-otherhost-{dead}"), ("run-nomarker", None)):
        (loc / name / "node0" / "rank0").mkdir(parents=True)
        (loc / name / "node0" / "rank0" / "1.row").write_bytes(b"x" * 100)
        if owner:
            (loc / name / owner).touch()
    r = cli(["run", "--workload", "cosmoflow", "--strategy", "local", "--data-dir", tiny, "--epochs", 1,
             "--compute-time", "0", "--out", tmp_path / "res", "--local-dir", loc])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in loc.iterdir()) == ["run-live", "run-nomarker", "run-other"]
    run = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())
    assert run["summary"]["strategy_stats"][0]["stale_local_dirs_removed"] == [str(loc / "run-dead")]
    assert remove_stale_run_dirs(loc) == []


def test_early_check_leaves_no_results_folder(tiny, tmp_path, cli):
    """Regression: a run failing an early check (here --local-dir under a missing parent, found when the store
    opens) left a "failed" results folder."""
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--strategy", "local", "--data-dir", tiny, "--epochs", 1,
             "--compute-time", "0", "--out", out, "--local-dir", tmp_path / "no" / "such"])
    _one_line(r, "--local-dir", code=2)
    assert "parent directory" in r.output
    assert not [p for p in out.rglob("*") if p.is_file()] and not (out / "cosmoflow").exists()


def test_guardian_outlives_a_stray_sigterm_and_still_cleans_up(tmp_path):
    """Issue 15 second pass: kill -TERM of the node's guardian (it shows a python command line beside the ranks)
    ended it silently, and the run went on without its clean-up. It ignores SIGTERM/SIGINT/SIGHUP now, and
    still removes the run directory once its owner is dead."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    from dlbench.storage.localtier import REAPER_POLL_S, spawn_reaper

    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    root = tmp_path / "run-x"
    root.mkdir()
    (root / f".owner-{socket.gethostname()}-{owner.pid}").touch()
    (root / "copy.bin").write_bytes(b"x" * 100)
    pid = spawn_reaper(root)
    assert pid is not None
    try:
        time.sleep(3 * REAPER_POLL_S)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            os.kill(pid, sig)
        time.sleep(3 * REAPER_POLL_S)
        assert root.exists()
        with open(f"/proc/{pid}/stat") as f:           # alive, not a zombie
            assert f.read().split(") ", 1)[1][0] != "Z"
    finally:
        owner.kill()
        owner.wait()
    for _ in range(int(10 / REAPER_POLL_S)):            # the owner is dead: the guardian removes the copies
        if not root.exists():
            break
        time.sleep(REAPER_POLL_S)
    assert not root.exists()
