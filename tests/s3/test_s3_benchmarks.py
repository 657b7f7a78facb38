"""Smoke tests of the S3 benchmarks (tiny arguments, against the session's server): they run and print their
figures."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]


def _bench(name, *args):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_s3_clients_smoke(s3_server):
    out = _bench("s3_clients.py", "--objects", "2", "--rounds", "1", "--sizes", "4096", "--prefix", "smoke-c")
    assert "s3torchconnectorclient" in out and "GET/s" in out


def test_s3_read_path_smoke(s3_server):
    out = _bench("s3_read_path.py", "--objects", "2", "--rounds", "1", "--sizes", "4096", "--procs", "1",
                 "--seconds", "0.2", "--prefix", "smoke-r")
    assert "dlbench / bare = " in out and "1 process(es)" in out


def test_s3_matrix_smoke(s3_server, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path))
    out = _bench("s3_matrix.py", "--workloads", "imagenet,webdataset", "--strategies", "naive", "--samples", "8")
    row = [ln for ln in out.splitlines() if ln.startswith("imagenet")][0].split()
    assert row[:3] == ["imagenet", "naive", "0"] and row[4] == "1.00"     # exit 0, one GET per sample
    row = [ln for ln in out.splitlines() if ln.startswith("webdataset")][0].split()
    assert row[:3] == ["webdataset", "naive", "0"] and row[4] == "0.12"   # one GET per shard of 8 samples
