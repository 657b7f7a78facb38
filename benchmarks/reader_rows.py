"""Per-sample read cost on small samples, the way executors call readers: ``reader.read_into(i, rows[j])``
with ``rows[j]`` a fresh row view of the reused batch buffer at every call (issue 12: the readers' view
cache was keyed by ``id(out)`` of that fresh view, so it never hit and rebuilt the views every sample).

    PYTHONPATH=. python benchmarks/reader_rows.py [--samples 4096] [--repeats 7] [--dir /tmp/...]

One run, page cache warm, 1 process. A 4 KiB-per-sample ``hdf5_blocks`` dataset (two arrays: data
(32, 32, 2) float16 + label (4,) float32, 256 samples per file), read in file order:
- raw:     ``os.preadv`` of each array's bytes at its offset into a reused buffer (the floor);
- one buf: ``read_into(i, out)`` with one reused buffer (what benchmarks/readers.py times);
- rows[j]: ``read_into(i, rows[j])`` with a batch buffer of 32 rows (what the executors do);
for the default read path (``via=pread``) and HDF5 hyperslab reads (``via=hdf5``). Reported: µs per
sample, best of --repeats, and rows[j] / raw (the bookkeeping the reader adds, as a ratio taken in the
same run, since the machine is shared and absolute figures move).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import yaml
from _bench import best_of


def _bench_via(d, m, wl, via: str, n: int, repeats: int) -> str:
    from dlbench.data.fmt_hdf5 import BlockReader
    from dlbench.data.formats import aligned_empty
    from dlbench.storage import aligned_rows

    r = BlockReader(d, m, wl, via=via)
    out = aligned_empty(r.max_row_nbytes)
    rows = aligned_rows(32, r.max_row_nbytes)
    fds = {f: os.open(d / p, os.O_RDONLY) for f, p in enumerate(m.paths)}
    h = r._get(0)
    offs = h.offsets if h.fd >= 0 else None
    nbs = h.nbytes
    raw_bufs = [out[:nbs[0]], out[nbs[0]:nbs[0] + nbs[1]]]

    def raw():
        if offs is None:
            return
        for i in range(n):
            f, j = divmod(i, 256)
            fd = fds[f]
            for off, nb, b in zip(offs, nbs, raw_bufs):
                os.preadv(fd, [b], off + j * nb)

    def one():
        for i in range(n):
            r.read_into(i, out)

    def per_row():
        for i in range(n):
            r.read_into(i, rows[i & 31])

    one(), per_row(), raw()  # warm
    tr, to, tw = best_of(raw, repeats), best_of(one, repeats), best_of(per_row, repeats)
    ratio = f"{tw / tr:12.2f}" if offs is not None else f"{'-':>12}"
    r.close()
    for fd in fds.values():
        os.close(fd)
    return (f"{via:<6} {tr / n * 1e6 if offs else float('nan'):7.2f} {to / n * 1e6:8.2f} "
            f"{tw / n * 1e6:8.2f} {ratio}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.workload import load

    tmp = Path(tempfile.mkdtemp(prefix="dlbench-reader-rows-", dir=a.dir))
    try:
        spec = {"name": "bench4k", "layout": "hdf5_blocks", "samples": a.samples, "batch_size": 32,
                "samples_per_file": 256,
                "arrays": [{"name": "data", "shape": [32, 32, 2], "dtype": "float16", "role": "data"},
                           {"name": "label", "shape": [4], "dtype": "float32", "role": "label"}]}
        (tmp / "w.yaml").write_text(yaml.safe_dump(spec))
        wl = load(str(tmp / "w.yaml"), samples=a.samples)
        d = tmp / "d"
        generate(wl, d, progress=False)
        m = Manifest.load(d)
        n = a.samples
        print(f"{n} samples of {wl.sample_nbytes} B, hdf5_blocks, page cache warm; us per sample, best of "
              f"{a.repeats}")
        print(f"{'via':<6} {'raw':>7} {'one buf':>8} {'rows[j]':>8} {'rows[j]/raw':>12}")
        for via in ("pread", "hdf5"):
            print(_bench_via(d, m, wl, via, n, a.repeats))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
