"""Micro-benchmark: the cost of the storage backend on the per-sample read path (issue 16).

    PYTHONPATH=. python benchmarks/storage_backend.py [--files 2000] [--nbytes 4096] [--repeat 7]

Files of --nbytes bytes in the page cache (a JPEG-sized sample). Per sample, best of --repeat passes
(median-free: the minimum is the cost without the machine's noise):
- bare: ``os.open`` + ``os.preadv`` + ``os.close`` in a loop (the syscalls alone);
- posix calls: the same through ``PosixBackend``'s bound ``open_read``/``preadv``/``close`` (what the JPEG and
  HDF5 readers call);
- JpegReader-like loop with ``pread_into`` (one more Python call than ``preadv``), for reference;
- memory: ``MemoryBackend``'s calls (the fake; no system call).
Also one open file read at offsets (``preadv`` only), bare vs the backend's bound call.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from _bench import best_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--nbytes", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()

    from dlbench.storage import aligned_empty, preadv
    from dlbench.storage.backend import MemoryBackend, PosixBackend

    root = Path(tempfile.mkdtemp(prefix="dlbench-backend-", dir=a.dir))
    try:
        rels = [f"f{i:06d}" for i in range(a.files)]
        data = os.urandom(a.nbytes)
        for r in rels:
            (root / r).write_bytes(data)
        big = root / "big"
        big.write_bytes(os.urandom(a.nbytes * a.files))
        px = PosixBackend(root)
        mem = MemoryBackend.from_dir(root)
        keys = px.keys(rels)
        mkeys = mem.keys(rels)
        out = aligned_empty(a.nbytes)
        n = a.files

        def bare():
            for k in keys:
                fd = os.open(k, os.O_RDONLY)
                try:
                    preadv(fd, [out], 0)
                finally:
                    os.close(fd)

        def backend_calls(b=px, ks=keys):
            op, pv, cl = b.open_read, b.preadv, b.close
            for k in ks:
                fd = op(k, os.O_RDONLY)
                try:
                    pv(fd, [out], 0)
                finally:
                    cl(fd)

        def backend_pread_into():
            op, pi, cl = px.open_read, px.pread_into, px.close
            for k in keys:
                fd = op(k, os.O_RDONLY)
                try:
                    pi(fd, out, 0)
                finally:
                    cl(fd)

        fd = os.open(root / "big", os.O_RDONLY)
        offs = [i * a.nbytes for i in range(n)]

        def bare_offsets():
            for o in offs:
                preadv(fd, [out], o)

        def backend_offsets():
            pv = px.preadv
            for o in offs:
                pv(fd, [out], o)

        for f in (bare, backend_calls, bare_offsets, backend_offsets):   # warm the page cache and the code
            f()
        rows = []
        for _ in range(3):   # interleaved rounds
            rows.append({
                "bare open+preadv+close": best_of(bare, a.repeat),
                "PosixBackend open_read+preadv+close": best_of(backend_calls, a.repeat),
                "PosixBackend open_read+pread_into+close": best_of(backend_pread_into, a.repeat),
                "MemoryBackend open_read+preadv+close": best_of(lambda: backend_calls(mem, mkeys), a.repeat),
                "bare preadv at offsets (open file)": best_of(bare_offsets, a.repeat),
                "PosixBackend preadv at offsets": best_of(backend_offsets, a.repeat),
            })
        os.close(fd)
        print(f"{n} files of {a.nbytes} B in the page cache; us per sample, best of {a.repeat} per round, 3 rounds "
              f"interleaved (PosixBackend.preadv is dlbench.storage.preadv: {px.preadv is preadv})")
        for k in rows[0]:
            vals = [r[k] / n * 1e6 for r in rows]
            print(f"  {k:42s} " + "  ".join(f"{v:6.2f}" for v in vals) + f"   best {min(vals):6.2f}")
        b0 = min(r["bare open+preadv+close"] for r in rows)
        b1 = min(r["PosixBackend open_read+preadv+close"] for r in rows)
        print(f"backend per-sample overhead (best vs best): {(b1 - b0) / n * 1e6:+.2f} us "
              f"({b1 / b0:.3f} x the bare syscalls)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
