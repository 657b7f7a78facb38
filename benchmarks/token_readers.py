"""Per-sample cost of the token-dataset readers (mmap_indexed_binary: numpy.memmap and pread) and of the
webdataset stream reader, each against a bare loop doing the same I/O in the same run:

- mmap: a bare ``numpy.memmap`` copy loop (what Megatron's dataset does per sample) vs dlbench's ``MMapReader``
  without counters and with them (getrusage around each copy: the page-fault counting's cost);
- pread: a bare ``os.preadv`` loop at the index's pointers vs ``PreadReader`` with counters;
- webdataset stream: a bare loop reading each shard whole with one ``preadv`` and slicing the samples out vs
  ``StreamReader`` with counters (the same shard order, samples in stream order).

    PYTHONPATH=. python benchmarks/token_readers.py [--samples 32768] [--tokens 1024] [--repeats 5] [--dir D]

One process, page cache warm, samples in a shuffled order (wds: shard by shard). Variants alternate within each
repeat; reported: µs per sample, best of --repeats, and the ratio to the bare loop of the same I/O (the machine
is shared: absolute figures move, ratios less).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def _wl(layout: str, samples: int, spf: int, tokens: int, extra: dict | None = None):
    from dlbench.config import from_mapping
    from dlbench.workload import WorkloadSpec, resolve

    d = {"name": f"bench_{layout}", "layout": layout, "samples": samples, "batch_size": 8, "samples_per_file": spf,
         "arrays": [{"name": "tokens", "shape": [tokens], "dtype": "uint16", "role": "data"}], **(extra or {})}
    return resolve(from_mapping(WorkloadSpec, d, where="benchmark"))


def main(argv=None) -> dict:
    from dlbench.data import fmt_indexed as X
    from dlbench.data.formats import open_reader
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.storage.counters import CounterSet

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=32768)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--shard-samples", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args(argv)
    root = Path(a.dir or tempfile.mkdtemp(prefix="dlbench-tokbench-"))
    try:
        tok = _wl(X.MEGATRON, a.samples, a.samples, a.tokens)
        wds = _wl("webdataset", a.samples, a.shard_samples, a.tokens, {"webdataset": {"read": "stream"}})
        generate(tok, root / "tok", seed=0)
        generate(wds, root / "wds", seed=0)
        mt, mw = Manifest.load(root / "tok"), Manifest.load(root / "wds")
        order = np.random.default_rng(0).permutation(a.samples).tolist()
        n = a.tokens * 2
        out = np.empty(n, np.uint8)
        ptr = (np.arange(a.samples, dtype=np.int64) * n).tolist()
        binp = str(root / "tok" / mt.paths[0])
        wds_order = list(range(a.samples))          # shard by shard, front to back (the stream's I/O)
        shard_paths = [os.fsencode(str(root / "wds" / p)) for p in mw.paths]
        stride = 512 + -(-n // 512) * 512

        def bare_mmap():
            mm = np.memmap(binp, dtype=np.uint8, mode="r")
            for i in order:
                out[:] = mm[ptr[i]:ptr[i] + n]

        def reader_loop(layout_wl, m, d, via, counters, ids):
            def run():
                r = open_reader(d, m, layout_wl, via=via, counters=CounterSet() if counters else None)
                for i in ids:
                    r.read_into(i, out)
                r.close()
            return run

        def bare_preadv():
            fd = os.open(binp, os.O_RDONLY)
            try:
                for i in order:
                    os.preadv(fd, [out], ptr[i])
            finally:
                os.close(fd)

        def bare_shards():
            for f, p in enumerate(shard_paths):
                size = int(mw.nbytes[f])
                buf = np.empty(size, np.uint8)
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.preadv(fd, [buf], 0)
                finally:
                    os.close(fd)
                for j in range(int(mw.count[f])):
                    q = j * stride + 512
                    out[:] = buf[q:q + n]

        variants = {
            "mmap bare": bare_mmap,
            "mmap dlbench": reader_loop(tok, mt, root / "tok", "library", False, order),
            "mmap dlbench+counters": reader_loop(tok, mt, root / "tok", "library", True, order),
            "pread bare": bare_preadv,
            "pread dlbench+counters": reader_loop(tok, mt, root / "tok", "pread", True, order),
            "wds bare": bare_shards,
            "wds dlbench+counters": reader_loop(wds, mw, root / "wds", "auto", True, wds_order),
        }
        best = {k: float("inf") for k in variants}
        for _ in range(a.repeats):          # alternated: every variant once per repeat
            for k, fn in variants.items():
                t = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t)
        us = {k: v / a.samples * 1e6 for k, v in best.items()}
        res = {"samples": a.samples, "sample_bytes": n, "repeats": a.repeats, "us_per_sample": us,
               "ratio_to_bare": {k: us[k] / us[k.split()[0] + " bare"] for k in us if not k.endswith("bare")}}
        print(json.dumps(res, indent=1))
        return res
    finally:
        if a.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
