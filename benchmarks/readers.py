"""Micro-benchmark: dlbench's sample readers against a bare h5py loop, 1 MiB samples in the page cache.

    PYTHONPATH=. python benchmarks/readers.py [--samples 256] [--repeats 5] [--dir /tmp/...]

Per layout it generates a 1 MiB-per-sample dataset (one int16 array `full` (64,64,64,2)), reads every
sample once to warm the page cache, then times, best of --repeats passes over all samples:
- bare: `with h5py.File(p) as f: f['full'][...]` per sample (per-sample files), or `ds[i]` on an open
  file (shared), each allocating its array as user code does;
- dlbench: `reader.read_into(i, out)` into one reused page-aligned buffer.
Reports µs per sample, GB/s and dlbench / bare (samples/s ratio; the issue's goal is >= 0.9).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import yaml
from _bench import best_of


def _workload(tmp: Path, layout: str, n: int):
    from dlbench.workload import load

    spec = {"name": f"bench1mib_{layout}", "layout": layout, "samples": n, "batch_size": 1,
            "arrays": [{"name": "full", "shape": [64, 64, 64, 2], "dtype": "int16", "role": "data"}]}
    p = tmp / f"{layout}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return load(str(p), samples=n)


def _bench(tmp: Path, layout: str, n: int, repeats: int) -> str:
    import os

    import h5py

    from dlbench.data.formats import aligned_empty, open_reader
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest

    wl = _workload(tmp, layout, n)
    d = tmp / layout
    generate(wl, d, progress=False)
    m = Manifest.load(d)
    paths = [str(d / p) for p in m.paths]
    r = open_reader(d, m, wl)
    out = aligned_empty(r.max_row_nbytes)
    nb = wl.sample_nbytes
    f = h5py.File(paths[0], "r")
    ds = f["full"]
    off = ds.id.get_offset()
    fd = os.open(paths[0], os.O_RDONLY)

    def ours():
        for i in range(n):
            r.read_into(i, out)

    def bare_per_file():
        for i in range(n):
            with h5py.File(paths[i], "r") as g:
                g["full"][...]

    def bare_shared():
        for i in range(n):
            ds[i]

    def raw_shared():  # the floor: one preadv per sample, no bookkeeping
        for i in range(n):
            os.preadv(fd, [out], off + i * nb)

    bare = bare_per_file if layout == "hdf5_per_sample" else bare_shared
    ours(), bare()  # warm the page cache
    tb, to = best_of(bare, repeats), best_of(ours, repeats)
    extra = ""
    if layout == "hdf5_shared":
        tr = best_of(raw_shared, repeats)
        extra = f"  (raw preadv {tr / n * 1e6:.1f} us: bookkeeping {(to - tr) / n * 1e6:.1f} us/sample)"
    r.close()
    f.close()
    os.close(fd)
    return (f"{layout:<16} {tb / n * 1e6:9.1f} {to / n * 1e6:11.1f} {n * nb / tb / 1e9:10.2f} "
            f"{n * nb / to / 1e9:13.2f} {tb / to:6.2f}{extra}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dlbench-readers-", dir=a.dir))
    try:
        print(f"{'layout':<16} {'bare us':>9} {'dlbench us':>11} {'bare GB/s':>10} {'dlbench GB/s':>13} {'ratio':>6}")
        for layout in ("hdf5_per_sample", "hdf5_shared"):
            print(_bench(tmp, layout, a.samples, a.repeats))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
