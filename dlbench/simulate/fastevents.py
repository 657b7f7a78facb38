"""The thesis-window costing at scale: the event order and arithmetic of ``events.cost_events`` (the
reference, kept for equivalence tests: tests/unit/test_simulate_fastevents.py), without its costs that grow
with the world.

- γ = 1 + the other nodes whose logged PFS-read start is at or after t: the reference counts it with a loop
  over the nodes at every PFS read (O(nodes) per access); here a sorted list of the nodes' latest logged
  starts answers it with one bisection (``bisect_left``), the node's own entry subtracted. A node's entry is
  replaced in the sorted list after its rank has scheduled (its own reads never count for it), so every
  comparison is the reference's comparison of the same two floats: the same γ, the same sums. A loader
  thread's start times only grow, so γ is kept until its start passes the next logged start (one
  comparison instead of a bisection while no other node's log lies in between).
- What does not depend on time is computed with NumPy when an epoch is loaded, in the reference's
  arithmetic: each access's kind (a window-rule PFS read, a cache fill at γ = nodes, a fixed-rate own-tier or
  peer read), its write s/β and a fixed-rate access's whole cost; the per-rank sums of compute, samples,
  bytes and fixed fetch time. The Python loop is left with the start-time chain and γ.
- The staging buffer (a loader thread admits access a while the bytes held, from the step's first access on,
  stay within the rank's share of it): the reference's float sums of whole-byte sizes below 2**53 are exact,
  so the same admissions come from integer byte prefix sums per epoch (``_Block``), for every rank at once:
  one ``searchsorted`` per step (``_PlainWindow.admit``). Sizes with fractions of a byte take the generic
  loop below (``_whole_bytes``); ``simulate`` draws whole bytes.
- Consumption (a rank waits for each of the step's samples, a wait on a PFS read logs it) is a loop over
  the step's columns vectorised across ranks from ``VEC_MIN_RANKS`` ranks (same operations per element).
- Memory: the reference flattens every rank's accesses over all epochs into Python lists up front (and a
  per-rank array over all samples for tier fills); here the epochs are loaded as the loop reaches them (a
  loader thread reads ahead across epochs up to the staging buffer) and dropped once consumed.

The reference's scheduling order is sequential across ranks within a step (a rank's γ depends on the reads
the ranks before it scheduled), so each access is still a few Python operations (0.3-0.45 µs here): the cost is
linear in the accesses (steps x ranks x local batch) and no longer grows with the node count per access.
When every loaded access is a window-rule PFS read (naive, prefetch) the loops are cut to that case: the
node's own entry leaves the sorted log while its rank schedules (γ = nodes - bisect_left), no per-access kind
test. (A fixed-point iteration over all ranks of a step at once was tried: exact at convergence, but at 1,024
nodes it needs tens to a hundred rounds per step and is slower than this loop; so was stepping γ's index
linearly along a chain: a γ change crosses many logged starts.) With tier fills (``fill_by_tier_threads``),
``shared_reads_in_trainer``, background transfers under prefetch or sizes with fractions of a byte (prefetch)
the reference's loop runs as is, with γ by bisection (``_cost_events_generic``). pls (background transfers,
ondemand: the trainer reads its own samples) takes ``_cost_ondemand_exchange``: the generic ondemand loop's
floats, its steps without a PFS read (pls reads its local tier) as running sums with ``np.cumsum`` along the
step's columns for every rank at once (sequential sums, the loop's additions in its order), the steps with a
PFS read by the per-rank loop (tests/unit/test_simulate_pls_fast.py: bit for bit the generic loop's results).
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from bisect import bisect_left, insort
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError
from ..plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED, Plan
from ..storage.tiers import TIER_NAMES
from .events import exchange_per_step


class _Window:
    """Every rank's accesses of the loaded epochs as Python lists (the hot loop's fastest form). Indices
    are absolute (over all epochs); list position = absolute index - ``base[r]``. ``step_start[r][j]``: the
    absolute index of global step j's first access of rank r."""

    def __init__(self, plan: Plan, sizes: np.ndarray, comp_const: float | None, comp_spb: float, model=None):
        W = plan.world_size
        self.plan, self.sizes, self.W = plan, sizes, W
        self.comp_const, self.comp_spb = comp_const, comp_spb
        self.S: list[list] = [[] for _ in range(W)]
        self.SRC: list[list] = [[] for _ in range(W)]
        self.FILL: list[list] = [[] for _ in range(W)]
        self.COMP: list[list] = [[] for _ in range(W)]
        self.IDS: list[list] = [[] for _ in range(W)]
        self.KEEP: list[list] = [[] for _ in range(W)]
        self.base = [0] * W
        self.end = [0] * W                      # absolute accesses loaded
        self.step_start: list[list] = [[0] for _ in range(W)]
        self.next_epoch = 0
        self.epoch_steps: list[int] = []
        self.epoch_first: set[int] = set()     # global index of each loaded epoch's first step
        self.steps_loaded = 0
        self.model = model              # set: background transfers costed (generic loop)
        self.xch: dict = {}             # global step -> (network s, local-tier file s) per rank, pls
        self.requests = np.zeros(W)     # PFS requests per rank of the loaded epochs (a chunk's covered columns not)

    @staticmethod
    def epoch_arrays(plan: Plan, e: int, sizes: np.ndarray, with_chunk: bool = False, transfers_ok: bool = False):
        """Epoch e's valid accesses, rank-major: (ids, src, keep, counts per rank, step starts (W, steps+1)
        relative to the rank's first access of the epoch, steps). Background transfers (pls) are refused
        unless ``transfers_ok`` (the generic loop costs them: ``events.exchange_per_step``)."""
        ep = plan.epoch(e)
        if not transfers_ok and ep.transfers is not None and len(ep.transfers):
            raise ConfigError(f"rules.gamma=thesis-window: plan {plan.strategy} moves samples between ranks in the "
                              f"background (epoch {e}); the event-driven costing does not model that exchange: use "
                              f"gamma: threads or nodes")
        ids = ep.sample_ids
        W, n = ids.shape
        col = np.arange(n)
        valid = (col[None, :] >= ep.bounds[:, :1]) & (col[None, :] < ep.bounds[:, -1:]) & (ids >= 0)
        C = np.zeros((W, n + 1), np.int64)
        np.cumsum(valid, axis=1, out=C[:, 1:])
        at = np.take_along_axis(C, np.clip(ep.bounds, 0, n), axis=1)
        rel = at - at[:, :1]
        counts = valid.sum(axis=1)
        if counts.sum() == W * n:       # every entry valid: the arrays flattened as they are (rank-major)
            def pick(x):
                return x.reshape(-1)
        else:
            def pick(x):
                return x[valid]
        kp = pick(ep.keep) if ep.keep is not None else np.full(int(counts.sum()), NO_TIER, np.uint8)
        src = pick(ep.source)
        if with_chunk:   # the PFS requests: a chunk's covered columns (chunk == 0) are not requests
            req = src == SHARED
            if ep.chunk is not None:
                req &= pick(ep.chunk) != 0
            return pick(ids), src, kp, counts, rel, ep.steps, req
        return pick(ids), src, kp, counts, rel, ep.steps

    def load(self) -> bool:
        """Append the next epoch; False when every epoch is loaded."""
        plan = self.plan
        if self.next_epoch >= plan.epochs:
            return False
        ids, src, kp, counts, rel, steps, req = self.epoch_arrays(plan, self.next_epoch, self.sizes, with_chunk=True,
                                                                  transfers_ok=self.model is not None)
        self.requests += np.bincount(np.repeat(np.arange(self.W), counts), weights=req, minlength=self.W)
        if self.model is not None:
            ex = exchange_per_step(self.model, plan.epoch(self.next_epoch), self.sizes, self.W)
            if ex is not None:
                for k in range(steps):
                    self.xch[self.steps_loaded + k] = (ex[0][:, k].tolist(), ex[1][:, k].tolist())
        s = self.sizes[ids].astype(np.float64)
        fill = (kp != NO_TIER) & (src == SHARED)
        comp = np.full(len(s), self.comp_const) if self.comp_const is not None else s * self.comp_spb
        cuts = np.concatenate([[0], np.cumsum(counts)]).tolist()
        cols = [x.tolist() for x in (s, src.astype(np.int64), fill, comp, ids, kp.astype(np.int64))]
        rel_l = rel.tolist()
        for r in range(self.W):
            a, b = cuts[r], cuts[r + 1]
            for dst, x in zip((self.S, self.SRC, self.FILL, self.COMP, self.IDS, self.KEEP), cols):
                dst[r].extend(x[a:b])
            e0 = self.end[r]
            self.step_start[r].extend(e0 + v for v in rel_l[r][1:])
            self.end[r] = e0 + b - a
        self.epoch_steps.append(steps)
        self.epoch_first.add(self.steps_loaded)
        self.steps_loaded += steps
        self.next_epoch += 1
        return True

    def ensure_step(self, j: int) -> None:
        """Load epochs until global step j is loaded (or every epoch is)."""
        while self.steps_loaded <= j and self.load():
            pass

    def trim(self, keep_from: list) -> None:
        """Drop every rank's accesses before absolute index ``keep_from[r]``."""
        for r in range(self.W):
            k = keep_from[r] - self.base[r]
            if k > 0:
                for lst in (self.S, self.SRC, self.FILL, self.COMP, self.IDS, self.KEEP):
                    del lst[r][:k]
                self.base[r] += k


class _Setup(NamedTuple):
    """What both loops take from the model and the plan."""
    W: int
    node_of: list          # node of each rank
    nodes: int
    K: int                 # ranks per node
    fixed_spb: list        # seconds per byte of a non-PFS read, by tier code (0.0 for the PFS)
    w_spb: float           # seconds per byte of the staging write
    series: bool           # write after fetch (``write: series``) or overlapped
    lat: float             # PFS request latency
    pfs_spb: list          # seconds per byte of a PFS read by γ = 0 .. nodes
    fixed_gamma: int | None   # γ = nodes under ``gamma: nodes``; None under the window rule
    comp_const: float | None  # compute per sample when the model has a step time, else None (bytes-bound)
    cap: float             # a rank's share of the node's staging buffer


class _Block(NamedTuple):
    """An epoch's accesses for the loader threads' buffer: rank r's byte prefix sums as integers,
    ``Q[rowoff[r] + c] - rowbig[r]`` = the bytes of its first c accesses of the epoch (c = 0 .. its count), rows
    offset by ``big`` (> a row's bytes + 1) so that one ``searchsorted`` over ``Q`` answers every rank; past a
    rank's count its row holds its bytes + 1. ``A``: each rank's bytes before the epoch, ``E0``/``END``: its
    absolute access indices at the epoch's start and end."""
    Q: np.ndarray
    A: np.ndarray
    E0: np.ndarray
    END: np.ndarray
    rowtot: np.ndarray
    big: int
    rowoff: np.ndarray
    rowbig: np.ndarray


def _whole_bytes(sizes: np.ndarray, cap: float, local_batch: int) -> bool:
    """The reference's buffer sums (held + s <= cap, held -= a step's bytes) are exact in float64: whole
    bytes, the sums below 2**53 (held stays below the cap plus a step's bytes). Then the plain loop takes them
    as integer prefix sums; otherwise the generic loop runs (the same answers, slower)."""
    if not len(sizes):
        return True
    mx = float(sizes.max())
    return bool(float(sizes.min()) >= 0 and math.isfinite(cap) and cap + 2 * local_batch * mx < 2.0 ** 53
                and np.array_equal(np.floor(sizes), sizes))


def _setup(model, plan: Plan) -> _Setup:
    p = model.p
    rules = model.rules
    if rules.gamma == "threads":
        raise ConfigError("the event-driven costing counts γ by nodes (thesis-window or nodes), not threads")
    W = plan.world_size
    nodes = plan.nodes
    K = max(1, W // max(nodes, 1))
    spb = model.fetch_s_per_byte(nodes, p.staging.threads)      # non-PFS tiers (the PFS by γ below)
    step_time = model.step_time_s
    fixed_spb = [float(spb[c]) if c != SHARED else 0.0 for c in range(len(TIER_NAMES))]
    if plan.peer_tier == LOCAL:    # peers serve from their node-local tier: min(b_c, r_local)
        fixed_spb[PEER] = max(1.0 / p.network_bytes_per_s, float(spb[LOCAL]))
    return _Setup(W, [int(x) for x in plan.node_map], nodes, K, fixed_spb,
                  p.staging_write_s_per_byte(), rules.write == "series", p.pfs.latency_s if p.pfs else 0.0,
                  [0.0] + [1.0 / float(p.pfs_per_client(g)) for g in range(1, nodes + 1)],
                  nodes if rules.gamma == "nodes" else None,
                  step_time / plan.local_batch if step_time is not None else None,
                  float(p.staging.capacity_bytes) / K)


def _epoch_times(plan: Plan, epoch_steps: list, step_end: list, t0: float) -> np.ndarray:
    """Each epoch's time from the global steps' end times."""
    out = np.zeros(plan.epochs)
    prev = t0
    k = 0
    for e, ns in enumerate(epoch_steps):
        if ns:
            k += ns
            out[e] = step_end[k - 1] - prev
            prev = step_end[k - 1]
    return out


def _tier_fill_ready(model, plan: Plan, sizes: np.ndarray, t0: float, fill_spb: float, w_spb: float, lat: float,
                     K: int):
    """When each rank's tier fills are done (per rank: {sample: time}) and, per node, the latest start the
    tier threads log; the reference's arithmetic (round robin over the tier's threads from t0, γ = nodes).
    Every cached sample is filled from the PFS, also one whose first access the plan serves from a peer."""
    p = model.p
    W = plan.world_size
    parts: list[list] = [[] for _ in range(W)]
    for e in range(plan.epochs):
        ids, src, kp, counts, _rel, _steps = _Window.epoch_arrays(plan, e, sizes)
        cuts = np.concatenate([[0], np.cumsum(counts)])
        fill = kp != NO_TIER        # every cached sample, whatever its first access's source
        for r in range(W):
            a, b = int(cuts[r]), int(cuts[r + 1])
            m = fill[a:b]
            if m.any():
                parts[r].append((ids[a:b][m], kp[a:b][m]))
    ready: list[dict] = []
    fill_starts: dict = {}
    for r in range(W):
        rd: dict = {}
        if parts[r]:
            ids = np.concatenate([x[0] for x in parts[r]])
            kp = np.concatenate([x[1] for x in parts[r]])
            s = sizes[ids].astype(np.float64)
            for code, kind in ((MEMORY, "memory"), (LOCAL, "local")):
                tier = next((t for t in p.tiers if t.kind == kind), None)
                sel = np.nonzero(kp == code)[0]
                if not len(sel):
                    continue
                thr = max(1, int((tier.threads if tier is not None else 1) // K))
                cost = s[sel] * (fill_spb + w_spb) + lat
                pad = (-len(cost)) % thr
                c = np.concatenate([cost, np.zeros(pad)]).reshape(-1, thr)
                done = (t0 + np.cumsum(c, axis=0)).reshape(-1)[:len(cost)]
                starts = done - cost
                new = {}
                inf = float("inf")
                for i, d in zip(ids[sel].tolist(), done.tolist()):
                    old = rd.get(i, inf)
                    new[i] = old if old < d else d
                rd.update(new)
                nd = int(plan.node_map[r])
                fill_starts[nd] = max(fill_starts.get(nd, -np.inf), float(starts.max()))
        ready.append(rd)
    return ready, fill_starts


def _cost_events_generic(model, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank: float | None,
                         t0: float, tier_fill: bool = False):
    """The reference's loop with γ by bisection and epochs streamed: every case, tier fills and the trainer's
    own PFS reads (``events`` module doc) included."""
    W, node_of, nodes, K, fixed_spb, w_spb, series, lat, pfs_spb, fixed_gamma, comp_const, cap = _setup(model, plan)
    trainer_shared = policy == "prefetch" and plan.shared_reads_in_trainer
    fetch_tr = [0.0] * W        # the trainer's own PFS fetch seconds (not shared by the loader threads)
    fill_spb = pfs_spb[nodes]
    win = _Window(plan, sizes, comp_const, model.compute_s_per_byte, model=model)
    xch = win.xch

    ready: list = []
    fill_starts: dict = {}
    if tier_fill and policy == "prefetch":
        ready, fill_starts = _tier_fill_ready(model, plan, sizes, t0, fill_spb, w_spb, lat, K)
    use_ready = bool(ready)

    compute = [0.0] * W
    stall = [0.0] * W
    barrier = [0.0] * W
    fetch_l = [[0.0] * len(TIER_NAMES) for _ in range(W)]
    bytes_l = [[0.0] * len(TIER_NAMES) for _ in range(W)]
    samples = [0] * W
    log = [-np.inf] * nodes
    for nd, t in fill_starts.items():
        log[nd] = t
    slog = sorted(log)              # every node's latest logged start, sorted (the γ queries)

    def relog(nd: int, old: float) -> None:
        new = log[nd]
        if new != old:
            del slog[bisect_left(slog, old)]
            insort(slog, new)

    B = t0
    step_end: list[float] = []
    S, SRC, FILL, COMP, base, sst = win.S, win.SRC, win.FILL, win.COMP, win.base, win.step_start
    epoch_first = win.epoch_first

    if policy == "ondemand":
        j = -1
        while True:
            j += 1
            win.ensure_step(j)
            if j >= win.steps_loaded:
                break
            if j in epoch_first and j:
                win.trim([sst[r][j] for r in range(W)])
            t = [B] * W
            for r in range(W):
                nd = node_of[r]
                own = log[nd]
                tr = B
                Sr, SRCr, FILLr, Cr, br, fr = S[r], SRC[r], FILL[r], COMP[r], bytes_l[r], fetch_l[r]
                a, b = sst[r][j] - base[r], sst[r][j + 1] - base[r]
                st_r = 0.0
                cm = 0.0
                for f in range(a, b):
                    s = Sr[f]
                    c = SRCr[f]
                    if c == SHARED:
                        if FILLr[f]:
                            g = nodes
                        elif fixed_gamma is not None:
                            g = fixed_gamma
                        else:
                            g = 1 + nodes - bisect_left(slog, tr) - (1 if own >= tr else 0)
                        fetch = s * pfs_spb[g] + lat
                        if tr > log[nd]:
                            log[nd] = tr
                    else:
                        fetch = s * fixed_spb[c]
                    io = fetch + s * w_spb
                    fr[c] += fetch
                    br[c] += s
                    st_r += io
                    cf = Cr[f]
                    cm += cf
                    tr += io + cf
                stall[r] += st_r
                compute[r] += cm
                samples[r] += b - a
                if j in xch:        # pls: the exchange's files, then its sends (from the step's start)
                    x = xch[j][1][r]
                    if x:
                        stall[r] += x
                        tr += x
                    x = B + xch[j][0][r]
                    if x > tr:
                        stall[r] += x - tr
                        tr = x
                t[r] = tr
                relog(nd, own)
            Bn = max(t) if W else B
            for r in range(W):
                barrier[r] += Bn - t[r]
            B = Bn
            step_end.append(B)
    else:
        p_thr = max(1, int(round(threads_per_rank or 1)))
        free = [[t0] * p_thr for _ in range(W)]
        counter = [0] * W
        nxt = [0] * W
        held = [0.0] * W
        AV: list[list] = [[] for _ in range(W)]     # avail, per rank, aligned with the window's lists
        IDS, KEEP = win.IDS, win.KEEP
        j = -1
        while True:
            j += 1
            win.ensure_step(j)
            if j >= win.steps_loaded:
                break
            if j in epoch_first and j > 1:   # keep step j - 1 (its bytes leave the buffer now)
                cut = [sst[r][j - 1] for r in range(W)]
                for r in range(W):
                    k = cut[r] - base[r]
                    if k > 0:
                        del AV[r][:k]
                win.trim(cut)
            for r in range(W):
                bs = base[r]
                Sr = S[r]
                SRCr = SRC[r]
                if j > 0:   # the previous step's samples leave the buffer
                    a, b = sst[r][j - 1] - bs, sst[r][j] - bs
                    if trainer_shared:      # the trainer's PFS reads were never buffered: they weigh 0.0
                        held[r] -= sum([0.0 if c == SHARED else s for s, c in zip(Sr[a:b], SRCr[a:b])])
                    else:
                        held[r] -= sum(Sr[a:b])
                must = sst[r][j + 1] - bs
                f = nxt[r] - bs
                nd = node_of[r]
                own = log[nd]
                FILLr, fr, av, br, ftr = FILL[r], free[r], AV[r], bytes_l[r], fetch_l[r]
                if use_ready:
                    rdy, IDr, KPr = ready[r], IDS[r], KEEP[r]
                hr = held[r]
                k = counter[r]
                n_acc = len(Sr)
                while True:
                    if f >= n_acc:
                        if not win.load():
                            break
                        n_acc = len(Sr)
                        continue
                    s = Sr[f]
                    if not (f < must or hr + s <= cap):
                        break
                    st = fr[k] if fr[k] > B else B
                    c = SRCr[f]
                    if trainer_shared and c == SHARED:      # the trainer reads it (consumption below)
                        av.append(0.0)
                        f += 1
                        k = k + 1 if k + 1 < p_thr else 0
                        continue
                    if use_ready and (c == MEMORY or c == LOCAL or KPr[f] != NO_TIER):
                        tier_code = c if (c == MEMORY or c == LOCAL) else KPr[f]
                        if rdy.get(IDr[f], np.inf) <= st:
                            c = tier_code
                            fetch = s * fixed_spb[c]
                        elif c == PEER:
                            fetch = s * fixed_spb[c]
                        else:
                            c = SHARED
                            g = fixed_gamma if fixed_gamma is not None else \
                                1 + nodes - bisect_left(slog, st) - (1 if own >= st else 0)
                            fetch = s * pfs_spb[g] + lat
                            if st > log[nd]:
                                log[nd] = st
                    elif c == SHARED:
                        if FILLr[f]:
                            g = nodes
                        elif fixed_gamma is not None:
                            g = fixed_gamma
                        else:
                            g = 1 + nodes - bisect_left(slog, st) - (1 if own >= st else 0)
                        fetch = s * pfs_spb[g] + lat
                        if st > log[nd]:
                            log[nd] = st
                    else:
                        fetch = s * fixed_spb[c]
                    wr = s * w_spb
                    cost = fetch + wr if series else (fetch if fetch > wr else wr)
                    ftr[c] += fetch
                    br[c] += s
                    e_ = st + cost
                    fr[k] = e_
                    av.append(e_)
                    hr += s
                    f += 1
                    k = k + 1 if k + 1 < p_thr else 0
                held[r] = hr
                counter[r] = k
                nxt[r] = f + bs
                relog(nd, own)
            Bn = B
            ends = [B] * W
            for r in range(W):
                nd = node_of[r]
                own = log[nd]
                e = B
                bs = base[r]
                a, b = sst[r][j] - bs, sst[r][j + 1] - bs
                av, cm, SRCr = AV[r], COMP[r], SRC[r]
                wait = 0.0
                csum = 0.0
                for f in range(a, b):
                    if trainer_shared and SRCr[f] == SHARED:
                        s = S[r][f]
                        if FILL[r][f]:
                            g = nodes
                        elif fixed_gamma is not None:
                            g = fixed_gamma
                        else:
                            g = 1 + nodes - bisect_left(slog, e) - (1 if own >= e else 0)
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
                            log[nd] = e
                    e += cm[f]
                    csum += cm[f]
                compute[r] += csum
                samples[r] += b - a
                if j in xch:        # pls: the exchange's files, then its sends (from the step's start)
                    x = xch[j][1][r]
                    if x:
                        wait += x
                        e += x
                    x = B + xch[j][0][r]
                    if x > e:
                        wait += x - e
                        e = x
                stall[r] += wait
                ends[r] = e
                if e > Bn:
                    Bn = e
                relog(nd, own)
            for r in range(W):
                barrier[r] += Bn - ends[r]
            B = Bn
            step_end.append(B)
    fetch_t = np.asarray(fetch_l, dtype=np.float64).reshape(W, len(TIER_NAMES))
    if policy != "ondemand":
        fetch_t /= max(1, int(round(threads_per_rank or 1)))
    fetch_t[:, SHARED] += np.asarray(fetch_tr, dtype=np.float64)
    epoch_times = _epoch_times(plan, win.epoch_steps, step_end, t0)
    fetch_by = {n: fetch_t[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    bytes_t = np.asarray(bytes_l, dtype=np.float64).reshape(W, len(TIER_NAMES))
    bytes_by = {n: bytes_t[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    out = (epoch_times, np.asarray(compute, dtype=np.float64), np.asarray(stall, dtype=np.float64),
           np.asarray(barrier, dtype=np.float64), fetch_by, bytes_by, np.asarray(samples, dtype=np.float64))
    # the PFS requests, counted while loading, where every epoch was loaded (else the summary counts them)
    return out + (win.requests.copy(),) if win.next_epoch >= plan.epochs else out


def _cols(x: np.ndarray, idx: np.ndarray, pad: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """A step's columns (W, n) of the flat per-access ``x`` (0.0 where a rank has fewer), ``first`` before them."""
    m = x[idx] if len(x) else np.zeros(idx.shape)
    m[pad] = 0.0
    return m if first is None else np.concatenate([first[:, None], m], axis=1)


def _cost_ondemand_exchange(model, plan: Plan, sizes: np.ndarray, t0: float):
    """``_cost_events_generic``'s ondemand loop (pls: background transfers, a trainer that reads its own
    samples), the same floats, with the time-independent steps vectorised across ranks. A step in which no rank
    reads the PFS costs only fixed-rate reads: nothing in it depends on γ, so every rank's chain
    (``tr += io + compute``), its stall, compute, fetch and byte sums are running sums in the loop's order. They
    are taken with ``np.cumsum`` along the step's columns (a sequential left-to-right sum: the loop's additions,
    one by one; the columns of a rank with fewer accesses padded with 0.0, which leaves a non-negative sum as it
    is), the exchange's arithmetic elementwise. A step with a PFS read runs the reference's per-rank loop."""
    W, node_of, nodes, K, fixed_spb, w_spb, series, lat, pfs_spb, fixed_gamma, comp_const, cap = _setup(model, plan)
    comp_spb = model.compute_s_per_byte
    spb_code = np.asarray(fixed_spb, dtype=np.float64)
    NT = len(TIER_NAMES)
    compute = np.zeros(W)
    stall = np.zeros(W)
    barrier = np.zeros(W)
    fetch = np.zeros((W, NT))
    byts = np.zeros((W, NT))
    samples = np.zeros(W, np.int64)
    requests = np.zeros(W)
    log = [-np.inf] * nodes
    slog = sorted(log)
    B = t0
    step_end: list[float] = []
    epoch_steps: list[int] = []
    ranks = np.arange(W)
    for e in range(plan.epochs):
        ids, src, kp, counts, rel, steps, req = _Window.epoch_arrays(plan, e, sizes, with_chunk=True,
                                                                     transfers_ok=True)
        requests += np.bincount(np.repeat(ranks, counts), weights=req, minlength=W)
        ex = exchange_per_step(model, plan.epoch(e), sizes, W)
        epoch_steps.append(steps)
        if not steps:
            continue
        s = sizes[ids].astype(np.float64)
        comp = np.full(len(s), comp_const) if comp_const is not None else s * comp_spb
        fe = s * spb_code[src]                  # a fixed-rate read's fetch (a PFS read's is set per step)
        io = fe + s * w_spb
        d = io + comp                           # the chain's step: tr += io + cf
        shared = src == SHARED
        codes = [c for c in np.unique(src).tolist() if c != SHARED]
        # per tier code, its reads' fetch seconds and bytes (0.0 elsewhere: the code's own running sum)
        by_code = {c: (fe, s) if len(codes) == 1 else (np.where(src == c, fe, 0.0), np.where(src == c, s, 0.0))
                   for c in codes}
        off = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        # the steps with a PFS read (any rank): the per-rank loop
        sh_c = np.concatenate([[0], np.cumsum(shared)])
        lo, hi = off[:, None] + rel[:, :-1], off[:, None] + rel[:, 1:]
        py_step = ((sh_c[hi] - sh_c[lo]) > 0).any(axis=0).tolist()
        for k in range(steps):
            a, b = lo[:, k], hi[:, k]
            L = b - a
            if py_step[k]:
                t = np.full(W, B)
                st_l, cm_l, fr_l, br_l = stall.tolist(), compute.tolist(), fetch.tolist(), byts.tolist()
                for r in range(W):
                    nd = node_of[r]
                    own = log[nd]
                    tr = B
                    fr, br = fr_l[r], br_l[r]
                    st_r = 0.0
                    cm = 0.0
                    a_, b_ = int(a[r]), int(b[r])
                    for s_, c, fill, cf in zip(s[a_:b_].tolist(), src[a_:b_].tolist(),
                                              (kp[a_:b_] != NO_TIER).tolist(), comp[a_:b_].tolist()):
                        if c == SHARED:
                            if fill:
                                g = nodes
                            elif fixed_gamma is not None:
                                g = fixed_gamma
                            else:
                                g = 1 + nodes - bisect_left(slog, tr) - (1 if own >= tr else 0)
                            f_ = s_ * pfs_spb[g] + lat
                            if tr > log[nd]:
                                log[nd] = tr
                        else:
                            f_ = s_ * fixed_spb[c]
                        io_ = f_ + s_ * w_spb
                        fr[c] += f_
                        br[c] += s_
                        st_r += io_
                        cm += cf
                        tr += io_ + cf
                    st_l[r] += st_r
                    cm_l[r] += cm
                    t[r] = tr
                    new = log[nd]
                    if new != own:
                        del slog[bisect_left(slog, own)]
                        insort(slog, new)
                stall, compute = np.asarray(st_l), np.asarray(cm_l)
                fetch, byts = np.asarray(fr_l).reshape(W, NT), np.asarray(br_l).reshape(W, NT)
                tr_v = t
            else:
                n = int(L.max()) if W else 0
                idx = a[:, None] + np.arange(n)
                pad = idx >= b[:, None]
                idx[pad] = 0

                tr_v = np.cumsum(_cols(d, idx, pad, np.full(W, B)), axis=1)[:, -1]
                stall += np.cumsum(_cols(io, idx, pad), axis=1)[:, -1] if n else 0.0
                compute += np.cumsum(_cols(comp, idx, pad), axis=1)[:, -1] if n else 0.0
                for c, (fc, sc) in by_code.items():
                    fetch[:, c] = np.cumsum(_cols(fc, idx, pad, fetch[:, c]), axis=1)[:, -1]
                    byts[:, c] = np.cumsum(_cols(sc, idx, pad, byts[:, c]), axis=1)[:, -1]
            samples += L
            if ex is not None:      # pls: the exchange's files, then its sends (from the step's start)
                x = ex[1][:, k]
                stall = stall + x       # + 0.0 where it has none: the same floats as skipping it
                tr_v = tr_v + x
                x = B + ex[0][:, k]
                w = x > tr_v
                stall = np.where(w, stall + (x - tr_v), stall)
                tr_v = np.where(w, x, tr_v)
            Bn = float(tr_v.max()) if W else B
            barrier += Bn - tr_v
            B = Bn
            step_end.append(B)
    epoch_times = _epoch_times(plan, epoch_steps, step_end, t0)
    fetch_by = {n: fetch[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    bytes_by = {n: byts[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    return (epoch_times, compute, stall, barrier, fetch_by, bytes_by, samples.astype(np.float64), requests)


def trainer_reads_shared(plan: Plan, model) -> Plan:
    """``plan`` marked for model option ``shared_reads_in_trainer`` (the ``events`` module doc): under the
    thesis-window costing its loader threads read ahead only what the plan serves from a tier or a peer, the
    trainer reads the PFS accesses itself, in series with compute (the HDMLP thesis' DeepIO)."""
    if model.rules.gamma != "thesis-window":
        raise ConfigError(f"model option shared_reads_in_trainer: needs rules.gamma=thesis-window (the event-driven "
                          f"costing), not {model.rules.gamma}")
    return plan.replace(shared_reads_in_trainer=True)


def cache_on_local_tier(plan: Plan, model) -> Plan:
    """``plan`` with its memory-tier holdings on the node-local tier instead (model option
    ``cache_on_local_tier``): every MEMORY source, keep and prologue destination becomes LOCAL, and the
    thesis-window costing reads a peer's holding at min(b_c, r_local) (``peer_tier``). The HDMLP thesis'
    Locality-aware policy caches on its SSD (``LocalityAwareDataLoadingPolicy._init_from_pfs``: tier 2)."""
    if model.rules.gamma != "thesis-window":
        raise ConfigError(f"model option cache_on_local_tier: needs rules.gamma=thesis-window (the event-driven "
                          f"costing), not {model.rules.gamma}")
    local = next((t for t in model.p.tiers if t.kind == "local"), None)
    if local is None:
        raise ConfigError(f"model option cache_on_local_tier: system profile {model.p.name} has no local tier")
    if plan.capacity.cache_peak_bytes is not None:     # the memory cache's bytes per rank, now on the node's local tier
        per_node = np.bincount(np.asarray(plan.node_map, dtype=np.int64),
                               weights=np.asarray(plan.capacity.cache_peak_bytes, dtype=np.float64),
                               minlength=plan.nodes)
        if per_node.max(initial=0.0) > local.capacity_bytes:
            raise ConfigError(f"model option cache_on_local_tier: plan {plan.strategy} caches "
                              f"{per_node.max():,.0f} bytes on a node; its local tier {local.name} holds "
                              f"{local.capacity_bytes:,.0f}")
    loc = np.uint8(LOCAL)

    def to_local(ep):
        return dataclasses.replace(ep, source=np.where(ep.source == MEMORY, loc, ep.source),
                                   keep=None if ep.keep is None else np.where(ep.keep == MEMORY, loc, ep.keep))

    pro = plan.prologue
    return plan.map_epochs(to_local).replace(prologue=dataclasses.replace(pro, dst=np.where(pro.dst == MEMORY, loc, pro.dst)),
                                             peer_tier=LOCAL)


__all__ = ["cost_events", "trainer_reads_shared", "cache_on_local_tier"]


# ----- the common case (no tier fills): per-access work cut to the γ-dependent part -------------------------
KIND_WINDOW, KIND_FILL, KIND_FIXED = 0, 1, 2    # a PFS read under the window rule, a PFS cache fill, the rest


class _PlainWindow(_Window):
    """``_Window`` plus, per access, what does not depend on time, computed with NumPy at load in the
    reference's arithmetic: the kind (``KIND_*``), the write s/β, the whole cost of a fixed-rate access (a
    fill at γ = nodes, an own-tier or peer read; every PFS read too under ``gamma: nodes``); and, per rank,
    the sums over accesses that do not depend on time (compute, samples, bytes and fixed fetch time by tier,
    the sync policy's fixed stall). Per epoch the padded (W, n) compute and PFS flags for the vectorised
    consumption and, for the loader threads' buffer, the accesses' byte prefix sums as integers (``_Block``).
    The sizes are kept per rank in ``array('d')`` (loaded and trimmed as bytes, no float object per access
    until the chains read it)."""

    def __init__(self, plan, sizes, comp_const, comp_spb, *, ondemand, series, w_spb, lat, fixed_spb, fill_spb,
                 fixed_pfs_spb):
        super().__init__(plan, sizes, comp_const, comp_spb)
        W = plan.world_size
        self.S = [array("d") for _ in range(W)]
        self.ptot = np.zeros(W, np.int64)      # bytes of each rank's loaded accesses (the next block's A)
        self.ondemand, self.series, self.w_spb, self.lat = ondemand, series, w_spb, lat
        self.fixed_spb, self.fill_spb, self.fixed_pfs_spb = np.asarray(fixed_spb), fill_spb, fixed_pfs_spb
        self.X: list[list] = [[] for _ in range(W)]    # per access: None, -cost or cost (``X_*`` below)
        self.compute = np.zeros(W)
        self.samples = np.zeros(W)
        self.requests = np.zeros(W)
        self.bytes = np.zeros((W, len(TIER_NAMES)))
        self.fetch = np.zeros((W, len(TIER_NAMES)))
        self.stall = np.zeros(W)
        self.mats: dict = {}     # epoch -> (comp (W, n), pfs (W, n), rel (W, steps + 1), first global step, _Block)
        self.step_epoch: list[int] = []    # the epoch of every loaded global step
        self._cut_step = 0                 # the global step the last trim kept from
        self.all_window = True             # every access loaded so far is a window-rule PFS read

    def load(self) -> bool:
        plan = self.plan
        e = self.next_epoch
        if e >= plan.epochs:
            return False
        ids, src, kp, counts, rel, steps, req = self.epoch_arrays(plan, e, self.sizes, with_chunk=True)
        W = self.W
        s = self.sizes[ids].astype(np.float64)
        pfs = src == SHARED
        fill = (kp != NO_TIER) & pfs
        comp = np.full(len(s), self.comp_const) if self.comp_const is not None else s * self.comp_spb
        rix = np.repeat(np.arange(W), counts)
        NT = len(TIER_NAMES)
        window = self.fixed_pfs_spb is None and bool(pfs.all()) and not fill.any()
        wr = s * self.w_spb if self.ondemand or not window else None
        n = int(counts.max()) if W else 0
        rows = len(s) == W * n      # every rank has n accesses: (W, n) views of the accesses
        if window:      # every access a window-rule PFS read: nothing static but its write
            static = None
            self.bytes[:, SHARED] += np.bincount(rix, weights=s, minlength=W)
        else:
            src = src.astype(np.int64)
            if self.fixed_pfs_spb is not None:     # gamma: nodes: every PFS read at a fixed rate, logged
                kind = np.where(pfs, KIND_FILL, KIND_FIXED)
                fetch = np.where(pfs, s * np.where(fill, self.fill_spb, self.fixed_pfs_spb) + self.lat, 0.0)
            else:
                kind = np.where(fill, KIND_FILL, np.where(pfs, KIND_WINDOW, KIND_FIXED))
                fetch = np.where(fill, s * self.fill_spb + self.lat, 0.0)
            fetch = np.where(pfs, fetch, s * self.fixed_spb[src])
            if self.ondemand:
                io = fetch + wr
                cost = io + comp
            else:
                cost = fetch + wr if self.series else np.maximum(fetch, wr)
            static = kind != KIND_WINDOW
            self.bytes += np.bincount(rix * NT + src, weights=s, minlength=W * NT).reshape(W, NT)
            self.fetch += np.bincount(rix * NT + src, weights=np.where(static, fetch, 0.0),
                                      minlength=W * NT).reshape(W, NT)
        self.compute += np.bincount(rix, weights=comp, minlength=W)
        self.requests += np.count_nonzero(req.reshape(W, n), axis=1) if rows else \
            np.bincount(rix, weights=req, minlength=W)
        self.samples += counts
        if self.ondemand:   # stall = fetch + write: the window reads' fetches are added by the loop
            self.stall += np.bincount(rix, weights=wr if static is None else np.where(static, io, wr), minlength=W)
        else:
            if rows:
                cm, pm, sm = comp.reshape(W, n), pfs.reshape(W, n), s.reshape(W, n)
            else:
                first = np.concatenate([[0], np.cumsum(counts)[:-1]])
                flat = np.arange(len(s)) - first[rix] + rix * n     # (rank, column) in a (W, n) matrix
                cm, pm, sm = np.zeros(W * n), np.zeros(W * n, bool), np.zeros(W * n)
                cm[flat], pm[flat], sm[flat] = comp, pfs, s
                cm, pm, sm = cm.reshape(W, n), pm.reshape(W, n), sm.reshape(W, n)
            self.mats[e] = (cm, pm, rel, self.steps_loaded, self._block(sm, counts))
        # the lists are extended in place (the loops hold references to a rank's lists across a load); while
        # every access is a window-rule PFS read X is not kept (all None): filled in when that ends
        e0 = np.asarray(self.end, dtype=np.int64)
        SS = self.step_start
        for r, v in enumerate((rel[:, 1:] + e0[:, None]).tolist()):
            SS[r] += v
        self.end = (e0 + counts).tolist()
        S = self.S
        sb = s.tobytes()        # rank-major: rank r's accesses are bytes 8 cuts[r] .. 8 cuts[r + 1]
        cuts = (np.concatenate([[0], np.cumsum(counts)]) * 8).tolist()
        for r in range(W):
            S[r].frombytes(sb[cuts[r]:cuts[r + 1]])
        if not window:
            if self.all_window:     # X from here on: None for every access kept so far
                self.all_window = False
                for r in range(W):
                    self.X[r] += [None] * (int(e0[r]) - self.base[r])
            x = np.where(kind == KIND_FILL, -cost, cost).astype(object)
            x[kind == KIND_WINDOW] = None
            xl = x.tolist()
            cuts = np.concatenate([[0], np.cumsum(counts)]).tolist()
            for r in range(W):
                self.X[r] += xl[cuts[r]:cuts[r + 1]]
        self.epoch_steps.append(steps)
        self.epoch_first.add(self.steps_loaded)
        self.step_epoch.extend([e] * steps)
        self.steps_loaded += steps
        self.next_epoch += 1
        return True

    def _block(self, sm: np.ndarray, counts: np.ndarray) -> _Block:
        """The epoch's ``_Block`` from its (W, n) sizes (zero past a rank's count) and per-rank counts."""
        W, n = sm.shape
        P = np.zeros((W, n + 1), np.int64)
        np.cumsum(sm.astype(np.int64), axis=1, out=P[:, 1:])      # whole bytes: exact
        rowtot = P[:, -1].copy()
        big = int(rowtot.max(initial=0)) + 2
        if (W + 1) * big >= 2 ** 62:
            raise ConfigError(f"simulate: an epoch of {int(rowtot.sum()):,} bytes is past what the thesis-window "
                              f"costing's buffer search counts in 64-bit integers (2**62 bytes)")
        ragged = np.arange(n + 1)[None, :] > counts[:, None]
        if ragged.any():    # past a rank's count: above every target of its row, below the next row's
            P[ragged] = np.broadcast_to(rowtot[:, None] + 1, P.shape)[ragged]
        rows = np.arange(W, dtype=np.int64)
        A = self.ptot.copy()
        self.ptot += rowtot
        E0 = np.asarray(self.end, dtype=np.int64)
        return _Block((P + (rows * big)[:, None]).reshape(-1), A, E0, E0 + counts, rowtot, big, rows * (n + 1),
                      rows * big)

    def admit(self, FB: np.ndarray, T: np.ndarray) -> np.ndarray:
        """For every rank r, the largest absolute index a with P_r(a) <= T[r] (P_r(a): the bytes of its first
        a accesses) where that lies at or past the start of loaded block (epoch) ``FB[r]``, else an index
        before that start. The search starts in block FB[r] and moves on while a whole block fits (loading
        epochs as needed; ``FB`` is updated: T only grows from step to step, so the next search starts there)."""
        out = np.empty(self.W, np.int64)
        todo = np.arange(self.W)
        last = self.plan.epochs - 1
        while len(todo):
            fb = FB[todo]
            e = int(fb.min())
            while e >= self.next_epoch and self.load():
                pass
            here = fb == e
            rows = todo[here]
            b = self.mats[e][4]
            t = np.clip(T[rows] - b.A[rows], -1, b.rowtot[rows]) + b.rowbig[rows]
            col = np.searchsorted(b.Q, t, "right") - 1 - b.rowoff[rows]
            more = col >= b.END[rows] - b.E0[rows]      # the whole block fits: a lies further on
            if e >= last:
                more[:] = False
            done = ~more
            out[rows[done]] = b.E0[rows[done]] + col[done]
            FB[rows[more]] = e + 1
            todo = np.concatenate([todo[~here], rows[more]])
        return out

    def trim(self, keep_from: list) -> None:
        for r in range(self.W):
            k = keep_from[r] - self.base[r]
            if k > 0:
                for lst in (self.S, self.X):
                    del lst[r][:k]
                self.base[r] += k
        done = [e for e in self.mats if e < self.step_epoch[min(len(self.step_epoch) - 1, self._cut_step)]]
        for e in done:
            del self.mats[e]


VEC_MIN_RANKS = 32   # consumption vectorised across ranks from this many ranks (a per-rank loop below)


def cost_events(model, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank: float | None,
                t0: float, tier_fill: bool = False):
    """``events.cost_events`` (same arguments, same results) for any world size; see the module doc."""
    tr0 = plan.epoch(0).transfers if plan.epochs else None
    setup = _setup(model, plan)
    if (policy == "prefetch" and (tier_fill or plan.shared_reads_in_trainer)) or \
            (tr0 is not None and len(tr0)) or \
            (policy != "ondemand" and not _whole_bytes(sizes, setup.cap, plan.local_batch)):
        # background transfers (pls), tier fills, the trainer's own reads, a buffer counted in fractional
        # bytes: the generic loop costs them
        if policy == "ondemand":      # only background transfers bring ondemand here
            return _cost_ondemand_exchange(model, plan, sizes, t0)
        return _cost_events_generic(model, plan, sizes, policy, threads_per_rank, t0, tier_fill)
    W, node_of, nodes, K, fixed_spb, w_spb, series, lat, pfs_spb, fixed_gamma, comp_const, cap = setup
    ondemand = policy == "ondemand"
    win = _PlainWindow(plan, sizes, comp_const, model.compute_s_per_byte, ondemand=ondemand, series=series,
                       w_spb=w_spb, lat=lat, fixed_spb=fixed_spb, fill_spb=pfs_spb[nodes],
                       fixed_pfs_spb=pfs_spb[nodes] if fixed_gamma is not None else None)
    stall = [0.0] * W
    barrier = [0.0] * W
    fsh = [0.0] * W           # PFS fetch seconds of window-rule reads
    log = [-np.inf] * nodes
    inf = float("inf")
    slog = sorted(log) + [inf]     # + a sentinel: slog[bisect_left(slog, t)] is the next logged start or inf
    nn = nodes
    # the fast paths take a node's own entry out of slog while its rank schedules: γ = 1 + the other nodes
    # whose start >= t = nodes - bisect_left(slog, t) (the reference's 1 + nodes - i - (own >= t))
    RG = [pfs_spb[nn - i] for i in range(nn)]
    B = t0
    step_end: list[float] = []
    S, X, base, sst = win.S, win.X, win.base, win.step_start
    comp_spb = win.comp_spb
    node_arr = np.asarray(plan.node_map, dtype=np.int64)
    node_starts = np.searchsorted(node_arr, np.arange(nodes)) if nodes else np.zeros(0, np.int64)
    grouped = bool(W and np.all(np.diff(node_arr) >= 0) and node_arr[0] == 0 and np.all(np.diff(node_arr) <= 1))

    def relog(nd: int, old: float) -> None:
        new = log[nd]
        if new != old:
            del slog[bisect_left(slog, old)]
            insort(slog, new)

    j = -1
    if ondemand:
        while True:
            j += 1
            win.ensure_step(j)
            if j >= win.steps_loaded:
                break
            if j in win.epoch_first and j:
                win._cut_step = j
                win.trim([sst[r][j] for r in range(W)])
            t = [B] * W
            for r in range(W):
                nd = node_of[r]
                own = log[nd]
                lmax = own
                tr = B
                Sr, Xr = S[r], X[r]
                bs = base[r]
                fs = 0.0
                th = -inf      # γ holds while tr <= th (the smallest logged start >= the tr it was taken at)
                gs = 0.0
                lp = -inf      # the last PFS read's start (tr only grows: the largest)
                if win.all_window:     # every access a window-rule PFS read: the loop below, cut to that case
                    del slog[bisect_left(slog, own)]
                    if comp_const is not None:
                        for s in Sr[sst[r][j] - bs:sst[r][j + 1] - bs]:
                            if tr > th:
                                i = bisect_left(slog, tr)
                                th = slog[i]
                                gs = RG[i]
                            fe = s * gs + lat
                            fs += fe
                            lp = tr
                            tr += fe + s * w_spb + comp_const
                    else:
                        for s in Sr[sst[r][j] - bs:sst[r][j + 1] - bs]:
                            if tr > th:
                                i = bisect_left(slog, tr)
                                th = slog[i]
                                gs = RG[i]
                            fe = s * gs + lat
                            fs += fe
                            lp = tr
                            tr += fe + s * w_spb + s * comp_spb
                    if lp > lmax:
                        log[nd] = lmax = lp
                    insort(slog, lmax)
                    fsh[r] += fs
                    t[r] = tr
                    continue
                for f in range(sst[r][j] - bs, sst[r][j + 1] - bs):
                    x = Xr[f]
                    if x is None:
                        if tr > th:
                            i = bisect_left(slog, tr)
                            th = slog[i] if i < nn else inf
                            gs = pfs_spb[1 + nn - i - (own >= tr)]
                        s = Sr[f]
                        fe = s * gs + lat
                        fs += fe
                        lp = tr
                        tr += fe + s * w_spb + (comp_const if comp_const is not None else s * comp_spb)
                    elif x < 0.0:
                        lp = tr
                        tr -= x
                    else:
                        tr += x
                if lp > lmax:
                    lmax = lp
                fsh[r] += fs      # stall: these fetches plus the window reads' writes (summed at load)
                t[r] = tr
                if lmax != own:
                    log[nd] = lmax
                    relog(nd, own)
            Bn = max(t) if W else B
            for r in range(W):
                barrier[r] += Bn - t[r]
            B = Bn
            step_end.append(B)
    else:
        p_thr = max(1, int(round(threads_per_rank or 1)))
        free = [[t0] * p_thr for _ in range(W)]
        counter = [0] * W
        AV = [array("d") for _ in range(W)]     # avail, per rank, aligned with the window's lists
        vec = W >= VEC_MIN_RANKS and grouped
        capi = math.floor(cap)      # held + s <= cap in whole bytes
        F0 = np.zeros(W, np.int64)  # each rank's next access to schedule (absolute index)
        FB = np.zeros(W, np.int64)  # the block (epoch) its buffer search starts in
        while True:
            j += 1
            win.ensure_step(j)
            if j >= win.steps_loaded:
                break
            if j in win.epoch_first and j > 1:
                win._cut_step = j - 1
                cut = [sst[r][j - 1] for r in range(W)]
                for r in range(W):
                    k = cut[r] - base[r]
                    if k > 0:
                        del AV[r][:k]
                win.trim(cut)
            # how many accesses each rank schedules: all of this step's, then while the buffer has room. The
            # buffer holds the rank's accesses from this step's first on (the previous steps' have left it):
            # the reference admits access a while P(a + 1) - P(step start) <= cap (P: the bytes of the first
            # a accesses, exact in whole bytes), so up to the largest a with P(a) <= P(step start) + cap
            blk = win.mats[win.step_epoch[j]]
            kk = j - blk[3]
            bk = blk[4]
            T = bk.Q[bk.rowoff + blk[2][:, kk]] - bk.rowbig + bk.A + capi
            end = np.maximum(np.maximum(win.admit(FB, T), bk.E0 + blk[2][:, kk + 1]), F0)
            F0l = F0.tolist()
            Nl = (end - F0).tolist()
            F0 = end
            for r in range(W):
                n = Nl[r]
                if not n:
                    continue
                bs = base[r]
                Sr = S[r]
                f0 = F0l[r] - bs
                nd = node_of[r]
                own = log[nd]
                lmax = own
                Xr, fr = X[r], free[r]
                k0 = counter[r]
                counter[r] = (k0 + n) % p_thr
                ev = [0.0] * n
                fs = 0.0
                if series and win.all_window:     # the loop below, cut to window-rule PFS reads written in series
                    del slog[bisect_left(slog, own)]
                    for t_ in range(p_thr):
                        q0 = (t_ - k0) % p_thr
                        if q0 >= n:
                            continue
                        st = st0 = fr[t_] if fr[t_] > B else B
                        th = -inf
                        gs = 0.0
                        ch: list = []
                        app = ch.append
                        for s in Sr[f0 + q0:f0 + n:p_thr]:
                            if st > th:
                                i = bisect_left(slog, st)
                                th = slog[i]
                                gs = RG[i]
                            fe = s * gs + lat
                            fs += fe
                            st += fe + s * w_spb
                            app(st)
                        fr[t_] = st
                        lp = ch[-2] if len(ch) > 1 else st0     # the thread's last read's start
                        if lp > lmax:
                            lmax = lp
                        if p_thr == 1:
                            ev = ch
                        else:
                            ev[q0::p_thr] = ch
                    AV[r].fromlist(ev)
                    fsh[r] += fs
                    log[nd] = lmax
                    insort(slog, lmax)
                    continue
                for t_ in range(p_thr):     # loader thread t_ takes every p-th access from its turn on
                    q0 = (t_ - k0) % p_thr
                    if q0 >= n:
                        continue
                    st = fr[t_]
                    if st < B:
                        st = B
                    th = -inf       # γ holds while st <= th (st only grows along the thread)
                    gs = 0.0
                    lp = -inf
                    for f in range(f0 + q0, f0 + n, p_thr):
                        s = Sr[f]
                        x = Xr[f]
                        if x is None:
                            if st > th:
                                i = bisect_left(slog, st)
                                th = slog[i] if i < nn else inf
                                gs = pfs_spb[1 + nn - i - (own >= st)]
                            fe = s * gs + lat
                            fs += fe
                            if series:
                                e_ = st + (fe + s * w_spb)
                            else:
                                w_ = s * w_spb
                                e_ = st + (fe if fe > w_ else w_)
                            lp = st
                        elif x < 0.0:
                            lp = st
                            e_ = st - x
                        else:
                            e_ = st + x
                        ev[f - f0] = e_
                        st = e_
                    fr[t_] = st
                    if lp > lmax:      # starts only grow along a thread: its last PFS read is its latest
                        lmax = lp
                AV[r].fromlist(ev)
                fsh[r] += fs
                if lmax != own:
                    log[nd] = lmax
                    relog(nd, own)
            # consumption: e_f = max(avail_f, e_{f-1}) + compute_f; a wait on a PFS read logs it
            e_idx = win.step_epoch[j]
            cm, pm, rel, j0, _sm = win.mats[e_idx]
            kk = j - j0
            a_col, b_col = rel[:, kk], rel[:, kk + 1]
            if vec and (a_col == a_col[0]).all() and (b_col == b_col[0]).all():
                a0, b0 = int(a_col[0]), int(b_col[0])
                ends_a = np.full(W, B)
                if b0 > a0:
                    av2 = np.frombuffer(b"".join([AV[r][sst[r][j] - base[r]:sst[r][j + 1] - base[r]]
                                                  for r in range(W)]), dtype=np.float64).reshape(W, b0 - a0)
                    # columns contiguous; where a rank waits (a_ > e) a_ - e > 0 is added and e becomes a_,
                    # elsewhere a_ - e <= 0: + max(a_ - e, 0.0) adds 0.0 and max(e, a_) is e (the same floats)
                    avT = np.ascontiguousarray(av2.T)
                    cmT = np.ascontiguousarray(cm[:, a0:b0].T)
                    pmT = np.ascontiguousarray(pm[:, a0:b0].T)
                    e = ends_a
                    wait = np.zeros(W)
                    lg = np.full(W, -np.inf)
                    d = np.empty(W)
                    for c in range(b0 - a0):
                        a_ = avT[c]
                        w = a_ > e
                        if w.any():
                            np.subtract(a_, e, out=d)
                            np.maximum(d, 0.0, out=d)
                            wait += d
                            np.maximum(e, a_, out=e)
                            lg = np.where(w & pmT[c] & (e > lg), e, lg)
                        e += cmT[c]
                    ends_a = e
                    lgn = np.maximum.reduceat(lg, node_starts)
                    for nd in np.nonzero(lgn > np.asarray(log))[0].tolist():
                        old = log[nd]
                        log[nd] = float(lgn[nd])
                        relog(nd, old)
                    for r, x in enumerate(wait.tolist()):
                        stall[r] += x
                ends = ends_a.tolist()
            else:
                ends = [B] * W
                all_w = win.all_window      # X is not kept while every access is a window-rule PFS read
                for r in range(W):
                    nd = node_of[r]
                    own = log[nd]
                    lmax = own
                    e = B
                    bs = base[r]
                    av, Sr, Xr = AV[r], S[r], X[r]
                    wait = 0.0
                    for f in range(sst[r][j] - bs, sst[r][j + 1] - bs):
                        a_ = av[f]
                        if a_ > e:
                            wait += a_ - e
                            e = a_
                            if e > lmax:
                                x = None if all_w else Xr[f]
                                if x is None or x < 0.0:      # a PFS read
                                    lmax = e
                        e += comp_const if comp_const is not None else Sr[f] * comp_spb
                    stall[r] += wait
                    ends[r] = e
                    if lmax != own:
                        log[nd] = lmax
                        relog(nd, own)
            Bn = max(B, max(ends)) if W else B
            for r in range(W):
                barrier[r] += Bn - ends[r]
            B = Bn
            step_end.append(B)
    fetch_t = win.fetch.copy()
    fetch_t[:, SHARED] += np.asarray(fsh, dtype=np.float64)
    if not ondemand:
        fetch_t /= max(1, int(round(threads_per_rank or 1)))
    epoch_times = _epoch_times(plan, win.epoch_steps, step_end, t0)
    fetch_by = {n: fetch_t[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    bytes_by = {n: win.bytes[:, i].copy() for i, n in enumerate(TIER_NAMES)}
    if ondemand:
        stall = (np.asarray(stall, dtype=np.float64) + np.asarray(fsh, dtype=np.float64)).tolist()
    return (epoch_times, win.compute.copy(), win.stall + np.asarray(stall, dtype=np.float64),
            np.asarray(barrier, dtype=np.float64), fetch_by, bytes_by, win.samples.copy(), win.requests.copy())
