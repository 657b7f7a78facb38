"""Event-driven costing of a plan under the ``thesis-window`` contention rule (``ModelRules.gamma``): the
reference loop, a test oracle (imported by the tests as ``thesis_oracle``: this folder is on ``sys.path`` under
pytest; never by dlbench). The model costs with ``dlbench.simulate.fastevents.cost_events`` (the same order and
arithmetic, at any world size); this one is kept as the definition it is tested against
(tests/unit/test_simulate_fastevents.py and the other thesis-engine tests; benchmarks/thesis_scale.py times both).

The HDMLP thesis' reference simulator gives a PFS read that starts at time t on node n the bandwidth
min(b_fs, t(γ)/γ) with γ = 1 + the other nodes whose log of PFS reads holds a read that starts at or after
t (its test "a read within ±0.1 s" reduces to this: it bisects for the first logged read at or after t and
accepts it whatever its distance, provided the node's latest logged read is later than t − 0.1 s). The log is
built as the simulation proceeds, so γ depends on the order in which reads are *scheduled*, not only on
when they happen: reads a loader thread schedules ahead of time are logged at their (future) start, and a
node that schedules later sees them. This module reproduces that order:

- steps (global batches) one after the other; within a step the ranks in rank order;
- ``ondemand`` (``sync`` plans): within a step the reference serves one rank's whole local batch, then
  the next rank's (from the same barrier time): so rank 0 sees only the previous step's reads, rank 1 sees
  rank 0's reads of this step, and so on; a request is logged when it is issued and costs fetch + write +
  compute in series;
- ``prefetch``: every rank has ``threads`` loader threads (round robin, thread k takes accesses k, k+p, ...
  as they are scheduled) and a staging buffer of the profile's ``staging.capacity_bytes`` (shared by the
  node's ranks). At the start of a step the rank drops the previous step's samples from its buffer and
  schedules the next accesses of its stream, across epoch boundaries, while they fit; a read starts at
  max(step start, the thread's previous end) and costs fetch + write (``write: series``) or max(fetch,
  write). An access that fills a cache (``keep`` set) and comes from the PFS is read at γ = nodes (the
  reference's cache-fill threads use that fixed figure); other PFS reads use the window rule. Consumption:
  e_f = max(avail_f, e_{f−1}) + compute_f, barrier after every step.

- ``plan.peer_tier == LOCAL`` (model option ``cache_on_local_tier``): the caches are on the
  node-local tier, so a peer read costs s / min(b_c, r_local) (the reference's remote read from a peer's SSD)
  instead of the fastest tier's rate.
- ``prefetch`` with ``plan.shared_reads_in_trainer`` (model option ``shared_reads_in_trainer``,
  ``trainer_reads_shared``): the loader threads read ahead only the accesses the plan serves from a tier or a
  peer; an access from the PFS is not scheduled (it takes no buffer room and no thread time, though the
  round robin moves past it and the buffer test still weighs its size, as the reference's
  ``StagingPoolPrefetcher`` with ``pfs_prefetch`` off: its DeepIO policy) and the trainer reads it when it
  gets there: at e, γ by the window rule at e (logged at e), fetch + write in series with compute.

- background transfers (pls's exchange; the reference has none): as the default model has it, a rank's
  step ends no earlier than the step's start + the bytes it sends at that step / b_c, and its trainer also pays
  the exchange's local-tier files (reads of what it sends, writes of what it receives) after the step's
  samples; both counted as stall (the event costing reports no separate exchange time).

Not modelled from the reference: its request-time alternative (fetch a not-yet-buffered sample directly
when that is sooner), its loader-thread counter shared by all nodes, its buffer's bookkeeping quirks (a sample
buffered twice is counted once), and its γ test on unsorted logs (``Statistics.get_pfs_clients`` bisects each
node's logs as if sorted and tests the last entry appended; HDMLP's tier fills are logged out of time order, so
its HDMLP runs up to ~2 % faster than under the reduction above: docs/evidence/issue-19.md). Cost: a Python
loop over steps × (accesses per rank) with W-wide NumPy comparisons: meant for the thesis' scale (a few nodes,
~10^6 accesses), refused past
``MAX_RANKS`` ranks or ``MAX_ACCESSES`` accesses.
"""

from __future__ import annotations

import numpy as np

from dlbench.errors import ConfigError
from dlbench.plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED, Plan
from dlbench.simulate.events_reads import exchange_per_step
from dlbench.storage.tiers import TIER_NAMES

MAX_RANKS = 256
MAX_ACCESSES = 50_000_000


def _streams(plan: Plan, sizes: np.ndarray):
    """Every rank's accesses over all epochs, flattened: (ids, src, fill, step) per rank, and the global
    step count; ``step`` is the global step index (epoch offsets added)."""
    W = plan.world_size
    parts = [[] for _ in range(W)]
    step0 = 0
    epoch_steps = []
    for e in range(plan.epochs):
        ep = plan.epoch(e)
        keep = ep.keep
        for r in range(W):
            n = int(ep.bounds[r, -1])
            lo = int(ep.bounds[r, 0])
            ids = ep.sample_ids[r, lo:n]
            ok = ids >= 0
            src = ep.source[r, lo:n]
            kp = keep[r, lo:n] if keep is not None else np.full(n - lo, NO_TIER, np.uint8)
            cols = np.arange(lo, n)
            st = np.searchsorted(ep.bounds[r], cols, side="right") - 1 + step0
            parts[r].append((ids[ok], src[ok], kp[ok], st[ok]))
        epoch_steps.append(ep.steps)
        step0 += ep.steps
    out = []
    for r in range(W):
        ids = np.concatenate([p[0] for p in parts[r]]) if parts[r] else np.zeros(0, np.int64)
        src = np.concatenate([p[1] for p in parts[r]]) if parts[r] else np.zeros(0, np.uint8)
        fill = np.concatenate([p[2] for p in parts[r]]) if parts[r] else np.zeros(0, np.uint8)
        st = np.concatenate([p[3] for p in parts[r]]) if parts[r] else np.zeros(0, np.int64)
        out.append((ids, src, fill, st))
    return out, step0, epoch_steps


def check_event_size(plan: Plan) -> None:
    W = plan.world_size
    if W > MAX_RANKS:
        raise ConfigError(f"rules.gamma=thesis-window: {W:,} ranks; the event-driven costing takes at most "
                          f"{MAX_RANKS} (use gamma: threads or nodes for large worlds)")
    n = plan.n_samples * plan.epochs
    if n > MAX_ACCESSES:
        raise ConfigError(f"rules.gamma=thesis-window: {n:,} accesses (samples x epochs); the event-driven "
                          f"costing takes at most {MAX_ACCESSES:,} (use gamma: threads or nodes)")


def cost_events(model, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank: float | None,
                t0: float, tier_fill: bool = False):
    """(epoch_times, compute, stall, barrier, fetch_s_by_tier, bytes_by_tier, samples) of ``plan`` under
    the thesis-window rule; ``t0``: when epoch 0 starts (after the prologue). ``tier_fill`` (prefetch
    only): the plan's cache fills (every access with ``keep``, whether the plan reads it from the PFS or
    from a peer) are read ahead from the PFS by the node's tier threads (the profile's ``tiers[].threads``,
    split over the node's ranks) in the plan's order from t0, at γ = nodes, each followed by its write, as
    HDMLP's tier prefetchers do (the reference's ``FrequencyPrefetcher.fill_buffers`` reads every sample of
    its tiers from the PFS, peers or not); the loader reads such a sample (and every later own-tier access
    of it) from the own tier once its fill is done, else from its planned source: the peer the plan names,
    else the PFS (window rule)."""
    check_event_size(plan)
    trainer_shared = policy == "prefetch" and plan.shared_reads_in_trainer
    p = model.p
    rules = model.rules
    W = plan.world_size
    node_of = [int(x) for x in plan.node_map]
    nodes = plan.nodes
    K = max(1, W // max(nodes, 1))
    spb = model.fetch_s_per_byte(nodes, p.staging.threads)      # non-PFS tiers (PFS replaced below)
    w_spb = p.staging_write_s_per_byte()
    series = rules.write == "series"
    lat = p.pfs.latency_s if p.pfs else 0.0
    # seconds per byte of a PFS read by γ = 1..nodes
    pfs_spb = [0.0] + [1.0 / float(p.pfs_per_client(g)) for g in range(1, nodes + 1)]
    fill_spb = pfs_spb[nodes]
    streams, total_steps, epoch_steps = _streams(plan, sizes)
    XS = np.zeros((total_steps, W))      # pls: per global step and rank, the exchange's network seconds
    TIO = np.zeros((total_steps, W))     # and its local-tier file seconds on the trainer's path
    j0 = 0
    for e in range(plan.epochs):
        ex = exchange_per_step(model, plan.epoch(e), sizes, W)
        if ex is not None:
            XS[j0:j0 + epoch_steps[e]] = ex[0].T
            TIO[j0:j0 + epoch_steps[e]] = ex[1].T
        j0 += epoch_steps[e]
    comp_spb = model.compute_s_per_byte
    fill_starts: dict = {}
    step_time = model.step_time_s
    lb = plan.local_batch

    # per rank: python lists for the hot loop
    S, SRC, FILL, ST, COMP, IDS, KEEP = [], [], [], [], [], [], []
    step_start = []
    ready = []
    for r in range(W):
        ids, src, kp, st = streams[r]
        s = sizes[ids].astype(np.float64)
        fill = (kp != NO_TIER) & (src == SHARED)
        S.append(s.tolist())
        SRC.append(src.astype(np.int64).tolist())
        FILL.append(fill.tolist())
        IDS.append(ids.tolist())
        KEEP.append(kp.astype(np.int64).tolist())
        if tier_fill and policy == "prefetch":
            rd = np.full(len(sizes), np.inf)
            for code, kind in ((MEMORY, "memory"), (LOCAL, "local")):
                tier = next((t for t in p.tiers if t.kind == kind), None)
                sel = np.nonzero(kp == code)[0]     # every cached sample, whatever its first access's source
                if not len(sel):
                    continue
                thr = max(1, int((tier.threads if tier is not None else 1) // K))
                cost = s[sel] * (fill_spb + w_spb) + lat
                pad = (-len(cost)) % thr
                c = np.concatenate([cost, np.zeros(pad)]).reshape(-1, thr)
                done = (t0 + np.cumsum(c, axis=0)).reshape(-1)[:len(cost)]
                starts = done - cost
                rd[ids[sel]] = np.minimum(rd[ids[sel]], done)
                nd = int(plan.node_map[r])
                fill_log_start = float(starts.max())
                fill_starts[nd] = max(fill_starts.get(nd, -np.inf), fill_log_start)
            ready.append(rd.tolist())
        ST.append(st)
        COMP.append((np.full(len(s), step_time / lb) if step_time is not None else s * comp_spb).tolist())
        step_start.append(np.searchsorted(st, np.arange(total_steps + 1), side="left").tolist())
    fixed_spb = [float(spb[c]) if c != SHARED else 0.0 for c in range(len(TIER_NAMES))]
    if plan.peer_tier == LOCAL:    # peers serve from their node-local tier: min(b_c, r_local)
        fixed_spb[PEER] = max(1.0 / p.network_bytes_per_s, float(spb[LOCAL]))

    compute = np.zeros(W)
    stall = np.zeros(W)
    barrier = np.zeros(W)
    fetch_t = np.zeros((W, len(TIER_NAMES)))
    # bytes by the tier each fetch is charged to (a tier-filled access whose fill is not done is read from the
    # PFS, and counted there): per rank a python list, added to in the loops below
    bytes_l = [[0.0] * len(TIER_NAMES) for _ in range(W)]
    samples = np.zeros(W)
    for r in range(W):
        compute[r] = float(np.sum(COMP[r]))
        samples[r] = len(S[r])
    log = [-np.inf] * nodes          # latest logged PFS-read start per node
    for nd, t in fill_starts.items():   # the tier threads' reads are all scheduled (logged) at the start
        log[nd] = t
    use_ready = bool(ready)
    B = t0
    step_end = np.zeros(total_steps)

    fixed_gamma = {"nodes": nodes, "threads": None}.get(rules.gamma)
    if rules.gamma == "threads":
        raise ConfigError("the event-driven costing counts γ by nodes (thesis-window or nodes), not threads")

    def gamma(node: int, t: float) -> int:
        if fixed_gamma is not None:
            return fixed_gamma
        g = 1
        for m in range(nodes):
            if m != node and log[m] >= t:
                g += 1
        return g

    if policy == "ondemand":
        for j in range(total_steps):
            pos = [step_start[r][j] for r in range(W)]
            end = [step_start[r][j + 1] for r in range(W)]
            t = [B] * W
            for r in range(W):
                nd = node_of[r]
                tr = B
                Sr, SRCr, FILLr, Cr, br = S[r], SRC[r], FILL[r], COMP[r], bytes_l[r]
                for f in range(pos[r], end[r]):
                    s = Sr[f]
                    c = SRCr[f]
                    if c == SHARED:
                        g = nodes if FILLr[f] else gamma(nd, tr)
                        fetch = s * pfs_spb[g] + lat
                        if tr > log[nd]:
                            log[nd] = tr
                    else:
                        fetch = s * fixed_spb[c]
                    io = fetch + s * w_spb
                    fetch_t[r, c] += fetch
                    br[c] += s
                    stall[r] += io
                    tr += io + Cr[f]
                x = TIO[j, r]           # pls: the exchange's files, then its sends (from the step's start)
                if x:
                    stall[r] += x
                    tr += x
                x = B + XS[j, r]
                if x > tr:
                    stall[r] += x - tr
                    tr = x
                t[r] = tr
            Bn = max(t) if W else B
            for r in range(W):
                barrier[r] += Bn - t[r]
            B = Bn
            step_end[j] = B
    else:
        p_thr = max(1, int(round(threads_per_rank or 1)))
        cap = float(p.staging.capacity_bytes) / K
        free = [[t0] * p_thr for _ in range(W)]
        counter = [0] * W
        nxt = [0] * W
        held = [0.0] * W
        avail = [np.zeros(len(S[r])).tolist() for r in range(W)]
        n_acc = [len(S[r]) for r in range(W)]
        # the bytes each access holds in the staging buffer (0: read by the trainer, never buffered)
        BUF = [[0.0 if trainer_shared and c == SHARED else s for s, c in zip(S[r], SRC[r])] for r in range(W)]
        fetch_tr = np.zeros(W)      # the trainer's own PFS fetch seconds (not shared by the loader threads)
        for j in range(total_steps):
            for r in range(W):
                if j > 0:   # the previous step's samples leave the buffer
                    a, b = step_start[r][j - 1], step_start[r][j]
                    held[r] -= sum(BUF[r][a:b])
                must = step_start[r][j + 1]     # the current step is scheduled whatever the capacity
                f = nxt[r]
                nd = node_of[r]
                Sr, SRCr, FILLr, fr, av, br = S[r], SRC[r], FILL[r], free[r], avail[r], bytes_l[r]
                if use_ready:
                    rdy, IDr, KPr = ready[r], IDS[r], KEEP[r]
                while f < n_acc[r] and (f < must or held[r] + Sr[f] <= cap):
                    k = counter[r]
                    st = fr[k] if fr[k] > B else B
                    s = Sr[f]
                    c = SRCr[f]
                    if trainer_shared and c == SHARED:      # the trainer reads it (consumption below)
                        f += 1
                        counter[r] = (k + 1) % p_thr
                        continue
                    if use_ready and (c == MEMORY or c == LOCAL or KPr[f] != NO_TIER):
                        # filled by the tier threads: own tier once done, else the planned peer or the PFS
                        tier_code = c if (c == MEMORY or c == LOCAL) else KPr[f]
                        if rdy[IDr[f]] <= st:
                            c = tier_code
                            fetch = s * fixed_spb[c]
                        elif c == PEER:
                            fetch = s * fixed_spb[c]
                        else:
                            c = SHARED
                            g = gamma(nd, st)
                            fetch = s * pfs_spb[g] + lat
                            if st > log[nd]:
                                log[nd] = st
                    elif c == SHARED:
                        g = nodes if FILLr[f] else gamma(nd, st)
                        fetch = s * pfs_spb[g] + lat
                        if st > log[nd]:
                            log[nd] = st
                    else:
                        fetch = s * fixed_spb[c]
                    wr = s * w_spb
                    cost = fetch + wr if series else (fetch if fetch > wr else wr)
                    fetch_t[r, c] += fetch
                    br[c] += s
                    fr[k] = st + cost
                    av[f] = st + cost
                    held[r] += s
                    f += 1
                    counter[r] = (k + 1) % p_thr
                nxt[r] = f
            Bn = B
            ends = [B] * W
            for r in range(W):
                e = B
                a, b = step_start[r][j], step_start[r][j + 1]
                av, cm, SRCr = avail[r], COMP[r], SRC[r]
                wait = 0.0
                nd = node_of[r]
                for f in range(a, b):
                    if trainer_shared and SRCr[f] == SHARED:
                        s = S[r][f]
                        g = nodes if FILL[r][f] else gamma(nd, e)
                        fetch = s * pfs_spb[g] + lat
                        if e > log[nd]:
                            log[nd] = e
                        io = fetch + s * w_spb
                        fetch_tr[r] += fetch
                        bytes_l[r][SHARED] += s
                        wait += io
                        e += io
                    elif av[f] > e:
                        wait += av[f] - e
                        e = av[f]
                        if SRCr[f] == SHARED and e > log[nd]:
                            log[nd] = e      # a request that waited on a PFS read is logged then
                    e += cm[f]
                x = TIO[j, r]           # pls: the exchange's files, then its sends (from the step's start)
                if x:
                    wait += x
                    e += x
                x = B + XS[j, r]
                if x > e:
                    wait += x - e
                    e = x
                stall[r] += wait
                ends[r] = e
                if e > Bn:
                    Bn = e
            for r in range(W):
                barrier[r] += Bn - ends[r]
            B = Bn
            step_end[j] = B
        fetch_t /= p_thr
        fetch_t[:, SHARED] += fetch_tr
    # epoch times from the step ends
    epoch_times = np.zeros(plan.epochs)
    prev = t0
    k = 0
    for e, ns in enumerate(epoch_steps):
        if ns:
            k += ns
            epoch_times[e] = step_end[k - 1] - prev
            prev = step_end[k - 1]
    fetch_by = {n: fetch_t[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    bytes_t = np.asarray(bytes_l, dtype=np.float64).reshape(W, len(TIER_NAMES))
    bytes_by = {n: bytes_t[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    return epoch_times, compute, stall, barrier, fetch_by, bytes_by, samples
