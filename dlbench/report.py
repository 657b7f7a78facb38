"""Tables from result folders only (nothing is run here), and imports of other tools' records:
TimeLogger CSV (NERSC DL-Parallel-IO) and Darshan logs (PyDarshan)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from .timeline import OUTSIDE_EPOCH, PHASES

MB = 1e6


def _f(x, fmt="{:.3f}") -> str:
    try:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "-"
        return fmt.format(x)
    except (TypeError, ValueError):
        return str(x)


def _table(headers: Sequence[str], rows: Sequence[Sequence], align_left: int = 1) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for k, r in enumerate(cells):
        out.append("  ".join(c.ljust(w[i]) if i < align_left else c.rjust(w[i]) for i, c in enumerate(r)).rstrip())
        if k == 0:
            out.append("  ".join("-" * x for x in w))
    return "\n".join(out)


def _tier_bytes_text(bt: dict) -> str:
    """``shared FS X, own tiers Y (memory a, local b), peers Z`` in MB: where the epochs' bytes came from."""
    own = {k: v for k, v in bt.items() if k not in ("shared", "peer")}
    parts = [f"shared FS {bt.get('shared', 0) / MB:.1f}", f"own tiers {sum(own.values()) / MB:.1f}"]
    if any(own.values()):
        parts[-1] += " (" + ", ".join(f"{k} {v / MB:.1f}" for k, v in own.items() if v) + ")"
    parts.append(f"peers {bt.get('peer', 0) / MB:.1f}")
    return ", ".join(parts)


def render_summary(run: dict) -> str:
    """Plain-text summary of one run (a ``read_run`` dict or a bare summary): key figures, then the phase
    breakdown (mean over ranks, share of epoch time) and the per-rank spread."""
    s = run.get("summary", run) or {}
    lines = []
    head = f"{s.get('workload', '?')} / {s.get('strategy', '?')}: {s.get('ranks', '?')} ranks on " \
           f"{s.get('nodes', '?')} nodes, {s.get('epochs', '?')} epochs"
    if run.get("simulated") or s.get("simulated"):
        head += "  [SIMULATED: modelled, not measured]"
    if run.get("status") == "failed" or run.get("error"):
        err = run.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        head += f"  [FAILED: {msg}]"
    lines.append(head)
    ep = s.get("epoch_time_s") or []
    key = [
        ("total time (s)", _f(s.get("total_time_s"))),
        ("prologue / stage (s)", _f(s.get("prologue_time_s"))),
        ("epoch time (s), mean over ranks", ", ".join(_f(x) for x in ep) or "-"),
        ("exposed I/O share (stall/epoch)", _f(s.get("exposed_io_share"), "{:.1%}")),
        ("end-to-end exposed share (with prologue)", _f(s.get("e2e_exposed_io_share"), "{:.1%}")),
        ("read share (read/epoch)", _f(s.get("read_share"), "{:.1%}")),
        ("AU (compute/epoch)", _f(s.get("au"), "{:.1%}")),
        ("samples/s", _f(s.get("samples_per_s"), "{:.1f}")),
        ("read (MB)", _f((s.get("read_bytes") or 0) / MB, "{:.1f}")),
        ("read bandwidth per rank (MB/s)", _f((s.get("read_bandwidth_bytes_per_s") or 0) / MB, "{:.1f}")),
        ("first-step stall per epoch (s)", ", ".join(_f(x, "{:.4f}") for x in s.get("first_step_stall_s") or [])
         or "-"),
        ("imbalance (max/mean - 1)", _f(s.get("imbalance"), "{:.1%}")),
    ]
    comp = s.get("compute") or {}
    if comp.get("mode") == "sleep" and comp.get("source"):
        key.append(("compute: sleep (s/step)", f"{_f(comp.get('step_time_s'), '{:.4g}')}  {comp['source']}"))
    elif comp.get("mode") == "torch":
        key.append(("compute: torch (s/step, median)", f"{_f(comp.get('step_time_s_median'), '{:.4g}')}  "
                    f"{comp.get('model', '?')} on {comp.get('device', '?')}, {comp.get('precision', 'fp32')}"))
    if s.get("plan_time_s"):
        key.append(("plan build per epoch (s), outside epoch time",
                    ", ".join(_f(x, "{:.4f}") for x in s["plan_time_s"])))
    bt = s.get("bytes_by_tier") or {}
    if bt:
        key.append(("bytes by tier (MB)", _tier_bytes_text(bt)))
    sem = s.get("semantics") or {}
    if sem:
        key.append(("order semantics", f"full permutation each epoch: "
                    f"{sem.get('each_epoch_a_full_permutation', '?')}; global batch = global shuffle's: "
                    f"{sem.get('global_batch_is_global_shuffles', '?')}; order changes: {sem.get('order_changes', '?')}"))
    oq = s.get("order_quality") or {}
    seen = oq.get("fraction_of_dataset_seen_per_rank_after_epoch") or []
    exp = oq.get("global_shuffle_expected_after_epoch") or []
    if seen and exp:
        key.append(("dataset seen per rank after last epoch", f"{seen[-1]:.1%} (global shuffle: {exp[-1]:.1%})"))
    lines.append(_table(["figure", "value"], key, align_left=2))
    pt = s.get("phase_time_s") or {}
    ps = s.get("phase_share") or {}
    if pt:
        rows = [(p, _f(pt.get(p)), _f(ps.get(p), "{:.1%}")) for p in PHASES if pt.get(p) and p not in OUTSIDE_EPOCH]
        lines.append("")
        lines.append(_table(["phase", "time (s)", "share"], rows))
    sp = s.get("spread") or {}
    if sp and (s.get("ranks") or 1) > 1:
        rows = [(k, *(_f(v.get(x), "{:.4g}") for x in ("min", "mean", "max"))) for k, v in sp.items()]
        lines.append("")
        lines.append(_table(["per rank", "min", "mean", "max"], rows))
    return "\n".join(lines)


COMPARE_COLUMNS = ("workload", "strategy", "compute", "ranks", "epoch_time_s", "exposed_io_share",
                   "e2e_exposed_io_share", "read_share", "au", "read_MB_per_s", "samples_per_s", "simulated", "run_dir")


def compare_rows(run_dirs: Sequence) -> list[dict]:
    from .results import read_run
    rows = []
    for d in run_dirs:
        r = read_run(d)
        s = r.get("summary") or {}
        ep = s.get("epoch_time_s") or []
        rows.append({
            "workload": s.get("workload"), "strategy": s.get("strategy"), "compute": _compute_label(r),
            "ranks": s.get("ranks"),
            "epoch_time_s": (sum(ep) / len(ep)) if ep else None,
            "exposed_io_share": s.get("exposed_io_share"),
            # older run folders (before the figure existed) have no prologue share: shown as "-"
            "e2e_exposed_io_share": s.get("e2e_exposed_io_share"),
            "read_share": s.get("read_share"), "au": s.get("au"),
            "read_MB_per_s": (s.get("read_bandwidth_bytes_per_s") or 0) / MB,
            "samples_per_s": s.get("samples_per_s"),
            "simulated": bool(r.get("simulated") or s.get("simulated")), "run_dir": r.get("run_dir"),
            "status": r.get("status", "ok"),
        })
    return rows


def _compute_label(run: dict) -> str:
    """``sleep a100`` / ``sleep 0.01s`` / ``torch cuda`` / ``model`` (simulated): how steps were computed."""
    s = run.get("summary") or {}
    if run.get("simulated") or s.get("simulated"):
        return "model"
    c = s.get("compute") or {}
    cfg = run.get("config") or {}
    mode = c.get("mode") or cfg.get("compute") or "?"
    if mode == "torch":
        prec = c.get("precision") or cfg.get("precision") or "fp32"
        return f"torch {c.get('device_type') or c.get('device') or ''}{'' if prec == 'fp32' else ' ' + prec}".strip()
    if cfg.get("compute_time_s") is not None:
        return f"sleep {cfg['compute_time_s']:g}s"
    if cfg.get("compute_profile"):
        return "sleep profile"
    acc = c.get("accelerator") or cfg.get("accelerator") or ""
    return f"sleep {acc}{' measured' if c.get('kind') == 'measured' else ''}".strip()


def compare(run_dirs: Sequence, fmt: str = "table") -> str:
    """One row per run: workload, strategy, ranks, mean epoch time, exposed I/O share, read share, AU,
    per-rank read MB/s, samples/s, simulated flag; as ``table``, ``csv`` or ``json``."""
    if fmt not in ("table", "csv", "json"):
        from .errors import unknown_choice
        raise unknown_choice("format", fmt, ["table", "csv", "json"])
    rows = compare_rows(run_dirs)
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*COMPARE_COLUMNS, "status"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()
    tab = [(r["workload"], r["strategy"], r["compute"], r["ranks"], _f(r["epoch_time_s"]), _f(r["exposed_io_share"], "{:.1%}"),
            _f(r["e2e_exposed_io_share"], "{:.1%}"), _f(r["read_share"], "{:.1%}"), _f(r["au"], "{:.1%}"), _f(r["read_MB_per_s"], "{:.1f}"),
            _f(r["samples_per_s"], "{:.1f}"), "yes" if r["simulated"] else "no",
            r["status"]) for r in rows]
    return _table(["workload", "strategy", "compute", "ranks", "epoch (s)", "exposed I/O", "e2e exposed", "read",
                   "AU", "MB/s",
                   "samples/s", "simulated", "status"], tab, align_left=3)


# ---- TimeLogger import ----------------------------------------------------------------------------
def import_timelogger(path, *, nodes: int | None = None, fold_setup: bool = True) -> dict:
    """Per-description sums of ``Time Taken`` from a TimeLogger CSV (plain or .gz; dlbench's own
    timelogger.csv too). Returns ``{"nodes", "ranks", "epochs", "rows", "descriptions": {desc: {"count",
    "sum_s", "per_node_s", "per_epoch_s": {epoch: Σ/nodes}}}}``. ``nodes`` defaults to the number of
    distinct ranks ≥ 0 (the NERSC analysis divides by nodes, one rank per node); ``fold_setup`` counts
    epoch −1 (set-up) as epoch 0, as the original analysis does. Descriptions are stripped of the
    leading space TimeLogger writes. Sums use math.fsum."""
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    sums: dict[str, list[float]] = defaultdict(list)
    per_epoch: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ranks: set[int] = set()
    epochs: set[int] = set()
    n = 0
    with opener(p, "rt", newline="") as f:
        rd = csv.reader(f)
        header = [h.strip() for h in next(rd)]
        try:
            ie, ir, idsc, itk = (header.index(c) for c in ("Epoch", "Rank", "Action Description", "Time Taken"))
        except ValueError as exc:
            from .errors import DataError
            raise DataError(f"{p}: not a TimeLogger CSV (header {header!r}: {exc})") from None
        for row in rd:
            if not row:
                continue
            n += 1
            e = int(float(row[ie]))
            r = int(float(row[ir]))
            desc = row[idsc].strip()
            t = float(row[itk])
            ranks.add(r)
            if fold_setup and e < 0:
                e = 0
            epochs.add(e)
            sums[desc].append(t)
            per_epoch[desc][e].append(t)
    nn = nodes if nodes else max(1, len([r for r in ranks if r >= 0]))
    out = {}
    for desc, vals in sums.items():
        s = math.fsum(vals)
        out[desc] = {"count": len(vals), "sum_s": s, "per_node_s": s / nn,
                     "per_epoch_s": {e: math.fsum(v) / nn for e, v in sorted(per_epoch[desc].items())}}
    return {"nodes": nn, "ranks": sorted(r for r in ranks if r >= 0), "epochs": sorted(epochs), "rows": n,
            "descriptions": out}


# ---- Darshan import -------------------------------------------------------------------------------
_POSIX = ("POSIX_OPENS", "POSIX_READS", "POSIX_WRITES", "POSIX_BYTES_READ", "POSIX_BYTES_WRITTEN",
          "POSIX_SEQ_READS", "POSIX_CONSEC_READS", "POSIX_SEEKS", "POSIX_STATS")
_POSIX_F = ("POSIX_F_READ_TIME", "POSIX_F_WRITE_TIME", "POSIX_F_META_TIME")
_HIST = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M", "10M_100M", "100M_1G", "1G_PLUS")


def import_darshan(path) -> dict:
    """Per-module counters of a Darshan log via PyDarshan: ``{"modules": [...], "job": {...},
    "posix": {counter: total over records, "files", "read_size_histogram": {bucket: count},
    "write_size_histogram": {...}, "read_time_s", ...}, "mpiio": {...}, "stdio": {...},
    "per_module": {module: {"records": n}}}``. Needs the ``darshan`` package (dlbench[darshan])."""
    try:
        import darshan
    except ImportError:
        from .errors import ConfigError
        raise ConfigError("import_darshan needs PyDarshan: pip install 'dlbench[darshan]'") from None
    rep = darshan.DarshanReport(str(path), read_all=True)
    out: dict = {"modules": sorted(rep.modules), "job": {}, "per_module": {}}
    try:
        job = rep.metadata.get("job", {})
        out["job"] = {"nprocs": job.get("nprocs"), "run_time_s": job.get("run_time"),
                      "start_time": job.get("start_time_sec"), "end_time": job.get("end_time_sec")}
    except Exception:  # noqa: BLE001
        pass
    for mod in rep.records:
        try:
            df = rep.records[mod].to_df()
        except Exception:  # noqa: BLE001 - modules without a DataFrame form (DXT, HEATMAP) are skipped
            continue
        if not isinstance(df, dict):
            continue
        c = df.get("counters")
        fc = df.get("fcounters")
        d: dict = {"records": int(len(c)) if c is not None else 0}
        if c is not None:
            d["files"] = int(c["id"].nunique()) if "id" in c else None
            d["ranks"] = int(c["rank"].nunique()) if "rank" in c else None
            for col in c.columns:
                if col.endswith(("_OPENS", "_READS", "_WRITES", "_BYTES_READ", "_BYTES_WRITTEN", "_SEEKS",
                                 "_STATS", "_INDEP_READS", "_COLL_READS", "_INDEP_WRITES", "_COLL_WRITES",
                                 "_INDEP_OPENS", "_COLL_OPENS")):
                    d[col] = int(c[col].clip(lower=0).sum())
            for rw in ("READ", "WRITE"):
                hist = {}
                for b in _HIST:
                    col = f"{mod}_SIZE_{rw}_{b}" if mod != "MPI-IO" else f"MPIIO_SIZE_{rw}_AGG_{b}"
                    if col in c:
                        hist[b] = int(c[col].clip(lower=0).sum())
                if hist:
                    d[f"{rw.lower()}_size_histogram"] = hist
        if fc is not None:
            for col in fc.columns:
                if col.endswith(("_READ_TIME", "_WRITE_TIME", "_META_TIME")) and "_MAX_" not in col:
                    d[col] = float(fc[col].clip(lower=0).sum())
        key = {"POSIX": "posix", "MPI-IO": "mpiio", "STDIO": "stdio", "H5F": "h5f", "H5D": "h5d"}.get(mod, mod.lower())
        out[key] = d
        out["per_module"][mod] = {"records": d["records"]}
    return out
