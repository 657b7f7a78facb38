"""The ablation table of surrogatetrain run folders (``dlbench study configs/studies/surrogatetrain-ablation.yaml``):
per run its label, mean epoch time, exposed I/O (stall) and barrier wait (with --barrier: the cost of unequal
local batches) per rank, shared-tier MB and requests, bytes per
request, the local-batch spread and the per-rank compute spread, and ratios against the first naive and
prefetch rows (speedup of the epoch time and of the exposed I/O = data loading the trainer waited for).

    python benchmarks/surrogatetrain_table.py RUN_DIR [RUN_DIR ...]    (or a results root: every run.json below)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _label(r: dict) -> str:
    from dlbench.report import run_label as lab

    return lab(r)


def main(argv: list[str]) -> None:
    paths = []
    for a in argv:
        p = Path(a)
        paths += [p / "run.json"] if (p / "run.json").exists() else sorted(p.rglob("run.json"),
                                                                         key=lambda x: x.parent.name)
    rows = []
    for p in paths:
        r = json.loads(p.read_text())
        s = r.get("summary") or {}
        if not s:
            continue
        ep = s.get("epoch_time_s") or [0]
        stall = (s.get("phase_time_s") or {}).get("stall", 0.0)
        barrier = (s.get("phase_time_s") or {}).get("barrier", 0.0)
        io = (s.get("tier_io") or {}).get("epochs", {}).get("shared", {})
        sts = s.get("strategy_stats") or [{}]
        lb = [x.get("local_batch") for x in sts if x.get("local_batch")]
        comp = (s.get("spread") or {}).get("compute_s") or {}
        rows.append({
            "label": _label(r), "epoch_s": sum(ep) / len(ep), "total_s": s.get("total_time_s", 0.0), "stall_s": stall, "barrier_s": barrier,
            "shared_MB": io.get("bytes", 0) / 1e6, "requests": io.get("ops", 0),
            "KiB_per_req": io.get("bytes", 0) / max(1, io.get("ops", 0)) / 1024,
            "batch": f"{min(x['min'] for x in lb)}-{max(x['max'] for x in lb)}" if lb else "-",
            "compute_s": f"{comp.get('min', 0):.2f}-{comp.get('max', 0):.2f}",
        })
    ref = {k: next((x for x in rows if x["label"].split()[0] == k), None) for k in ("naive", "prefetch")}
    head = ["run", "epoch (s)", "stall/rank (s)", "barrier/rank (s)", "shared MB", "requests", "KiB/req", "local batch",
            "compute/rank (s)", "epoch vs naive", "stall vs naive", "epoch vs prefetch", "stall vs prefetch"]
    out = []
    for x in rows:
        cells = [x["label"], f"{x['epoch_s']:.3f}", f"{x['stall_s']:.3f}", f"{x['barrier_s']:.3f}", f"{x['shared_MB']:.1f}", str(x["requests"]),
                 f"{x['KiB_per_req']:.0f}", x["batch"], x["compute_s"]]
        for k in ("naive", "prefetch"):
            b = ref[k]
            cells.append(f"{b['epoch_s'] / x['epoch_s']:.2f}x" if b else "-")
            cells.append(f"{b['stall_s'] / x['stall_s']:.2f}x" if b and x["stall_s"] > 0 else "-")
        out.append(cells)
    w = [max(len(h), *(len(c[i]) for c in out)) if out else len(h) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(head)))
    print("  ".join("-" * x for x in w))
    for c in out:
        print("  ".join(v.ljust(w[i]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(c)))


if __name__ == "__main__":
    main(sys.argv[1:])
