"""Figures from result folders only (nothing is run here): ``dlbench plot RUN_DIR...``.

Four kinds, each written as PNG and SVG:

- ``bars``      per run, two stacked bars side by side. *Trainer*: what the training loop spent its time
                on (staging before epoch 0, compute, host→device transfer, barrier, checkpoint, **stall =
                exposed I/O**, hatched, and any remainder), which adds up to the run's time. *Loader*: the
                I/O work (read, decode, exchange, stage during epochs) as the union of its intervals; it
                may overlap compute (prefetch) or sit inside the stall (naive), so it is drawn apart, not
                stacked on the trainer. The exposed I/O share (stall / epoch time) is written above.
- ``timeline``  one epoch of one run: a lane per (rank, thread), intervals coloured by phase, time from
                the epoch's start (ranks aligned by wall clock). Needs ``intervals.npz`` (measured runs).
- ``sizes``     the access-size histogram, Darshan's buckets, from
                ``summary.io_counters.by_class[CLASS].POSIX_SIZE_READ_<bucket>``; one group of bars per
                file class. Runs without ``io_counters`` are skipped with a note.
- ``scaling``   any set of runs, measured and simulated on the same axes: x = ranks or nodes (log₂),
                panels epoch time / exposed I/O share / samples/s, one colour per strategy, filled markers
                and solid lines for measured runs, hollow markers and dashed lines for simulated ones.

matplotlib is optional (``pip install 'dlbench[plot]'``), imported when a figure is made, with the Agg
backend (no display needed).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from .errors import ConfigError, DataError
from .report import LOADER_PHASES, TRAINER_PHASES, bar_segments, is_simulated
from .results import find_run_dirs
from .timeline import PHASES

KINDS = ("bars", "timeline", "sizes", "scaling")
SIZE_BUCKETS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M", "10M_100M", "100M_1G",
                "1G_PLUS")
SIZE_LABELS = ("0–100", "100–1K", "1K–10K", "10K–100K", "100K–1M", "1M–4M", "4M–10M", "10M–100M", "100M–1G",
               "1G+")
PHASE_COLOR = {
    "read": "#1f77b4", "decode": "#9467bd", "transfer": "#8c564b", "exchange": "#17becf", "stage": "#bcbd22",
    "compute": "#2ca02c", "checkpoint": "#7f7f7f", "stall": "#d62728", "barrier": "#ff7f0e", "other": "#dddddd",
    "plan": "#e377c2", "verify": "#393b79",
}
_EXTRA_COLORS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d")


def phase_color(name: str) -> str:
    """The colour of a phase; a phase recorded by a newer timeline than this table gets a stable spare."""
    c = PHASE_COLOR.get(name)
    if c is None:
        i = PHASES.index(name) if name in PHASES else sum(map(ord, name))
        c = _EXTRA_COLORS[i % len(_EXTRA_COLORS)]
    return c
STRATEGY_ORDER = ("lowerbound", "naive", "prefetch", "staging", "local", "pls")
OPTION_ABBREV = {"exchange_fraction": "Q", "num_workers": "workers", "prefetch_factor": "pf"}


# ---- loading ---------------------------------------------------------------------------------------
def load_runs(paths: Sequence) -> tuple[list[dict], list[str]]:
    """``read_run`` of every run folder; failed runs and unreadable run.json are left out with a note."""
    from .errors import DlbenchError
    from .report import check_run
    from .results import read_run

    runs, notes, bad = [], [], []
    for d in find_run_dirs(paths):
        try:
            r = check_run(read_run(d))  # a wrong-typed field: one line naming it, not a traceback in a figure
        except (OSError, DlbenchError) as exc:
            notes.append(f"{d}: unreadable run.json ({exc}); skipped")
            bad.append(exc)
            continue
        if r.get("status") == "failed" or not r.get("summary"):
            notes.append(f"{d}: failed or incomplete run ({_err(r)}); skipped")
            continue
        runs.append(r)
    if bad and len(bad) == len(notes) and not runs:   # nothing good, every one unreadable: the first is the error
        if isinstance(bad[0], DlbenchError):
            raise bad[0]
        raise DataError(str(bad[0]))
    return runs, notes


def _err(r: dict) -> str:
    e = r.get("error")
    return (e.get("message") if isinstance(e, dict) else e) or "no summary"


def _options(r: dict) -> dict:
    cfg = r.get("config") or {}
    s = r.get("summary") or {}
    if "options" in cfg or not is_simulated(r):
        return dict(cfg.get("options") or {})
    # simulated folders written before config carried "options": a strategy's shorthand option (pls's Q) was
    # config[shorthand] (config["pls_q"])
    return {field: cfg.get(sh) for sh, field in _shorthands(s.get("strategy")).items()}


def _shorthands(strategy: str | None) -> dict:
    """``Strategy.shorthands`` of a registered strategy ({} for one this install does not have)."""
    from . import strategies

    return strategies.get(strategy).shorthands if strategy in strategies.names() else {}


def labels(runs: Sequence[dict], *, ranks: bool | None = None) -> list[str]:
    """A short, distinct label per run: strategy, the options that differ between runs of that strategy
    (``Q=0.3``), the workload when runs have several, ranks when they differ (``ranks=None``: automatic),
    and ``[sim]`` for simulated runs."""
    strat = [(r.get("summary") or {}).get("strategy", "?") for r in runs]
    opts = [_options(r) for r in runs]
    varying: dict[str, set] = defaultdict(set)
    by_strat: dict[str, list[dict]] = defaultdict(list)
    for s, o in zip(strat, opts):
        by_strat[s].append(o)
    for s, os_ in by_strat.items():
        keys = set().union(*os_) if os_ else set()
        for k in keys:  # runs that do not state an option (simulated runs) do not make it vary
            if len({repr(o[k]) for o in os_ if k in o}) > 1:
                varying[s].add(k)
    wls = {(r.get("summary") or {}).get("workload") for r in runs}
    rk = {(r.get("summary") or {}).get("ranks") for r in runs}
    show_ranks = len(rk) > 1 if ranks is None else ranks
    out = []
    for r, s, o in zip(runs, strat, opts):
        parts = [s]
        parts += [f"{OPTION_ABBREV.get(k, k)}={o.get(k)}" for k in sorted(varying[s])]
        # a strategy's shorthand options (pls's Q) are always shown
        parts += [f"{OPTION_ABBREV.get(k, k)}={o[k]}" for k in _shorthands(s).values()
                  if k not in varying[s] and o.get(k) is not None]
        if len(wls) > 1:
            parts.append(str((r.get("summary") or {}).get("workload")))
        if show_ranks:
            n = (r.get("summary") or {}).get("ranks")
            parts[-1] += ","
            parts.append(f"{n} rank{'' if n == 1 else 's'}")
        lab = " ".join(parts)
        if is_simulated(r):
            lab += " [sim]"
        out.append(lab)
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "-", text).strip("-") or "run"


# ---- matplotlib ------------------------------------------------------------------------------------
def _plt():
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("dlbench plot needs matplotlib: pip install 'dlbench[plot]'") from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10, "legend.fontsize": 8, "svg.fonttype": "none",
                         "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _save(fig, out_dir: Path, stem: str) -> list[Path]:
    """PNG (150 dpi) and SVG, each written to a temporary name and renamed (nothing half-written)."""
    import os

    from .errors import OutputError
    from .results import output_error_line

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(output_error_line("--out", out_dir, e)) from None
    paths: list[Path] = []
    for ext, kw in (("png", {"dpi": 150}), ("svg", {})):
        p = out_dir / f"{stem}.{ext}"
        tmp = out_dir / f".{stem}.{os.getpid()}.tmp.{ext}"
        try:
            fig.savefig(tmp, format=ext, bbox_inches="tight", **kw)
            os.replace(tmp, p)
        except OSError as e:   # a full disk, a name too long: one line; the figure's other format goes too
            for q in paths:
                q.unlink(missing_ok=True)
            raise OutputError(output_error_line("--out", out_dir, e)) from None
        finally:
            if tmp.exists():
                tmp.unlink()
        paths.append(p)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return paths


# ---- bars ------------------------------------------------------------------------------------------
def _overlapping(boxes) -> bool:
    """Whether any two of the (display-space) boxes overlap by more than a pixel."""
    bs = sorted(boxes, key=lambda b: b.x0)
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            if b.x0 >= a.x1 - 1:
                break
            if min(a.y1, b.y1) - max(a.y0, b.y0) > 1:
                return True
    return False


def fit_xticklabels(fig, ax, labs: Sequence[str]) -> None:
    """Tick labels that do not overlap, however many runs: horizontal (wrapped at word boundaries) when
    they fit, else turned 30°, 45°, then upright at 90°, at the base font size down to 6 pt; measured with
    the figure's renderer, not guessed from the label length. A figure still too narrow is widened."""
    import textwrap

    base = float(ax.xaxis.get_ticklabels()[0].get_fontsize()) if ax.xaxis.get_ticklabels() else 9.0
    wrapped = [textwrap.fill(str(lab), 18, break_long_words=False) for lab in labs]
    tries = [(wrapped, 0), (list(labs), 30), (list(labs), 45), (list(labs), 90)]
    sizes = [base] + [v for v in (8.0, 7.0, 6.0) if v < base]
    for _ in range(8):
        for size in sizes:
            for texts, rot in tries:
                slanted = rot not in (0, 90)
                ax.set_xticks(range(len(texts)))
                ax.set_xticklabels(texts, rotation=rot, fontsize=size, ha="right" if slanted else "center",
                                   rotation_mode="anchor" if slanted else "default")
                fig.canvas.draw()
                r = fig.canvas.get_renderer()
                if not _overlapping([t.get_window_extent(r) for t in ax.get_xticklabels() if t.get_text()]):
                    return
        w, h = fig.get_size_inches()
        fig.set_size_inches(w * 1.5, h)


def bars_figure(runs: Sequence[dict]):
    """The bars figure (matplotlib Figure) of ``runs``; ``plot_bars`` saves it."""
    plt = _plt()
    from matplotlib.patches import Patch

    labs = labels(runs)
    segs = [bar_segments(r) for r in runs]
    n = len(runs)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * n + 2.5), 4.2))
    w = 0.38
    x = np.arange(n)
    top = max([sg["total"] for sg in segs] + [sum(sg["loader"].values()) for sg in segs] + [1e-9])
    for i, sg in enumerate(segs):
        b = 0.0
        stack = [("stage", sg["prologue"], ".."), *[(p, sg["trainer"][p], "//" if p == "stall" else None)
                                                    for p in TRAINER_PHASES], ("other", sg["other"], None)]
        for p, v, hatch in stack:
            if v <= 0:
                continue
            ax.bar(x[i] - w / 2, v, w, bottom=b, color=PHASE_COLOR[p], hatch=hatch,
                   edgecolor="black" if p == "stall" else "white", linewidth=0.6 if p == "stall" else 0.3)
            b += v
        lb = 0.0
        for p in LOADER_PHASES:
            v = sg["loader"][p]
            if v <= 0:
                continue
            ax.bar(x[i] + w / 2, v, w, bottom=lb, color=PHASE_COLOR[p], alpha=0.75, edgecolor="white",
                   linewidth=0.3)
            lb += v
        share = sg["exposed_io_share"]
        txt = "exposed I/O\n" + ("-" if share is None else f"{share:.1%}")
        ax.text(x[i] - w / 2, b + 0.01 * top, txt, ha="center", va="bottom", fontsize=7, color="#a00000")
    ax.set_ylabel("time (s), all epochs + staging, mean over ranks")
    ax.set_ylim(0, top * 1.22)
    wls = sorted({str((r.get("summary") or {}).get("workload")) for r in runs})
    rk = sorted({int((r.get("summary") or {}).get("ranks") or 0) for r in runs})
    ax.set_title(f"{', '.join(wls)}: where the time goes (left bar: trainer, right bar: loader I/O work)\n"
                 f"{'/'.join(map(str, rk))} rank(s); loader phases may overlap compute, so they are not stacked "
                 f"on the trainer", fontsize=8.5)
    present = [p for p in (*TRAINER_PHASES, "other", *LOADER_PHASES)
               if any(sg["trainer"].get(p, 0) > 0 or sg["loader"].get(p, 0) > 0
                      or (p == "other" and sg["other"] > 0) for sg in segs)]
    names = {"stall": "stall = exposed I/O", "stage": "stage (during epochs)", "other": "other (loop overhead)",
             **{p: f"{p} (loader)" for p in ("read", "decode", "exchange")}}
    handles = [Patch(facecolor=PHASE_COLOR[p], hatch="//" if p == "stall" else None,
                     edgecolor="black" if p == "stall" else "white", label=names.get(p, p)) for p in present]
    if any(sg["prologue"] > 0 for sg in segs):
        handles.append(Patch(facecolor=PHASE_COLOR["stage"], hatch="..", edgecolor="white",
                             label="staging before epoch 0"))
    if any(is_simulated(r) for r in runs):
        handles.append(Patch(facecolor="white", edgecolor="white", label="[sim] = modelled, not measured"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fit_xticklabels(fig, ax, labs)
    return fig


def plot_bars(runs: Sequence[dict], out_dir: Path, stem: str = "bars") -> list[Path]:
    return _save(bars_figure(runs), out_dir, stem)


# ---- timeline --------------------------------------------------------------------------------------
def default_epoch(run: dict) -> int:
    """Epoch 1 (past the warm-up) when the run has more than one epoch, else 0."""
    eps = (run.get("summary") or {}).get("epoch_ids")
    n = len(eps) if eps else int((run.get("summary") or {}).get("epochs") or 1)
    return 1 if n > 1 else 0


def _span_ns(span: tuple[int, int] | None) -> int:
    """An epoch's length on one rank (-1: the rank has no such epoch)."""
    return span[1] - span[0] if span else -1


def timeline_lanes(intervals: list[dict], epoch: int, max_ranks: int = 32) -> dict:
    """What the timeline draws: ``{"t0_ns", "lanes": [(rank, thread)], "bars": {(lane, phase): [(x0_s, w_s)]},
    "epoch_spans": {rank: (x0_s, x1_s)}, "ranks_total", "ranks_shown"}``; x in seconds from the earliest
    start of the epoch over ranks (wall-clock aligned). Intervals of a (lane, phase) are merged (their
    union), which changes nothing drawn and keeps large runs cheap. More than ``max_ranks`` ranks: that
    many, evenly spread, always with rank 0 and the rank whose epoch was longest."""
    from .metrics import merge_intervals

    starts = []
    per: list[tuple[int, tuple[int, int] | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for a in intervals:
        r = int(a.get("rank", 0))
        off = int(a.get("wall_offset_ns", 0))
        eps = np.asarray(a.get("epochs", ()))
        es = np.asarray(a.get("epoch_start_ns", ()), dtype=np.int64)
        ee = np.asarray(a.get("epoch_end_ns", ()), dtype=np.int64)
        span: tuple[int, int] | None = None
        k = np.nonzero(eps == epoch)[0]
        if k.size:
            span = (int(es[k[0]]) + off, int(ee[k[0]]) + off)
            starts.append(span[0])
        m = np.asarray(a["epoch"]) == epoch
        s = np.asarray(a["start_ns"], dtype=np.int64)[m] + off
        e = np.asarray(a["end_ns"], dtype=np.int64)[m] + off
        if s.size:
            starts.append(int(s.min()))
        per.append((r, span, s, e, np.asarray(a["phase"])[m], np.asarray(a["thread"])[m]))
    if not starts:
        raise DataError(f"--epoch {epoch}: no intervals of that epoch in the run")
    t0 = min(starts)
    per.sort(key=lambda x: x[0])
    total = len(per)
    if total > max_ranks:
        slowest = max(range(total), key=lambda i: _span_ns(per[i][1]))
        keep = set(np.linspace(0, total - 1, max_ranks - 1).round().astype(int).tolist()) | {0, slowest}
        per = [x for i, x in enumerate(per) if i in keep]
    lanes: list[tuple[int, int]] = []
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    spans: dict[int, tuple[float, float]] = {}
    for r, span, s, e, ph, th in per:
        if span is not None:
            spans[r] = ((span[0] - t0) / 1e9, (span[1] - t0) / 1e9)
        for t in sorted(set(th.tolist()) | {0}):
            lane = len(lanes)
            lanes.append((r, int(t)))
            mt = th == t
            for pid, name in enumerate(PHASES):
                mm = mt & (ph == pid)
                if not mm.any():
                    continue
                ms, me = merge_intervals(s[mm], e[mm])
                bars[(lane, name)] = list(zip(((ms - t0) / 1e9).tolist(), ((me - ms) / 1e9).tolist()))
    return {"t0_ns": t0, "lanes": lanes, "bars": bars, "epoch_spans": spans, "ranks_total": total,
            "ranks_shown": len(per)}


def plot_timeline(run: dict, out_dir: Path, *, epoch: int | None = None, label: str | None = None) -> list[Path]:
    from .results import read_intervals

    f = Path(run["run_dir"]) / "intervals.npz"
    if not f.is_file():
        raise DataError(f"{run['run_dir']}: no intervals.npz (simulated or imported run): no timeline")
    ivs = read_intervals(f)
    ep = default_epoch(run) if epoch is None else int(epoch)
    have = sorted({int(e) for a in ivs for e in np.asarray(a.get("epochs", ())).tolist() if e >= 0})
    if have and ep not in have:
        raise ConfigError(f"--epoch={ep}: {run['run_dir']} has epochs {have[0]}..{have[-1]}")
    tl = timeline_lanes(ivs, ep)
    plt = _plt()
    from matplotlib.patches import Patch

    lanes = tl["lanes"]
    fig, ax = plt.subplots(figsize=(9, 0.9 + 0.42 * max(len(lanes), 2)))
    xmax = max([x0 + w for v in tl["bars"].values() for x0, w in v] + [s[1] for s in tl["epoch_spans"].values()]
               + [1e-9])
    unit, scale = ("ms", 1e3) if xmax < 2 else ("s", 1.0)
    from matplotlib.patches import Rectangle

    for r, (x0, x1) in tl["epoch_spans"].items():
        ys = [i for i, (rr, _) in enumerate(lanes) if rr == r]
        ax.add_patch(Rectangle((x0 * scale, min(ys) - 0.48), (x1 - x0) * scale, max(ys) - min(ys) + 0.96,
                               facecolor="#eeeeee", edgecolor="#999999", lw=0.6, zorder=0))
    present = []
    # the stall first, tall and hatched, so what happens inside it (naive's reads) is drawn on top
    for name in ("stall", *(p for p in PHASES if p != "stall")):
        for i in range(len(lanes)):
            seg = tl["bars"].get((i, name))
            if not seg:
                continue
            if name not in present:
                present.append(name)
            h = 0.8 if name == "stall" else 0.5
            ax.broken_barh([(x * scale, w * scale) for x, w in seg], (i - h / 2, h), facecolors=phase_color(name),
                           edgecolor="none", hatch="////" if name == "stall" else None, zorder=1 + (name != "stall"))
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"rank {r}" if t == 0 else f"rank {r} · thread {t}" for r, t in lanes])
    ax.invert_yaxis()
    ax.set_xlim(0, xmax * scale * 1.01)
    ax.set_xlabel(f"time since the epoch's first event ({unit}; ranks aligned by wall clock)")
    s = run.get("summary") or {}
    shown = (f"{tl['ranks_shown']} of {tl['ranks_total']} ranks shown (incl. the slowest)"
             if tl["ranks_shown"] < tl["ranks_total"] else f"{tl['ranks_total']} rank(s)")
    ax.set_title(f"{s.get('workload')} / {label or s.get('strategy')}: epoch {ep}, {shown}; "
                 f"grey band = the rank's epoch, start to end", fontsize=9)
    names = {"stall": "stall (exposed I/O)", "plan": "plan (before the epoch clock)"}
    ax.legend(handles=[Patch(facecolor=phase_color(p), hatch="////" if p == "stall" else None,
                             label=names.get(p, p)) for p in PHASES if p in present],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _save(fig, out_dir, f"timeline-{_slug(label or s.get('strategy', 'run'))}-epoch{ep}")


# ---- access sizes ----------------------------------------------------------------------------------
def size_histogram(run: dict) -> dict[str, list[int]] | None:
    """``{file class: [reads per Darshan bucket]}`` from ``summary.io_counters.by_class``; None when the
    run has no counters."""
    ioc = (run.get("summary") or {}).get("io_counters") or {}
    by = ioc.get("by_class") or {}
    out = {}
    for cls, c in by.items():
        if not isinstance(c, dict):
            continue
        v = [int(c.get(f"POSIX_SIZE_READ_{b}") or 0) for b in SIZE_BUCKETS]
        if any(f"POSIX_SIZE_READ_{b}" in c for b in SIZE_BUCKETS):
            out[str(cls)] = v
    return out or None


def plot_sizes(run: dict, out_dir: Path, *, label: str | None = None) -> list[Path]:
    hist = size_histogram(run)
    if hist is None:
        raise DataError(f"{run['run_dir']}: no io_counters in run.json: no access-size histogram")
    plt = _plt()
    classes = list(hist)
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    x = np.arange(len(SIZE_BUCKETS))
    w = 0.8 / len(classes)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    vmax = max(max(v) for v in hist.values())
    for k, cls in enumerate(classes):
        v = np.asarray(hist[cls])
        pos = x - 0.4 + w * (k + 0.5)
        nr = int(v.sum())
        ax.bar(pos, v, w, color=colors[k % len(colors)], label=f"{cls} ({nr:,} read{'s' if nr != 1 else ''})")
        for xx, vv in zip(pos, v):
            if vv:
                ax.text(xx, vv, f"{vv:,}", ha="center", va="bottom", fontsize=6.5)
    ax.set_xticks(x)
    ax.set_xticklabels(SIZE_LABELS, rotation=30, ha="right")
    ax.set_xlabel("read size (bytes; Darshan's POSIX_SIZE_READ_* buckets, K = 1024)")
    ax.set_ylabel("reads (all ranks)")
    if vmax > 0 and vmax / max(1, min(vv for v in hist.values() for vv in v if vv) if any(
            vv for v in hist.values() for vv in v) else 1) > 100:
        ax.set_yscale("log")
    if ax.get_yscale() == "log":
        from matplotlib.ticker import FuncFormatter

        ax.set_ylim(bottom=0.8, top=vmax * 3)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: _num(v)))
    else:
        ax.set_ylim(bottom=0, top=vmax * 1.15 + 1)
    s = run.get("summary") or {}
    ax.set_title(f"{s.get('workload')} / {label or s.get('strategy')}: access sizes of reads, per file class")
    ax.legend(frameon=False)
    return _save(fig, out_dir, f"sizes-{_slug(label or s.get('strategy', 'run'))}")


# ---- scaling ---------------------------------------------------------------------------------------
def epoch_figures(run: dict) -> tuple[float, float | None, float | None]:
    """(mean epoch time, exposed I/O share, samples/s) over the epochs only: the summary's own figures, the same
    for measured and simulated runs (both leave staging before epoch 0 out of the share and the rate:
    ``metrics.summary_from_arrays``; a simulated ``dlbench.run/1`` summary is brought to that definition by
    ``results.SCHEMA_LOADERS``), so every plotted figure is the one ``report`` and ``compare`` print."""
    s = run.get("summary") or {}
    ep = [float(x) for x in s.get("epoch_time_s") or [] if x is not None]
    mean = sum(ep) / len(ep) if ep else float("nan")
    return mean, s.get("exposed_io_share"), s.get("samples_per_s")


def _finite(v) -> bool:
    try:
        return v is not None and bool(np.isfinite(float(v)))
    except (TypeError, ValueError):
        return False


def has_epoch_figures(run: dict) -> bool:
    """Whether a run has any of the scaling figures (an imported Darshan log has no epochs, no share, no
    rate: nothing to put on the scaling axes)."""
    return any(_finite(v) for v in epoch_figures(run))


def scaling_points(runs: Sequence[dict], x: str = "ranks") -> dict:
    """``{(series label, simulated): {x value: {"epoch_time_s", "exposed_io_share", "samples_per_s", "n"}}}``;
    several runs at one point are averaged. Series labels leave ranks out."""
    if x not in ("ranks", "nodes"):
        from .errors import unknown_choice

        raise unknown_choice("--x", x, ("ranks", "nodes"))
    labs = [lab.removesuffix(" [sim]") for lab in labels(runs, ranks=False)]
    acc: dict = defaultdict(lambda: defaultdict(list))
    for r, lab in zip(runs, labs):
        s = r.get("summary") or {}
        xv = s.get(x)
        if xv is None or not has_epoch_figures(r):
            continue
        acc[(lab, is_simulated(r))][int(xv)].append(epoch_figures(r))
    out: dict = {}
    for key, pts in acc.items():
        out[key] = {}
        for xv, vals in sorted(pts.items()):
            a = np.array([[np.nan if v is None else float(v) for v in t] for t in vals], dtype=np.float64)
            # per figure, the mean of the runs that have it (nan when none has it)
            m = [float(np.mean(c[np.isfinite(c)])) if np.isfinite(c).any() else float("nan") for c in a.T]
            out[key][xv] = {"epoch_time_s": float(m[0]), "exposed_io_share": float(m[1]),
                            "samples_per_s": float(m[2]), "n": len(vals)}
    return out


def _series_order(label: str) -> tuple:
    s = label.split()[0]
    return (STRATEGY_ORDER.index(s) if s in STRATEGY_ORDER else len(STRATEGY_ORDER), label)


def plot_scaling(runs: Sequence[dict], out_dir: Path, *, x: str = "ranks") -> list[Path]:
    pts = scaling_points(runs, x=x)
    if not pts:
        raise DataError(f"no run has a '{x}' figure: no scaling plot")
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, PercentFormatter

    series = sorted({k[0] for k in pts}, key=_series_order)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    color = {s: colors[i % len(colors)] for i, s in enumerate(series)}
    panels = (("epoch_time_s", "epoch time (s)", True), ("exposed_io_share", "exposed I/O share (stall / epoch)",
                                                         False), ("samples_per_s", "samples/s (all ranks)", True))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.0))
    xs_all = sorted({xv for v in pts.values() for xv in v})
    for ax, (key, ylab, logy) in zip(axes, panels):
        drawn = 0
        for (lab, sim), p in sorted(pts.items(), key=lambda kv: (_series_order(kv[0][0]), kv[0][1])):
            # a point without this figure (an imported run without samples/s) is left out, not drawn at 0
            xy = [(v, p[v][key]) for v in p if _finite(p[v][key]) and (p[v][key] > 0 or not logy)]
            if not xy:
                continue
            drawn += 1
            ax.plot([a for a, _ in xy], [b for _, b in xy], ls="--" if sim else "-", marker="s" if sim else "o",
                    ms=5, lw=1.3, color=color[lab], mfc="white" if sim else color[lab], mec=color[lab])
        if not drawn:  # no run has this figure: say so (a log axis of no data is an error in matplotlib)
            ax.text(0.5, 0.5, "no run has this figure", transform=ax.transAxes, ha="center", va="center",
                    color="#777777")
            ax.set_xlim(min(xs_all) / 1.5, max(xs_all) * 1.5)
            logy = False
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(xs_all) if len(xs_all) <= 12 else
                                   FixedLocator([v for v in xs_all if v & (v - 1) == 0] or xs_all))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{int(round(v)):,}"))
        if len(xs_all) > 6:
            ax.tick_params(axis="x", labelrotation=45)
        if logy:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: _num(v)))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: _num(v) if f"{v:.0e}"[0] in "25" else ""))
        else:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(bottom=0)
        if not drawn:
            ax.set_yticks([])
        ax.set_xlabel(f"{x} (log scale)")
        ax.set_ylabel(ylab)
        ax.grid(True, which="major", alpha=0.3)
    handles = [Line2D([], [], color=color[s], lw=2, label=s) for s in series]
    kinds = {sim for _, sim in pts}
    if False in kinds:
        handles.append(Line2D([], [], color="black", ls="-", marker="o", label="measured (filled, solid)"))
    if True in kinds:
        handles.append(Line2D([], [], color="black", ls="--", marker="s", mfc="white",
                              label="simulated (hollow, dashed)"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    wls = sorted({str((r.get("summary") or {}).get("workload")) for r in runs})
    systems = sorted({str(_system_name(r)) for r in runs})
    fig.suptitle(f"Scaling: {', '.join(wls)} on {', '.join(systems)}. Epoch figures only (staging before epoch 0 "
                 f"left out, measured and simulated alike); epoch time: mean over epochs and ranks", fontsize=10)
    fig.tight_layout()
    return _save(fig, out_dir, f"scaling-{x}")


def _num(v: float) -> str:
    """Axis numbers without exponents: 1,000 / 20 / 0.5 / 0.002."""
    return f"{v:,.0f}" if v >= 10 else f"{v:.3g}"


def _system_name(r: dict) -> str:
    s = r.get("summary") or {}
    if s.get("system"):
        return s["system"]
    cfg = r.get("config") or {}
    sysv = cfg.get("system")
    if isinstance(sysv, dict):
        return sysv.get("name", "?")
    return sysv or "local"


# ---- driver ----------------------------------------------------------------------------------------
def order_runs(runs: Sequence[dict]) -> list[dict]:
    """Strategies in their usual order (lowerbound, naive, prefetch, staging, local, pls), then options,
    measured before simulated, then ranks."""
    def key(r):
        s = r.get("summary") or {}
        st = s.get("strategy", "?")
        return (STRATEGY_ORDER.index(st) if st in STRATEGY_ORDER else len(STRATEGY_ORDER), st, is_simulated(r),
                repr(sorted((k, repr(v)) for k, v in _options(r).items())), int(s.get("ranks") or 0),
                r.get("run_dir", ""))

    return sorted(runs, key=key)


def _some(runs: Sequence[dict]) -> str:
    """``1 run (path)`` or ``12 runs (path, ...)``."""
    first = runs[0].get("run_dir")
    return f"1 run ({first})" if len(runs) == 1 else f"{len(runs)} runs ({first}, ...)"


def make_plots(paths: Sequence, out_dir, *, kinds: Sequence[str] = ("all",), epoch: int | None = None,
               x: str = "ranks", echo: Callable[[str], None] | None = None) -> list[Path]:
    """Every requested figure for the runs under ``paths``; returns the files written. Figures that a run
    cannot give (no intervals, no counters) are skipped with a one-line note through ``echo``."""
    say = echo or (lambda _m: None)
    want = list(KINDS) if "all" in kinds else list(dict.fromkeys(kinds))
    for k in want:
        if k not in KINDS:
            from .errors import unknown_choice

            raise unknown_choice("--kind", k, (*KINDS, "all"))
    if x not in ("ranks", "nodes"):
        from .errors import unknown_choice

        raise unknown_choice("--x", x, ("ranks", "nodes"))
    runs, notes = load_runs(paths)
    for n in notes:
        say(f"note: {n}")
    if not runs:
        raise DataError(f"RUN_DIR {' '.join(map(str, paths))}: no completed run to plot")
    _plt()  # matplotlib missing: one line before anything is written
    runs = order_runs(runs)
    out = Path(out_dir)
    written: list[Path] = []
    labs = labels(runs)
    if "bars" in want:
        ranks = sorted({int((r.get("summary") or {}).get("ranks") or 0) for r in runs})
        if len(runs) > 12 and len(ranks) > 1:  # a scaling root: one comparison per scale
            for w in ranks:
                written += plot_bars([r for r in runs if int((r.get("summary") or {}).get("ranks") or 0) == w],
                                     out, stem=f"bars-{w}r")
        else:
            written += plot_bars(runs, out)
    if "timeline" in want:
        no_iv = [r for r in runs if is_simulated(r) or not (Path(r["run_dir"]) / "intervals.npz").is_file()]
        if no_iv:
            say(f"note: {_some(no_iv)}: no intervals.npz (simulated or imported): no timeline")
        for r, lab in zip(runs, labs):
            if any(r is x for x in no_iv):
                continue
            try:
                written += plot_timeline(r, out, epoch=epoch, label=lab)
            except (DataError, ConfigError) as exc:
                if len(runs) == 1:
                    raise
                say(f"note: {r['run_dir']}: {exc}: no timeline")
    if "sizes" in want:
        no_c = [r for r in runs if size_histogram(r) is None]
        if no_c:
            say(f"note: {_some(no_c)}: no io_counters in run.json: no access-size histogram")
        for r, lab in zip(runs, labs):
            if size_histogram(r) is not None:
                written += plot_sizes(r, out, label=lab)
    if "scaling" in want:
        none = [r for r in runs if not has_epoch_figures(r)]
        if none:
            say(f"note: {_some(none)}: no epoch time, exposed I/O share or samples/s (an imported log without "
                f"epochs): left out of the scaling figure")
        runs = [r for r in runs if has_epoch_figures(r)]
        xs = {(r.get("summary") or {}).get(x) for r in runs}
        if not runs and "all" in kinds:
            say("note: no run with epoch figures: no scaling figure")
        elif not runs:
            raise DataError(f"RUN_DIR {' '.join(map(str, paths))}: no run has epoch time, exposed I/O share or "
                            f"samples/s: no scaling plot")
        elif len(xs) < 2 and "all" in kinds:
            say(f"note: every run has the same {x}: no scaling figure (give runs at several {x})")
        else:
            written += plot_scaling(runs, out, x=x)
    return written
