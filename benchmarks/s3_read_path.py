"""dlbench's S3 GET path against a bare loop of the same client, and the instrument's own ceiling.

    eval "$(scripts/s3-local.sh start)"
    python benchmarks/s3_read_path.py [--objects 32] [--rounds 5] [--sizes 131072,4194304] [--procs 1,2,4]
    scripts/s3-local.sh stop

1. Ratio: per object size, the same objects read into the same page-aligned buffer by (A) a bare loop of the
   CRT client (``get_object`` and the chunks copied into the buffer) and (B) ``S3Backend.preadv`` (what a reader
   calls, sizes from a manifest: a plain GET, counters and latency recorded), A and B alternated object by
   object, each round's sums, best round kept; prints B's rate / A's rate (target >= 0.9).
2. Ceiling: 1, 2, 4 processes each reading the 128 KiB objects through ``S3Backend.preadv`` for ``--seconds``;
   GETs/s per process and in all (when the total stops growing with processes, the client or this host, not the
   storage, is the limit).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np


def _setup(bucket: str, prefix: str, size: int, n: int) -> list[str]:
    from dlbench.storage.s3 import S3Backend

    b = S3Backend(f"s3://{bucket}/{prefix}/{size}")
    body = np.frombuffer(os.urandom(size), dtype=np.uint8)
    rels = [f"o{i:05d}" for i in range(n)]
    for r in rels:
        h = b.open(r + ".part", write=True)
        b.pwrite(h, body, 0)
        b.rename(r + ".part", r)
    return rels


def _bare(client, bucket: str, keys: list[str], buf: np.ndarray) -> None:
    mv = memoryview(buf).cast("B")
    for k in keys:
        off = 0
        for c in client.get_object(bucket, k):
            n = len(c)
            mv[off:off + n] = c
            off += n


def _dlbench(backend, handles: list[int], buf: np.ndarray) -> None:
    preadv = backend.preadv
    bufs = [buf]
    for h in handles:
        preadv(h, bufs, 0)


def _ceiling_worker(url: str, rels: list[str], size: int, seconds: float, q) -> None:
    from dlbench.storage.s3 import S3Backend

    b = S3Backend(url)
    b.set_sizes(rels, [size] * len(rels))
    hs = [b.open_read(r) for r in rels]
    buf = np.empty(size, dtype=np.uint8)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _dlbench(b, hs, buf)
        n += len(hs)
    q.put(n / (time.perf_counter() - t0))


def main(argv=None) -> dict:
    from dlbench.storage import aligned_empty
    from dlbench.storage.s3 import S3Backend, process_client

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="131072,4194304")
    ap.add_argument("--procs", default="1,2,4")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--bucket", default="dlbench")
    ap.add_argument("--prefix", default="bench-read-path")
    a = ap.parse_args(argv)
    out: dict = {"ratio": {}, "ceiling": {}}
    for size in (int(s) for s in a.sizes.split(",")):
        rels = _setup(a.bucket, a.prefix, size, a.objects)
        url = f"s3://{a.bucket}/{a.prefix}/{size}"
        b = S3Backend(url)
        b.set_sizes(rels, [size] * len(rels))
        hs = [b.open_read(r) for r in rels]
        keys = [f"{a.prefix}/{size}/{r}" for r in rels]
        client = process_client()
        buf = aligned_empty(size)
        best = {"bare": float("inf"), "dlbench": float("inf")}
        clock = time.perf_counter
        for _ in range(a.rounds):   # A and B alternated object by object (a loaded host drifts less in between)
            tb = td = 0.0
            for k, h in zip(keys, hs):
                t0 = clock()
                _bare(client, a.bucket, [k], buf)
                t1 = clock()
                _dlbench(b, [h], buf)
                t2 = clock()
                tb += t1 - t0
                td += t2 - t1
            best["bare"] = min(best["bare"], tb)
            best["dlbench"] = min(best["dlbench"], td)
        ratio = best["bare"] / best["dlbench"]
        out["ratio"][size] = ratio
        print(f"{size:>9} B: bare client {a.objects / best['bare']:7.0f} GET/s, dlbench S3Backend.preadv "
              f"{a.objects / best['dlbench']:7.0f} GET/s: dlbench / bare = {ratio:.3f} (best of {a.rounds}, alternated per object)")
    size = int(a.sizes.split(",")[0])
    rels = [f"o{i:05d}" for i in range(a.objects)]
    ctx = mp.get_context("spawn")
    for p in (int(x) for x in a.procs.split(",")):
        q = ctx.Queue()
        ps = [ctx.Process(target=_ceiling_worker, args=(f"s3://{a.bucket}/{a.prefix}/{size}", rels, size,
                                                        a.seconds, q)) for _ in range(p)]
        for x in ps:
            x.start()
        rates = [q.get() for _ in ps]
        for x in ps:
            x.join()
        out["ceiling"][p] = rates
        print(f"ceiling, {size} B objects: {p} process(es): {sum(rates) / p:7.0f} GET/s per process, "
              f"{sum(rates):7.0f} GET/s in all ({os.cpu_count()} CPUs here)")
    return out


if __name__ == "__main__":
    main()
