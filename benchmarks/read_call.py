"""Micro-benchmark: the cost of DLBENCH_READ_CALL=readv (lseek + readv, calls dftracer intercepts) against the
default os.preadv (glibc preadv64v2, which dftracer 2.2 does not intercept) on dlbench's read path.

    PYTHONPATH=. python benchmarks/read_call.py [--sizes 4096,1048576] [--reads 20000] [--repeats 7]

A file in the page cache (a temporary directory), one descriptor, reads of SIZE bytes at rotating offsets into a
page-aligned buffer: the two calls alternate pass by pass (A B A B ...) so the drift of a loaded machine hits
both. Reports the median per-read time of each and the difference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from dlbench.storage import PAGE, aligned_empty


def lseek_readv(fd, bufs, off):
    os.lseek(fd, off, os.SEEK_SET)
    return os.readv(fd, bufs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,1048576")
    ap.add_argument("--reads", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        for size in (int(x) for x in a.sizes.split(",")):
            slots = 64
            path = os.path.join(d, f"f{size}")
            with open(path, "wb") as f:
                f.write(os.urandom(size * slots))
            fd = os.open(path, os.O_RDONLY)
            buf = aligned_empty(size + PAGE)
            view = [buf[:size]]
            n = max(200, a.reads if size <= 65536 else a.reads // 50)
            times: dict[str, list[float]] = {"preadv": [], "lseek+readv": []}
            calls = {"preadv": os.preadv, "lseek+readv": lseek_readv}
            for _ in range(a.repeats):
                for name, call in calls.items():
                    t0 = time.perf_counter_ns()
                    for k in range(n):
                        call(fd, view, (k % slots) * size)
                    times[name].append((time.perf_counter_ns() - t0) / n / 1000)
            os.close(fd)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(f"{size:>9} B: preadv {med['preadv']:.2f} us, lseek+readv {med['lseek+readv']:.2f} us per read "
                  f"(+{med['lseek+readv'] - med['preadv']:.2f} us, {med['lseek+readv'] / med['preadv']:.2f}x)")


if __name__ == "__main__":
    main()
