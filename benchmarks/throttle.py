"""Benchmark of the PFS emulation (dlbench/storage/throttle.py).

In one run:
  (a) one reader reads 1 GB (10^9 bytes, 16 MiB requests, really read from a generated file) through the
      throttle at an emulated 200 MB/s (latency 0, b_fs = 200 MB/s, t(1) = t(2) = 200 MB/s):
      the model says 5.0 s; the issue asks for ±5 %;
  (b) two processes, started together, each read 0.5 GB of the same file at the same emulated PFS:
      t(2) = 200 MB/s shared, so each should get ~100 MB/s (5.0 s each);
  (d) staggered: reader A reads 1 GB, reader B joins 2 s later for ~0.3 GB: A alone at 200 MB/s, both at
      100 MB/s while B reads, A alone again; the model gives each one's time (γ integrated piecewise);
  (c) the per-read overhead of the γ counter (enter + read γ + exit) and of a Throttle.read that does not
      need to wait, in µs, next to an fcntl.flock lock/unlock pair for comparison.
The real, unthrottled read of the same bytes is timed too (the ceiling the emulation sits on).

    PYTHONPATH=. python benchmarks/throttle.py [--total-bytes 1e9] [--dir /tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dlbench.storage import PfsModel, ReaderCounter, Throttle, ThrottledReader, aligned_empty  # noqa: E402

CHUNK = 16 << 20
MODEL = PfsModel(0.0, 200, ((1, 200), (2, 200)))


class ChunkReader:
    """A SampleReader over one big file: sample i is the i-th 16 MiB chunk (the last may be short)."""

    def __init__(self, path: str, chunk: int = CHUNK):
        self.fd = os.open(path, os.O_RDONLY)
        self.size = os.fstat(self.fd).st_size
        self.chunk = chunk
        self.max_row_nbytes = chunk

    def n_chunks(self) -> int:
        return -(-self.size // self.chunk)

    def read_into(self, i, out) -> int:
        off = i * self.chunk
        n = min(self.chunk, self.size - off)
        got = os.preadv(self.fd, [memoryview(out)[:n]], off)
        return got

    def close(self):
        os.close(self.fd)


def make_file(path: str, nbytes: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            k = min(left, len(block))
            f.write(block[:k])
            left -= k


def read_range(path: str, first: int, last: int, key: str | None) -> tuple[float, int]:
    r = ChunkReader(path)
    reader = ThrottledReader(r, Throttle(MODEL, key=key)) if key else r
    out = aligned_empty(CHUNK)
    t0 = time.perf_counter()
    n = 0
    for i in range(first, last):
        n += reader.read_into(i, out)
    dt = time.perf_counter() - t0
    reader.close()
    return dt, n


def _worker(path, first, last, key, barrier, conn, delay_s=0.0):
    barrier.wait(60)
    if delay_s:
        time.sleep(delay_s)
    conn.send(read_range(path, first, last, key))
    conn.close()


def new_key(tables: list) -> str:
    key = "bench-" + uuid.uuid4().hex
    tables.append(ReaderCounter.path_for(key))
    return key


def overheads(n: int = 100_000) -> dict:
    import fcntl

    c = ReaderCounter("bench-overhead-" + uuid.uuid4().hex)
    path = c.path
    t0 = time.perf_counter()
    for _ in range(n):
        c.enter()
        c.active()
        c.exit()
    counter_us = (time.perf_counter() - t0) / n * 1e6
    th = Throttle(PfsModel(0.0, 1e12), c)
    f = int
    t0 = time.perf_counter()
    for _ in range(n):
        th.read(f)
    throttle_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    bare_us = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(n):
        fcntl.flock(c._fd, fcntl.LOCK_EX)
        fcntl.flock(c._fd, fcntl.LOCK_UN)
    flock_us = (time.perf_counter() - t0) / n * 1e6
    c.close()
    os.unlink(path)
    return {"counter_enter_active_exit_us": counter_us, "throttle_read_no_wait_us": throttle_us - bare_us,
            "flock_lock_unlock_pair_us": flock_us}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total-bytes", type=float, default=1e9)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    total = int(a.total_bytes)
    path = os.path.join(a.dir, f"dlbench-throttle-bench-{os.getpid()}.bin")
    tables = []      # this run's γ tables (unique keys, unused once the run ends)
    res: dict = {"model": {"latency_s": MODEL.latency_s, "client_link_MBps": MODEL.client_link_MBps,
                           "aggregate_MBps_by_clients": MODEL.aggregate_MBps_by_clients},
                 "total_bytes": total, "request_bytes": CHUNK}
    try:
        make_file(path, total)
        nch = ChunkReader(path).n_chunks()
        read_range(path, 0, nch, None)                       # warm the page cache
        dt, n = read_range(path, 0, nch, None)
        res["unthrottled"] = {"wall_s": dt, "MBps": n / dt / 1e6}

        expected = MODEL.read_time_s(total, 1)
        key = new_key(tables)
        dt, n = read_range(path, 0, nch, key)
        res["single"] = {"bytes": n, "wall_s": dt, "expected_s": expected, "error_pct": (dt / expected - 1) * 100,
                         "MBps": n / dt / 1e6}

        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(2)
        half = nch // 2
        pipes, procs = [], []
        key = new_key(tables)
        for first, last in ((0, half), (half, nch)):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, args=(path, first, last, key, barrier, w))
            p.start()
            pipes.append(r)
            procs.append(p)
        two = [pipe.recv() for pipe in pipes]
        for p in procs:
            p.join()
        res["two_concurrent"] = [
            {"bytes": n, "wall_s": dt, "MBps": n / dt / 1e6,
             "expected_MBps_while_both_read": MODEL.rate_Bps(2) / 1e6} for dt, n in two]

        # (d) staggered start
        key = new_key(tables)
        nb = max(1, int(0.3e9) // CHUNK)
        jobs = [(0, nch, 0.0), (0, nb, 2.0)]
        barrier = ctx.Barrier(2)
        pipes, procs = [], []
        for first, last, delay in jobs:
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, args=(path, first, last, key, barrier, w, delay))
            p.start()
            pipes.append(r)
            procs.append(p)
        (ta, na), (tb, nb_bytes) = [pipe.recv() for pipe in pipes]
        for p in procs:
            p.join()
        r1, r2 = MODEL.rate_Bps(1), MODEL.rate_Bps(2)
        a_alone = 2.0 * r1
        exp_b = nb_bytes / r2
        exp_a = 2.0 + exp_b + (na - a_alone - exp_b * r2) / r1
        res["staggered"] = {"A": {"bytes": na, "wall_s": ta, "expected_s": exp_a},
                            "B": {"bytes": nb_bytes, "start_s": 2.0, "wall_s": tb, "expected_s": exp_b}}
        res["overhead"] = overheads()
    finally:
        for f in [path, *tables]:
            try:
                os.unlink(f)
            except OSError:
                pass

    s = res["single"]
    print(f"unthrottled read of {total / 1e9:.2f} GB (page cache): {res['unthrottled']['wall_s']:.3f} s "
          f"({res['unthrottled']['MBps']:.0f} MB/s)")
    print(f"(a) 1 reader, {s['bytes'] / 1e9:.3f} GB at emulated 200 MB/s: {s['wall_s']:.3f} s "
          f"(model {s['expected_s']:.3f} s, error {s['error_pct']:+.2f} %)")
    for k, t in enumerate(res["two_concurrent"]):
        print(f"(b) reader {k} of 2 concurrent: {t['bytes'] / 1e9:.3f} GB in {t['wall_s']:.3f} s = "
              f"{t['MBps']:.1f} MB/s (model while both read: {t['expected_MBps_while_both_read']:.0f})")
    st = res["staggered"]
    print(f"(d) staggered: A {st['A']['bytes'] / 1e9:.3f} GB in {st['A']['wall_s']:.3f} s (model "
          f"{st['A']['expected_s']:.3f}); B joins at 2 s, {st['B']['bytes'] / 1e9:.3f} GB in "
          f"{st['B']['wall_s']:.3f} s (model {st['B']['expected_s']:.3f})")
    o = res["overhead"]
    print(f"(c) γ counter enter+read+exit: {o['counter_enter_active_exit_us']:.2f} µs; Throttle.read with no "
          f"wait: {o['throttle_read_no_wait_us']:.2f} µs per read; flock lock+unlock pair: "
          f"{o['flock_lock_unlock_pair_us']:.2f} µs")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
