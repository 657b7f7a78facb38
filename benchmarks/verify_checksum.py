"""What ``dlbench verify --checksum`` costs against the default structure check (files, sizes, HDF5 shapes).

    PYTHONPATH=. python benchmarks/verify_checksum.py [--dir /tmp/...] [--repeats 3]

CosmoFlow ``tiny`` (32 files × 256 KiB) and CosmoFlow ``small`` with 24 samples (24 × 16 MiB), page cache
warm (the best case for the checksum: on a cold PFS it reads the whole dataset from storage, as an epoch
does, while the structure check reads a few KiB of metadata per file). Prints, best of --repeats, the
structure check, structure + checksum, and --content, each as a ratio to the structure check taken in the
same run. ``cold``: the checksum check again after evicting the dataset's pages from the page cache
(``posix_fadvise(DONTNEED)`` on its files only), so the files are read from the device. Data is deleted after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from _bench import best_of

from dlbench import workload as W
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify


def _evict(d: Path, m: Manifest) -> None:
    for p in m.paths:
        fd = os.open(d / p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="cosmoflow tiny only (that the script runs)")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dlbench-verify-", dir=a.dir))
    try:
        cases = (("cosmoflow", "tiny", None), ("cosmoflow", "small", 24))
        for name, scale, samples in cases[:1] if a.smoke else cases:
            d = root / f"{name}-{scale}"
            generate(W.load(name, scale=scale, samples=samples), d, progress=False)
            m = Manifest.load(d)
            times = {}
            for label, kw in (("structure", {}), ("checksum", {"checksum": True}), ("content", {"content": True})):
                times[label] = best_of(lambda d=d, m=m, kw=kw: verify(d, manifest=m, **kw), a.repeats)
                assert verify(d, manifest=m, **kw) == []
            cold = float("inf")
            for _ in range(a.repeats):
                _evict(d, m)
                t = time.perf_counter()
                verify(d, manifest=m, checksum=True)
                cold = min(cold, time.perf_counter() - t)
            times["checksum cold"] = cold
            base = times["structure"]
            print(f"{name} {scale}: {len(m.paths)} files, {m.dataset_nbytes / 1e6:.1f} MB: " + ", ".join(
                f"{k} {v * 1e3:.1f} ms ({v / base:.1f}x)" for k, v in times.items()))
            shutil.rmtree(d)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
