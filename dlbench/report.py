"""Tables from result folders only (nothing is run here), and imports of other tools' records:
TimeLogger CSV (NERSC DL-Parallel-IO) and Darshan logs (PyDarshan)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence

from .errors import DlbenchError
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
    head = f"{s.get('workload') or '?'} / {s.get('strategy') or '?'}: {s.get('ranks') or '?'} ranks on " \
           f"{s.get('nodes') or '?'} nodes, {s.get('epochs') or '?'} epochs"
    if run.get("simulated") or s.get("simulated"):
        head += "  [SIMULATED: modelled, not measured]"
    imp = run.get("imported") if isinstance(run.get("imported"), dict) else None
    if imp:
        head += f"  [IMPORTED from {imp.get('kind')}: {imp.get('source')}]"
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
        ("AU threshold", _au_rule(s.get("au_rule"))),
        ("samples/s", _f(s.get("samples_per_s"), "{:.1f}")),
        ("read (MB)", _f(_div(s.get("read_bytes"), MB), "{:.1f}")),
        ("read bandwidth per rank (MB/s)", _f(_div(s.get("read_bandwidth_bytes_per_s"), MB), "{:.1f}")),
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
    if imp and imp.get("kind") == "timelogger" and imp.get("descriptions"):
        rows = [(k, v.get("count"), _f(v.get("per_node_s"), "{:.10g}"),
                 ", ".join(_f(x, "{:.4f}") for x in (v.get("per_epoch_s") or {}).values()))
                for k, v in sorted(imp["descriptions"].items(), key=lambda kv: -kv[1].get("sum_s", 0))]
        lines.append("")
        lines.append(_table(["TimeLogger description", "rows", f"sum / {imp.get('nodes')} nodes (s)",
                             "per epoch (s)"], rows))
    ioc = render_io_counters(s.get("io_counters"))
    if ioc:
        lines.append("")
        lines.append(ioc)
    for note in s.get("import_notes") or []:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _div(x, d):
    return None if x is None else x / d


def render_io_counters(ioc: dict | None) -> str:
    """The Darshan-style counters of ``summary["io_counters"]``: one row per file class, the access-size
    histogram (non-empty buckets) and the slowest rank. Empty string when there are none."""
    if not ioc or not ioc.get("by_class"):
        return ""
    from .counters import bucket_label

    rows = []
    for cls, c in ioc["by_class"].items():
        rows.append((cls, c.get("POSIX_OPENS", 0), c.get("POSIX_READS", 0),
                     _f(c.get("POSIX_BYTES_READ", 0) / MB, "{:.1f}"), c.get("POSIX_SEQ_READS", 0),
                     c.get("POSIX_CONSEC_READS", 0), _f(c.get("POSIX_F_READ_TIME"), "{:.4f}"),
                     _f(c.get("POSIX_F_MAX_READ_TIME"), "{:.6f}"), c.get("POSIX_WRITES", 0),
                     c.get("H5D_READS", 0)))
    out = [_table(["I/O counters", "opens", "reads", "MB read", "seq", "consec", "read time (s)", "max read (s)",
                   "writes", "H5D reads"], rows)]
    for cls, c in ioc["by_class"].items():
        hist = [f"{bucket_label(b)}: {c.get(b, 0)}" for b in ioc.get("buckets") or [] if c.get(b)]
        if hist:
            out.append(f"read sizes ({cls}): " + ", ".join(hist))
    sr = ioc.get("slowest_rank")
    if sr and len(ioc.get("by_rank") or []) > 1:
        if sr.get("POSIX_F_READ_TIME") is not None:
            out.append(f"slowest rank: {sr['rank']} (POSIX_F_READ_TIME {sr['POSIX_F_READ_TIME']:.4f} s)")
        elif sr.get("POSIX_F_SLOWEST_RANK_TIME") is not None:
            out.append(f"slowest rank: {sr['rank']} (Darshan's POSIX_F_SLOWEST_RANK_TIME "
                       f"{sr['POSIX_F_SLOWEST_RANK_TIME']:.4f} s on shared files)")
    return "\n".join(out)


COMPARE_COLUMNS = ("workload", "strategy", "run", "compute", "ranks", "epoch_time_s", "exposed_io_share",
                   "e2e_exposed_io_share", "read_share", "au", "read_MB_per_s", "samples_per_s", "simulated", "run_dir")


def compare_rows(run_dirs: Sequence) -> list[dict]:
    from .results import read_run
    rows = []
    for d in run_dirs:
        r = read_run(d)
        s = r.get("summary") or {}
        ep = s.get("epoch_time_s") or []
        rows.append({
            "workload": s.get("workload"), "strategy": s.get("strategy"), "run": run_label(r),
            "compute": _compute_label(r),
            "ranks": s.get("ranks"),
            "epoch_time_s": (sum(ep) / len(ep)) if ep else None,
            "exposed_io_share": s.get("exposed_io_share"),
            # older run folders (before the figure existed) have no prologue share: shown as "-"
            "e2e_exposed_io_share": s.get("e2e_exposed_io_share"),
            "read_share": s.get("read_share"), "au": s.get("au"),
            "read_MB_per_s": _div(s.get("read_bandwidth_bytes_per_s"), MB),
            "samples_per_s": s.get("samples_per_s"),
            "simulated": bool(r.get("simulated") or s.get("simulated")), "run_dir": r.get("run_dir"),
            "status": r.get("status", "ok"),
        })
    return rows


def run_label(run: dict) -> str:
    """The run's strategy with what tells its study entries apart: pls's Q, a mode, and every option that
    differs from the strategy's default (cache capacity in MB, loader threads as ``t<N>``); surrogatetrain: its
    ablation switches."""
    cfg = run.get("config") or {}
    opts = cfg.get("options") or {}
    s = cfg.get("strategy") or (run.get("summary") or {}).get("strategy") or "?"
    if cfg.get("label"):   # a simulated row names itself (`dlbench simulate` study rows)
        return str(cfg["label"])
    if s == "pls":
        return s + f" Q={opts.get('exchange_fraction')}"
    if s == "surrogatetrain":   # the ablation's rows: buffer and the techniques switched off
        s += f" buf={opts.get('buffer_fraction')}" if opts.get("buffer_fraction") else ""
        s += "".join(f" no-{k}" for k in ("reorder", "remap", "balance", "chunking") if opts.get(k) is False)
        s += " fifo" if opts.get("eviction") == "fifo" else ""
        s += f" threads={opts['loader_threads']}" if opts.get("loader_threads") else ""
        return s
    try:
        import dataclasses

        from . import strategies

        defaults = {f.name: f.default for f in dataclasses.fields(strategies.get(s).Options)}
    except DlbenchError:  # a strategy this install does not have (a folder from another version): every option
        defaults = {}
    parts = [str(opts["mode"])] if "mode" in opts else []
    for k, v in opts.items():
        if k == "mode" or (k in defaults and defaults[k] == v):
            continue
        if k.endswith("capacity") and isinstance(v, (int, float)):
            parts.append(f"{k.replace('_capacity', '').replace('_', '-')} {v / 1e6:g}MB")
        elif k == "loader_threads":
            parts.append(f"t{v}")
        else:
            parts.append(f"{k}={v}")
    return " ".join([s, *parts])


def _compute_label(run: dict) -> str:
    """``sleep a100`` / ``sleep 0.01s`` / ``torch cuda`` / ``model`` (simulated): how steps were computed."""
    s = run.get("summary") or {}
    if run.get("simulated") or s.get("simulated"):
        return "model"
    if isinstance(run.get("imported"), dict):
        return f"imported {run['imported'].get('kind', '')}".strip()
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
    tab = [(r["workload"], r["run"], r["compute"], r["ranks"], _f(r["epoch_time_s"]), _f(r["exposed_io_share"], "{:.1%}"),
            _f(r["e2e_exposed_io_share"], "{:.1%}"), _f(r["read_share"], "{:.1%}"), _f(r["au"], "{:.1%}"), _f(r["read_MB_per_s"], "{:.1f}"),
            _f(r["samples_per_s"], "{:.1f}"), "yes" if r["simulated"] else "no",
            r["status"]) for r in rows]
    return _table(["workload", "run", "compute", "ranks", "epoch (s)", "exposed I/O", "e2e exposed", "read",
                   "AU", "MB/s",
                   "samples/s", "simulated", "status"], tab, align_left=3)


# ---- imports of other tools' records: dlbench.importers (re-exported here) ----------------------------
from .importers import import_darshan, import_timelogger  # noqa: E402,F401


def _au_rule(rule) -> str:
    """'90.0% (MLPerf Storage rules): pass', or 'none published' (runs older than the rule: '-')."""
    if not rule:
        return "-"
    if rule.get("threshold") is None:
        return "none published"
    return f"{rule['threshold']:.1%} ({rule.get('source') or 'workload'}): {'pass' if rule.get('pass') else 'FAIL'}"
