"""The performance model (HDMLP thesis / NoPFS paper; docs/STRATEGIES.md "The performance model"), costing a
strategy's ``Plan`` with NumPy over (ranks × samples) per epoch — no Python loop per sample or per step
(except under the ``thesis-window`` rule, below).

Per rank and access f (s = the sample's bytes):

- fetch cost by the plan's source tier:
  PFS  s / min(b_fs, t(γ)/γ), γ = concurrent PFS clients (rule ``gamma``, below);
  peer s / min(b_c, r_j); local tier j  s / r_j, with r_j = r_j(p_j)/p_j per thread (rule ``tier_read:
  per-thread``) or the tier's full r_j(p_j) (``full``);
- copy into the staging buffer w = max(s/β, s/(r_0(p_0)/p_0));
- consumption s / c (profile ``compute_mb_per_s``) or the workload's step time spread over the batch;
- after every global batch all ranks wait for the slowest (barrier).

Rule sets (``ModelRules``: the profile's ``rules:`` key, a study's ``rules:``, ``simulate --rules``). The
default is the physical reading; ``thesis`` is what the thesis' reference simulator does, which is what its
published runtimes come from:

| rule | default | thesis |
|---|---|---|
| ``gamma`` | ``threads``: γ = nodes × the PFS requests a node has in flight (a synchronous rank: 1; a prefetching rank: its loader threads) | ``thesis-window``: γ = 1 + other nodes whose log holds a PFS read starting at or after t |
| ``write`` | ``overlap``: a thread copies f while fetching f+1: max(fetch, w) | ``series``: fetch + w |
| ``tier_read`` | ``per-thread``: r(p)/p | ``full``: r(p) for every thread |
| ``prologue`` | ``overlap``: max(PFS read, receive, write) | ``series``: per tier thread, PFS reads at γ = nodes, then peer copies, each + w |

(``gamma: nodes`` is a third choice: γ = the nodes.) ``thesis-window`` depends on the order in which the
reference schedules reads, so it is costed event by event (``fastevents.py``; the reference loop, ``tests/unit/thesis_oracle.py``:
per node, loader threads as servers, the staging buffer's capacity, the nodes' logs of PFS reads); the rest
stays vectorised. On the
thesis' Scenario 2 the default rules make the staging-pool row 7.5 % faster than published (8 clients share
t(8) and the copy overlaps) and the thesis rules reproduce all ten rows within 0.4 %
(configs/studies/hdmlp-thesis-s2.yaml). Per-row model options (``core.MODEL_OPTIONS``) carry two policy
details of the reference a plan does not: tier threads filling caches ahead of the loader (HDMLP) and a
staging prologue that copies peers' pieces until the tier is full (its Parallel Data Staging).

Policies (how fetches relate to consumption):

- ``lowerbound``: every sample available at t = 0: runtime = Σ_batches max_rank Σ s/c.
- ``ondemand`` (naive): the rank asks for sample f when it is done with f−1; fetch, copy and compute run in
  series: per access fetch + w + s/c.
- ``prefetch`` (staging pool / double buffering, and every strategy reading local copies): p_0 threads per
  node fetch the rank's samples in access order, round robin, from the epoch's start; a thread copies
  sample f into the buffer while it fetches f+1 (``write_overlap``, default) so a thread's time per access
  is max(fetch, w); with ``write_overlap=False`` it is fetch + w. avail(f) = epoch start + the thread's
  cumulative time; consumption e_f = max(avail(f), e_{f−1}) + s/c. The buffer capacity is not enforced
  (producers never wait for space): exact when the producer is the bottleneck, optimistic otherwise.

Vectorisation: within a global batch j a rank finishes at T_rj = Cb_rj + max(B_{j−1}, M_rj) with Cb the
batch's compute and M_rj = max_f (avail_f − compute before f in the batch); the barrier gives
B_j = max_r T_rj = max(B_{j−1} + max_r Cb_rj, max_r (Cb_rj + M_rj)), a max-plus recurrence solved for all
steps at once with cumulative sums and ``np.maximum.accumulate``.

Prologue (staging, local, pls, preloading caches), ``prologue: overlap``: each node reads its piece from
the PFS with its tiers' threads, receives the rest over the network (staging: all-gather) and writes into
its tiers; the three overlap, so the prologue takes max over nodes of max(PFS read, network receive,
slowest tier write). ``prologue: series``: ``Model._prologue_series``.
PLS exchange (rule ``exchange``): ``series`` (default): the samples sent at step i move inside the MPI
wait after the step (an MPI without an asynchronous progress thread, as mpich by default, moves rendezvous
messages only inside MPI calls), so the step lasts its own time + sent bytes / the profile's
``exchange_mb_per_s`` (measured with sample-sized messages both ways; b_c without it); ``overlap`` (thesis):
the transfer overlaps the step, which lasts at least the transfer. With a local (file) tier the trainer also
reads the samples it sends from their files before posting and writes the ones it receives as files after
the step, in series with the step (``_exchange_tier_io_s``). With ``series``, a local tier and the profile's
``exchange_sample_s`` (measured through the ``Exchange`` stage itself: file reads, Isend/Irecv, the wait,
file writes and unlinks on two ranks), each sample a rank sends or receives in a step costs
``exchange_sample_s`` on top of its sent bytes / ``exchange_mb_per_s``, instead of the tier's file
read/write pieces (which that figure contains). All of it is reported as ``exchange``.

Measured mechanisms (optional profile figures, ``dlbench calibrate-storage``; docs/evidence/issue-19-real-vs-sim.md;
priced by the vectorised costing: the ``thesis-window`` event costing keeps the reference simulator's prices):

- page cache: a local tier whose files fit every node's ``page_cache_bytes`` (``local_tier_cached``) is read
  at its ``cached_bandwidth`` curve: the files were just written by the prologue or an exchange;
- the format reader: a PFS request lasts at least ``pfs.open_s + s / pfs.cached_mb_per_s`` (HDF5's open and
  parse; the emulated PFS runs the real read inside the modelled interval, so the longer of the two counts);
- loader worker start: a DataLoader without persistent workers starts them every epoch; its first read
  begins ``worker_start_s`` after the epoch's start;
- DataLoader hand-off: a prefetch loader with worker processes (with or without persistent workers) costs
  the trainer ``loader_batch_s`` per step (in series, counted as stall) and the worker
  ``loader_worker_batch_s`` per batch on top of its reads;
- wake-up latency: a training step (the workload's step time) and a PFS request are blocking waits, which
  on a loaded host end ``wake_latency(wait)`` late (the sleep a benchmark step is, an accelerator's
  synchronisation, a read the emulated PFS holds or a file system answers); reads of a local or memory
  tier are memory copies from the page cache, not waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..plan import LOCAL, MEMORY, PEER, SHARED, Plan
from ..storage.tiers import TIER_NAMES
from ..system import ModelRules, SystemProfile, rules_from

POLICIES = ("lowerbound", "ondemand", "prefetch")


@dataclass
class Costing:
    """What the model says about one plan: times in seconds, per rank where it matters."""

    strategy: str
    ranks: int
    nodes: int
    epochs: int
    prologue_s: float
    epoch_time_s: np.ndarray            # (E,)
    compute_s: np.ndarray               # (W,) over all epochs
    stall_s: np.ndarray                 # (W,) waiting for data
    barrier_s: np.ndarray               # (W,) waiting for the slowest rank
    exchange_s: np.ndarray              # (W,) exposed exchange time (pls)
    fetch_s_by_tier: dict               # tier name -> (W,) thread-busy seconds fetching
    bytes_by_tier: dict                 # tier name -> (W,) bytes
    samples: np.ndarray                 # (W,) samples consumed
    notes: list = field(default_factory=list)
    shared_requests: np.ndarray | None = None   # (W,) PFS requests (a chunk's covered columns not counted), if known

    @property
    def total_time_s(self) -> float:
        return float(self.prologue_s + self.epoch_time_s.sum())


class Model:
    """Costs plans on one system. ``compute_s_per_byte`` (1/c) or ``step_time_s`` (per local batch) give
    the consumption time; ``staging_threads`` overrides p_0."""

    def __init__(self, profile: SystemProfile, *, compute_s_per_byte: float | None = None,
                 step_time_s: float | None = None, write_overlap: bool | None = None,
                 rules: ModelRules | str | dict | None = None):
        self.p = profile
        r = rules_from(rules if rules is not None else profile.rules)
        if write_overlap is not None and not write_overlap:   # --serial-write
            import dataclasses

            r = dataclasses.replace(r, write="series")
        self.rules = r
        if compute_s_per_byte is None and step_time_s is None:
            if profile.compute_mb_per_s is None:
                raise ConfigError(f"system profile {profile.name}: no compute_mb_per_s; give the workload's "
                                  f"step time (--accelerator) instead")
            compute_s_per_byte = 1.0 / (profile.compute_mb_per_s * 1e6)
        self.compute_s_per_byte = compute_s_per_byte
        self.step_time_s = step_time_s
        self.write_overlap = r.write == "overlap"

    # ----- per-tier seconds per byte ------------------------------------------------------------------
    def fetch_s_per_byte(self, nodes: int, pfs_threads_per_node: float, local_cached: bool = False) -> np.ndarray:
        """Seconds per byte for each plan tier code (SHARED, LOCAL, MEMORY, PEER); ``pfs_threads_per_node``:
        the PFS requests a node has in flight at once (γ = nodes × that under the default rule);
        ``local_cached``: the local tier is read at its page-cache curve (``local_tier_cached``)."""
        p = self.p
        out = np.full(len(TIER_NAMES), np.inf)
        gamma = nodes * pfs_threads_per_node if self.rules.gamma == "threads" else nodes
        out[SHARED] = 1.0 / p.pfs_per_client(gamma)
        for code, kind in ((LOCAL, "local"), (MEMORY, "memory")):
            t = next((t for t in p.tiers if t.kind == kind), None)
            if t is not None:
                cached = local_cached and code == LOCAL
                out[code] = 1.0 / (p.tier_per_thread(t, p.staging.threads, cached=cached)
                                   if self.rules.tier_read == "per-thread" else p.tier_aggregate(t, cached=cached))
        fastest = min(out[LOCAL], out[MEMORY])
        out[PEER] = max(1.0 / p.network_bytes_per_s, fastest) if np.isfinite(fastest) else 1.0 / p.network_bytes_per_s
        return out

    def local_tier_cached(self, plan: Plan, sizes: np.ndarray) -> bool:
        """Whether the local tier is read from the page cache: the profile has the tier's
        ``cached_bandwidth`` and ``page_cache_bytes``, the plan uses the tier, and every node's files on it fit
        its page cache. A node's files: those the prologue stores on its local tier (staging's all-gather: every
        staged sample, as peer rows), and in each epoch the distinct samples its ranks read from the tier (pls's moves
        replace a sent file by a received one: the count stays). The files were just written (staged, filled
        or received), so they sit in the page cache until memory runs short: a node whose files fit reads them
        from memory (calibrate-storage measures both curves, the cold one with O_DIRECT). Cheap first: when the
        whole dataset fits, no node's files can exceed it."""
        p = self.p
        t = next((t for t in p.tiers if t.kind == "local"), None)
        if t is None or not t.cached_bandwidth or p.page_cache_bytes is None:
            return False
        cap = float(p.page_cache_bytes)
        fits = float(sizes.sum()) <= cap

        def over(node: np.ndarray, sample: np.ndarray) -> bool:
            """Whether some node's distinct samples exceed the page cache. Without duplicates first (one
            bincount: when that fits, the distinct ones do); the exact count only for a node over it, one node
            at a time, stopping at the first over."""
            bound = np.bincount(node, weights=sizes[sample], minlength=plan.nodes)
            for nd in np.nonzero(bound > cap)[0].tolist():
                if float(sizes[np.unique(sample[node == nd])].sum()) > cap:
                    return True
            return False

        pro = plan.prologue
        staged = pro.dst == LOCAL if len(pro.sample) else np.zeros(0, dtype=bool)
        used = bool(staged.any())
        if used:    # the rows name the receiving rank (staging's all-gather: peer rows to every node)
            if fits:
                return True
            if over(plan.node_map[pro.rank[staged]].astype(np.int64), pro.sample[staged]):
                return False
        rank_node = plan.node_map.astype(np.int64)
        for e in range(plan.epochs):     # each epoch built once (the costing builds it again)
            ep = plan.epoch(e)
            m = (ep.source == LOCAL) & (ep.sample_ids >= 0)
            if not m.any():
                continue
            used = True
            if fits:
                return True
            if over(rank_node[np.nonzero(m)[0]], ep.sample_ids[m]):
                return False
        return used

    # ----- prologue ----------------------------------------------------------------------------------
    def prologue_s(self, plan: Plan, sizes: np.ndarray, fill_to_capacity: bool = False) -> float:
        pro = plan.prologue
        if len(pro.sample) == 0:
            return 0.0
        if self.rules.prologue == "series" or fill_to_capacity:
            return self._prologue_series(plan, sizes, fill_to_capacity)
        p = self.p
        nodes = plan.nodes
        node = plan.node_map[pro.rank]
        s = sizes[pro.sample]
        tier_threads = sum(t.threads for t in p.tiers) or p.staging.threads
        per_thread = p.pfs_per_client(nodes * tier_threads)
        from_pfs = pro.src == SHARED
        read_s = np.bincount(node[from_pfs], weights=s[from_pfs], minlength=nodes) / (per_thread * tier_threads)
        # the peer rows (staging's distribution): what a node receives from other nodes crosses the network;
        # every row, read or received, is written into the receiver's tier
        moved = pro.src == PEER
        sender = plan.node_map[np.where(moved, pro.peer, pro.rank)]
        net = moved & (sender != node)
        recv_s = np.bincount(node[net], weights=s[net], minlength=nodes) / p.network_bytes_per_s
        stored_b = {}
        for code in (MEMORY, LOCAL):
            sel = pro.dst == code
            stored_b[code] = np.bincount(node[sel], weights=s[sel], minlength=nodes)
        write_s = np.zeros(nodes)
        for code, kind in ((MEMORY, "memory"), (LOCAL, "local")):
            t = next((t for t in p.tiers if t.kind == kind), None)
            if t is None:
                continue
            # w(p) of the tier's threads; r(p) without a write curve
            rate = p.tier_write_aggregate(t) if t.write_bandwidth else p.tier_per_thread(t) * t.threads
            write_s = np.maximum(write_s, stored_b[code] / rate)
        return float(np.max(np.maximum(np.maximum(read_s, recv_s), write_s)))

    def _prologue_series(self, plan: Plan, sizes: np.ndarray, fill_to_capacity: bool) -> float:
        """The thesis' staging (``prologue: series``): per node, the destination tier's threads take the
        node's rows round robin; a PFS row costs s / min(b_fs, t(N)/N) + w (γ = the N nodes), then each
        sample received from peers (the plan's peer rows) costs s / min(b_c, r_dst(p)) + w. ``fill_to_capacity``: the
        node also copies other nodes' pieces from its peers until its destination tier is full (the
        reference's Parallel Data Staging, whose training then draws only from the own piece): whole samples
        in id order up to the first that does not fit, in the plan's capacity where smaller than the tier's."""
        p = self.p
        pro = plan.prologue
        nodes = plan.nodes
        node = plan.node_map[pro.rank]
        s = sizes[pro.sample]
        w = p.staging_write_s_per_byte()
        pfs = 1.0 / float(p.pfs_per_client(nodes))
        out = 0.0
        for nd in range(nodes):
            t_nd = 0.0
            for code, kind in ((MEMORY, "memory"), (LOCAL, "local")):
                tier = next((t for t in p.tiers if t.kind == kind), None)
                sel = (node == nd) & (pro.dst == code)
                if not sel.any():
                    continue
                thr = tier.threads if tier is not None else p.staging.threads
                rate = (p.tier_aggregate(tier) if tier is not None else p.network_bytes_per_s)
                peer = 1.0 / min(p.network_bytes_per_s, rate)
                rd = sel & (pro.src == SHARED)
                ss = s[rd]
                cost = ss * (pfs + w)
                if self.p.pfs is not None and self.p.pfs.latency_s:
                    cost = cost + self.p.pfs.latency_s
                per_thread = np.bincount(np.arange(len(ss)) % thr, weights=cost, minlength=thr)
                own_b = float(ss.sum())
                # samples received from peers (the plan's peer rows: staging's distribution), spread over the
                # tier's threads
                recv_b = float(s[sel & (pro.src == PEER)].sum())
                if not recv_b and fill_to_capacity and tier is not None:
                    # whole samples not staged from the PFS, in id order, until the first that does not fit
                    node_cap = plan.capacity.capacity_per_node_bytes
                    cap = min(tier.capacity_bytes, float(node_cap) if node_cap is not None else np.inf)
                    held = np.zeros(len(sizes), dtype=bool)
                    held[pro.sample[node == nd]] = True
                    cand = np.cumsum(sizes[~held])
                    recv_b = float(cand[np.searchsorted(cand, cap - own_b, side="right") - 1]) \
                        if len(cand) and cand[0] <= cap - own_b else 0.0
                t_nd = max(t_nd, float(per_thread.max()) + recv_b * (peer + w) / thr)
            out = max(out, t_nd)
        return out

    # ----- one epoch ---------------------------------------------------------------------------------
    def cost(self, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank: float | None = None,
             fill_to_capacity: bool = False, tier_fill: bool = False, worker_restart: bool = False,
             loader_handoff: bool = False) -> Costing:
        """``threads_per_rank``: loader threads of a prefetching plan (default: the profile's p_0 over the
        node's ranks). ``fill_to_capacity``: see ``_prologue_series``; ``tier_fill``: cache fills read
        ahead by the tiers' threads (``fastevents.cost_events``; thesis-window rule only). ``worker_restart``:
        the loader's worker processes start anew every epoch (a DataLoader without persistent_workers): its
        first read starts the profile's ``worker_start_s`` after the epoch's start. ``loader_handoff``: the
        loader hands every batch from a worker process to the trainer (a DataLoader with workers): each
        step costs the trainer the profile's ``loader_batch_s`` (exposed, counted as stall) and the worker
        ``loader_worker_batch_s`` on top of the batch's reads (spread over its samples)."""
        if policy not in POLICIES:
            raise ConfigError(f"policy {policy!r}: choose one of {', '.join(POLICIES)}")
        sizes = np.asarray(sizes, dtype=np.float64)
        if self.rules.gamma == "thesis-window" and policy != "lowerbound":
            return self._cost_events(plan, sizes, policy, threads_per_rank, fill_to_capacity, tier_fill)
        if tier_fill and policy != "lowerbound":
            raise ConfigError("model option fill_by_tier_threads: needs rules.gamma=thesis-window (the event-driven "
                              "costing); the vectorised model has the loader deliver and keep every fill")
        W, nodes, E = plan.world_size, plan.nodes, plan.epochs
        K = max(1, W // max(nodes, 1))
        p0 = self.p.staging.threads
        if threads_per_rank is None:
            threads_per_rank = p0 / K
        # PFS clients per node: the requests a node's ranks have in flight at once — one per rank for a
        # synchronous loader (naive, sync executors), the loader threads for a prefetching one
        clients_per_node = K * (1.0 if policy == "ondemand" else float(threads_per_rank))
        local_cached = self.local_tier_cached(plan, sizes)
        spb = self.fetch_s_per_byte(nodes, clients_per_node, local_cached)
        w_spb = self.p.staging_write_s_per_byte()
        has_floor = self.p.pfs is not None and (self.p.pfs.open_s is not None or self.p.pfs.cached_mb_per_s)
        start_s = float(self.p.worker_start_s or 0.0) if worker_restart and policy == "prefetch" else 0.0
        handoff = loader_handoff and policy == "prefetch"
        hand_t = float(self.p.loader_batch_s or 0.0) if handoff else 0.0
        hand_w = float(self.p.loader_worker_batch_s or 0.0) / plan.local_batch if handoff else 0.0
        z = np.zeros(W)
        compute = z.copy()
        stall = z.copy()
        barrier = z.copy()
        exch_exposed = z.copy()
        fetch_t = {n: z.copy() for n in TIER_NAMES}
        bytes_t = {n: z.copy() for n in TIER_NAMES}
        samples = z.copy()
        requests = z.copy()
        epoch_times = np.zeros(E)
        pro_s = self.prologue_s(plan, sizes, fill_to_capacity)
        t0 = pro_s
        for e in range(E):
            ep = plan.epoch(e)
            ids = ep.sample_ids
            n = ids.shape[1]
            col = np.arange(n)
            valid = (col[None, :] >= ep.bounds[:, :1]) & (col[None, :] < ep.bounds[:, -1:]) & (ids >= 0)
            s = np.where(valid, sizes[np.where(ids >= 0, ids, 0)], 0.0)
            src = ep.source
            if self.step_time_s is not None:   # a step is a blocking wait: it ends late by the host's wake-up
                step = self.step_time_s + self.p.wake_late_s(self.step_time_s)
                comp = np.where(valid, step / plan.local_batch, 0.0)
            else:
                comp = s * self.compute_s_per_byte
            # one request latency per PFS request: a run of consecutive ids read as one request (the plan's
            # ``chunk``: covered columns hold 0) pays it once
            request = valid & (src == SHARED) if ep.chunk is None else valid & (src == SHARED) & (ep.chunk != 0)
            if policy != "lowerbound":       # nothing is read under the lower bound
                requests += request.sum(axis=1)
            fetch = s * spb[src] + np.where(request, self.p.pfs.latency_s if self.p.pfs else 0.0, 0.0)
            if has_floor:   # a PFS request lasts at least the format reader's own time (open, parse, bytes)
                fetch = np.where(request, np.maximum(fetch, self.p.pfs_reader_floor_s(s)), fetch)
            if self.p.wake_latency:   # a PFS request is a blocking wait: it ends late on a loaded host
                fetch = np.where(request, fetch + self.p.wake_late_s(fetch), fetch)
            write = s * w_spb
            for code, name in enumerate(TIER_NAMES):
                if policy == "lowerbound":  # nothing is read: every sample is there at t = 0
                    break
                m = src == code
                bytes_t[name] += np.where(m, s, 0.0).sum(axis=1)
                fetch_t[name] += np.where(m, fetch, 0.0).sum(axis=1) / (1.0 if policy == "ondemand" else threads_per_rank)
            samples += valid.sum(axis=1)
            steps = ep.steps
            seg = _Segments(ep.bounds, n)
            if policy == "ondemand":
                per = comp + fetch + write
                avail = None
            else:
                per = comp
                if policy == "lowerbound":
                    avail = None
                else:
                    cost = np.maximum(fetch, write) if self.write_overlap else fetch + write
                    if hand_w:   # the worker's own time per batch (pickling, the socket), spread over its samples
                        cost = cost + np.where(valid, hand_w, 0.0)
                    avail = _thread_avail(cost, threads_per_rank) + start_s
            Cb = seg.sum(per)                                            # (W, steps)
            Cc = seg.sum(comp)
            compute += Cc.sum(axis=1)
            if avail is not None:
                before = np.cumsum(per, axis=1) - per                    # compute before f in the row
                start_of_step = np.concatenate([np.zeros((W, 1)), np.cumsum(Cb, axis=1)], axis=1)
                term = np.where(valid, avail - (before - seg.spread(start_of_step)), -np.inf)
                M = seg.max(term)                                        # relative to epoch start
            else:
                M = np.full((W, steps), -np.inf)
            if hand_t:   # the trainer takes every batch from the worker: in series with its step (after M:
                # the samples' offsets within a step stay those of its compute)
                h = np.where(seg.sum(valid.astype(np.float64)) > 0, hand_t, 0.0)
                Cb = Cb + h
                stall += h.sum(axis=1)
            # exchange (pls): bytes sent per step; a step lasts at least its exchange
            xs = np.zeros((W, steps))
            xio: float | np.ndarray = 0.0   # the exchange seconds in series with each step (none: 0)
            tr = ep.transfers
            if tr is not None and len(tr) and steps:
                xb = np.zeros((W, steps))
                st = np.minimum(tr.step, steps - 1)
                np.add.at(xb, (tr.src, st), sizes[tr.sample])
                xs = xb / self.p.exchange_bytes_per_s
                xq = self.p.exchange_sample_s
                if self.rules.exchange == "series" and tr.tier == LOCAL and xq is not None:
                    # measured through the stage: per sample sent or received, beyond the bytes
                    cnt = np.zeros((W, steps))
                    np.add.at(cnt, (tr.src, st), 1.0)
                    np.add.at(cnt, (tr.dst, st), 1.0)
                    tio = cnt * xq
                else:
                    tio = self._exchange_tier_io_s(tr, st, sizes, W, steps, local_cached)
                if self.rules.exchange == "series":   # the transfer moves inside the MPI wait: adds to the step
                    tio = xs if tio is None else tio + xs
                    xs = np.zeros((W, steps))
                if tio is not None:   # in series with the step, on the trainer's path (not overlapped)
                    xio = tio
                    Cb = Cb + tio
                    exch_exposed += tio.sum(axis=1)
            # barrier recurrence over steps (relative to the epoch's start, B_{-1} = 0)
            a = Cb.max(axis=0) if W else np.zeros(steps)
            d = (Cb + M).max(axis=0)
            A = np.cumsum(a)
            B = A + np.maximum(0.0, np.maximum.accumulate(d - A))
            if xs.any():  # a step cannot end before its exchange does: fold it in step by step (few steps)
                Bx = np.empty(steps)
                prev = 0.0
                for j in range(steps):
                    T = Cb[:, j] + np.maximum(prev, M[:, j])
                    Tx = np.maximum(T, prev + xs[:, j])
                    exch_exposed += Tx - T
                    Bx[j] = Tx.max()
                    prev = Bx[j]
                B = Bx
            Bprev = np.concatenate([[0.0], B[:-1]])
            T = Cb + np.maximum(Bprev[None, :], M)
            stall += (T - Bprev[None, :] - Cb).sum(axis=1)
            if policy == "ondemand":
                stall += (Cb - Cc - xio).sum(axis=1)
            barrier += (B[None, :] - T).sum(axis=1)
            epoch_times[e] = B[-1] if steps else 0.0
            t0 += epoch_times[e]
        notes = []
        if local_cached:
            notes.append("local tier read at its page-cache curve (every node's files on it fit page_cache_bytes)")
        if start_s:
            notes.append(f"loader workers restart every epoch: first read {start_s:.3f} s after the epoch's start")
        if hand_t or hand_w:
            notes.append(f"DataLoader hand-off per batch: trainer {hand_t * 1e3:.3f} ms, worker "
                         f"{hand_w * plan.local_batch * 1e3:.3f} ms")
        if policy == "prefetch":
            notes.append("prefetch: staging-buffer capacity not enforced (producers never wait for space)")
        if self.write_overlap and policy == "prefetch":
            notes.append("a loader thread copies sample f into the buffer while fetching f+1 (write_overlap)")
        return Costing(strategy=plan.strategy, ranks=W, nodes=nodes, epochs=E, prologue_s=pro_s,
                       epoch_time_s=epoch_times, compute_s=compute, stall_s=stall, barrier_s=barrier,
                       exchange_s=exch_exposed, fetch_s_by_tier=fetch_t, bytes_by_tier=bytes_t, samples=samples,
                       notes=notes, shared_requests=requests)


    def _exchange_tier_io_s(self, tr, step: np.ndarray, sizes: np.ndarray, W: int, steps: int,
                            cached: bool = False):
        """(W, steps) seconds the trainer spends on a step's exchange moving local-tier files, or None: the
        sender reads the samples it sends from the tier's files (and unlinks them), the receiver writes those
        it receives as files when the step ends (``strategies/pls.py``), one thread each, in series with the
        step. Reads at the tier's r(1) (its page-cache curve where ``cached``, ``local_tier_cached``). A
        received file costs the tier's ``file_write_s`` (create, write, close, rename, unlink: the fixed
        part) + bytes / ``cached_write_mb_per_s`` where the profile has them, else bytes / w(1) (r(1) without
        a write curve). A memory tier sends from and receives into its slots: no cost here."""
        if tr.tier != LOCAL:
            return None
        t = next((t for t in self.p.tiers if t.kind == "local"), None)
        if t is None:
            return None
        b = sizes[tr.sample]
        rd = np.zeros((W, steps))
        np.add.at(rd, (tr.src, step), b)
        wr = np.zeros((W, steps))
        np.add.at(wr, (tr.dst, step), b)
        out = rd / self.p.tier_aggregate(t, 1, cached=cached)
        if t.file_write_s is not None and t.cached_write_mb_per_s is not None:
            files = np.zeros((W, steps))
            np.add.at(files, (tr.dst, step), 1.0)
            return out + files * t.file_write_s + wr / (t.cached_write_mb_per_s * 1e6)
        return out + wr / self.p.tier_write_aggregate(t, 1)

    def _cost_events(self, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank, fill_to_capacity,
                     tier_fill=False):
        from .fastevents import cost_events  # the reference loop: tests/unit/thesis_oracle.py (equivalence tests)

        pro_s = self.prologue_s(plan, sizes, fill_to_capacity)
        K = max(1, plan.world_size // max(plan.nodes, 1))
        if threads_per_rank is None:
            threads_per_rank = self.p.staging.threads / K
        out = cost_events(self, plan, sizes, policy, threads_per_rank, pro_s, tier_fill=tier_fill)
        ep, comp, stall, barrier, fetch_t, bytes_t, samples = out[:7]
        notes = ["thesis-window: event-driven costing (γ from the nodes' logs of PFS-read starts, in the "
                 "reference simulator's scheduling order; staging buffer capacity enforced)"]
        return Costing(strategy=plan.strategy, ranks=plan.world_size, nodes=plan.nodes, epochs=plan.epochs,
                       prologue_s=pro_s, epoch_time_s=ep, compute_s=comp, stall_s=stall, barrier_s=barrier,
                       exchange_s=np.zeros(plan.world_size), fetch_s_by_tier=fetch_t, bytes_by_tier=bytes_t,
                       samples=samples, notes=notes, shared_requests=out[7] if len(out) > 7 else None)


def _thread_avail(cost: np.ndarray, threads: float) -> np.ndarray:
    """When each access is in the buffer, relative to the epoch's start: p threads take the rank's accesses
    round robin (thread k: accesses k, k+p, ...); with fewer threads than ranks (p < 1) one shared thread
    serves the rank at rate p."""
    W, n = cost.shape
    if threads < 1 or abs(threads - round(threads)) > 1e-9:
        return np.cumsum(cost, axis=1) / threads
    p = int(round(threads))
    if p == 1:
        return np.cumsum(cost, axis=1)
    pad = (-n) % p
    c = np.concatenate([cost, np.zeros((W, pad))], axis=1).reshape(W, -1, p)
    return np.cumsum(c, axis=1).reshape(W, -1)[:, :n]


class _Segments:
    """Steps as contiguous column ranges of each rank's row: sums and maxima per (rank, step) with
    ``reduceat`` when every rank has the same bounds (the usual case), else per rank."""

    def __init__(self, bounds: np.ndarray, n: int):
        self.bounds = bounds
        self.n = n
        self.same = bool((bounds == bounds[:1]).all())
        self.W, self.steps = bounds.shape[0], bounds.shape[1] - 1

    def _reduce(self, ufunc, x: np.ndarray, empty: float) -> np.ndarray:
        out = np.full((self.W, self.steps), empty)
        if self.steps == 0:
            return out
        rows = [slice(None)] if self.same else range(self.W)
        for r in rows:
            b = self.bounds[0] if self.same else self.bounds[r]
            nonempty = b[1:] > b[:-1]
            if not nonempty.any():
                continue
            starts = b[:-1][nonempty]
            res = ufunc.reduceat(x[r, :b[-1]] if not self.same else x[:, :b[-1]], starts,
                                 axis=-1)
            if self.same:
                out[:, nonempty] = res
            else:
                out[r, nonempty] = res
        return out

    def sum(self, x):
        return self._reduce(np.add, x, 0.0)

    def max(self, x):
        return self._reduce(np.maximum, x, -np.inf)

    def spread(self, per_step: np.ndarray) -> np.ndarray:
        """A (W, steps[+1]) per-step value at every column of its step."""
        if self.same:
            idx = np.minimum(np.searchsorted(self.bounds[0], np.arange(self.n), side="right") - 1,
                             max(self.steps - 1, 0))
            return per_step[:, idx]
        out = np.empty((self.W, self.n))
        for r in range(self.W):
            idx = np.minimum(np.searchsorted(self.bounds[r], np.arange(self.n), side="right") - 1,
                             max(self.steps - 1, 0))
            out[r] = per_step[r, idx]
        return out
