"""How fast is dlbench's read path, against the bare loops it must not fall behind?

In one run, on 1 MiB float32 samples in one-sample HDF5 files (configs/examples/onemib-hdf5.yaml),
warm in the page cache, compute 0, 1 rank:
  (L) a bare low-level libhdf5 loop: h5py.h5f.open + h5d.open + h5d.read into a preallocated, page-aligned
      buffer + close (the limit of this access pattern: the reference, issue 19)
  (L+) the same loop as dlbench's reader makes its calls: a memory type made once, the file closed by
      releasing its identifier (no FileID.close, whose nonlocal_close scans every live h5py identifier)
  (a) a bare h5py loop:       with h5py.File(p) as f: x = f["data"][...]
  (b) plain os.pread of the same bytes (open, pread at the dataset's offset into a reused buffer, close)
  (c) dlbench run --strategy naive (counters and timeline on, as every run)
  (d) dlbench run --strategy prefetch with 0, 1, 2 workers
(L), (a) and (c) are interleaved ``--repeat`` times and each is its best: a bare loop's best pass over the
files, naive's best epoch (the machine is shared; ratios taken in the same run are what counts).
Goals: naive >= 0.95 of (L); bookkeeping <= 5 us per sample, where bookkeeping is (epoch time - union of
read time) / samples for naive with compute 0 (everything the loop does besides reading). Order: the same
shuffled order for the bare loops as dlbench's epoch 0.

    python benchmarks/read_path.py [--samples 1024] [--epochs 3] [--repeat 5] [--dir /tmp/dlbench-readpath]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "configs" / "examples" / "onemib-hdf5.yaml"


def dlbench(*args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], capture_output=True, text=True,
                          env=e, check=False)


def warm(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 22):
                pass


def bare_h5py(paths, order):
    t0 = time.perf_counter()
    for i in order:
        with h5py.File(paths[i], "r") as f:
            f["data"][...]
    return len(order) / (time.perf_counter() - t0)


def bare_lowlevel(paths, order, name=b"data", tuned=False):
    """The issue's reference loop: low-level libhdf5 calls, nothing else, into one preallocated buffer.
    ``tuned``: a memory type made once and the file released instead of ``close()``d (PerSampleReader's calls)."""
    from dlbench.storage import aligned_empty

    h5f, h5d, h5s = h5py.h5f, h5py.h5d, h5py.h5s
    bpaths = [os.fsencode(p) for p in paths]
    with h5py.File(paths[0], "r") as f:
        shape, dtype = f[name.decode()].shape, f[name.decode()].dtype
    buf = aligned_empty(int(np.prod(shape)) * dtype.itemsize, np.uint8).view(dtype).reshape(shape)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    if tuned:
        mt = h5py.h5t.py_create(dtype)
        t0 = time.perf_counter()
        for i in order:
            fid = h5f.open(bpaths[i], h5f.ACC_RDONLY, fapl)
            h5d.open(fid, name).read(h5s.ALL, h5s.ALL, buf, mt)
            del fid
        return len(order) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for i in order:
        fid = h5f.open(bpaths[i], h5f.ACC_RDONLY, fapl)
        h5d.open(fid, name).read(h5s.ALL, h5s.ALL, buf)
        fid.close()
    return len(order) / (time.perf_counter() - t0)


def bare_pread(paths, order, offsets, nbytes):
    buf = np.empty(nbytes + 4096, np.uint8)
    off = (-buf.ctypes.data) % 4096
    view = memoryview(buf[off:off + nbytes])
    t0 = time.perf_counter()
    for i in order:
        fd = os.open(paths[i], os.O_RDONLY)
        os.preadv(fd, [view], offsets[i])
        os.close(fd)
    return len(order) / (time.perf_counter() - t0)


def run_strategy(data_dir, out, epochs, strategy, *extra):
    r = dlbench("run", "--workload", WORKLOAD, "--data-dir", data_dir, "--strategy", strategy, *extra,
                "--compute-time", "0", "--epochs", epochs, "--out", out)
    if r.returncode != 0:
        raise SystemExit(f"dlbench run failed: {r.stderr}")
    rd = [ln.split("results: ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1]
    run = json.loads((Path(rd) / "run.json").read_text())
    s = run["summary"]
    # skip epoch 0 when there are several (it includes worker start-up for prefetch)
    ep = s["epoch_time_s"][1:] if len(s["epoch_time_s"]) > 1 else s["epoch_time_s"]
    n = s["samples"] / len(s["epoch_time_s"])
    sps = n / float(np.mean(ep))
    best = n / float(np.min(s["epoch_time_s"]))
    read_s = s["phase_time_s"].get("read", 0.0)
    book_us = (sum(s["epoch_time_s"]) - read_s) / s["samples"] * 1e6
    return sps, book_us, best


def null_reader_bookkeeping(samples: int = 4096, epochs: int = 3, batch: int = 16) -> float:
    """The runner's own cost per sample with a reader that does nothing: (epoch - read) / samples."""
    from dlbench import workload as wl_mod
    from dlbench.comm import SerialComm
    from dlbench.metrics import summarize
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.timeline import Timeline

    wl = wl_mod.load(str(WORKLOAD), samples=samples)

    class NullReader:
        max_row_nbytes = 64

        def read_into(self, i, out):
            return 64

        def close(self):
            pass

    class Sizes:
        def __init__(self):
            self.samples = samples

        def sample_nbytes(self):
            return np.full(samples, 64)

    cfg = RunConfig(workload=str(WORKLOAD), strategy="naive", epochs=epochs, batch_size=batch, compute_time_s=0.0)
    loop = Loop(cfg, SerialComm(), wl, Sizes(), None, reader_factory=NullReader)
    out = loop.run(Timeline(1 << 16, 0))
    s = summarize([out["arrays"]], workload="null", strategy="naive", ranks=1, nodes=1, epochs=epochs)
    return (sum(s["epoch_time_s"]) - s["phase_time_s"]["read"]) / s["samples"] * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5, help="bare loops and naive, interleaved: best of N")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="prefetch with 0 workers only (that the script runs)")
    a = ap.parse_args()
    base = Path(a.dir or tempfile.mkdtemp(prefix="dlbench-readpath-"))
    data, out = base / "data", base / "results"
    r = dlbench("generate", "--workload", WORKLOAD, "--samples", a.samples, "--data-dir", data, "--no-progress")
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    sys.path.insert(0, str(ROOT))
    from dlbench.data.manifest import Manifest
    from dlbench.plan import epoch_permutation

    m = Manifest.load(data)
    paths = [str(data / f.path) for f in m.files]
    offsets = []
    for p in paths:
        with h5py.File(p, "r") as f:
            offsets.append(f["data"].id.get_offset())
    order = epoch_permutation(0, 0, len(paths)).tolist()
    nbytes = int(m.sample_nbytes()[0])
    warm(paths)
    low = tuned = h5 = naive = 0.0
    book = float("inf")
    for _ in range(a.repeat):       # interleaved, best of N each
        low = max(low, bare_lowlevel(paths, order))
        tuned = max(tuned, bare_lowlevel(paths, order, tuned=True))
        h5 = max(h5, bare_h5py(paths, order))
        _sps, bk, best = run_strategy(data, out, a.epochs, "naive")
        naive, book = max(naive, best), min(book, bk)
    rows = [("(L) bare low-level libhdf5 loop", low, None), ("(L+) (L), dlbench's calls", tuned, None),
            ("(a) bare h5py loop", h5, None)]
    pr = max(bare_pread(paths, order, offsets, nbytes) for _ in range(a.repeat))
    rows.append(("(b) os.pread, same bytes", pr, None))
    rows.append(("(c) dlbench naive", naive, book))
    for w in (0,) if a.smoke else (0, 1, 2):
        sps, _, _ = run_strategy(data, out, a.epochs, "prefetch", "--num-workers", w)
        rows.append((f"(d) dlbench prefetch, {w} workers", sps, None))
    mb = nbytes / 1e6
    print(f"{a.samples} samples of {nbytes:,} B, page cache warm, compute 0, 1 rank; cpus={os.cpu_count()}; "
          f"(L), (L+), (a), (c): best of {a.repeat} interleaved")
    print(f"{'path':<34} {'samples/s':>10} {'MB/s':>8} {'vs (L)':>7} {'vs h5py':>8} {'bookkeeping us/sample':>22}")
    for name, sps, bk in rows:
        bks = f"{bk:.1f}" if bk is not None else ""
        print(f"{name:<34} {sps:>10.0f} {sps * mb:>8.0f} {sps / low:>7.2f} {sps / h5:>8.2f} {bks:>22}")
    print(f"runner bookkeeping with a null reader (batch 16): {null_reader_bookkeeping():.2f} us/sample "
          f"(goal <= 5)")
    print(f"goal naive >= 0.95 x bare low-level loop: {'met' if naive >= 0.95 * low else 'NOT met'} "
          f"({naive / low:.3f})")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
