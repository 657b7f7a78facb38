"""Writing simulated runs: one results folder per strategy in the schema of a real run (run.json,
``"schema": results.SCHEMA``, ``summary.simulated: true``), and the comparison table."""

from __future__ import annotations

import json
from pathlib import Path

from ..results import output_error_line
from .core import display_name


def write_simulated_run(out: Path | str, *, config: dict, summary: dict) -> Path:
    """One results folder for one simulated strategy; returns its path."""
    from ..results import new_run_dir, remove_run_dir, write_run

    d = Path(new_run_dir(Path(out), summary["workload"], summary["strategy"]))
    try:
        write_run(d, config=config, summary=summary, simulated=True)
    except BaseException as e:   # a full disk: no half-written folder (write_run removed its temporary file)
        remove_run_dir(d)
        if isinstance(e, OSError):
            from ..errors import OutputError

            raise OutputError(output_error_line("--out", out, e)) from None
        raise
    return d


def compare_table(run_dirs: list[Path], fmt: str = "table", reference_s: dict | None = None) -> str:
    """``dlbench compare``'s rendering, or for labelled rows (studies) and published references a table /
    csv / json of the modelled breakdown. ``reference_s`` ({strategy: published seconds}) adds the published
    column and the gap."""
    from ..report import io_bound_share
    from ..results import read_run

    summaries = [read_run(d)["summary"] for d in run_dirs]
    labelled = any(s.get("label", s["strategy"]) != s["strategy"] for s in summaries)
    if not reference_s and not labelled:   # labelled rows (studies) keep their labels: the table below
        from ..report import compare

        return compare([str(d) for d in run_dirs], fmt=fmt)
    rows = []
    for d, s in zip(run_dirs, summaries):
        b = s.get("modelled_breakdown", {})
        label = s.get("label", s["strategy"])
        row = {"strategy": s["strategy"], "name": display_name(label),
               "total_time_s": s["total_time_s"], "io_bound_share": io_bound_share(s),
               "exposed_io_share": s["exposed_io_share"],
               "e2e_exposed_io_share": s.get("e2e_exposed_io_share", s["exposed_io_share"]), "au": s["au"],
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
        "io_bound_share", "exposed_io_share", "e2e_exposed_io_share", "au", "stage_s", "pfs_s", "local_s", "peer_s", "compute_s", "stall_s", "barrier_s"]
    if fmt == "csv":
        lines = [",".join(cols)]
        lines += [",".join(str(r.get(c, "")) for c in cols) for r in rows]
        return "\n".join(lines)

    def cell(v):
        if isinstance(v, float):
            return f"{v:,.2f}" if abs(v) >= 1 or v == 0 else f"{v:.3f}"
        return str(v)

    table = [cols] + [[cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    out = ["  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(t, widths))) for t in table]
    out.insert(1, "  ".join("-" * w for w in widths))
    out.append("(simulated: modelled times in seconds; fetch columns are thread-busy seconds per rank; "
               "io_bound_share = 1 - AU - non-I/O overhead: stall + barrier (waiting for data-starved peers) + "
               "exchange; exposed_io_share (the own stall) leaves the prologue (stage_s) out, e2e_exposed_io_share "
               "counts it)")
    return "\n".join(out)
