"""DLBENCH_READ_CALL: dlbench's data reads with os.preadv (glibc preadv64v2, the default) or lseek + readv (calls
dftracer intercepts: tests/tracer). Same bytes either way; a bad value is one line, before anything runs."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os
from dlbench import storage
p = {path!r}
fd = os.open(p, os.O_RDONLY)
a, b = bytearray(100), bytearray(50)
n = storage.preadv(fd, [a, b], 1000)
os.lseek(fd, 7, os.SEEK_SET)
n2 = storage.preadv(fd, [a], 1000)
print(storage.READ_CALL, n, n2, bytes(a[:4]).hex(), bytes(b[-4:]).hex())
"""


def _probe(tmp_path, value):
    p = tmp_path / "f.bin"
    if not p.exists():
        p.write_bytes(bytes(range(256)) * 40)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_READ_CALL": value}
    return subprocess.run([sys.executable, "-c", PROBE.format(path=str(p))], capture_output=True, text=True, env=env)


def test_readv_reads_the_same_bytes_as_preadv(tmp_path):
    a = _probe(tmp_path, "preadv")
    b = _probe(tmp_path, "readv")
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    # 1000 % 256 = 232: bytes e8 e9 ea eb ...; both scatter 150 bytes into two buffers at the offset asked
    assert a.stdout.split()[1:] == b.stdout.split()[1:] == ["150", "100", "e8e9eaeb", "7a7b7c7d"]
    assert a.stdout.split()[0] == "preadv" and b.stdout.split()[0] == "readv"


def test_bad_read_call_is_one_line_before_the_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_READ_CALL": "mmap", "DLBENCH_NO_MPI": "1"}
    r = subprocess.run([sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn", "--data-dir",
                        tmp_path / "d", "--out", tmp_path / "res", "--compute-time", "0"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.strip() == ("dlbench: error: DLBENCH_READ_CALL='mmap' (environment): "
                                                      "choose one of: preadv, readv")
    assert not (tmp_path / "d").exists() and not (tmp_path / "res").exists()
