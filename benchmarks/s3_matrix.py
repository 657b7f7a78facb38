"""Every format x every strategy with the shared tier in S3: one `dlbench run --verify` each (1 rank), the table
of exit code, bytes read, GET requests per sample and per-GET latency P50/P99 (run.json's ``summary.s3``).

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

WORKLOADS = ["cosmoflow", "hep_cnn", "ptychonn", "imagenet", "unet3d"]
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
    print(f"{'workload':<10} {'strategy':<15} {'exit':>4} {'MB read':>8} {'GET/sample':>10} {'P50 ms':>7} "
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
        g = _dlbench("generate", "-w", w, "--scale", a.scale, "--samples", str(a.samples), "--data-dir", url,
                     "--no-progress")
        if g.returncode != 0:
            print(f"{w:<10} {'(generate)':<15} {g.returncode:>4}  {g.stderr.strip()[-200:]}")
            continue
        for s in a.strategies.split(","):
            r = _dlbench("run", "-w", w, "--data-dir", url, "--strategy", s, "--epochs", "2", "--verify",
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
            print(f"{w:<10} {s:<15} {row['exit']:>4} {f(row.get('read_mb'), 2):>8} "
                  f"{f(row.get('gets_per_sample'), 2):>10} {f(row.get('p50'), 2):>7} {f(row.get('p99'), 2):>7}  {note}",
                  flush=True)


if __name__ == "__main__":
    main()
