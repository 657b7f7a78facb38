"""Cold vs warm reads of the same configuration (issue 17): ``--cache keep`` (after a warm-up run, so the
dataset sits in the page cache), ``--cache drop`` and ``--cache direct``, with the bytes requested and the bytes
that reached the device per epoch.

    PYTHONPATH=. python benchmarks/cold_reads.py [--root DIR] [--epochs 2] [--strategies naive,prefetch]
        [--cosmoflow-samples 20] [--ptychonn-samples 1600] [--keep-data]

Data (generated under ``--root``, on the disk whose device bytes are measured; default a temporary directory
under $TMPDIR, removed at the end unless ``--keep-data``): cosmoflow with real 16 MiB samples in per-sample
HDF5 files (``--cosmoflow-samples`` x 16 MiB; ``--cache direct`` falls back to buffered reads + eviction, as it
says) and ptychonn's shared HDF5 file of 192 KiB rows (``--ptychonn-samples`` x 192 KiB; O_DIRECT). After
generating, ``os.sync()`` so the files are clean. One rank, sleep compute 0 (the loop measures delivery only),
prefetch with 2 DataLoader workers. For each (workload, strategy): ``keep`` from a cold start (the dataset evicted
first: epoch 0 cold, the later ones warm: mixed), ``keep`` again (warm), ``drop`` and ``direct``. Columns: mean epoch time, read MB/s per rank, requested and device MB
per epoch (requested: the mean; device: each epoch's, e0/e1/...), device / requested over the epochs, the
run's verdict, P50/P99 read latency of the main tier.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from dlbench.storage import pagecache


def cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"dlbench {' '.join(map(str, args))} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def run(data: Path, workload: str, strategy: str, cache: str, epochs: int, out: Path) -> dict:
    extra = ["--num-workers", "2"] if strategy == "prefetch" else []
    o = cli("run", "--workload", workload, "--data-dir", data, "--strategy", strategy, *extra, "--epochs", epochs,
            "--compute-time", "0", "--cache", cache, "--out", out, "--no-progress")
    d = Path([ln for ln in o.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    return json.loads((d / "run.json").read_text())["summary"]


def row(workload: str, strategy: str, s: dict, label: str | None = None) -> tuple:
    c = s["cache"]
    ep = [d for d in c["per_epoch"] if d["epoch"] >= 0]
    req = sum(d["requested_bytes"] for d in ep) / len(ep)
    dev = sum(d["device_read_bytes"] for d in ep) / len(ep)
    avail = c["device_bytes"]["available"]
    lat = s.get("read_latency", {}).get("all", {})
    t = max(lat, key=lambda k: lat[k]["count"]) if lat else None
    et = s["epoch_time_s"]
    return (workload, strategy, label or c["mode"] + (" (O_DIRECT)" if c["direct_reads"] else ""),
            f"{sum(et) / len(et):.3f}", f"{s['read_bandwidth_bytes_per_s'] / 1e6:.0f}", f"{req / 1e6:.1f}",
            "/".join(f"{d['device_read_bytes'] / 1e6:.1f}" for d in ep) if avail else "n/a", f"{dev / req:.0%}" if avail and req else "n/a", c["verdict"],
            f"{lat[t]['p50_s'] * 1e3:.3f}" if t else "-", f"{lat[t]['p99_s'] * 1e3:.3f}" if t else "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=None, help="where the datasets go (a real disk) [default: a temp dir]")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--strategies", default="naive,prefetch")
    ap.add_argument("--cosmoflow-samples", type=int, default=20)
    ap.add_argument("--ptychonn-samples", type=int, default=1600)
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="cosmoflow only (that the script runs)")
    a = ap.parse_args()
    root = Path(a.root) if a.root else Path(tempfile.mkdtemp(prefix="dlbench-cold-"))
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        cases = (("cosmoflow", a.cosmoflow_samples), ("ptychonn", a.ptychonn_samples))
        for wl, n in cases[:1] if a.smoke else cases:
            data = root / f"{wl}-{n}"
            if not (data / "dlbench-manifest.json").exists():
                cli("generate", "--workload", wl, "--samples", n, "--data-dir", data, "--no-progress")
            os.sync()
            for strategy in a.strategies.split(","):
                # keep from a cold start (the dataset evicted first: epoch 0 cold, later epochs warm), which
                # leaves the dataset in the page cache for keep (warm); then drop and direct
                pagecache.evict(pagecache.files_under(data))
                for cache, label in (("keep", "keep, cold start"), ("keep", "keep (warm)"), ("drop", None),
                                     ("direct", None)):
                    rows.append(row(wl, strategy, run(data, wl, strategy, cache, a.epochs, root / "res"), label))
                    print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    finally:
        if not a.keep_data and not a.root:
            shutil.rmtree(root, ignore_errors=True)
    head = ("workload", "strategy", "cache", "epoch (s)", "read MB/s", "requested MB/epoch", "device MB e0/e1/..",
            "device/req", "verdict", "P50 ms", "P99 ms")
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    print("| " + " | ".join(h.ljust(n) for h, n in zip(head, w)) + " |")
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).ljust(n) for x, n in zip(r, w)) + " |")


if __name__ == "__main__":
    main()
