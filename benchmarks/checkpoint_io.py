"""The checkpoint engine's write and restore paths against bare loops writing and reading the same files.

Write: ``Saver.begin`` + ``finish`` (sync: every file pwrite'd in 16 MiB requests and fsync'd, the folder
fsync'd, the manifest written, the rename published) against a bare loop of ``os.open`` / ``os.pwrite`` (the
same requests) / ``os.fsync`` / ``os.close`` over the same file names and sizes. Restore: ``engine.execute``
of the rank's own read plan (one preadv per file range) against a bare loop of ``os.open`` / ``os.preadv`` /
``os.close``, both into the state buffer. Both cold (the files evicted first) or warm (``--warm``). A and B alternate,
``--repeats`` times; the figure is the ratio of the medians (engine rate / bare rate), one run.

    python benchmarks/checkpoint_io.py --model llama3-8b --scale 1e-3 --dp 1 --layout shards --repeats 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--scale", type=float, default=1e-3)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--layout", default="shards", choices=["stream", "shards"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--dir", default=None, help="where to write [default: a temporary folder]")
    a = ap.parse_args(argv)

    from dlbench.checkpoint import engine
    from dlbench.checkpoint.models import get_model
    from dlbench.comm import SerialComm
    from dlbench.storage.pagecache import evict

    m = get_model(a.model, dp=a.dp, scale=a.scale)
    base = Path(tempfile.mkdtemp(prefix="ckpt-bench-", dir=a.dir))
    try:
        saver = engine.Saver(SerialComm(), m, 0, a.layout, base / "engine")
        (base / "engine").mkdir()
        saver.generate(0)
        clock = time.perf_counter_ns
        bare_dir = base / "bare"
        bare_dir.mkdir()
        mv = memoryview(saver.state)

        def engine_write(k):
            t = time.perf_counter()
            saver.begin(k, clock)
            saver.finish(clock)
            return time.perf_counter() - t

        def bare_write(k):
            d = bare_dir / f"c{k}"
            d.mkdir()
            t = time.perf_counter()
            for f in saver.files:
                fd = os.open(d / f.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                buf, pos = mv[f.offset:f.offset + f.nbytes], 0
                while pos < f.nbytes:
                    pos += os.pwrite(fd, buf[pos:pos + engine.CHUNK], pos)
                os.fsync(fd)
                os.close(fd)
            return time.perf_counter() - t

        ew, bw = [], []
        for k in range(a.repeats):
            ew.append(engine_write(k))
            bw.append(bare_write(k))
        folder = base / "engine" / saver.name(a.repeats - 1)
        place = engine.placement(m, [0], a.layout, folder)
        rp = engine.read_plan(place, [t for f in saver.files for t, _ in f.tensors])
        out_buf = memoryview(saver.state)     # both read into the model's state (already in memory)
        paths = sorted(rp.ranges)

        def engine_read():
            if not a.warm:
                evict(paths)
            return engine.execute(rp, cold=False, into=saver.state)["read_s"]

        def bare_read():
            if not a.warm:
                evict(paths)
            t = time.perf_counter()
            pos = 0
            for p in paths:
                fd = os.open(p, os.O_RDONLY)
                for off, n in rp.ranges[p]:
                    got = 0
                    while got < n:
                        got += os.preadv(fd, [out_buf[pos + got:pos + n]], off + got)
                    pos += n
                os.close(fd)
            return time.perf_counter() - t

        er, br = [], []
        for _ in range(a.repeats):
            er.append(engine_read())
            br.append(bare_read())
        nbytes = saver.nbytes
        res = {"bytes": nbytes, "files": len(saver.files), "repeats": a.repeats, "cold": not a.warm,
               "engine_write_s": statistics.median(ew), "bare_write_s": statistics.median(bw),
               "engine_read_s": statistics.median(er), "bare_read_s": statistics.median(br)}
        res["write_ratio"] = res["bare_write_s"] / res["engine_write_s"]
        res["restore_ratio"] = res["bare_read_s"] / res["engine_read_s"]
        mb = 1 << 20
        print(f"{a.model} scale {a.scale:g} dp {a.dp} layout {a.layout}: {nbytes / mb:,.1f} MiB in "
              f"{len(saver.files)} files, {a.repeats} alternated repeats, {'cold' if not a.warm else 'warm'} reads")
        print(f"  write   engine {nbytes / mb / res['engine_write_s']:8.1f} MiB/s  bare pwrite+fsync "
              f"{nbytes / mb / res['bare_write_s']:8.1f} MiB/s  ratio {res['write_ratio']:.3f}")
        print(f"  restore engine {nbytes / mb / res['engine_read_s']:8.1f} MiB/s  bare preadv "
              f"{nbytes / mb / res['bare_read_s']:8.1f} MiB/s  ratio {res['restore_ratio']:.3f}")
        return res
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
