"""Micro-benchmark: aggregated chunked loading (surrogatetrain) on PtychoNN's shared HDF5 file, page cache.

    PYTHONPATH=. python benchmarks/chunked_read.py [--samples 2048] [--run 16] [--repeats 7] [--scale small]

Reads runs of ``--run`` consecutive samples into consecutive page-aligned ring rows (as the loader does),
interleaving the variants in every repeat (best of ``--repeats`` each, same page-cache state):

- per-sample: ``read_into`` per sample (one ``preadv`` per array per sample): the reference;
- scatter:    ``read_run_into`` with ``run_mode="scatter"``: one ``preadv`` per array straight into the rows;
- block:      ``read_run_into`` with ``run_mode="block"``: one ``pread`` per array into a contiguous scratch
              block, then one NumPy copy into the rows;
- hdf5-one / hdf5-block: the same through H5Dread (``via="hdf5"``): a (1, ...) hyperslab per sample vs a
              (run, ...) hyperslab into the scratch block + copy.

Prints µs per sample and the ratio against per-sample reads (> 1: faster). The machine is shared: compare
the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--scale", default="small", help="ptychonn preset for the sample shapes (small: 192 KiB)")
    ap.add_argument("--run", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()

    from dlbench.data.formats import open_reader
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.storage import aligned_rows
    from dlbench.workload import load

    tmp = Path(a.dir or tempfile.mkdtemp(prefix="dlbench-chunked-"))
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        wl = load("ptychonn", scale=a.scale, samples=a.samples)
        d = tmp / "data"
        generate(wl, d, progress=False)
        m = Manifest.load(d)
        readers = {"pread": open_reader(d, m, wl), "hdf5": open_reader(d, m, wl, via="hdf5")}
        rows = aligned_rows(a.run, readers["pread"].max_row_nbytes)
        n = (a.samples // a.run) * a.run
        starts = range(0, n, a.run)

        def per_sample(r):
            for s in starts:
                for k in range(a.run):
                    r.read_into(s + k, rows[k])

        def runs(r, mode):
            r.run_mode = mode
            for s in starts:
                r.read_run_into(s, a.run, rows)

        variants = {
            "per-sample": lambda: per_sample(readers["pread"]),
            "scatter": lambda: runs(readers["pread"], "scatter"),
            "block": lambda: runs(readers["pread"], "block"),
            "hdf5-one": lambda: per_sample(readers["hdf5"]),
            "hdf5-block": lambda: runs(readers["hdf5"], "block"),
        }
        per_sample(readers["pread"])          # warm the page cache
        best = {k: float("inf") for k in variants}
        for _ in range(a.repeats):
            for k, fn in variants.items():
                t = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t)
        nb = wl.sample_nbytes
        print(f"ptychonn {a.scale}: {nb:,} B per sample, {n} samples, runs of {a.run}; best of {a.repeats}")
        print(f"{'variant':<12} {'us/sample':>10} {'GB/s':>7} {'vs per-sample':>14}")
        for k, t in best.items():
            ref = best["hdf5-one"] if k.startswith("hdf5") else best["per-sample"]
            print(f"{k:<12} {t / n * 1e6:>10.1f} {n * nb / t / 1e9:>7.2f} {ref / t:>13.2f}x")
        for r in readers.values():
            r.close()
    finally:
        if a.dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
