"""The breakdown: pure arithmetic on recorded intervals (no MPI, no clocks, no printing).

Definitions (per rank r, epoch e; an interval belongs to the epoch it is *tagged* with, i.e. the
epoch whose samples it serves, even when a prefetch thread runs it before that epoch starts):

- epoch time          T[r,e]  = epoch end − epoch start, from ``Timeline.mark_epoch``; for an epoch
                                that was not marked, the hull of its intervals.
- phase time          P[r,e,p] = |∪ intervals of phase p| (TimeLogger's merge: overlapping intervals,
                                e.g. from several reader threads, are counted once).
- exposed I/O share   = Σ_e P[stall] / Σ_e T   (the trainer blocked waiting for its next batch)
- I/O-bound share     = Σ_e (P[stall] + P[barrier] + P[exchange]) / Σ_e T = 1 − AU − non-I/O overhead
                                (transfer, checkpoint, verify, loop overhead): the trainer waiting for data, its
                                own (stall), its data-starved peers' at the step barrier, its exchange. At scale
                                a rank's own stall can be small while it waits for peers at the barrier; this
                                share counts that wait where its cause is (I/O on the critical path).
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

Read latency (``read_latency``): the duration (end − start) of every ``read`` interval of the epochs (one per
read request the executor timed: a sample, or a run of samples for aggregated loading; the prologue's staging
reads apart are left out), per tier. Per rank: exact (count, mean, P50/P95/P99 by linear interpolation, max).
All ranks: count, mean and max exact; P50/P95/P99 from the ranks' merged log-spaced histograms
(``LAT_PER_DECADE`` = 100 bins per decade from ``LAT_MIN_NS``: a bin's centre is within ±1.2 % of any
duration in it), so rank 0 never gathers every duration.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .timeline import OUTSIDE_EPOCH, PHASE_ID, PHASES

NS = 1e-9
# the trainer's phases that are waiting for data (``io_bound_share``): its own next batch, its peers at the step
# barrier, its exchange; every other phase of the epoch (compute, transfer, checkpoint, verify) and the loop's
# unrecorded time is not I/O
IO_WAIT_PHASES = ("stall", "barrier", "exchange")


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


def _tiers(tier_names: Sequence[str] | None) -> Sequence[str]:
    """The plan's tier names unless others are given."""
    if tier_names is not None:
        return tier_names
    from .storage.tiers import TIER_NAMES

    return TIER_NAMES


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
    samples_marked = a.get("epoch_samples")
    if samples_marked is None:
        samples_marked = np.zeros(len(_get(a, "epochs", np.int32)))
    marked = {int(e): (int(s), int(t), int(n)) for e, s, t, n in zip(
        _get(a, "epochs", np.int32), _get(a, "epoch_start_ns", np.int64), _get(a, "epoch_end_ns", np.int64),
        samples_marked)}

    def one(mask: np.ndarray, window: tuple[int, int] | None, window_is_prologue: bool = False) -> dict:
        if window is None:
            window = (int(start[mask].min()), int(end[mask].max())) if mask.any() else (0, 0)
        d: dict = {"time_s": (window[1] - window[0]) * NS, "start_ns": window[0], "end_ns": window[1]}
        d["phase_time_s"] = {p: float(union_length(start[mask & (phase == i)], end[mask & (phase == i)])) * NS
                             for i, p in enumerate(PHASES)}
        d["phase_bytes"] = {p: int(nbytes[mask & (phase == i)].sum()) for i, p in enumerate(PHASES)}
        rd = mask & (phase == PHASE_ID["read"])
        d["read_bytes"] = int(nbytes[rd].sum())
        d["read_ops"] = int(rd.sum())
        d["shared_read_ops"] = int((rd & (tier == 0)).sum())
        # bytes by tier also count what a rank received from others outside its reads (``exchange`` intervals
        # with bytes, PEER): staging's distribution in the prologue, pls's exchange during the epochs
        mv = rd | (mask & (phase == PHASE_ID["exchange"]))
        bt = np.bincount(tier[mv].astype(np.int64), weights=nbytes[mv].astype(np.float64), minlength=n_tiers)
        d["bytes_by_tier"] = [int(x) for x in bt]
        st0 = mask & (phase == PHASE_ID["stall"]) & (step == 0)
        d["first_step_stall_s"] = float(union_length(start[st0], end[st0])) * NS
        return d

    out: dict = {"epochs": []}
    for e in epochs:
        m = marked.get(e)
        d = one(ep == e, (m[0], m[1]) if m else None)
        d["epoch"] = e
        d["samples"] = m[2] if m else 0
        out["epochs"].append(d)
    pm = marked.get(-1)
    pro = one(ep < 0, (pm[0], pm[1]) if pm else None, window_is_prologue=True)
    out["prologue"] = pro
    return out


LAT_PER_DECADE = 100
LAT_MIN_NS = 100                      # bin 0: < 100 ns; the last bin: >= 10^4 s
LAT_DECADES = 11
LAT_BINS = LAT_PER_DECADE * LAT_DECADES + 2
LAT_Q = (50, 95, 99)


def _lat_bins(d_ns: np.ndarray) -> np.ndarray:
    x = np.log10(np.maximum(d_ns, 1).astype(np.float64) / LAT_MIN_NS) * LAT_PER_DECADE
    return np.clip(np.floor(x).astype(np.int64) + 1, 0, LAT_BINS - 1)


def _lat_bin_value_s(idx: np.ndarray) -> np.ndarray:
    """A bin's geometric centre in seconds (bin 0: LAT_MIN_NS)."""
    idx = np.asarray(idx, dtype=np.float64)
    return np.where(idx <= 0, LAT_MIN_NS, LAT_MIN_NS * 10.0 ** ((idx - 0.5) / LAT_PER_DECADE)) * NS


def read_latency_rank(a: dict, tier_names: Sequence[str] | None = None) -> dict:
    """One rank's read latencies per tier (module docstring): ``{"rank", "tiers": {name: {count, mean_s,
    p50_s, p95_s, p99_s, max_s}}, "hist": {name: [bin indices, counts]}}`` (tiers without reads left out)."""
    tier_names = _tiers(tier_names)
    phase, ep = _get(a, "phase", np.uint8), _get(a, "epoch", np.int32)
    m = (phase == PHASE_ID["read"]) & (ep >= 0)
    d = (_get(a, "end_ns", np.int64)[m].astype(np.int64) - _get(a, "start_ns", np.int64)[m].astype(np.int64))
    tier = _get(a, "tier", np.uint8)[m].astype(np.int64)
    out: dict = {"rank": int(a.get("rank", 0)), "tiers": {}, "hist": {}}
    for code, name in enumerate(tier_names):
        x = d[tier == code]
        if not x.size:
            continue
        q = np.percentile(x, LAT_Q) * NS
        out["tiers"][name] = {"count": int(x.size), "mean_s": float(x.mean()) * NS,
                              **{f"p{k}_s": float(v) for k, v in zip(LAT_Q, q)}, "max_s": float(x.max()) * NS}
        h = np.bincount(_lat_bins(x), minlength=LAT_BINS)
        nz = np.nonzero(h)[0]
        out["hist"][name] = [nz.tolist(), h[nz].tolist()]
    return out


def merge_read_latency(parts: Sequence[dict]) -> dict:
    """run.json's ``summary["read_latency"]`` from every rank's ``read_latency_rank``: ``per_rank`` (exact),
    ``all`` (per tier over all ranks; percentiles from the merged histograms, exact where one rank read)."""
    parts = sorted(parts, key=lambda p: p.get("rank", 0))
    names = list(dict.fromkeys(n for p in parts for n in p.get("tiers", {})))
    all_: dict = {}
    for name in names:
        have = [p for p in parts if name in p.get("tiers", {})]
        st = [p["tiers"][name] for p in have]
        count = sum(x["count"] for x in st)
        row = {"count": int(count), "mean_s": sum(x["mean_s"] * x["count"] for x in st) / count,
               "max_s": max(x["max_s"] for x in st), "ranks": len(have)}
        if len(have) == 1:
            row.update({f"p{k}_s": st[0][f"p{k}_s"] for k in LAT_Q})
        else:
            h = np.zeros(LAT_BINS, dtype=np.int64)
            for p in have:
                idx, cnt = p["hist"][name]
                np.add.at(h, np.asarray(idx, dtype=np.int64), np.asarray(cnt, dtype=np.int64))
            cum = np.cumsum(h)
            for k in LAT_Q:
                b = int(np.searchsorted(cum, k / 100.0 * count))   # the bin holding the k-th percentile
                row[f"p{k}_s"] = float(min(_lat_bin_value_s(np.array([b]))[0], row["max_s"]))
        all_[name] = row
    return {"all": all_, "per_rank": [{"rank": p.get("rank", i), "tiers": p.get("tiers", {})}
                                      for i, p in enumerate(parts)],
            "definition": "duration of every read interval of the epochs, per tier; per rank exact (linear "
                          "interpolation); all ranks: count/mean/max exact, P50/P95/P99 from merged histograms "
                          f"({LAT_PER_DECADE} bins per decade, within 1.2 %) unless one rank read the tier"}


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
    tier_names = _tiers(tier_names)
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
    tier_names = _tiers(tier_names)
    eps = _epoch_list([a], epochs)
    return {"rank": int(a.get("rank", 0)), "epoch_ids": eps,
            "breakdown": rank_breakdown(a, eps, n_tiers=len(tier_names)),
            "tier_io": tier_io([a], tier_names), "records": int(len(a.get("start_ns", ()))),
            "read_latency": read_latency_rank(a, tier_names)}


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
    their own files): gathers the per-rank arrays and calls ``summary_from_arrays``."""
    tier_names = _tiers(tier_names)
    nt = len(tier_names)
    R = len(bds)
    E = len(eps)
    T = np.array([[d["time_s"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    P = {p: np.array([[d["phase_time_s"][p] for d in b["epochs"]] for b in bds]).reshape(R, E) for p in PHASES}
    RB = np.array([[d["read_bytes"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    RO = np.array([[d.get("shared_read_ops", 0) for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    S = np.array([[d["samples"] for d in b["epochs"]] for b in bds], dtype=np.float64).reshape(R, E)
    FS = np.array([[d["first_step_stall_s"] for d in b["epochs"]] for b in bds]).reshape(R, E)
    pro_t = np.array([b["prologue"]["time_s"] for b in bds], dtype=np.float64)
    bbt = np.zeros(nt, dtype=np.int64)
    pbbt = np.zeros(nt, dtype=np.int64)
    for b in bds:
        for d in b["epochs"]:
            bbt += np.asarray(d["bytes_by_tier"][:nt], dtype=np.int64)
        pbbt += np.asarray(b["prologue"]["bytes_by_tier"][:nt], dtype=np.int64)
    pro_phase = {p: np.array([b["prologue"]["phase_time_s"][p] for b in bds], dtype=np.float64) for p in PHASES}
    return summary_from_arrays(T, P, RB, S, pro_t, workload=workload, strategy=strategy, eps=eps,
                               ranks=ranks, nodes=nodes, tier_names=tier_names, bytes_by_tier=bbt,
                               prologue_bytes_by_tier=pbbt, prologue_phase_time_s=pro_phase,
                               first_step_stall_s=FS, read_requests=RO.sum(1), simulated=simulated)


def summary_from_arrays(T: np.ndarray, P: dict, read_bytes: np.ndarray, samples: np.ndarray,
                        prologue_time_s: np.ndarray, *, workload: str, strategy: str, eps: Sequence[int],
                        bytes_by_tier, prologue_bytes_by_tier, tier_names: Sequence[str],
                        ranks: int | None = None, nodes: int = 1, prologue_phase_time_s: dict | None = None,
                        first_step_stall_s: np.ndarray | None = None, read_requests: np.ndarray | None = None,
                        simulated: bool = False) -> dict:
    """The one definition of every summary number, for measured and simulated runs alike (``GLOSSARY``).

    ``T`` (R, E): each rank's epoch times; ``P``: phase -> (R, E) phase times (or (R,) totals over the
    epochs: ``plan`` and ``compute`` are also reported per epoch when given so); ``read_bytes``/``samples``
    (R, E) or (R,) per-rank totals; ``read_requests`` (R,); ``prologue_time_s`` (R,); ``bytes_by_tier``/``prologue_bytes_by_tier``: per tier,
    summed over ranks; ``first_step_stall_s`` (R, E) where recorded."""
    T = np.asarray(T, dtype=np.float64)
    R, E = T.shape
    ranks = R if ranks is None else int(ranks)

    def tot(x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x.sum(axis=1) if x.ndim == 2 else x.reshape(R)

    Pt = {p: tot(P.get(p, np.zeros(R))) for p in PHASES}
    Pc = np.asarray(P.get("compute", np.zeros(R)), dtype=np.float64)
    Tr = T.sum(axis=1)
    pro_t = np.asarray(prologue_time_s, dtype=np.float64).reshape(R)
    RB_in = np.asarray(read_bytes, dtype=np.float64)
    S_in = np.asarray(samples, dtype=np.float64)
    RB, S = tot(RB_in), tot(S_in)
    FS = np.zeros((R, E)) if first_step_stall_s is None else np.asarray(first_step_stall_s, dtype=np.float64)
    plan_p = np.asarray(P.get("plan", np.zeros((R, E))), dtype=np.float64)
    plan_p = plan_p if plan_p.ndim == 2 else np.zeros((R, E))
    pro_phase = prologue_phase_time_s or {}
    pr = {
        "total_epoch_time_s": Tr.tolist(),
        "prologue_time_s": pro_t.tolist(),
        "exposed_io_share": [_div(x, t) for x, t in zip(Pt["stall"], Tr)],
        "io_bound_share": [_div(sum(Pt[p][i] for p in IO_WAIT_PHASES), t) for i, t in enumerate(Tr)],
        "e2e_exposed_io_share": [_div(x + p, t + p) for x, t, p in zip(Pt["stall"], Tr, pro_t)],
        "read_share": [_div(x, t) for x, t in zip(Pt["read"], Tr)],
        "au": [_div(x, t) for x, t in zip(Pt["compute"], Tr)],
        "read_bytes": [int(x) for x in RB],
        "read_bandwidth_bytes_per_s": [_div(b, t) for b, t in zip(RB, Pt["read"])],
        "samples": [float(x) for x in S],
        "samples_per_s": [_div(n, t) for n, t in zip(S, Tr)],
        "phase_time_s": {p: Pt[p].tolist() for p in PHASES},
        "first_step_stall_s": FS.sum(1).tolist(),
    }

    def mean(x) -> float:
        return float(np.mean(x)) if len(x) else 0.0

    epoch_time = T.mean(axis=0) if R else np.zeros(E)
    prologue_time = mean(pro_t)
    total_samples = float(S.sum())
    summary = {
        "workload": workload, "strategy": strategy, "ranks": ranks, "nodes": int(nodes),
        "epochs": E, "epoch_ids": list(eps), "simulated": bool(simulated),
        "total_time_s": float(epoch_time.sum()) + prologue_time,
        "prologue_time_s": prologue_time,
        "epoch_time_s": epoch_time.tolist(),
        "epoch_time_max_s": (T.max(axis=0) if R else np.zeros(E)).tolist(),
        "exposed_io_share": mean(pr["exposed_io_share"]),
        "io_bound_share": mean(pr["io_bound_share"]),
        "e2e_exposed_io_share": mean(pr["e2e_exposed_io_share"]),
        "plan_time_s": (plan_p.mean(axis=0) if R else np.zeros(E)).tolist(),
        "read_share": mean(pr["read_share"]),
        "au": mean(pr["au"]),
        "samples": int(round(total_samples)),
        "samples_per_s": _div(total_samples, (T.max(axis=0).sum() if R else 0.0)),
        "read_bytes": int(RB.sum()),
        "shared_read_requests": int(np.asarray(read_requests).sum()) if read_requests is not None else None,
        "read_bandwidth_bytes_per_s": mean(pr["read_bandwidth_bytes_per_s"]),
        "aggregate_read_bandwidth_bytes_per_s": float(sum(pr["read_bandwidth_bytes_per_s"])),
        "bytes_by_tier": {n: int(v) for n, v in zip(tier_names, bytes_by_tier)},
        "prologue_bytes_by_tier": {n: int(v) for n, v in zip(tier_names, prologue_bytes_by_tier)},
        "phase_time_s": {p: mean(pr["phase_time_s"][p]) for p in PHASES},
        "phase_share": {p: mean([_div(x, t) for x, t in zip(Pt[p], Tr)]) for p in PHASES
                        if p not in OUTSIDE_EPOCH},
        "prologue_phase_time_s": {p: mean(np.asarray(pro_phase.get(p, np.zeros(R)), dtype=np.float64).reshape(R))
                                  for p in PHASES},
        "first_step_stall_s": (FS.mean(axis=0) if R else np.zeros(E)).tolist(),
        # per epoch (DLIO's summary.json): AU mean over ranks, samples and bytes read summed over ranks
        # (only where the phases are recorded per epoch: a measured run; the model gives totals per rank)
        "au_per_epoch": ([mean([_div(c, t) for c, t in zip(Pc[:, e], T[:, e])]) for e in range(E)]
                         if Pc.ndim == 2 else None),
        "samples_per_epoch": S_in.sum(axis=0).tolist() if S_in.ndim == 2 else None,
        "read_bytes_per_epoch": [int(x) for x in RB_in.sum(axis=0)] if RB_in.ndim == 2 else None,
        "imbalance": _div(Tr.max(), Tr.mean()) - 1.0 if R and Tr.mean() > 0 else 0.0,
        "per_rank": pr,
        "spread": {**{k: _stats(pr[k]) for k in ("total_epoch_time_s", "exposed_io_share", "io_bound_share", "e2e_exposed_io_share",
                                                 "read_share", "au", "read_bytes", "read_bandwidth_bytes_per_s",
                                                 "samples_per_s")},
                   "compute_s": _stats(pr["phase_time_s"]["compute"]), "samples": _stats(pr["samples"])},
        "definitions": dict(GLOSSARY),
    }
    return summary


# The glossary of every summary number: one meaning for measured and simulated runs (``dlbench report
# --explain`` prints it; docs/architecture.md repeats it).
GLOSSARY = {
    "phase_time": "length of the union of the phase's intervals (overlaps counted once); simulated: the "
                  "model's seconds of that phase per rank",
    "epoch_time": "per rank, epoch end - start (the prologue excluded); summary value: mean over ranks",
    "total_time": "sum of mean epoch times + mean prologue (stage) time",
    "exposed_io_share": "stall / epoch time per rank, mean over ranks (prologue excluded: see e2e)",
    "io_bound_share": "(stall + barrier + exchange) / epoch time per rank, mean over ranks: the trainer waiting "
                      "for data, its own next batch (stall), data-starved peers at the step barrier (barrier) and "
                      "its exchange; = 1 - AU - non-I/O overhead (transfer, checkpoint, verify, loop overhead). The "
                      "headline: at scale a rank's own stall can be small while it waits for peers",
    "e2e_exposed_io_share": "(stall + prologue) / (epoch time + prologue) per rank, mean over ranks: staging "
                            "before epoch 0 counted as exposed I/O",
    "read_share": "read time / epoch time per rank, mean over ranks (can exceed exposed share: reads overlap "
                  "compute)",
    "au": "compute / epoch time per rank, mean over ranks (DLIO's accelerator utilisation)",
    "phase_share": "each phase's time / epoch time per rank, mean over ranks",
    "read_bytes": "bytes delivered to the trainers by reads during the epochs, summed over ranks (prologue "
                  "bytes under prologue_bytes_by_tier)",
    "shared_read_requests": "read requests to the shared file system during the epochs, summed over ranks (a "
                            "run of consecutive samples read as one request counts once)",
    "bytes_by_tier": "read_bytes split by the tier they came from (shared FS, memory, local disk, peer), plus "
                     "under peer what background transfers between ranks moved during the epochs (pls's "
                     "exchange), summed over ranks",
    "prologue_bytes_by_tier": "bytes moved before epoch 0 (staging), by source tier, summed over ranks",
    "read_bandwidth": "read bytes / read time per rank, mean over ranks",
    "samples_per_s": "all samples / sum over epochs of the slowest rank's epoch time",
    "imbalance": "max over ranks / mean over ranks - 1 of total epoch time",
    "plan_time": "building each epoch's plan, before its epoch clock starts (not in epoch time)",
    "verify": "--verify's per-batch checks: a phase inside the epoch, between stall and compute",
    "first_step": "included in all figures; first_step_stall_s shows step 0's stall per epoch",
    "epoch_attribution": "intervals count toward the epoch they are tagged with",
    "s3": "the shared tier is S3: GET/PUT/HEAD/LIST/DELETE requests and bytes summed over ranks (every "
          "attempt counted, retries and 503 throttled replies also apart), requests_per_sample = GETs / "
          "delivered samples, and per GET the latency (request sent to last body byte) and time to first "
          "byte (to the first body bytes the client hands over: whole parts of up to 8 MiB, so equal to "
          "the latency for smaller objects) as P50/P95/P99 in ms over all GETs of all ranks, prologue "
          "included; cost_usd = GETs / 10^6 x the profile's pfs.usd_per_million_requests where it gives "
          "one; simulated (a pfs.kind: object_store profile): the plan's GETs of the shared tier, "
          "prologue included, and no latency percentiles (the model has one per-request latency, "
          "pfs.latency_s)",
    "simulated": "true: every number above is the performance model's, from the same plan a run executes",
    "transfer_exposed": "the part of the host-to-device copy (and input conversion) the compute waited for: "
                        "after the previous step's compute ended (all of it with --overlap off); counts against "
                        "AU",
    "transfer_overlapped": "the rest of the host-to-device copy: hidden behind the previous step's compute on "
                           "the device; reported, not counted against AU",
    "ceiling": "measured runs: samples per second when every rank replays the first steps of epoch 0's plan "
               "after the epochs, its shared tier read from memory (no PFS model, no compute), the first step "
               "left out: samples summed over ranks / the slowest rank's time; dlbench's own limit on this host",
    "headroom": "ceiling_samples_per_s / samples_per_s; under 1.25 (a run within 80 % of its ceiling) dlbench "
                "itself may be the limit",
    "eval": "DLIO's evaluation after an epoch (--dlio-config with workflow.evaluation): its files read and its "
            "eval_time slept per step, outside the epoch clock (not in epoch time or AU); eval_s per epoch",
}


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
    tier_names = _tiers(tier_names)
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


# `dlbench checkpoint`'s figures (checkpoint.json's summary and per_checkpoint; dlbench.checkpoint.aggregate),
# measured and simulated alike; docs/architecture.md's checkpoint table is this dictionary word for word
CHECKPOINT_GLOSSARY = {
    "stall_s": "per checkpoint, the slowest rank's training stall: the time the training loop waited for the "
               "save (sync: until durable; async: the snapshot into the staging buffer and the save call; "
               "both: plus any wait for the previous checkpoint)",
    "durable_s": "per checkpoint, the slowest rank's time from the save's start until its checkpoint is "
                 "published (every file and the folder fsync'd, renamed from .incomplete)",
    "bandwidth_bytes_per_s": "per checkpoint, bytes of every rank / durable_s; summary value: all bytes / sum "
                             "of durable_s; simulated (dlbench checkpoint --simulate, and simulate "
                             "--checkpoint-every's checkpoint_schedule): all bytes / the slowest node's "
                             "modelled time",
    "mlperf_mean_of_rates_bytes_per_s": "MLPerf Storage's figure, labelled as such: mean over checkpoints of "
                                        "(bytes / that checkpoint's time): not bytes over time",
    "step_inflation": "mean step time while an async save is in flight / mean step time with none",
    "generation_ratio": "content generation rate / write rate per rank (minimum over ranks); below 2 the "
                        "generator, not the storage, may bound the result",
}
