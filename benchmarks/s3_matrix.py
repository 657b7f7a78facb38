"""Every format x every strategy with the shared tier in S3: one `dlbench run --verify` each (1 rank), the table
of exit code, bytes read, GET requests per sample and per-GET latency P50/P99 (run.json's ``summary.s3``).

The packaged workloads cover npz, hdf5 (per sample, blocks, shared) and jpeg; the formats without a packaged
workload of their own are small specs written here (``SPECS``): ``webdataset`` (read: stream, each shard one
sequential GET; only naive and prefetch read that way, the other strategies refuse it in one line, exit 2),
``webdataset_indexed`` (read: indexed, one ranged GET per sample), ``mmap_indexed_binary`` and
``indexed_binary`` (token datasets: one ranged GET per sample of the shared .bin object).

    eval "$(scripts/s3-local.sh start)"
    python benchmarks/s3_matrix.py [--bucket dlbench] [--samples 32] [--scale tiny] [--workloads cosmoflow,...]
        [--strategies ...]
    scripts/s3-local.sh stop
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

WORKLOADS = ["cosmoflow", "hep_cnn", "ptychonn", "imagenet", "unet3d", "webdataset", "webdataset_indexed",
             "mmap_indexed_binary", "indexed_binary"]
_WDS = """\
name: {name}
layout: webdataset
samples_per_file: 8
arrays:
  - {{name: x, shape: [64, 64], dtype: float32, role: data}}
  - {{name: cls, shape: [1], dtype: int64, role: label}}
samples: 64
batch_size: 4
compute: {{}}
webdataset: {{read: {read}, shuffle_buffer: 16, initial: 4, shard_shuffle: 4}}
"""
_TOK = """\
name: {name}
layout: {name}
samples_per_file: 1024
arrays:
  - {{name: tokens, shape: [1024], dtype: uint16, role: data}}
samples: 64
batch_size: 4
compute: {{}}
"""
# formats without a packaged workload: a small spec each (--samples overrides their sample count)
SPECS = {"webdataset": _WDS.format(name="webdataset", read="stream"),
         "webdataset_indexed": _WDS.format(name="webdataset_indexed", read="indexed"),
         "mmap_indexed_binary": _TOK.format(name="mmap_indexed_binary"),
         "indexed_binary": _TOK.format(name="indexed_binary")}
STRATEGIES = ["naive", "prefetch", "staging", "local", "pls", "lbann", "clairvoyant", "locality", "deepio",
              "surrogatetrain"]


def f(v, p: int) -> str:
    return "-" if v is None else f"{v:.{p}f}"


def _dlbench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlbench", *args], capture_output=True, text=True)


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bucket", default="dlbench")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--scale", default="tiny", help="the workloads' preset (a user YAML without presets: full)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    a = ap.parse_args(argv)
    rows = []
    out = Path(tempfile.mkdtemp(prefix="dlbench-s3-matrix-"))
    tag = uuid.uuid4().hex[:8]
    print(f"{'workload':<19} {'strategy':<15} {'exit':>4} {'MB read':>8} {'GET/sample':>10} {'P50 ms':>7} "
          f"{'P99 ms':>7}  note")
    try:
        _matrix(a, out, tag, rows)
    finally:
        import shutil

        shutil.rmtree(out, ignore_errors=True)   # the run folders: the table above is the result
    return rows


def _matrix(a, out: Path, tag: str, rows: list) -> None:
    for w in a.workloads.split(","):
        url = f"s3://{a.bucket}/matrix-{tag}/{Path(w).stem}"
        scale, spec = a.scale, w
        if w in SPECS:
            spec = str(out / f"{w}.yaml")
            Path(spec).write_text(SPECS[w])
            scale = "full"
        g = _dlbench("generate", "-w", spec, "--scale", scale, "--samples", str(a.samples), "--data-dir", url,
                     "--no-progress")
        if g.returncode != 0:
            print(f"{w:<19} {'(generate)':<15} {g.returncode:>4}  {g.stderr.strip()[-200:]}")
            continue
        for s in a.strategies.split(","):
            r = _dlbench("run", "-w", spec, "--data-dir", url, "--strategy", s, "--epochs", "2", "--verify",
                         "--compute-time", "0.001", "--out", str(out))
            row = {"workload": w, "strategy": s, "exit": r.returncode}
            note = ""
            if r.returncode == 0:
                run_dir = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1]
                summ = json.loads((Path(run_dir) / "run.json").read_text())["summary"]
                s3 = summ.get("s3") or {}
                lat = s3.get("get_latency_ms") or {}
                row.update(read_mb=summ["read_bytes"] / 1e6, gets_per_sample=s3.get("requests_per_sample"),
                           p50=lat.get("p50"), p99=lat.get("p99"))
            else:
                note = (r.stderr.strip().splitlines() or [""])[-1][:120]
            rows.append(row)
            print(f"{w:<19} {s:<15} {row['exit']:>4} {f(row.get('read_mb'), 2):>8} "
                  f"{f(row.get('gets_per_sample'), 2):>10} {f(row.get('p50'), 2):>7} {f(row.get('p99'), 2):>7}  {note}",
                  flush=True)


if __name__ == "__main__":
    main()
