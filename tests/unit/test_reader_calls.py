"""The npy/npz offset readers (``--read-via pread``) with a file per sample: ``open + one preadv + close`` per
sample (issue 26: they cost 1.7-2.9x that floor with a header pread and a preadv per member). Counted through a
real POSIX backend whose calls are tallied, so a reader that reads headers per sample again fails here; the
bytes are checked against the generator's, and other writers' files still take the general path."""
import os

import numpy as np
import pytest
import yaml

from dlbench import workload as W
from dlbench.data.content import expected_row
from dlbench.data.formats import aligned_empty, open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.errors import DataError
from dlbench.storage.backend import PosixBackend

N = 12


class Tally(PosixBackend):
    """PosixBackend whose reader calls are counted (the system calls themselves, then a count)."""

    def __init__(self, root):
        super().__init__(root)
        self.n = {"open": 0, "preadv": 0, "pread": 0}
        inner_open, inner_preadv, inner_pread = self.open_read, self.preadv, self.pread

        def open_read(k, fl=os.O_RDONLY):
            self.n["open"] += 1
            return inner_open(k, fl)

        def preadv(fd, bufs, off):
            self.n["preadv"] += 1
            return inner_preadv(fd, bufs, off)

        def pread(fd, n, off):
            self.n["pread"] += 1
            return inner_pread(fd, n, off)

        self.open_read, self.preadv, self.pread = open_read, preadv, pread


def dataset(tmp_path, layout, var):
    arrays = [{"name": "x", "shape": [3000], "dtype": "uint8", "role": "data"}]
    if layout == "npz":
        arrays.append({"name": "y", "shape": [1], "dtype": "int64", "role": "label"})
    spec = {"name": f"rc{layout}", "layout": layout, "samples": N, "batch_size": 2, "samples_per_file": 1,
            "arrays": arrays}
    if var:
        spec["record_size"] = {"kind": "normal", "mean_bytes": 4000, "std_bytes": 1000, "min_bytes": 8,
                               "max_bytes": 8000}
    p = tmp_path / "w.yaml"
    p.write_text(yaml.safe_dump(spec))
    w = W.load(str(p))
    d = tmp_path / "d"
    generate(w, d, seed=3)
    return w, d, Manifest.load(d)


@pytest.mark.parametrize("layout", ["npy", "npz"])
@pytest.mark.parametrize("var", [False, True], ids=["fixed", "record-size"])
def test_one_preadv_per_sample(tmp_path, layout, var):
    w, d, m = dataset(tmp_path, layout, var)
    st = Tally(d)
    r = open_reader(d, m, w, via="pread", storage=st)
    out = aligned_empty(r.max_row_nbytes)
    for i in range(N):
        assert np.array_equal(out[:r.read_into(i, out)], expected_row(w, 3, i))
    r.close()
    members = len(w.arrays)
    learn = 0 if layout == "npy" else 1      # npz: the first file read through its headers (the template)
    assert st.n["open"] == N
    assert st.n["preadv"] == N + learn * (members - 1)
    assert st.n["pread"] <= learn * 2 * members     # headers: never per sample


@pytest.mark.parametrize("layout", ["npy", "npz"])
def test_other_writers_and_truncation_take_the_general_path(tmp_path, layout):
    w, d, m = dataset(tmp_path, layout, False)
    p5 = d / m.paths[5]
    if layout == "npy":
        a = np.load(p5)
        with open(p5, "wb") as fh:        # a version 2.0 header: another length, the parser finds the data
            np.lib.format.write_array(fh, a, version=(2, 0))
    else:
        with np.load(p5) as z:
            x, y = z["x"], z["y"]
        np.savez(p5, y=y, x=x)            # members in another order: the central directory finds them
    p7 = d / m.paths[7]
    p7.write_bytes(p7.read_bytes()[:-(1000 if layout == "npy" else 1200)])
    r = open_reader(d, m, w, via="pread")
    out = aligned_empty(r.max_row_nbytes)
    for i in (0, 1, 5):
        assert np.array_equal(out[:r.read_into(i, out)], expected_row(w, 3, i))
    with pytest.raises(DataError, match=m.paths[7]):
        r.read_into(7, out)
    assert np.array_equal(out[:r.read_into(8, out)], expected_row(w, 3, 8))
    r.close()


def test_npz_readers_benchmark_smoke(tmp_path):
    """benchmarks/npz_readers.py with tiny arguments: it runs and prints every layout's ratio to the raw floor."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "npz_readers.py"), "--samples", "16", "--kib", "4",
                        "--repeats", "1", "--dir", str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [ln.split() for ln in r.stdout.splitlines()[2:]]
    assert [(x[0], x[1]) for x in rows] == [("npy", "1"), ("npy", "16"), ("npz", "1"), ("npz", "16")]
    assert all(x[-1].endswith("x)") for x in rows)
