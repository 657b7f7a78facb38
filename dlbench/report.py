"""Tables from result folders only (nothing is run here), and the numbers behind ``dlbench plot``'s bars
(``bar_segments``). Imports of other tools' records (TimeLogger CSV, Darshan logs) are ``dlbench.importers``'."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Sequence

from .errors import DlbenchError
from .timeline import OUTSIDE_EPOCH, PHASES
from .units import format_bytes

MIB = 2**20   # every size printed here is binary (MiB, MiB/s), as MLPerf Storage reports them


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
    """``shared FS X, own tiers Y (memory a, local b), peers Z`` in MiB: where the epochs' bytes came from."""
    own = {k: v for k, v in bt.items() if k not in ("shared", "peer", "unclassified")}
    parts = [f"shared FS {_num(bt.get('shared', 0)) / MIB:.1f}", f"own tiers {sum(map(_num, own.values())) / MIB:.1f}"]
    if any(own.values()):
        parts[-1] += " (" + ", ".join(f"{k} {_num(v) / MIB:.1f}" for k, v in own.items() if v) + ")"
    parts.append(f"peers {_num(bt.get('peer', 0)) / MIB:.1f}")
    if bt.get("unclassified"):  # imported logs: a mount of unknown kind
        parts.append(f"unclassified {_num(bt['unclassified']) / MIB:.1f}")
    return ", ".join(parts)


def _num(v) -> float:
    try:
        return float(v or 0)
    except (TypeError, ValueError):
        return 0.0


# ---- run.json fields as report / compare / plot read them -------------------------------------------------
def _is_num(v) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _is_int(v) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _is_num_list(v) -> bool:
    return v is None or (isinstance(v, list) and all(_is_num(x) for x in v))


def _is_num_map(v) -> bool:
    return v is None or (isinstance(v, dict) and all(_is_num(x) for x in v.values()))


def _is_map(v) -> bool:
    return v is None or isinstance(v, dict)


def _is_map_of_maps(v) -> bool:
    return v is None or (isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()))


_NUM, _INT = (_is_num, "a number"), (_is_int, "an integer")
_STR = (lambda v: v is None or isinstance(v, str), "a string")
_BOOL = (lambda v: v is None or isinstance(v, bool), "true or false")
_NUMS, _NUM_MAP = (_is_num_list, "a list of numbers"), (_is_num_map, "a mapping of names to numbers")
_MAP, _MAPS = (_is_map, "a mapping"), (_is_map_of_maps, "a mapping of mappings")
RUN_FIELDS = {
    "status": _STR, "simulated": _BOOL, "imported": _MAP,
    "error": (lambda v: v is None or isinstance(v, (str, dict)), "a string or a mapping"),
    "summary.workload": _STR, "summary.strategy": _STR, "summary.ranks": _INT, "summary.nodes": _INT,
    "summary.epochs": _INT, "summary.total_time_s": _NUM, "summary.prologue_time_s": _NUM,
    "summary.epoch_time_s": _NUMS, "summary.epoch_ids": _NUMS, "summary.exposed_io_share": _NUM,
    "summary.e2e_exposed_io_share": _NUM, "summary.io_bound_share": _NUM, "summary.read_share": _NUM, "summary.au": _NUM,
    "summary.samples_per_s": _NUM, "summary.read_bytes": _NUM, "summary.read_bandwidth_bytes_per_s": _NUM,
    "summary.first_step_stall_s": _NUMS, "summary.imbalance": _NUM, "summary.plan_time_s": _NUMS,
    "summary.bytes_by_tier": _NUM_MAP, "summary.phase_time_s": _NUM_MAP, "summary.phase_share": _NUM_MAP,
    "summary.spread": _MAPS, "summary.compute": _MAP, "summary.semantics": _MAP, "summary.order_quality": _MAP,
    "summary.io_counters": _MAP, "summary.shared_tier": _MAP, "summary.system": _STR,
    "summary.io_counters.by_class": (lambda v: v is None or (isinstance(v, dict) and all(_is_num_map(x) and x is not None
                                                                                          for x in v.values())),
                                     "a mapping of file classes to mappings of counters to numbers"), "summary.modelled_breakdown": _MAP,
    "summary.simulated": _BOOL,
    "summary.import_notes": (lambda v: v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
                             "a list of strings"),
    "config.strategy": _STR, "config.options": _MAP, "config.ranks": _INT, "config.nodes": _INT,
    "config.epochs": _INT, "config.compute_time_s": _NUM, "config.label": _STR, "config.workload_spec": _MAP,
    "config.workload": (lambda v: v is None or isinstance(v, (str, dict)), "a string or a mapping"),
}


# ---- a run's time, as the bars of ``dlbench plot`` and the report's columns show it ----------------------
TRAINER_PHASES = ("compute", "transfer", "barrier", "checkpoint", "stall")
LOADER_PHASES = ("read", "decode", "exchange", "stage")


def is_simulated(r: dict) -> bool:
    return bool(r.get("simulated") or (r.get("summary") or {}).get("simulated"))


def bar_segments(run: dict) -> dict:
    """The numbers behind one run's bars (seconds, mean over ranks, all epochs):
    ``{"prologue", "trainer": {phase: s}, "other", "loader": {phase: s}, "total", "exposed_io_share"}``.
    Trainer phases plus ``prologue`` plus ``other`` add up to ``total``."""
    s = run.get("summary") or {}
    pt = {p: float((s.get("phase_time_s") or {}).get(p) or 0.0) for p in PHASES}
    sim = is_simulated(run)
    if sim:
        prologue = float((s.get("modelled_breakdown") or {}).get("prologue_s") or 0.0)
        epochs_total = float(s.get("total_time_s") or 0.0) - prologue
        loader = {p: (0.0 if p == "stage" else pt[p]) for p in LOADER_PHASES}  # sim's stage = the prologue
    else:
        prologue = float(s.get("prologue_time_s") or 0.0)
        epochs_total = float(sum(x for x in s.get("epoch_time_s") or [] if x is not None))
        loader = {p: pt[p] for p in LOADER_PHASES}
    trainer = {p: pt[p] for p in TRAINER_PHASES}
    other = max(0.0, epochs_total - sum(trainer.values()))
    return {"prologue": prologue, "trainer": trainer, "other": other, "loader": loader,
            "total": prologue + max(epochs_total, sum(trainer.values())),
            "exposed_io_share": s.get("exposed_io_share")}


def check_run(run: dict) -> dict:
    """The fields report, compare and plot read, checked for their types: a hand-edited run.json with, say,
    ``"ranks": "four"`` is one DataError naming the file, the field, the value and the type expected (not a
    traceback further on). Returns ``run``."""
    from .errors import DataError

    for path, (ok, want) in RUN_FIELDS.items():
        v: object = run
        for k in path.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        if not ok(v):
            where = f"{run.get('run_dir', '?')}/run.json"
            shown = repr(v) if len(repr(v)) <= 60 else repr(v)[:57] + "..."
            raise DataError(f"{where}: field {path}={shown} is {_kind(v)}, expected {want} (a hand-edited "
                            f"or damaged run.json; fix or remove the field)")
    return run


def _kind(v) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number", list: "a list",
            dict: "a mapping"}.get(type(v), type(v).__name__)


def run_field(run: dict, key: str):
    """A head figure (workload, strategy, ranks, nodes, epochs) from the summary, else -- a failed or
    interrupted run has no summary -- from the config the run was started with."""
    s = run.get("summary") or {}
    v = s.get(key)
    if v is not None:
        return v
    cfg = run.get("config") or {}
    if key == "workload":
        spec = cfg.get("workload_spec")
        if isinstance(spec, dict) and spec.get("name"):
            return spec["name"]
        w = cfg.get("workload")
        return w.get("name") if isinstance(w, dict) else w
    return cfg.get(key)


def io_bound_share(s: dict):
    """``summary["io_bound_share"]`` (``metrics.GLOSSARY``); a run.json older than the figure: the same sum of
    its phase shares (stall + barrier + exchange: a mean of per-rank ratios adds up), None without them."""
    from .metrics import IO_WAIT_PHASES

    v = s.get("io_bound_share")
    if v is not None:
        return v
    ps = s.get("phase_share")
    if isinstance(ps, dict) and "stall" in ps:
        return float(sum(float(ps.get(p) or 0.0) for p in IO_WAIT_PHASES))
    return None


def shared_tier_label(run: dict) -> str:
    """How the shared tier's figures came about: ``real storage`` (read as it is), ``modelled shared tier:
    PROFILE`` (a measured run throttled by a system profile's PFS model) or ``simulated: PROFILE``;
    ``?`` where run.json does not say (an imported record, an older run)."""
    s = run.get("summary") or {}
    if run.get("simulated") or s.get("simulated"):
        sysv = s.get("system") or (run.get("config") or {}).get("system")
        name = sysv.get("name") if isinstance(sysv, dict) else sysv
        return f"simulated: {name or '?'}"
    st = s.get("shared_tier")
    if not isinstance(st, dict):
        return "?"
    return f"modelled shared tier: {st.get('profile') or '?'}" if st.get("modelled") else "real storage"


def render_summary(run: dict) -> str:
    """Plain-text summary of one run (a ``read_run`` dict or a bare summary): key figures, then the phase
    breakdown (mean over ranks, share of epoch time) and the per-rank spread."""
    if "summary" in run or "config" in run:
        check_run(run)
        s = run.get("summary") or {}
        fig = {k: run_field(run, k) for k in ("workload", "strategy", "ranks", "nodes", "epochs")}
    else:
        s = run
        fig = {k: s.get(k) for k in ("workload", "strategy", "ranks", "nodes", "epochs")}
    lines = []
    head = f"{fig['workload'] or '?'} / {fig['strategy'] or '?'}: {fig['ranks'] or '?'} ranks on " \
           f"{fig['nodes'] or '?'} nodes, {fig['epochs'] or '?'} epochs"
    if run.get("simulated") or s.get("simulated"):
        head += "  [SIMULATED: modelled, not measured]"
    imp = run.get("imported") if isinstance(run.get("imported"), dict) else None
    if imp:
        head += f"  [IMPORTED from {imp.get('kind')}: {imp.get('source')}]"
    if run.get("status") == "failed" or run.get("error"):
        err = run.get("error")
        msg = err.get("message") if isinstance(err, dict) else err
        head += f"  [FAILED: {msg}]"
    tier = shared_tier_label(run) if ("summary" in run or "config" in run) else "?"
    if tier.startswith("modelled shared tier"):   # a measured run whose shared-tier reads wait for a model
        head += f"  [{tier}: shared-tier reads throttled to the profile's PFS model, not the storage's own speed]"
    lines.append(head)
    ep = s.get("epoch_time_s") or []
    key = [
        ("total time (s)", _f(s.get("total_time_s"))),
        ("prologue / stage (s)", _f(s.get("prologue_time_s"))),
        ("epoch time (s), mean over ranks", ", ".join(_f(x) for x in ep) or "-"),
        ("I/O-bound share (1 - AU - non-I/O overhead)", _f(io_bound_share(s), "{:.1%}")),
        ("exposed I/O share (own stall/epoch)", _f(s.get("exposed_io_share"), "{:.1%}")),
        ("end-to-end exposed share (with prologue)", _f(s.get("e2e_exposed_io_share"), "{:.1%}")),
        ("read share (read/epoch)", _f(s.get("read_share"), "{:.1%}")),
        ("AU (compute/epoch)", _f(s.get("au"), "{:.1%}")),
        ("AU threshold", _au_rule(s.get("au_rule"))),
        ("samples/s", _f(s.get("samples_per_s"), "{:.1f}")),
        *_ceiling_rows(s),
        ("read (MiB)", _f(_div(s.get("read_bytes"), MIB), "{:.1f}")),
        ("read bandwidth per rank (MiB/s)", _f(_div(s.get("read_bandwidth_bytes_per_s"), MIB), "{:.1f}")),
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
        ps = s.get("phase_share") or {}
        if "transfer_exposed" in ps:
            key.append(("host-to-device exposed / overlapped (share of epoch)",
                        f"{_f(ps.get('transfer_exposed'), '{:.1%}')} / {_f(ps.get('transfer_overlapped'), '{:.1%}')}"
                        f"  (--overlap {comp.get('overlap', 'off')})"))
    if s.get("eval"):
        key.append(("DLIO evaluation (s), outside epoch time",
                    ", ".join(f"after epoch {r['after_epoch']}: {r['eval_s']:.4f}" for r in s["eval"]["per_epoch"])))
    if s.get("plan_time_s"):
        key.append(("plan build per epoch (s), outside epoch time",
                    ", ".join(_f(x, "{:.4f}") for x in s["plan_time_s"])))
    bt = s.get("bytes_by_tier") or {}
    if bt:
        key.append(("bytes by tier (MiB)", _tier_bytes_text(bt)))
    sem = s.get("semantics") or {}
    if sem:
        key.append(("order semantics", f"full permutation each epoch: "
                    f"{sem.get('each_epoch_a_full_permutation', '?')}; global batch = global shuffle's: "
                    f"{sem.get('global_batch_is_global_shuffles', '?')}; order changes: {sem.get('order_changes', '?')}"))
    if s.get("tfrecord_read"):
        key.append(("tfrecord read pattern", f"{s['tfrecord_read']}: {s.get('order')}"))
    oq = s.get("order_quality") or {}
    seen = oq.get("fraction_of_dataset_seen_per_rank_after_epoch") or []
    exp = oq.get("global_shuffle_expected_after_epoch") or []
    if seen and exp:
        key.append(("dataset seen per rank after last epoch", f"{seen[-1]:.1%} (global shuffle: {exp[-1]:.1%})"))
    lines.append(_table(["figure", "value"], key, align_left=2))
    pt = s.get("phase_time_s") or {}
    ps = s.get("phase_share") or {}
    if pt:
        rows: list[tuple] = [(p, _f(pt.get(p)), _f(ps.get(p), "{:.1%}")) for p in PHASES if pt.get(p) and p not in OUTSIDE_EPOCH]
        other, share = loop_overhead(run if ("summary" in run or "config" in run) else {"summary": s})
        if other is not None:
            rows.append(("other (loop overhead)", _f(other), _f(share, "{:.1%}")))
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
    for block in (render_cache(s.get("cache")), render_read_latency(s.get("read_latency"))):
        if block:
            lines.append("")
            lines.append(block)
    ioc = render_io_counters(s.get("io_counters"))
    if ioc:
        lines.append("")
        lines.append(ioc)
    if s.get("preloaded_warning"):
        lines.append(f"warning: {s['preloaded_warning']}")
    s3 = render_s3(s.get("s3"))
    if s3:
        lines.append("")
        lines.append(s3)
    for note in s.get("import_notes") or []:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def loop_overhead(run: dict) -> tuple:
    """(seconds, share of the epochs' time) of the trainer's time in no recorded phase: the bar chart's
    ``other (loop overhead)`` segment (``bar_segments``, the one computation); (None, None) without
    epoch times."""
    s = run.get("summary") or {}
    ep = [x for x in s.get("epoch_time_s") or [] if isinstance(x, (int, float))]
    if not ep or not sum(ep):
        return None, None
    seg = bar_segments(run)
    total = seg["total"] - seg["prologue"]
    return seg["other"], (seg["other"] / total if total > 0 else None)
def _ceiling_rows(s: dict) -> list:
    """The run's own ceiling (``summary["ceiling"]``, measured runs): samples/s replaying the plan from memory
    and the headroom, or why it was not replayed; nothing for runs without it (simulated, imported, older)."""
    c = s.get("ceiling")
    if not c:
        return []
    if c.get("skipped"):
        return [("ceiling (replay from memory)", f"not measured: {c['skipped']}")]
    warn = "  dlbench itself may be the limit" if c.get("warning") else ""
    return [("ceiling samples/s (replay from memory)",
             f"{_f(s.get('ceiling_samples_per_s'), '{:.1f}')}  ({c.get('steps')} steps, no compute)"),
            ("headroom (ceiling / measured)", _f(s.get("headroom"), "{:.2f}") + warn)]


def _div(x, d):
    return None if x is None else x / d


def render_cache(c: dict | None) -> str:
    """``summary["cache"]`` (``--cache``): requested vs device bytes per epoch, evictions, the verdict and the
    MLPerf Storage check. Empty string for runs without it."""
    if not c:
        return ""
    dev = c.get("device_bytes") or {}
    ev = {x["before_epoch"]: x for x in c.get("evictions") or []}
    rows = []
    for d in c.get("per_epoch") or []:
        e = d["epoch"]
        if e < 0 and not d["requested_bytes"] and not d["device_read_bytes"]:
            continue
        x = ev.get(e)
        rows.append(("prologue" if e < 0 else e, _f(d["requested_bytes"] / MIB, "{:.1f}"),
                     _f(d["device_read_bytes"] / MIB, "{:.1f}") if dev.get("available") else "n/a",
                     _f(d.get("device_share"), "{:.0%}") if dev.get("available") else "n/a", d.get("verdict", "-"),
                     _f(x["evict_s"], "{:.3f}") if x else "-", *_resident(x, ev)))
    head = ["epoch", "requested (MiB)", "device (MiB)", "device/requested", "verdict", "evict before (s)"]
    if any("resident_before_bytes" in x for x in ev.values()):
        head.append("resident before -> after evict (MiB, mincore)")
    out = [f"page cache: --cache {c.get('mode')}" + (" (O_DIRECT reads)" if c.get("direct_reads") else ""),
           _table(head, rows)]
    out.append(f"verdict: {c.get('verdict_line')}")
    ml = c.get("mlperf") or {}
    if ml:
        out.append(f"MLPerf Storage check (dataset >= 5x a node's RAM): {ml.get('line')}")
    if c.get("warning"):
        out.append(f"warning: {c['warning']}")   # printed here once (the run's summary and `dlbench report`)
    if c.get("residency_warning"):
        out.append(f"warning: {c['residency_warning']}")
    return "\n".join(out)


def _resident(x: dict | None, ev: dict) -> tuple:
    """The eviction's mincore check as one cell (none for runs without it)."""
    if not any("resident_before_bytes" in y for y in ev.values()):
        return ()
    if not x or "resident_before_bytes" not in x:
        return ("-",)
    return (f"{x['resident_before_bytes'] / MIB:.1f} -> {x['resident_after_bytes'] / MIB:.1f}",)


def render_read_latency(lat: dict | None) -> str:
    """``summary["read_latency"]``: P50/P95/P99/max per tier over all ranks, then per rank (several ranks)."""
    if not lat or not lat.get("all"):
        return ""

    def ms(v):
        return _f(None if v is None else v * 1e3, "{:.3f}")

    rows = [(t, "all", d["count"], ms(d.get("p50_s")), ms(d.get("p95_s")), ms(d.get("p99_s")), ms(d.get("max_s")))
            for t, d in lat["all"].items()]
    per = lat.get("per_rank") or []
    if len(per) > 1:
        rows += [(t, p["rank"], d["count"], ms(d["p50_s"]), ms(d["p95_s"]), ms(d["p99_s"]), ms(d["max_s"]))
                 for p in per for t, d in p["tiers"].items()]
    return _table(["read latency", "rank", "reads", "P50 (ms)", "P95 (ms)", "P99 (ms)", "max (ms)"], rows)


def _main_tier_latency(s: dict) -> tuple:
    """(tier, its all-ranks latency row) of the tier with the most reads; (None, {}) without figures."""
    allt = (s.get("read_latency") or {}).get("all") or {}
    if not allt:
        return None, {}
    t = max(allt, key=lambda k: allt[k]["count"])
    return t, allt[t]


def render_io_counters(ioc: dict | None) -> str:
    """The Darshan-style counters of ``summary["io_counters"]``: one row per file class, the access-size
    histogram (non-empty buckets) and the slowest rank. Empty string when there are none."""
    if not ioc or not ioc.get("by_class"):
        return ""
    from .counters import bucket_label

    rows = []
    for cls, c in ioc["by_class"].items():
        rows.append((cls, c.get("POSIX_OPENS", 0), c.get("POSIX_READS", 0),
                     _f(c.get("POSIX_BYTES_READ", 0) / MIB, "{:.1f}"), c.get("POSIX_SEQ_READS", 0),
                     c.get("POSIX_CONSEC_READS", 0), _f(c.get("POSIX_F_READ_TIME"), "{:.4f}"),
                     _f(c.get("POSIX_F_MAX_READ_TIME"), "{:.6f}"), c.get("POSIX_WRITES", 0),
                     c.get("H5D_READS", 0)))
    out = [_table(["I/O counters", "opens", "reads", "MiB read", "seq", "consec", "read time (s)", "max read (s)",
                   "writes", "H5D reads"], rows)]
    for cls, c in ioc["by_class"].items():
        hist = [f"{bucket_label(b)}: {c.get(b, 0)}" for b in ioc.get("buckets") or [] if c.get(b)]
        if hist:
            out.append(f"read sizes ({cls}): " + ", ".join(hist))
    for cls, c in ioc["by_class"].items():
        if c.get("H5F_OPENS"):
            out.append(f"hdf5 ({cls}): {c['H5F_OPENS']} file opens; libhdf5's own metadata reads for them are not in "
                       f"the reads above (a POSIX tracer counts them: dlbench import dftracer)")
    for cls, c in ioc["by_class"].items():
        if c.get("MMAP_READS"):   # memory-mapped reads (token datasets' numpy.memmap reader): no read calls
            out.append(f"mmap ({cls}): {c['MMAP_READS']} copies out of maps, "
                       f"{format_bytes(c.get('MMAP_BYTES_READ', 0), 'MiB')}; page faults "
                       f"{c.get('MMAP_MINOR_FAULTS', 0)} minor, {c.get('MMAP_MAJOR_FAULTS', 0)} major; "
                       f"{format_bytes(c.get('MMAP_DEVICE_BYTES_READ', 0), 'MiB')} from the device while mapped")
    h5 = ioc.get("hdf5_metadata")
    if h5 and h5.get("files_split"):
        out.append(f"hdf5 metadata (libhdf5's own reads, not data, included above): {h5['metadata_reads']:,} reads, "
                   f"{format_bytes(h5['metadata_bytes'], 'MiB', digits=3)}; data: {h5['data_reads']:,} reads, "
                   f"{format_bytes(h5['data_bytes'], 'MiB')} ({h5['files_split']:,} HDF5 files)")
    sr = ioc.get("slowest_rank")
    if sr and len(ioc.get("by_rank") or []) > 1:
        if sr.get("POSIX_F_READ_TIME") is not None:
            out.append(f"slowest rank: {sr['rank']} (POSIX_F_READ_TIME {sr['POSIX_F_READ_TIME']:.4f} s)")
        elif sr.get("POSIX_F_SLOWEST_RANK_TIME") is not None:
            out.append(f"slowest rank: {sr['rank']} (Darshan's POSIX_F_SLOWEST_RANK_TIME "
                       f"{sr['POSIX_F_SLOWEST_RANK_TIME']:.4f} s on shared files)")
    return "\n".join(out)


COMPARE_COLUMNS = ("workload", "strategy", "run", "compute", "ranks", "epoch_time_s", "io_bound_share", "exposed_io_share",
                   "e2e_exposed_io_share", "read_share", "au", "read_MiB_per_s", "samples_per_s", "simulated", "run_dir",
                   "cache", "device_share", "cache_verdict", "read_latency_tier", "read_p50_s", "read_p95_s",
                   "read_p99_s", "read_max_s", "shared_tier", "transfer_exposed_share", "transfer_overlapped_share",
                   "s3_gets_per_sample", "s3_get_p50_ms", "s3_get_p99_ms")


def compare_rows(run_dirs: Sequence, skipped: list | None = None) -> list[dict]:
    """compare's rows. ``skipped`` (a list): a damaged, foreign or newer-schema run.json is left out with a
    line naming it appended there; None: its DataError propagates."""
    from .errors import DataError
    from .results import read_run
    rows = []
    for d in run_dirs:
        try:
            r = check_run(read_run(d))
        except DataError as exc:
            if skipped is None:
                raise
            skipped.append(f"{exc}; skipped")
            continue
        s = r.get("summary") or {}
        ep = [x for x in s.get("epoch_time_s") or [] if x is not None]
        rows.append({
            "workload": run_field(r, "workload"), "strategy": run_field(r, "strategy"), "run": run_label(r),
            "compute": _compute_label(r),
            "ranks": run_field(r, "ranks"),
            "epoch_time_s": (sum(ep) / len(ep)) if ep else None,
            "io_bound_share": io_bound_share(s),
            "exposed_io_share": s.get("exposed_io_share"),
            # older run folders (before the figure existed) have no prologue share: shown as "-"
            "e2e_exposed_io_share": s.get("e2e_exposed_io_share"),
            "read_share": s.get("read_share"), "au": s.get("au"),
            "read_MiB_per_s": _div(s.get("read_bandwidth_bytes_per_s"), MIB),
            "samples_per_s": s.get("samples_per_s"),
            "simulated": bool(r.get("simulated") or s.get("simulated")), "run_dir": r.get("run_dir"),
            "shared_tier": shared_tier_label(r),
            "status": r.get("status", "ok"),
            **_cache_and_latency(s),
            # host-to-device copies (torch compute): waited for by the compute / hidden behind it
            "transfer_exposed_share": (s.get("phase_share") or {}).get("transfer_exposed"),
            "transfer_overlapped_share": (s.get("phase_share") or {}).get("transfer_overlapped"),
            **_s3_fields(s),
        })
    return rows


def _s3_label(r: dict) -> str:
    """compare's S3 column: GETs per delivered sample and the per-GET P50/P99 (ms); "-" for a run whose shared
    tier is not S3 (a simulated object-store run has GETs but no latency percentiles: "-" for them)."""
    if r.get("s3_gets_per_sample") is None:
        return "-"
    return (f"{_f(r['s3_gets_per_sample'], '{:.3g}')} {_f(r.get('s3_get_p50_ms'), '{:.2f}')}/"
            f"{_f(r.get('s3_get_p99_ms'), '{:.2f}')}")


def _s3_fields(s: dict) -> dict:
    """compare's S3 fields (None for runs whose shared tier is not S3)."""
    s3 = s.get("s3") or {}
    lat = s3.get("get_latency_ms") or {}
    return {"s3_gets_per_sample": s3.get("requests_per_sample"), "s3_get_p50_ms": lat.get("p50"),
            "s3_get_p99_ms": lat.get("p99")}


def render_s3(s3: dict | None) -> str:
    """``summary["s3"]`` (the shared tier is S3): requests and bytes by kind, retries, throttled replies, GETs
    per sample, per-GET latency and time to first byte P50/P95/P99, requests per rank (several ranks)."""
    if not s3:
        return ""
    req, nb = s3.get("requests") or {}, s3.get("bytes") or {}
    rows = [(k, req.get(k, 0), _f(nb.get(k, 0) / MIB, "{:.2f}")) for k in ("GET", "PUT", "HEAD", "LIST", "DELETE")
            if req.get(k)]
    out = [_table(["S3 requests", "count", "MiB"], rows)]
    out.append(f"S3: {_f(s3.get('requests_per_sample'), '{:.3g}')} GETs per delivered sample, "
               f"{s3.get('retries', 0)} retries ({s3.get('throttled', 0)} throttled replies)")
    lrows = [(name, *(_f(d.get(k), "{:.3f}") for k in ("p50", "p95", "p99")))
             for name, d in (("GET latency", s3.get("get_latency_ms")), ("time to first byte", s3.get("ttfb_ms")))
             if d]
    if lrows:
        out.append(_table(["S3 per request", "P50 (ms)", "P95 (ms)", "P99 (ms)"], lrows))
    per = s3.get("per_rank_requests") or []
    if len(per) > 1:
        out.append("S3 GETs per rank: " + ", ".join(f"{r}: {p.get('GET', 0)}" for r, p in enumerate(per)))
    return "\n".join(out)


def _cache_and_latency(s: dict) -> dict:
    """compare's cache and read-latency fields (None for runs without them)."""
    c = s.get("cache") or {}
    ep = [d for d in c.get("per_epoch") or [] if d["epoch"] >= 0]
    req = sum(d["requested_bytes"] for d in ep)
    dev = sum(d["device_read_bytes"] for d in ep)
    avail = (c.get("device_bytes") or {}).get("available")
    t, lat = _main_tier_latency(s)
    return {"cache": c.get("mode"), "device_share": dev / req if c and avail and req else None,
            "cache_verdict": c.get("verdict"), "read_latency_tier": t,
            **{f"read_{k}_s": lat.get(f"{k}_s") for k in ("p50", "p95", "p99", "max")}}


def run_label(run: dict) -> str:
    """The run's strategy with what tells its study entries apart: pls's Q, a mode, and every option that
    differs from the strategy's default (cache capacity in MB, loader threads as ``t<N>``); surrogatetrain: its
    ablation switches."""
    cfg = run.get("config") or {}
    opts = cfg.get("options") or {}
    s = cfg.get("strategy") or (run.get("summary") or {}).get("strategy") or "?"
    if cfg.get("label"):   # a simulated row names itself (`dlbench simulate` study rows)
        return str(cfg["label"])
    try:
        import dataclasses

        from . import strategies

        st = strategies.get(s)
        own = st.run_label(opts)   # a strategy's own label (pls's Q, surrogatetrain's ablation switches)
        if own is not None:
            return own
        defaults = {f.name: f.default for f in dataclasses.fields(st.Options)}
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
    per-rank read MiB/s, samples/s, simulated flag; as ``table``, ``csv`` or ``json``."""
    if fmt not in ("table", "csv", "json"):
        from .errors import unknown_choice
        raise unknown_choice("format", fmt, ["table", "csv", "json"])
    skipped: list[str] = []
    rows = compare_rows(run_dirs, skipped=skipped)
    if skipped and not rows:   # nothing good to show: the first bad one is the error
        from .errors import DataError

        raise DataError(skipped[0].removesuffix("; skipped") + (f" (and {len(skipped) - 1} more bad run.json)"
                                                                 if len(skipped) > 1 else ""))
    for line in skipped:   # the good runs are shown; each bad one is named on stderr
        print(f"warning: {line}", file=sys.stderr)
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=[*COMPARE_COLUMNS, "status"], lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue()
    tab = [(r["workload"], r["run"], r["compute"], r["ranks"], _f(r["epoch_time_s"]), _f(r["io_bound_share"], "{:.1%}"),
            _f(r["exposed_io_share"], "{:.1%}"),
            _f(r["e2e_exposed_io_share"], "{:.1%}"), _f(r["read_share"], "{:.1%}"), _f(r["au"], "{:.1%}"), _f(r["read_MiB_per_s"], "{:.1f}"),
            _f(r["samples_per_s"], "{:.1f}"), "yes" if r["simulated"] else "no",
            r["status"], _cache_label(r), _latency_label(r), _h2d_label(r), _s3_label(r), r["shared_tier"]) for r in rows]
    out = _table(["workload", "run", "compute", "ranks", "epoch (s)", "I/O-bound", "own stall", "own stall+prologue", "read",
                  "AU", "MiB/s",
                  "samples/s", "simulated", "status", "cache (device/req)", "read P50/P95/P99/max ms",
                  "H2D exposed/overlapped", "S3 GETs/sample P50/P99 ms", "shared tier"],
                 tab, align_left=3)
    notes = ["I/O-bound = 1 - AU - non-I/O overhead: own stall + waiting for data-starved peers at the step barrier "
             "+ exchange (dlbench report --explain)"]
    notes += mixed_point_caveats(rows)
    return out + "\n" + "\n".join(f"note: {n}" for n in notes)


def mixed_point_caveats(rows: Sequence[dict]) -> list[str]:
    """One caveat per point (workload, strategy label, ranks) that has both measured and simulated rows: the
    model's figures are a prediction for the profile's system, the measured ones this machine's, so their gap
    is not an error of either."""
    seen: dict = {}
    for r in rows:
        seen.setdefault((r["workload"], r["run"], r["ranks"]), set()).add(bool(r["simulated"]))
    return [f"{w} / {lab} at {n} ranks has measured and simulated rows: the simulated one is the model's "
            f"prediction for its system profile, the measured one this machine's storage (or its throttle); "
            f"compare their trends, not their values" for (w, lab, n), kinds in seen.items() if len(kinds) == 2]


def _h2d_label(r: dict) -> str:
    """compare's host-to-device column: exposed / overlapped share of the epoch (torch compute), else "-"."""
    e, o = r.get("transfer_exposed_share"), r.get("transfer_overlapped_share")
    if e is None and o is None:
        return "-"
    return f"{_f(e, '{:.1%}')}/{_f(o, '{:.1%}')}"


def _cache_label(r: dict) -> str:
    if not r.get("cache"):
        return "-"
    share = "n/a" if r.get("device_share") is None else f"{r['device_share']:.0%}"
    return f"{r['cache']} {r.get('cache_verdict')} ({share})"


def _latency_label(r: dict) -> str:
    if r.get("read_p50_s") is None:
        return "-"
    keys = ("read_p50_s", "read_p95_s", "read_p99_s", "read_max_s")
    return f"{r['read_latency_tier']} " + "/".join(f"{r[k] * 1e3:.3g}" for k in keys)


def _au_rule(rule) -> str:
    """'90.0% (MLPerf Storage rules): pass', or 'none published' (runs older than the rule: '-')."""
    if not rule:
        return "-"
    if rule.get("threshold") is None:
        return "none published"
    return f"{rule['threshold']:.1%} ({rule.get('source') or 'workload'}): {'pass' if rule.get('pass') else 'FAIL'}"
