"""Per-record cost of the tfrecord readers and of the decode phase, against a raw ``preadv`` of the same record as
the floor; generation speed; and, with ``--tf PYTHON`` (an interpreter that has TensorFlow), TensorFlow's own
``TFRecordDataset`` + ``parse_single_example`` over the same files in the same run.

    PYTHONPATH=.:<crc32c site> python benchmarks/tfrecord_readers.py [--files 4] [--records 256] [--kib 112]
        [--repeats 5] [--dir /tmp/...] [--tf /path/to/python-with-tensorflow]

One process, page cache warm. indexed: records in a shuffled order (the plan's global shuffle); tfdata: the order
``dlbench.plan.tfdata`` gives one stream (files front to back through a shuffle buffer of 1,024). Reported: µs
per record, best of --repeats, and each figure's ratio to the raw floor taken in the same run (the machine is
shared: absolute figures move, ratios less).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from _bench import best_of

TF_SCRIPT = """
import glob, sys, time
import tensorflow as tf
files = sorted(glob.glob(sys.argv[1] + "/*.tfrecord"))
feat = {"image": tf.io.FixedLenFeature([], tf.string), "size": tf.io.FixedLenFeature([], tf.int64)}
best = {}
for name, parse in (("read", False), ("read+parse", True)):
    for _ in range(int(sys.argv[2])):
        t = time.perf_counter()
        n = 0
        for rec in tf.data.TFRecordDataset(files):
            if parse:
                tf.io.parse_single_example(rec, feat)
            n += 1
        dt = time.perf_counter() - t
        best[name] = min(best.get(name, 1e9), dt / n)
print("TFJSON", best)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--records", type=int, default=256)
    ap.add_argument("--kib", type=int, default=112)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--tf", default=None, help="a Python interpreter with TensorFlow")
    a = ap.parse_args()

    from dlbench import workload as W
    from dlbench.data import fmt_tfrecord as T
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.plan.tfdata import rank_order
    from dlbench.storage import aligned_empty, preadv

    root = Path(a.dir or tempfile.mkdtemp(prefix="tfrec-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    n = a.files * a.records
    spec = {"name": "btfr", "layout": "tfrecord", "samples": n, "batch_size": 1, "samples_per_file": a.records,
            "arrays": [{"name": "x", "shape": [a.kib * 1024], "dtype": "uint8", "role": "data"}]}
    out = {}
    try:
        for read in ("indexed", "tfdata"):
            (root / f"{read}.yaml").write_text(yaml.safe_dump({**spec, "tfrecord": {"read": read}}))
        w = W.load(str(root / "indexed.yaml"))
        d = root / "data"
        t0 = time.perf_counter()
        generate(w, d, seed=0)
        gen_s = time.perf_counter() - t0
        m = Manifest.load(d)
        out["generate_MB_per_s"] = round(m.dataset_nbytes / 1e6 / gen_s, 1)
        order_idx = np.random.default_rng(0).permutation(n).tolist()
        order_tfd = rank_order(first=m.first, count=m.count, world_size=1, rank=0, epoch=0, seed=0, streams=1,
                               local_batch=32, shuffle_buffer=1024, file_shuffle=True).tolist()
        buf = aligned_empty(int(m.nbytes[0]) // a.records)
        img = aligned_empty(a.kib * 1024)
        paths = [str(d / p) for p in m.paths]
        stride = int(m.nbytes[0]) // a.records

        def raw():
            fds = [os.open(p, os.O_RDONLY) for p in paths]
            for i in order_idx:
                f, j = divmod(i, a.records)
                preadv(fds[f], [buf[:stride]], j * stride)
            for fd in fds:
                os.close(fd)

        def reader(read, order, decode=False):
            def go():
                r = T.open_reader(d, m, W.load(str(root / f"{read}.yaml")))
                for i in order:
                    k = r.read_into(i, buf)
                    if decode:
                        r.decode_into(buf, k, img)
                r.close()
            return go

        for name, fn in (("raw preadv (floor)", raw), ("indexed", reader("indexed", order_idx)),
                         ("indexed + decode", reader("indexed", order_idx, True)),
                         ("tfdata (CRCs checked)", reader("tfdata", order_tfd)),
                         ("tfdata + decode", reader("tfdata", order_tfd, True))):
            fn()  # warm the page cache
            out[name] = best_of(fn, a.repeats) / n * 1e6
        floor = out["raw preadv (floor)"]
        print(f"{a.files} files x {a.records} records of {a.kib} KiB ({m.dataset_nbytes / 1e6:.0f} MB), page cache "
              f"warm, best of {a.repeats}; generate {out['generate_MB_per_s']} MB/s")
        print(f"{'reader':28s} {'us/record':>10s} {'x floor':>8s}")
        for k, v in out.items():
            if k != "generate_MB_per_s":
                print(f"{k:28s} {v:10.1f} {v / floor:8.2f}")
        if a.tf:
            r = subprocess.run([a.tf, "-c", TF_SCRIPT, str(d), str(a.repeats)], capture_output=True, text=True,
                               env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
            line = [ln for ln in r.stdout.splitlines() if ln.startswith("TFJSON")]
            if line:
                tf = json.loads(line[0][7:].replace("'", '"'))
                for k, v in tf.items():
                    print(f"{'TensorFlow ' + k:28s} {v * 1e6:10.1f} {v * 1e6 / floor:8.2f}")
            else:
                print("TensorFlow run failed:", r.stderr[-500:])
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
