"""Micro-benchmark: the cost of Darshan-style counting on the read path.

    PYTHONPATH=. python benchmarks/counters.py [--repeats 7] [--dir /tmp/...]

For 4 KiB and 1 MiB samples (one float32 array) it generates an hdf5_shared and an hdf5_per_sample
dataset, warms the page cache, then times passes over every sample with the same reader class without
counters (``counters=None``: the uncounted loops) and with them (``counters=CounterSet()``), alternating
the two (A B A B ...) so drifts of the loaded machine hit both; the node-local tier (``LocalTier``) the
same way. Reports, per read: paired medians (each sample read with and without counters back to back, the
order swapped every sample, so the load of a shared machine moves both alike) with the median per-read
difference (the counting cost) and the ratio; and medians [best] of whole alternated passes. Also the
bare ``IOCounters.read`` call in a loop (the bookkeeping alone).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml


def _workload(tmp: Path, layout: str, n: int, floats: int):
    from dlbench.workload import load

    spec = {"name": f"cnt_{layout}_{floats}", "layout": layout, "samples": n, "batch_size": 1,
            "arrays": [{"name": "x", "shape": [floats], "dtype": "float32", "role": "data"}]}
    p = tmp / f"{layout}-{floats}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return load(str(p), samples=n)


def _alternate(fns: dict, n_reads: int, repeats: int, best: bool = False) -> dict:
    """Median (``best``: minimum) µs per read of every fn, run alternately."""
    times: dict = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - t) / n_reads * 1e6)
    return {k: (min(v) if best else statistics.median(v)) for k, v in times.items()}


def _paired(read_off, read_on, ids, repeats: int) -> dict:
    """Per-read times of the two read functions on the same sample, back to back, the order swapped every
    sample: medians over all reads of all passes, and the cost = the mean of the median per-read
    differences in either order (robust to the load of a shared machine, which moves both alike, and to the
    warmer caches the second read of a sample finds)."""
    pc = time.perf_counter_ns
    off, on = [], []
    for _ in range(repeats):
        for j, i in enumerate(ids):
            if j & 1:
                t0 = pc()
                read_on(i)
                t1 = pc()
                read_off(i)
                t2 = pc()
                on.append(t1 - t0)
                off.append(t2 - t1)
            else:
                t0 = pc()
                read_off(i)
                t1 = pc()
                read_on(i)
                t2 = pc()
                off.append(t1 - t0)
                on.append(t2 - t1)
    a, b = np.asarray(off) / 1e3, np.asarray(on) / 1e3
    d = b - a
    # the second read of a sample finds warmer caches (by δ): off first gives c − δ, on first c + δ
    return {"p_off": float(np.median(a)), "p_on": float(np.median(b)),
            "p_diff": float((np.median(d[0::2]) + np.median(d[1::2])) / 2)}


def _readers(tmp: Path, layout: str, n: int, floats: int, repeats: int):
    from dlbench.data.formats import open_reader
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.storage import aligned_empty
    from dlbench.storage.counters import CounterSet

    wl = _workload(tmp, layout, n, floats)
    d = tmp / f"{layout}-{floats}"
    generate(wl, d, progress=False)
    m = Manifest.load(d)
    plain = open_reader(d, m, wl)
    counted = open_reader(d, m, wl, counters=CounterSet())
    out = aligned_empty(plain.max_row_nbytes)
    order = np.random.default_rng(0).permutation(n).tolist()

    def run(r):
        def f():
            for i in order:
                r.read_into(i, out)
        return f

    run(plain)()  # warm the page cache
    fns = {"off": run(plain), "on": run(counted)}
    res = {**_alternate(fns, n, repeats), **{k + "_best": v for k, v in _alternate(fns, n, repeats, True).items()}}
    res.update(_paired(lambda i: plain.read_into(i, out), lambda i: counted.read_into(i, out), order, repeats))
    plain.close()
    counted.close()
    return res


def _local(tmp: Path, n: int, nbytes: int, repeats: int):
    from dlbench.storage import LocalTier, aligned_empty
    from dlbench.storage.counters import LockedIOCounters

    row = np.ones(nbytes, np.uint8)
    tiers = {}
    for k, io in (("off", None), ("on", LockedIOCounters("local"))):  # as the strategies give tiers
        t = LocalTier(tmp / f"local-{nbytes}-{k}", 0, n * nbytes + 1, check_free=False, io_counters=io)
        for i in range(n):
            t.put(i, row)
        tiers[k] = t
    out = aligned_empty(nbytes)

    def run(t):
        def f():
            for i in range(n):
                t.read_into(i, out)
        return f

    fns = {k: run(t) for k, t in tiers.items()}
    res = {**_alternate(fns, n, repeats), **{k + "_best": v for k, v in _alternate(fns, n, repeats, True).items()}}
    res.update(_paired(lambda i: tiers["off"].read_into(i, out), lambda i: tiers["on"].read_into(i, out),
                       list(range(n)), repeats))
    for t in tiers.values():
        t.clear()
    return res


def _bare(repeats: int) -> dict:
    from dlbench.storage.counters import IOCounters, LockedIOCounters

    k = 200_000

    def loop(c):
        rd = c.read

        def f():
            for i in range(k):
                rd(i & 1023, i * 4096, 4096, 1000)
        return f

    def nop(f, off, n, dt):
        return None

    def empty():  # the loop and a Python call with the same arguments
        for i in range(k):
            nop(i & 1023, i * 4096, 4096, 1000)
    r = _alternate({"loop": empty, "plain": loop(IOCounters("shared", 1024)),
                    "locked": loop(LockedIOCounters("shared", 1024))}, k, repeats)
    return {"plain": r["plain"] - r["loop"], "locked": r["locked"] - r["loop"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed)")
    ap.add_argument("--smoke", action="store_true", help="64 samples of 4 KiB only (that the script runs)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dlbench-counters-", dir=a.dir))
    try:
        rows = []
        cases = (("4 KiB", 1024, 64),) if a.smoke else (("4 KiB", 1024, 4096), ("1 MiB", 262144, 256))
        for label, floats, n in cases:
            for layout in ("hdf5_shared", "hdf5_per_sample"):
                r = _readers(tmp, layout, n, floats, a.repeats)
                rows.append((layout, label, r))
            r = _local(tmp, n, floats * 4, a.repeats)
            rows.append(("local tier", label, r))
        print("µs per read. paired: each sample read with and without counters back to back (order swapped every "
              "sample), medians over all reads; passes: median [best] of whole passes, alternated")
        print(f"{'path':16} {'sample':>7} | {'paired off':>10} {'on':>8} {'on-off':>7} {'on/off':>7} | "
              f"{'passes off':>17} {'on':>17} {'on/off':>14}")
        for path, label, r in rows:
            off, on, ob, nb = r["off"], r["on"], r["off_best"], r["on_best"]
            print(f"{path:16} {label:>7} | {r['p_off']:10.2f} {r['p_on']:8.2f} {r['p_diff']:7.2f} "
                  f"{r['p_on'] / r['p_off']:7.3f} | {off:8.2f} [{ob:6.2f}] {on:8.2f} [{nb:6.2f}] "
                  f"{on / off:6.3f} [{nb / ob:5.3f}]")
        b = _bare(a.repeats)
        print(f"IOCounters.read alone: {b['plain']:.3f} us per call; LockedIOCounters.read (tiers): "
              f"{b['locked']:.3f} us (median of {a.repeats}; a loop calling an empty function subtracted)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
