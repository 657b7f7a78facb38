"""Writing simulated runs: one results folder per strategy in the schema of a real run (run.json,
``"schema": "dlbench.run/1"``, ``summary.simulated: true``), and the comparison table.

Uses ``dlbench.results.new_run_dir`` / ``write_run`` and ``dlbench.report.compare`` when they exist
(imported lazily); otherwise writes the same run.json itself and renders a plain table, so simulate does
not depend on the measurement side being installed.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

from .core import DISPLAY


def _new_run_dir(out: Path, workload: str, strategy: str) -> Path:
    try:
        from ..results import new_run_dir  # type: ignore[attr-defined]
    except ImportError:
        new_run_dir = None
    if new_run_dir is not None:
        return Path(new_run_dir(out, workload, strategy))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = Path(out) / workload / strategy
    d = base / stamp
    i = 1
    while d.exists():
        d = base / f"{stamp}-{i}"
        i += 1
    d.mkdir(parents=True)
    return d


def write_simulated_run(out: Path | str, *, config: dict, summary: dict) -> Path:
    """One results folder for one simulated strategy; returns its path."""
    d = _new_run_dir(Path(out), summary["workload"], summary["strategy"])
    try:
        from ..results import write_run  # type: ignore[attr-defined]
    except ImportError:
        write_run = None
    if write_run is not None:
        write_run(d, config=config, summary=summary, simulated=True)
        return d
    import numpy as np

    run = {"schema": "dlbench.run/1", "simulated": True, "config": config,
           "environment": {"host": platform.node(), "python": sys.version.split()[0], "numpy": np.__version__,
                           "argv": sys.argv, "cwd": os.getcwd()},
           "summary": summary, "error": None}
    tmp = d / "run.json.tmp"
    tmp.write_text(json.dumps(run, indent=2, sort_keys=False))
    tmp.replace(d / "run.json")
    return d


def compare_table(run_dirs: list[Path], fmt: str = "table", reference_s: dict | None = None) -> str:
    """``dlbench compare``'s rendering when available, else a plain table / csv / json of the summaries.
    ``reference_s`` ({strategy: published seconds}) adds the published column and the gap."""
    summaries = [json.loads((Path(d) / "run.json").read_text())["summary"] for d in run_dirs]
    labelled = any(s.get("label", s["strategy"]) != s["strategy"] for s in summaries)
    if not reference_s and not labelled:   # labelled rows (studies) keep their labels: the table below
        try:
            from ..report import compare  # type: ignore[attr-defined]
        except ImportError:
            compare = None
        if compare is not None:
            return compare([str(d) for d in run_dirs], fmt=fmt)
    rows = []
    for d in run_dirs:
        s = json.loads((Path(d) / "run.json").read_text())["summary"]
        b = s.get("modelled_breakdown", {})
        label = s.get("label", s["strategy"])
        row = {"strategy": s["strategy"], "name": DISPLAY.get(label, label),
               "total_time_s": s["total_time_s"], "exposed_io_share": s["exposed_io_share"], "au": s["au"],
               "stage_s": b.get("prologue_s", 0.0), "pfs_s": b.get("pfs_s", 0.0), "local_s": b.get("local_s", 0.0),
               "peer_s": b.get("peer_s", 0.0), "compute_s": b.get("compute_s", 0.0), "stall_s": b.get("stall_s", 0.0),
               "barrier_s": b.get("barrier_s", 0.0), "run_dir": str(d)}
        if reference_s and label in reference_s:
            ref = float(reference_s[label])
            row["published_s"] = ref
            row["gap_pct"] = 100.0 * (s["total_time_s"] / ref - 1.0)
        rows.append(row)
    if fmt == "json":
        return json.dumps(rows, indent=2)
    cols = ["name", "total_time_s"] + (["published_s", "gap_pct"] if reference_s else []) + [
        "exposed_io_share", "au", "stage_s", "pfs_s", "local_s", "peer_s", "compute_s", "stall_s", "barrier_s"]
    if fmt == "csv":
        lines = [",".join(cols)]
        lines += [",".join(str(r.get(c, "")) for c in cols) for r in rows]
        return "\n".join(lines)

    def cell(v):
        if isinstance(v, float):
            return f"{v:+.2f}" if False else (f"{v:,.2f}" if abs(v) >= 1 or v == 0 else f"{v:.3f}")
        return str(v)

    table = [cols] + [[cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    out = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(t, widths))) for t in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("(simulated: modelled times in seconds; fetch columns are thread-busy seconds per rank)")
    return "\n".join(out)
