"""Generation throughput against this machine's own write limit, measured in the same run.

    PYTHONPATH=. python benchmarks/generate.py [--dir /work/tmp] [--imagenet-samples N] [--only imagenet]

For CosmoFlow ``small`` (96 × 16 MiB HDF5 files) and ImageNet ``small`` (12,800 JPEGs, or
--imagenet-samples), it runs ``dlbench generate`` (serially), then writes the same number of files of
the same sizes with plain ``numpy.ndarray.tofile`` from one preallocated buffer (the write limit: no
content generation, no HDF5), and prints both rates and their ratio. For the JPEGs it also prints, for
information, the same tofile into the 1,000 class folders with ``.part`` + rename (the layout's own metadata
cost, which generate pays too; on this machine's ext4 it varies a lot from run to run). Goals: >= 80 % of the limit for the
HDF5 workloads, >= 50 % for the JPEGs (issue 19: a pool of pre-encoded images per size class, made unique
per file; before it every file was encoded with Pillow, ~26 MB/s). Data is deleted after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def _tofile_limit(d: Path, sizes: np.ndarray) -> float:
    d.mkdir()
    buf = np.random.default_rng(0).integers(0, 256, int(sizes.max()), dtype=np.uint8)
    t = time.perf_counter()
    for k, n in enumerate(sizes):
        buf[:int(n)].tofile(d / f"f{k:08d}")
    return time.perf_counter() - t


def _folder_limit(d: Path, sizes: np.ndarray, classes: int) -> float:
    """The JPEG layout's own write limit: the same tofile, but into the class folders (created inside the
    timing, as generate does), one folder after another, each file written as ``.part`` and renamed."""
    d.mkdir()
    buf = np.random.default_rng(0).integers(0, 256, int(sizes.max()), dtype=np.uint8)
    idx = np.arange(len(sizes))
    t = time.perf_counter()
    for c in range(min(classes, len(sizes))):
        (d / f"n{c:08d}").mkdir()
    for k in idx[np.argsort(idx % classes, kind="stable")]:
        p = d / f"n{k % classes:08d}" / f"f{k:08d}"
        buf[:int(sizes[k])].tofile(str(p) + ".part")
        os.replace(str(p) + ".part", p)
    return time.perf_counter() - t


def _one(name: str, scale: str, samples: int | None, root: Path, repeat: int, goal: float) -> str:
    """Alternate the write limit and generation ``repeat`` times (each followed by removing its files
    and ``sync``, so both start from the same page-cache state) and keep the best of each."""
    from dlbench.data.generate import generate
    from dlbench.workload import load

    wl = load(name, scale=scale, samples=samples)
    d = root / f"gen-{name}"
    t_gen, t_lim, t_fold, sizes = [], [], [], None
    for _ in range(repeat):
        res = generate(wl, d, progress=False)
        t_gen.append(res.seconds)
        sizes = res.manifest.nbytes
        shutil.rmtree(d)
        os.sync()
        t_lim.append(_tofile_limit(root / f"lim-{name}", sizes))
        shutil.rmtree(root / f"lim-{name}")
        os.sync()
        if wl.layout == "jpeg_folders":
            t_fold.append(_folder_limit(root / f"fold-{name}", sizes, wl.classes))
            shutil.rmtree(root / f"fold-{name}")
            os.sync()
    nb = int(sizes.sum())
    gen = nb / min(t_gen) / 1e6
    lim = nb / min(t_lim) / 1e6
    fold = (f"\n{'':<10} (for information: tofile into the class folders, .part + rename: {min(t_fold):6.2f} s "
            f"{nb / min(t_fold) / 1e6:7.0f} MB/s, generate / that {min(t_fold) / min(t_gen):5.2f})") if t_fold else ""
    return (f"{name:<10} {len(sizes):>7} files {nb / 1e9:6.2f} GB  generate {min(t_gen):7.2f} s {gen:7.0f} MB/s  "
            f"tofile {min(t_lim):6.2f} s {lim:7.0f} MB/s  ratio {gen / lim:5.2f} (goal >= {goal:.2f})  (best of {repeat} each, alternated)" + fold)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None, help="where to write (default: the system temp dir)")
    ap.add_argument("--imagenet-samples", type=int, default=None, help="fewer JPEGs than small's 12,800")
    ap.add_argument("--skip-imagenet", action="store_true")
    ap.add_argument("--only", choices=("cosmoflow", "ptychonn", "imagenet"), default=None,
                    help="one workload only")
    ap.add_argument("--repeat", type=int, default=3, help="alternations of generate and the write limit")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dlbench-genbench-", dir=a.dir))
    try:
        for name, samples, goal in (("cosmoflow", None, 0.8), ("ptychonn", None, 0.8),
                                    ("imagenet", a.imagenet_samples, 0.5)):
            if (a.only or name) != name or (name == "imagenet" and a.skip_imagenet):
                continue
            print(_one(name, "small", samples, root, a.repeat, goal), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
