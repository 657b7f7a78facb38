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
    assert "shared FS 4.2, own tiers 0.0" in r.output
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1])
    s = json.loads((rd / "run.json").read_text())["summary"]
    assert s["bytes_by_tier"] == {"shared": 4202504}
    assert s["io_counters"]["class_fs"] == {"/global/cscratch1": "lustre"}
    assert s["io_counters"]["class_tier"] == {"/global/cscratch1": "shared"}
