"""The measured runs' table of a study (``dlbench study FILE``, after `dlbench compare`'s): per run the
steady-state epoch time (epochs 1..), its exposed I/O share, the tiers' traffic and the order quality."""

from __future__ import annotations

from pathlib import Path

from ..errors import DlbenchError
from ..report import run_label

_MAX_INTERVAL_BYTES = 64 << 20   # larger runs: the steady-state exposed share is not computed ("-")


def steady_state(run: dict) -> dict:
    """Figures of epochs 1.. (epoch 0 fills caches and pipelines; a single-epoch run: epoch 0 itself):
    ``epoch_s`` (mean over epochs of the ranks' mean), ``epoch0_s``, ``exposed`` (stall / epoch time over
    those epochs, all ranks, from the run's intervals; None when they are missing or over 64 MiB) and
    ``x_compute`` (epoch_s / (steps per epoch x the sleep step time); None without a fixed step time)."""
    s = run.get("summary") or {}
    cfg = run.get("config") or {}
    ep = list(s.get("epoch_time_s") or [])
    out: dict[str, float | None] = {"epoch_s": None, "epoch0_s": ep[0] if ep else None, "exposed": None,
                                    "x_compute": None}
    if not ep:
        return out
    first = 1 if len(ep) > 1 else 0
    out["epoch_s"] = epoch_s = sum(ep[first:]) / len(ep[first:])
    step = cfg.get("compute_step_time_s")
    n, ranks, b = s.get("samples"), s.get("ranks"), cfg.get("local_batch")
    if step and n and ranks and b and s.get("epochs"):
        steps = -(-int(n) // (int(s["epochs"]) * int(ranks)) // int(b))
        out["x_compute"] = epoch_s / (steps * float(step))
    d = run.get("run_dir")
    if d and not run.get("simulated"):
        out["exposed"] = _exposed_from(Path(d), first)
    return out


def _exposed_from(d: Path, first: int) -> float | None:
    import numpy as np

    from ..results import read_intervals
    from ..timeline import PHASES

    files = [f for f in d.glob("intervals*") if f.is_file()]
    if not files or sum(f.stat().st_size for f in files) > _MAX_INTERVAL_BYTES:
        return None
    try:
        iv = read_intervals(d)
    except (DlbenchError, OSError, ValueError, KeyError):  # unreadable or partial: left out, not guessed
        return None
    stall = PHASES.index("stall")
    num = den = 0
    for a in iv:
        m = (np.asarray(a["phase"]) == stall) & (np.asarray(a["epoch"]) >= first)
        num += int((np.asarray(a["end_ns"])[m] - np.asarray(a["start_ns"])[m]).sum())
        e = np.asarray(a["epochs"]) >= first
        den += int((np.asarray(a["epoch_end_ns"])[e] - np.asarray(a["epoch_start_ns"])[e]).sum())
    return num / den if den > 0 else None


def traffic_table(run_dirs) -> str:
    """Per run: epoch time of epochs 1.. (epoch 0 apart), its exposed I/O share, that time over compute
    alone, shared-tier MB (epochs + staging), own-tier (local/memory) MB read, peer MB received, staging and
    exchange time, and the fraction of the dataset a rank has trained on after E epochs."""
    from ..results import read_run

    head = ["strategy", "epoch 0 (s)", "epoch 1.. (s)", "exposed 1..", "x compute", "shared MB", "(staging)",
            "own MB", "peer MB", "stage (s)", "exchange (s)", "seen after E", "global-shuffle E",
            "global batch = shuffle's"]
    rows = []
    for d in run_dirs:
        r = read_run(d)
        s = r.get("summary") or {}
        io = s.get("tier_io") or {}
        ep, pro = io.get("epochs", {}), io.get("prologue", {})

        def mb(where, t):
            return (where.get(t) or {}).get("bytes", 0) / 1e6

        oq = s.get("order_quality") or {}
        seen = (oq.get("fraction_of_dataset_seen_per_rank_after_epoch") or [None])[-1]
        exp = (oq.get("global_shuffle_expected_after_epoch") or [None])[-1]
        sem = s.get("semantics") or {}
        st = steady_state(r)

        def f(v, fmt):
            return "-" if v is None else fmt.format(v)

        rows.append([run_label(r), f(st["epoch0_s"], "{:.3f}"), f(st["epoch_s"], "{:.3f}"), f(st["exposed"], "{:.1%}"),
                     f(st["x_compute"], "{:.2f}"),
                     f"{mb(ep, 'shared') + mb(pro, 'shared'):.1f}", f"{mb(pro, 'shared'):.1f}",
                     f"{mb(ep, 'local') + mb(ep, 'memory'):.1f}", f"{mb(ep, 'peer') + mb(pro, 'peer'):.1f}",
                     f"{s.get('prologue_time_s', 0.0):.3f}", f"{(s.get('phase_time_s') or {}).get('exchange', 0.0):.3f}",
                     "-" if seen is None else f"{seen:.1%}", "-" if exp is None else f"{exp:.1%}",
                     sem.get("global_batch_is_global_shuffles", "?")])
    w = [max(len(h), *(len(str(x[i])) for x in rows)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(head))
    out = [line, "-" * len(line)]
    for x in rows:
        out.append("  ".join(str(v).ljust(w[i]) if i == 0 else str(v).rjust(w[i]) for i, v in enumerate(x)))
    return "\n".join(out)
