"""The breakdown: pure arithmetic on recorded intervals (no MPI, no clocks, no printing).

Definitions (per rank r, epoch e; an interval belongs to the epoch it is *tagged* with, i.e. the
epoch whose samples it serves, even when a prefetch thread runs it before that epoch starts):

- epoch time          T[r,e]  = epoch end − epoch start, from ``Timeline.mark_epoch``; for an epoch
                                that was not marked, the hull of its intervals.
- phase time          P[r,e,p] = |∪ intervals of phase p| (TimeLogger's merge: overlapping intervals,
                                e.g. from several reader threads, are counted once).
- exposed I/O share   = Σ_e P[stall] / Σ_e T   (the trainer blocked waiting for its next batch)
- raw read share      = Σ_e P[read] / Σ_e T   (can exceed the exposed share when reads overlap compute)
- AU                  = Σ_e P[compute] / Σ_e T (DLIO's accelerator utilisation)
- read bandwidth      = Σ_e read bytes / Σ_e P[read]  (bytes the read intervals say they read, over
                                the union of read time)
- samples/s (rank)    = Σ_e samples[r,e] / Σ_e T[r,e]
- first step          included in every figure above; ``first_step_stall_s`` reports the stall of step 0
                                of each epoch on its own so warm-up (empty prefetch queue) is visible.
- prologue            intervals tagged with an epoch < 0 (staging before epoch 0); prologue time =
                                the bounds marked for epoch −1, else the hull of those intervals.
                                Kept out of the per-epoch shares and of ``read_bytes``/``bytes_by_tier``
                                (which, like ``Plan.bytes_by_tier``, cover the epochs), reported apart.

- end-to-end exposed share = (Σ_e P[stall] + prologue time) / (Σ_e T + prologue time): the prologue
                                (staging before epoch 0) is time the trainer cannot train, so it counts as
                                exposed I/O here; ``exposed_io_share`` (per epoch) leaves it out. For a
                                strategy without a prologue both are equal.
- plan time           P[r,e,plan]: building epoch e's plan, done by the runner *before* epoch e's clock
                                starts; reported apart (``plan_time_s`` per epoch), in no share.
- verify time         P[r,e,verify]: ``--verify``'s checks of each batch, inside the epoch between stall and
                                compute (its own phase, so stall + verify + compute add up for naive).

Run level (the summary): times, shares, bandwidth and per-rank rates are the **mean over ranks** of the
per-rank values (per-rank values under ``per_rank``, min/mean/max under ``spread``); byte and sample
counts (``read_bytes``, ``bytes_by_tier``, ``samples``) are **sums over ranks**.

- epoch_time_s[e]     = mean_r T[r,e];  epoch_time_max_s[e] = max_r T[r,e]
- total_time_s        = Σ_e epoch_time_s[e] + prologue_time_s (mean over ranks)
- samples_per_s       = Σ_r Σ_e samples / Σ_e max_r T[r,e]   (the job's throughput: an epoch ends when
                                its slowest rank does)
- aggregate_read_bandwidth_bytes_per_s = Σ_r read bandwidth of rank r
- imbalance           = max_r T_r / mean_r T_r − 1, with T_r = Σ_e T[r,e] (0 = perfectly balanced)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .timeline import OUTSIDE_EPOCH, PHASE_ID, PHASES

NS = 1e-9


def merge_intervals(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """TimeLogger's merge: the disjoint, sorted intervals covering ∪ [starts[i], ends[i]).
    Intervals with end ≤ start are empty and ignored."""
    s = np.asarray(starts)
    e = np.asarray(ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    cm = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > cm[:-1]
    idx = np.flatnonzero(new)
    last = np.append(idx[1:] - 1, s.size - 1)
    return s[idx], cm[last]


def union_length(starts, ends):
    """|∪ [starts[i], ends[i])| in the input's unit (exact for integer nanoseconds).
    Properties: ≤ Σ lengths; = Σ for disjoint intervals; ≤ hull (max end − min start);
    invariant under permutation and under splitting an interval in two."""
    ms, me = merge_intervals(starts, ends)
    if ms.size == 0:
        return ms.dtype.type(0) if ms.dtype.kind in "iuf" else 0
    return (me - ms).sum()


def _epoch_list(per_rank: Sequence[dict], epochs) -> list[int]:
    if epochs is None:
        found: set[int] = set()
        for a in per_rank:
            found.update(int(x) for x in np.asarray(a.get("epochs", ())) if x >= 0)
            found.update(int(x) for x in np.unique(np.asarray(a.get("epoch", ()))) if x >= 0)
        return sorted(found)
    if isinstance(epochs, int | np.integer):
        return list(range(int(epochs)))
    return [int(x) for x in epochs]


def _get(a: dict, name: str, dtype) -> np.ndarray:
    v = a.get(name)
    return np.zeros(0, dtype=dtype) if v is None else np.asarray(v)


def rank_breakdown(a: dict, epochs: Sequence[int], *, n_tiers: int = 4) -> dict:
    """Per-epoch breakdown of one rank's ``Timeline.arrays()`` (see the module docstring).
    Returns lists indexed like ``epochs`` plus a ``prologue`` dict."""
    start = _get(a, "start_ns", np.int64).astype(np.int64)
    end = _get(a, "end_ns", np.int64).astype(np.int64)
    phase = _get(a, "phase", np.uint8)
    ep = _get(a, "epoch", np.int32)
    step = _get(a, "step", np.int32)
    nbytes = _get(a, "nbytes", np.int64).astype(np.int64)
    tier = _get(a, "tier", np.uint8)
    marked = {int(e): (int(s), int(t), int(n)) for e, s, t, n in zip(
        _get(a, "epochs", np.int32), _get(a, "epoch_start_ns", np.int64), _get(a, "epoch_end_ns", np.int64),
        a.get("epoch_samples") if a.get("epoch_samples") is not None else np.zeros(len(_get(a, "epochs", np.int32))))}

    def one(mask: np.ndarray, window: tuple[int, int] | None) -> dict:
        if window is None:
            window = (int(start[mask].min()), int(end[mask].max())) if mask.any() else (0, 0)
        d = {"time_s": (window[1] - window[0]) * NS, "start_ns": window[0], "end_ns": window[1]}
        d["phase_time_s"] = {p: float(union_length(start[mask & (phase == i)], end[mask & (phase == i)])) * NS
                             for i, p in enumerate(PHASES)}
        d["phase_bytes"] = {p: int(nbytes[mask & (phase == i)].sum()) for i, p in enumerate(PHASES)}
        rd = mask & (phase == PHASE_ID["read"])
        d["read_bytes"] = int(nbytes[rd].sum())
        d["read_ops"] = int(rd.sum())
        bt = np.bincount(tier[rd].astype(np.int64), weights=nbytes[rd].astype(np.float64), minlength=n_tiers)
        d["bytes_by_tier"] = [int(x) for x in bt]
        st0 = mask & (phase == PHASE_ID["stall"]) & (step == 0)
        d["first_step_stall_s"] = float(union_length(start[st0], end[st0])) * NS
        return d

    out = {"epochs": []}
    for e in epochs:
        m = marked.get(e)
        d = one(ep == e, (m[0], m[1]) if m else None)
        d["epoch"] = e
        d["samples"] = m[2] if m else 0
        out["epochs"].append(d)
    pm = marked.get(-1)
    pro = one(ep < 0, (pm[0], pm[1]) if pm else None)
    out["prologue"] = pro
    return out


def _stats(vals: Sequence[float]) -> dict:
    v = np.asarray(vals, dtype=np.float64)
    if v.size == 0:
        return {"min": 0.0, "mean": 0.0, "max": 0.0}
    return {"min": float(v.min()), "mean": float(v.mean()), "max": float(v.max())}


def _div(a: float, b: float) -> float:
    return float(a) / float(b) if b else 0.0


def summarize(per_rank_arrays: Sequence[dict], *, workload: str, strategy: str, ranks: int | None = None,
              nodes: int = 1, epochs=None, samples_per_epoch: int | Sequence[int] | None = None,
              tier_names: Sequence[str] | None = None, simulated: bool = False) -> dict:
    """run.json's ``summary`` from every rank's ``Timeline.arrays()`` (index = rank). ``epochs``: a count
    (epochs 0..n−1), a list of epoch ids, or None (every epoch ≥ 0 seen). ``samples_per_epoch``: global
    samples per epoch (int or list) when the timelines did not record them via ``mark_epoch``; split
    evenly over ranks. Formulas: module docstring."""
    if tier_names is None:
        from .plan import TIER_NAMES as tier_names
    per_rank = [a if a is not None else {} for a in per_rank_arrays]
    ranks = len(per_rank) if ranks is None else int(ranks)
    eps = _epoch_list(per_rank, epochs)
    nt = len(tier_names)
    bds = [rank_breakdown(a, eps, n_tiers=nt) for a in per_rank]
    if samples_per_epoch is not None:
        spe = ([int(samples_per_epoch)] * len(eps) if isinstance(samples_per_epoch, int | np.integer)
               else [int(x) for x in samples_per_epoch])
        for b in bds:
            for d, n in zip(b["epochs"], spe):
                if not d["samples"]:
                    d["samples"] = n / max(len(bds), 1)

    return summarize_breakdowns(bds, eps, workload=workload, strategy=strategy, ranks=ranks, nodes=nodes,
                                tier_names=tier_names, simulated=simulated)


def rank_reduce(a: dict, epochs, *, tier_names: Sequence[str] | None = None) -> dict:
    """What one rank sends to rank 0 instead of its intervals: its ``rank_breakdown`` and ``tier_io``
    (small: a few numbers per epoch and phase), computed where the intervals are."""
    if tier_names is None:
        from .plan import TIER_NAMES as tier_names
    eps = _epoch_list([a], epochs)
    return {"rank": int(a.get("rank", 0)), "epoch_ids": eps,
            "breakdown": rank_breakdown(a, eps, n_tiers=len(tier_names)),
            "tier_io": tier_io([a], tier_names), "records": int(len(a.get("start_ns", ())))}


def merge_tier_io(parts: Sequence[dict]) -> dict:
    """Sum of ``tier_io`` results (one per rank)."""
    out: dict = {}
    for t in parts:
        for where, tiers in t.items():
            for name, d in tiers.items():
                cur = out.setdefault(where, {}).setdefault(name, {"ops": 0, "bytes": 0})
                cur["ops"] += int(d["ops"])
                cur["bytes"] += int(d["bytes"])
    return out


def summarize_breakdowns(bds: Sequence[dict], eps: Sequence[int], *, workload: str, strategy: str,
                         ranks: int | None = None, nodes: int = 1, tier_names: Sequence[str] | None = None,
                         simulated: bool = False) -> dict:
    """``summarize`` from every rank's ``rank_breakdown`` (what ranks send when their intervals stay in
    their own files). Same formulas (module docstring)."""
    if tier_names is None:
        from .plan import TIER_NAMES as tier_names
    nt = len(tier_names)
    ranks = len(bds) if ranks is None else int(ranks)
    R = len(bds)
    E = len(eps)
    T = np.array([[d["time_s"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    P = {p: np.array([[d["phase_time_s"][p] for d in b["epochs"]] for b in bds]).reshape(R, E) for p in PHASES}
    RB = np.array([[d["read_bytes"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    S = np.array([[d["samples"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    FS = np.array([[d["first_step_stall_s"] for d in b["epochs"]] for b in bds]).reshape(R, E)
    Tr = T.sum(axis=1)
    pro_t = np.array([b["prologue"]["time_s"] for b in bds], dtype=np.float64)

    pr = {
        "total_epoch_time_s": Tr.tolist(),
        "prologue_time_s": pro_t.tolist(),
        "exposed_io_share": [_div(x, t) for x, t in zip(P["stall"].sum(1), Tr)],
        "e2e_exposed_io_share": [_div(x + p, t + p) for x, t, p in zip(P["stall"].sum(1), Tr, pro_t)],
        "read_share": [_div(x, t) for x, t in zip(P["read"].sum(1), Tr)],
        "au": [_div(x, t) for x, t in zip(P["compute"].sum(1), Tr)],
        "read_bytes": [int(x) for x in RB.sum(1)],
        "read_bandwidth_bytes_per_s": [_div(b, t) for b, t in zip(RB.sum(1), P["read"].sum(1))],
        "samples": [float(x) for x in S.sum(1)],
        "samples_per_s": [_div(n, t) for n, t in zip(S.sum(1), Tr)],
        "phase_time_s": {p: P[p].sum(1).tolist() for p in PHASES},
        "first_step_stall_s": FS.sum(1).tolist(),
    }
    bbt = np.zeros(nt, dtype=np.int64)
    pbbt = np.zeros(nt, dtype=np.int64)
    for b in bds:
        for d in b["epochs"]:
            bbt += np.asarray(d["bytes_by_tier"][:nt], dtype=np.int64)
        pbbt += np.asarray(b["prologue"]["bytes_by_tier"][:nt], dtype=np.int64)

    def mean(x) -> float:
        return float(np.mean(x)) if len(x) else 0.0

    epoch_time = T.mean(axis=0) if R else np.zeros(E)
    prologue_time = mean(pro_t)
    total_samples = float(S.sum())
    summary = {
        "workload": workload, "strategy": strategy, "ranks": ranks, "nodes": int(nodes),
        "epochs": E, "epoch_ids": eps, "simulated": bool(simulated),
        "total_time_s": float(epoch_time.sum()) + prologue_time,
        "prologue_time_s": prologue_time,
        "epoch_time_s": epoch_time.tolist(),
        "epoch_time_max_s": (T.max(axis=0) if R else np.zeros(E)).tolist(),
        "exposed_io_share": mean(pr["exposed_io_share"]),
        "e2e_exposed_io_share": mean(pr["e2e_exposed_io_share"]),
        "plan_time_s": (P["plan"].mean(axis=0) if R else np.zeros(E)).tolist(),
        "read_share": mean(pr["read_share"]),
        "au": mean(pr["au"]),
        "samples": int(round(total_samples)),
        "samples_per_s": _div(total_samples, (T.max(axis=0).sum() if R else 0.0)),
        "read_bytes": int(RB.sum()),
        "read_bandwidth_bytes_per_s": mean(pr["read_bandwidth_bytes_per_s"]),
        "aggregate_read_bandwidth_bytes_per_s": float(sum(pr["read_bandwidth_bytes_per_s"])),
        "bytes_by_tier": {n: int(v) for n, v in zip(tier_names, bbt)},
        "prologue_bytes_by_tier": {n: int(v) for n, v in zip(tier_names, pbbt)},
        "phase_time_s": {p: mean(pr["phase_time_s"][p]) for p in PHASES},
        "phase_share": {p: mean([_div(x, t) for x, t in zip(P[p].sum(1), Tr)]) for p in PHASES
                        if p not in OUTSIDE_EPOCH},
        "prologue_phase_time_s": {p: mean([b["prologue"]["phase_time_s"][p] for b in bds]) for p in PHASES},
        "first_step_stall_s": (FS.mean(axis=0) if R else np.zeros(E)).tolist(),
        # per epoch (DLIO's summary.json): AU mean over ranks, samples and bytes read summed over ranks
        "au_per_epoch": [mean([_div(c, t) for c, t in zip(P["compute"][:, e], T[:, e])]) for e in range(E)],
        "samples_per_epoch": S.sum(axis=0).tolist() if R else [0.0] * E,
        "read_bytes_per_epoch": [int(x) for x in RB.sum(axis=0)] if R else [0] * E,
        "imbalance": _div(Tr.max(), Tr.mean()) - 1.0 if R and Tr.mean() > 0 else 0.0,
        "per_rank": pr,
        "spread": {**{k: _stats(pr[k]) for k in ("total_epoch_time_s", "exposed_io_share", "e2e_exposed_io_share",
                                                 "read_share", "au", "read_bytes", "read_bandwidth_bytes_per_s",
                                                 "samples_per_s")},
                   "compute_s": _stats(pr["phase_time_s"]["compute"]), "samples": _stats(pr["samples"])},
        "definitions": {
            "phase_time": "length of the union of the phase's intervals (overlaps counted once)",
            "epoch_time": "mark_epoch end - start per rank; summary value is the mean over ranks",
            "exposed_io_share": "stall / epoch time, mean over ranks",
            "e2e_exposed_io_share": "(stall + prologue) / (epoch time + prologue), mean over ranks: staging "
                                    "before epoch 0 counted as exposed I/O",
            "plan_time": "building each epoch's plan, before its epoch clock starts (not in epoch time)",
            "verify": "--verify's per-batch checks: a phase inside the epoch, between stall and compute",
            "read_share": "union read time / epoch time, mean over ranks",
            "au": "compute / epoch time, mean over ranks",
            "read_bandwidth": "bytes read / union read time per rank, mean over ranks",
            "samples_per_s": "all samples / sum over epochs of the slowest rank's epoch time",
            "imbalance": "max over ranks / mean over ranks - 1 of total epoch time",
            "first_step": "included in all figures; first_step_stall_s shows step 0's stall per epoch",
            "total_time": "sum of mean epoch times + mean prologue (stage) time",
            "epoch_attribution": "intervals count toward the epoch they are tagged with",
        },
    }
    return summary


def per_epoch_table(per_rank_arrays: Sequence[dict], epochs=None) -> list[dict]:
    """run.json's ``per_epoch``: one row per (epoch, rank) with epoch time, per-phase union time,
    read bytes, bytes per tier and samples."""
    per_rank = [a if a is not None else {} for a in per_rank_arrays]
    eps = _epoch_list(per_rank, epochs)
    rows = []
    for r, a in enumerate(per_rank):
        b = rank_breakdown(a, eps)
        for d in b["epochs"]:
            rows.append({"epoch": d["epoch"], "rank": int(a.get("rank", r)), "epoch_time_s": d["time_s"],
                         "phase_time_s": d["phase_time_s"], "phase_bytes": d["phase_bytes"],
                         "read_bytes": d["read_bytes"], "read_ops": d["read_ops"],
                         "bytes_by_tier": d["bytes_by_tier"], "samples": d["samples"],
                         "first_step_stall_s": d["first_step_stall_s"]})
    return rows


def tier_io(per_rank_arrays: Sequence[dict], tier_names: Sequence[str] | None = None) -> dict:
    """Bytes and operations per tier, summed over ranks, for the epochs and for the prologue (epoch < 0)
    apart: ``read`` intervals count as reads of their tier; ``exchange`` intervals with bytes count as
    receptions from a peer (tier ``peer``: bytes received, one operation per completed message)."""
    if tier_names is None:
        from .plan import TIER_NAMES as tier_names
    nt = len(tier_names)
    out = {w: {n: {"ops": 0, "bytes": 0} for n in tier_names} for w in ("epochs", "prologue")}
    peer = list(tier_names).index("peer") if "peer" in tier_names else None
    for a in per_rank_arrays:
        phase, ep = _get(a, "phase", np.uint8), _get(a, "epoch", np.int32)
        tier = _get(a, "tier", np.uint8).astype(np.int64)
        nb = _get(a, "nbytes", np.int64).astype(np.int64)
        for where, m in (("epochs", ep >= 0), ("prologue", ep < 0)):
            rd = m & (phase == PHASE_ID["read"])
            ops = np.bincount(tier[rd], minlength=nt)[:nt]
            byt = np.bincount(tier[rd], weights=nb[rd].astype(np.float64), minlength=nt)[:nt]
            for i, n in enumerate(tier_names):
                out[where][n]["ops"] += int(ops[i])
                out[where][n]["bytes"] += int(byt[i])
            if peer is not None:
                ex = m & (phase == PHASE_ID["exchange"]) & (nb > 0)
                out[where][tier_names[peer]]["ops"] += int(ex.sum())
                out[where][tier_names[peer]]["bytes"] += int(nb[ex].sum())
    return out
