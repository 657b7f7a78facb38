"""`dlbench import` on damaged or unusual inputs (regressions, issue 15): a truncated or corrupt Darshan log is
one line and exit 3 -- never a segfault, an abort or an exit 0 with wrong counts -- because the log is
validated first and PyDarshan's C parser runs in a child process; a log Darshan flagged partial imports with
a warning naming the modules; a Lustre mount's bytes count as the shared file system, not a node's own
tier; TimeLogger refuses a negative Time Taken, and skips (and counts) garbled rows unless --strict."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _log(name: str) -> Path:
    lu = pytest.importorskip("darshan.log_utils")
    try:
        return Path(lu.get_log_path(name))
    except Exception:  # noqa: BLE001 - PyDarshan without its example logs
        pytest.skip(f"PyDarshan's example log {name} not installed")


def _dlbench(args, cwd) -> subprocess.CompletedProcess:
    """The CLI in a process of its own: a crash in the C parser must show here as a return code, not take
    the test session down."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _one_line_error(r, *needles):
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("dlbench: error: LOG="), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


# ---- Darshan: truncated, random, corrupt ------------------------------------------------------------------
@pytest.mark.parametrize("cut,what", [(200, "shorter than its 360-byte header"),
                                      (500, "job record (bytes 360..921)"),     # aborted (SIGABRT) before
                                      (1000, "name table (bytes 921..1,237)"),  # segfaulted before
                                      (2000, "H5D records (bytes 1,792..2,176)"),  # exit 0, counts wrong before
                                      (3966, "DXT_MPIIO records")])
def test_truncated_darshan_log_is_one_line(tmp_path, cut, what):
    src = _log("ior_hdf5_example.darshan")
    bad = tmp_path / f"cut{cut}.darshan"
    bad.write_bytes(src.read_bytes()[:cut])
    r = _dlbench(["import", "darshan", bad, "--out", tmp_path / "res"], tmp_path)
    line = _one_line_error(r, "truncated", f"{cut:,} bytes" if cut >= 1000 else f"{cut} bytes", what)
    assert "copy the whole log again" in line
    assert not (tmp_path / "res").exists()


def test_random_bytes_are_not_a_darshan_log(tmp_path):
    bad = tmp_path / "random.darshan"
    bad.write_bytes(random.Random(7).randbytes(4096))
    r = _dlbench(["import", "darshan", bad, "--out", tmp_path / "res"], tmp_path)
    _one_line_error(r, "not a Darshan log")
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("region,lo,hi", [("job", 362, 921), ("names", 923, 1237), ("posix", 1239, 1456)])
def test_corrupt_darshan_region_is_one_line(tmp_path, region, lo, hi):
    """Garbage inside a compressed region (file size intact): PyDarshan crashes (the child is killed) or
    returns a report without records; both are one line, exit 3, nothing written."""
    b = bytearray(_log("ior_hdf5_example.darshan").read_bytes())
    rnd = random.Random(1)
    for i in range(lo, hi):
        b[i] = rnd.randrange(256)
    bad = tmp_path / f"corrupt-{region}.darshan"
    bad.write_bytes(bytes(b))
    r = _dlbench(["import", "darshan", bad, "--out", tmp_path / "res"], tmp_path)
    line = _one_line_error(r)
    assert "damaged" in line or "crashed" in line
    assert not (tmp_path / "res").exists()


def test_partial_darshan_log_imports_with_a_warning(tmp_path):
    b = bytearray(_log("ior_hdf5_example.darshan").read_bytes())
    b[20] |= 1 << 1  # the header's partial_flag, bit 1: POSIX (format 3.2x ids)
    log = tmp_path / "partial.darshan"
    log.write_bytes(bytes(b))
    r = _dlbench(["import", "darshan", log, "--out", tmp_path / "res"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "warning: LOG=" in r.stderr and "POSIX partial" in r.stderr and "lower bounds" in r.stderr
    rd = Path([ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1])
    doc = json.loads((tmp_path / rd / "run.json").read_text())
    assert doc["imported"]["partial_modules"] == ["POSIX"]
    assert any("POSIX partial" in n for n in doc["summary"]["import_notes"])


def test_whole_log_still_imports_in_the_child(tmp_path):
    from dlbench.importers import darshan_run

    path = _log("ior_hdf5_example.darshan")
    a = darshan_run(path)
    b = darshan_run(path, isolate=False)
    assert a["summary"]["read_bytes"] == b["summary"]["read_bytes"] == 4202504
    assert a["summary"]["ranks"] == 4 and "warnings" not in a


# ---- Darshan: where the bytes live ------------------------------------------------------------------------
@pytest.mark.parametrize("fstype,tier", [("lustre", "shared"), ("gpfs", "shared"), ("nfs", "shared"),
                                         ("nfs4", "shared"), ("beegfs", "shared"), ("cephfs", "shared"),
                                         ("dvs", "shared"), ("fuse.glusterfs", "shared"), ("LUSTRE", "shared"),
                                         ("xfs", "local"), ("ext4", "local"), ("tmpfs", "memory"),
                                         ("weirdfs", "unclassified"), (None, "unclassified")])
def test_fs_tier_classifier(fstype, tier):
    from dlbench.importers import fs_tier

    assert fs_tier(fstype) == tier


def test_lustre_scratch_bytes_are_the_shared_file_system(tmp_path):
    """ior_hdf5_example.darshan reads 4,202,504 bytes on /global/cscratch1, a lustre mount in its mount
    table: that is the shared file system (it used to be reported as 'own tiers 4.2')."""
    from click.testing import CliRunner

    from dlbench.cli import main

    path = _log("ior_hdf5_example.darshan")
    r = CliRunner().invoke(main, ["import", "darshan", str(path), "--out", str(tmp_path / "res")],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "shared FS 4.0, own tiers 0.0" in r.output     # MiB (4,202,504 B)
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1])
    s = json.loads((rd / "run.json").read_text())["summary"]
    assert s["bytes_by_tier"] == {"shared": 4202504}
    assert s["io_counters"]["class_fs"] == {"/global/cscratch1": "lustre"}
    assert s["io_counters"]["class_tier"] == {"/global/cscratch1": "shared"}


# ---- TimeLogger: negative, garbled, --strict ----------------------------------------------------------------
TL_HEAD = "Epoch, Rank, Action Name, Action Description, Start Time, End Time, Time Taken\n"
TL_ROWS = ["0,0, train, Training Iteration,10.0,11.0,1.0", "0,0, load, Load File,10.0,10.4,0.4",
           "0,0, read, HDF5 File Read,10.0,10.3,0.3", "0,0, next, Call to Next Batch,10.0,10.1,0.1",
           "0,1, train, Training Iteration,10.0,11.5,1.5", "0,1, load, Load File,10.0,10.5,0.5",
           "0,1, read, HDF5 File Read,10.0,10.2,0.2", "0,1, next, Call to Next Batch,10.0,10.2,0.2"]
# what many ranks appending to one file leave behind: two lines run together, a line cut short, a value cut
GARBLED = ["0,1, train, Training Iteration,10.0,0,0, load, Load File,10.0,10.4,0.4",
           "0,1, read, HDF5 Fi",
           "0,0, next, Call to Next Batch,10.0,10.1,0.1e"]


def _import_tl(tmp_path, text, *extra):
    from click.testing import CliRunner

    from dlbench.cli import main

    f = tmp_path / "tl.csv"
    f.write_text(text)
    return CliRunner().invoke(main, ["import", "timelogger", str(f), "--out", str(tmp_path / "res"), *extra],
                              catch_exceptions=False)


def _summary(output):
    rd = Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1])
    return json.loads((rd / "run.json").read_text())


def test_negative_time_taken_is_refused(tmp_path):
    rows = TL_ROWS[:5] + ["0,1, load, Load File,10.0,10.5,-5.0"] + TL_ROWS[6:]
    r = _import_tl(tmp_path, TL_HEAD + "\n".join(rows) + "\n")
    assert r.exit_code == 3, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: CSV="), r.output
    assert "line 7" in lines[0] and "'Time Taken'='-5.0' is negative" in lines[0] and "rank 1" in lines[0]
    assert not (tmp_path / "res").exists()


def test_garbled_rows_are_skipped_counted_and_warned(tmp_path):
    (tmp_path / "a").mkdir()
    clean = _import_tl(tmp_path / "a", TL_HEAD + "\n".join(TL_ROWS) + "\n")
    assert clean.exit_code == 0, clean.output
    rows = TL_ROWS[:2] + [GARBLED[0]] + TL_ROWS[2:5] + [GARBLED[1]] + TL_ROWS[5:] + [GARBLED[2]]
    (tmp_path / "b").mkdir()
    r = _import_tl(tmp_path / "b", TL_HEAD + "\n".join(rows) + "\n")
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.output.splitlines() if ln.startswith("dlbench: warning: ")]
    assert len(warn) == 1 and "skipped 3 garbled rows of 11 (lines 4, 8, 12;" in warn[0], r.output
    a, b = _summary(clean.output), _summary(r.output)
    assert b["imported"]["skipped_rows"] == {"count": 3, "lines": [4, 8, 12]}
    assert b["imported"]["rows"] == a["imported"]["rows"] == 8
    assert b["summary"]["phase_time_s"] == a["summary"]["phase_time_s"]
    assert b["summary"]["exposed_io_share"] == a["summary"]["exposed_io_share"]
    assert any("skipped 3 garbled rows" in n for n in b["summary"]["import_notes"])


def test_strict_refuses_the_first_garbled_row(tmp_path):
    rows = TL_ROWS[:2] + [GARBLED[0]] + TL_ROWS[2:] + [GARBLED[1]]
    r = _import_tl(tmp_path, TL_HEAD + "\n".join(rows) + "\n", "--strict")
    assert r.exit_code == 3, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "line 4: not a TimeLogger row (12 columns, the header has 7" in lines[0], r.output
    assert not (tmp_path / "res").exists()


def test_only_garbled_rows_is_refused(tmp_path):
    r = _import_tl(tmp_path, TL_HEAD + "\n".join(GARBLED) + "\n")
    assert r.exit_code == 3 and "all 3 rows are garbled (first at line 2" in r.output, r.output


@pytest.mark.parametrize("kind", ["darshan", "timelogger"])
def test_fifo_device_or_symlink_loop_is_one_line(tmp_path, kind):
    """A FIFO was reported as 'no such file' (and would block a read); a symlink loop gave a traceback."""
    from click.testing import CliRunner

    from dlbench.cli import main

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for path, msg in ((fifo, "a FIFO, not a regular file"), (Path(os.devnull), "a device, not a regular file"),
                      (tmp_path / "a", "cannot read it")):
        r = CliRunner().invoke(main, ["import", kind, str(path), "--out", str(tmp_path / "res")],
                               catch_exceptions=False)
        assert r.exit_code == 3 and msg in r.output, (path, r.output)
    assert not (tmp_path / "res").exists()


def test_timelogger_nodes_bounded(tmp_path):
    r = _import_tl(tmp_path, TL_HEAD + "\n".join(TL_ROWS) + "\n", "--nodes", str(10 ** 15))
    assert r.exit_code == 2 and "--nodes=1000000000000000: must be <= 1,000,000" in r.output, r.output
