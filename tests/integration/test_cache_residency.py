"""``--cache drop`` verifies its eviction with mincore on the files it evicted (resident bytes before and after in
run.json and the printed table; a warning when pages stayed), and the summary warns when a cache- or
fsync-defeating library is loaded into the run's process (issue 26)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from runs_helper import run_dir_of

from dlbench.storage import pagecache

ROOT = Path(__file__).resolve().parents[2]


def _run(cli, data, out):
    g = cli(["generate", "--workload", "unet3d", "--scale", "tiny", "--data-dir", data, "--no-progress"])
    assert g.exit_code == 0, g.output
    r = cli(["run", "--workload", "unet3d", "--scale", "tiny", "--data-dir", data, "--epochs", 2, "--cache", "drop",
             "--compute-time", "0.001", "--ceiling-steps", 0, "--out", out])
    assert r.exit_code == 0, r.output
    return r, json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]["cache"]


def test_drop_reports_residency_before_and_after(tmp_path, cli):
    r, c = _run(cli, tmp_path / "d", tmp_path / "res")
    evs = [e for e in c["evictions"] if e["before_epoch"] >= 0]
    assert len(evs) == 2 and all("resident_before_bytes" in e and "resident_after_bytes" in e for e in evs)
    assert all(e["resident_total_bytes"] > 0 for e in evs)
    assert evs[1]["resident_before_bytes"] > 0          # epoch 0 read the files back into the page cache
    assert "resident before -> after evict (MiB, mincore)" in r.output
    memory_fs = pagecache.fs_of(tmp_path)[0] in pagecache.MEMORY_FS
    assert (c["residency_warning"] is not None) == memory_fs


@pytest.mark.skipif(not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK)
                    or pagecache.fs_of("/dev/shm")[0] not in pagecache.MEMORY_FS, reason="no writable tmpfs /dev/shm")
def test_eviction_that_does_not_take_is_named(tmp_path, cli):
    shm = Path(tempfile.mkdtemp(prefix="dlbench-test-", dir="/dev/shm"))
    try:
        r, c = _run(cli, shm / "d", tmp_path / "res")    # tmpfs: posix_fadvise cannot drop its pages
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    assert "the eviction did not take" in c["residency_warning"]
    assert f"warning: {c['residency_warning']}" in r.output


def _libm() -> str | None:
    for line in Path("/proc/self/maps").read_text().splitlines():
        p = line.split(None, 5)[-1].strip()
        if os.path.basename(p).startswith("libm.so"):
            return p
    return None


@pytest.mark.skipif(_libm() is None, reason="no libm mapped in this process")
def test_defeating_preload_warns_in_the_summary(tmp_path, cli):
    data = tmp_path / "d"
    g = cli(["generate", "--workload", "unet3d", "--scale", "tiny", "--data-dir", data, "--no-progress"])
    assert g.exit_code == 0, g.output
    lib = tmp_path / "libnocache.so"          # a real, harmless library under a page-cache-defeating name
    shutil.copy(_libm(), lib)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_PRELOAD": str(lib)}
    p = subprocess.run([sys.executable, "-m", "dlbench", "run", "--workload", "unet3d", "--scale", "tiny",
                        "--data-dir", str(data), "--epochs", "1", "--compute-time", "0.001", "--ceiling-steps", "0",
                        "--no-progress", "--out", str(tmp_path / "res")], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    s = json.loads((run_dir_of(p.stdout) / "run.json").read_text())["summary"]
    assert str(lib) in s["preloaded_warning"] and "page-cache" in s["preloaded_warning"]
    assert f"dlbench: warning: {s['preloaded_warning']}" in p.stderr
    assert f"warning: {s['preloaded_warning']}" in p.stdout
