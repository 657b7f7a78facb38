"""The thesis-rules costing's generic loops (``fastevents`` module doc), each access costed by
``events_reads.Reads.fetch``:

- ``cost_prefetch_generic``: loader threads with what the fast loops leave out (tier fills by the tiers'
  threads, the trainer's own PFS reads, background transfers, sizes with fractions of a byte): the reference's
  loop with γ by bisection, epochs streamed (``events_window.Window``);
- ``cost_ondemand_exchange``: pls (ondemand, background transfers); its steps without a PFS read (nothing in them
  depends on γ) costed for every rank at once as running sums (``np.cumsum`` along the step's columns: the
  loop's additions in its order), the others by the per-rank loop: the same floats either way
  (tests/unit/test_simulate_pls_fast.py).
"""

from __future__ import annotations

import numpy as np

from ..plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED, Plan
from ..storage.tiers import TIER_NAMES
from .events_reads import Reads, Setup, exchange_per_step, result, setup
from .events_window import Window

# pls's steps without a PFS read are costed for every rank at once from this many ranks (below: the per-rank
# loop, the same floats; tests/unit/test_simulate_pls_fast.py compares the two)
EXCHANGE_VEC_MIN_RANKS = 1


class _GenericPrefetch:
    """The loader threads' loop of the reference with γ by bisection: per global step, every rank schedules its
    accesses (``schedule``) while the staging buffer has room, then consumes the step's (``consume``)."""

    def __init__(self, model, plan: Plan, sizes: np.ndarray, st: Setup, threads_per_rank: float | None, t0: float,
                 tier_fill: bool, trainer_shared: bool):
        W = st.W
        self.st, self.trainer_shared = st, trainer_shared
        self.p_thr = max(1, int(round(threads_per_rank or 1)))
        self.win = Window(plan, sizes, st.comp_const, model.compute_s_per_byte, model=model)
        self.ready: list = []
        fill_starts: dict = {}
        if tier_fill:
            self.ready, fill_starts = tier_fill_ready(model, plan, sizes, t0, st.pfs_spb[st.nodes], st.w_spb,
                                                      st.lat, st.K)
        self.reads = Reads(st, fill_starts)
        self.compute, self.stall, self.samples = [0.0] * W, [0.0] * W, [0] * W
        self.fetch_l = [[0.0] * len(TIER_NAMES) for _ in range(W)]
        self.bytes_l = [[0.0] * len(TIER_NAMES) for _ in range(W)]
        self.fetch_tr = [0.0] * W        # the trainer's own PFS fetch seconds (not shared by the loader threads)
        self.free = [[t0] * self.p_thr for _ in range(W)]
        self.counter, self.nxt, self.held = [0] * W, [0] * W, [0.0] * W
        self.AV: list[list] = [[] for _ in range(W)]     # avail, per rank, aligned with the window's lists

    def trim(self, j: int) -> None:
        """At an epoch's first step j (> 1): drop what precedes step j - 1 (its bytes leave the buffer now)."""
        self.win.trim([self.win.step_start[r][j - 1] for r in range(self.st.W)], also=(self.AV,))

    def release(self, r: int, j: int) -> None:
        """Step j - 1's samples leave rank r's buffer (the trainer's own PFS reads were never buffered: 0.0)."""
        win = self.win
        bs, sst = win.base[r], win.step_start[r]
        a, b = sst[j - 1] - bs, sst[j] - bs
        Sr, SRCr = win.S[r], win.SRC[r]
        if self.trainer_shared:
            self.held[r] -= sum([0.0 if c == SHARED else s for s, c in zip(Sr[a:b], SRCr[a:b])])
        else:
            self.held[r] -= sum(Sr[a:b])

    def tier_source(self, r: int, f: int, c: int, t: float) -> int:
        """The source of rank r's access f (window list position) that the tier threads fill, read at t: its own
        tier once the fill is done, else the planned peer, else the PFS (window rule)."""
        win = self.win
        if self.ready[r].get(win.IDS[r][f], np.inf) <= t:
            return c if (c == MEMORY or c == LOCAL) else win.KEEP[r][f]
        return c if c == PEER else SHARED

    def schedule(self, r: int, j: int, B: float) -> None:
        """Rank r schedules its accesses from its next one on: all of step j's, then while they fit the buffer
        (across epochs: loaded as needed)."""
        st, win, reads, trainer_shared = self.st, self.win, self.reads, self.trainer_shared
        bs, sst = win.base[r], win.step_start[r]
        Sr, SRCr = win.S[r], win.SRC[r]
        must = sst[j + 1] - bs
        f = self.nxt[r] - bs
        nd = st.node_of[r]
        own = reads.log[nd]
        FILLr, KPr, fr, av = win.FILL[r], win.KEEP[r], self.free[r], self.AV[r]
        br, ftr, use_ready, tier_source = self.bytes_l[r], self.fetch_l[r], bool(self.ready), self.tier_source
        fetch, p_thr, cap, w_spb, series = reads.fetch, self.p_thr, st.cap, st.w_spb, st.series
        hr = self.held[r]
        k = self.counter[r]
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
            t = fr[k] if fr[k] > B else B
            c = SRCr[f]
            if trainer_shared and c == SHARED:      # the trainer reads it (consumption below)
                av.append(0.0)
                f += 1
                k = k + 1 if k + 1 < p_thr else 0
                continue
            if use_ready and (c == MEMORY or c == LOCAL or KPr[f] != NO_TIER):     # filled by the tier threads
                c = tier_source(r, f, c, t)
                fe = fetch(s, c, False, nd, own, t)
            else:
                fe = fetch(s, c, FILLr[f], nd, own, t)
            wr = s * w_spb
            cost = fe + wr if series else (fe if fe > wr else wr)
            ftr[c] += fe
            br[c] += s
            e_ = t + cost
            fr[k] = e_
            av.append(e_)
            hr += s
            f += 1
            k = k + 1 if k + 1 < p_thr else 0
        self.held[r] = hr
        self.counter[r] = k
        self.nxt[r] = f + bs
        reads.relog(nd, own)

    def consume(self, r: int, j: int, B: float) -> float:
        """Rank r consumes step j from B (e_f = max(avail_f, e_{f-1}) + compute_f; a wait on a PFS read logs it;
        the trainer's own PFS reads in series); the step's end."""
        st, win, reads = self.st, self.win, self.reads
        nd = st.node_of[r]
        own = reads.log[nd]
        log, fetch, w_spb, trainer_shared = reads.log, reads.fetch, st.w_spb, self.trainer_shared
        e = B
        bs = win.base[r]
        a, b = win.step_start[r][j] - bs, win.step_start[r][j + 1] - bs
        av, cm, Sr, SRCr, FILLr = self.AV[r], win.COMP[r], win.S[r], win.SRC[r], win.FILL[r]
        wait = 0.0
        csum = 0.0
        for f in range(a, b):
            if trainer_shared and SRCr[f] == SHARED:
                s = Sr[f]
                fe = fetch(s, SHARED, FILLr[f], nd, own, e)
                io = fe + s * w_spb
                self.fetch_tr[r] += fe
                self.bytes_l[r][SHARED] += s
                wait += io
                e += io
            elif av[f] > e:
                wait += av[f] - e
                e = av[f]
                if SRCr[f] == SHARED and e > log[nd]:
                    log[nd] = e
            e += cm[f]
            csum += cm[f]
        self.compute[r] += csum
        self.samples[r] += b - a
        if j in win.xch:        # pls: the exchange's files, then its sends (from the step's start)
            x = win.xch[j][1][r]
            if x:
                wait += x
                e += x
            x = B + win.xch[j][0][r]
            if x > e:
                wait += x - e
                e = x
        self.stall[r] += wait
        reads.relog(nd, own)
        return e


def cost_prefetch_generic(model, plan: Plan, sizes: np.ndarray, threads_per_rank: float | None, t0: float,
                          tier_fill: bool = False, trainer_shared: bool = False):
    """Loader threads (the ``prefetch`` policy) by the reference's loop with γ by bisection, epochs streamed:
    every case, tier fills (``tier_fill``) and the trainer's own PFS reads (``trainer_shared``) included."""
    st = setup(model, plan)
    g = _GenericPrefetch(model, plan, sizes, st, threads_per_rank, t0, tier_fill, trainer_shared)
    win, W = g.win, st.W
    barrier = [0.0] * W
    B = t0
    step_end: list[float] = []
    j = -1
    while True:
        j += 1
        win.ensure_step(j)
        if j >= win.steps_loaded:
            break
        if j in win.epoch_first and j > 1:   # keep step j - 1 (its bytes leave the buffer now)
            g.trim(j)
        for r in range(W):
            if j > 0:
                g.release(r, j)
            g.schedule(r, j, B)
        ends = [g.consume(r, j, B) for r in range(W)]
        Bn = max(B, max(ends)) if W else B
        for r in range(W):
            barrier[r] += Bn - ends[r]
        B = Bn
        step_end.append(B)
    fetch_t = np.asarray(g.fetch_l, dtype=np.float64).reshape(W, len(TIER_NAMES))
    fetch_t /= g.p_thr
    fetch_t[:, SHARED] += np.asarray(g.fetch_tr, dtype=np.float64)
    bytes_t = np.asarray(g.bytes_l, dtype=np.float64).reshape(W, len(TIER_NAMES))
    # the PFS requests, counted while loading, where every epoch was loaded (else the summary counts them)
    return result(plan, win.epoch_steps, step_end, t0, g.compute, g.stall, barrier, fetch_t, bytes_t, g.samples,
                  win.requests if win.next_epoch >= plan.epochs else None)


def _cols(x: np.ndarray, idx: np.ndarray, pad: np.ndarray, first: np.ndarray | None = None) -> np.ndarray:
    """A step's columns (W, n) of the flat per-access ``x`` (0.0 where a rank has fewer), ``first`` before them."""
    m = x[idx] if len(x) else np.zeros(idx.shape)
    m[pad] = 0.0
    return m if first is None else np.concatenate([first[:, None], m], axis=1)


class _Exchange:
    """pls's running sums per rank (``cost_ondemand_exchange``) and its two ways of costing a step."""

    def __init__(self, st: Setup):
        W, NT = st.W, len(TIER_NAMES)
        self.st = st
        self.reads = Reads(st)
        self.compute, self.stall, self.barrier = np.zeros(W), np.zeros(W), np.zeros(W)
        self.fetch, self.byts = np.zeros((W, NT)), np.zeros((W, NT))
        self.samples = np.zeros(W, np.int64)
        self.requests = np.zeros(W)

    def loop_step(self, ep: tuple, a: np.ndarray, b: np.ndarray, B: float) -> np.ndarray:
        """The step's accesses [a[r], b[r]) of every rank by the per-rank loop (ondemand: fetch + write + compute
        in series from B); each rank's end."""
        st, reads = self.st, self.reads
        s, src, fillv, comp = ep[:4]
        fetch, log, w_spb, NT = reads.fetch, reads.log, st.w_spb, len(TIER_NAMES)
        t = np.full(st.W, B)
        st_l, cm_l, fr_l, br_l = self.stall.tolist(), self.compute.tolist(), self.fetch.tolist(), self.byts.tolist()
        for r in range(st.W):
            nd = st.node_of[r]
            own = log[nd]
            tr = B
            fr, br = fr_l[r], br_l[r]
            st_r = 0.0
            cm = 0.0
            a_, b_ = int(a[r]), int(b[r])
            for s_, c, fill, cf in zip(s[a_:b_].tolist(), src[a_:b_].tolist(), fillv[a_:b_].tolist(),
                                      comp[a_:b_].tolist()):
                f_ = fetch(s_, c, fill, nd, own, tr)
                io_ = f_ + s_ * w_spb
                fr[c] += f_
                br[c] += s_
                st_r += io_
                cm += cf
                tr += io_ + cf
            st_l[r] += st_r
            cm_l[r] += cm
            t[r] = tr
            reads.relog(nd, own)
        self.stall, self.compute = np.asarray(st_l), np.asarray(cm_l)
        self.fetch, self.byts = np.asarray(fr_l).reshape(st.W, NT), np.asarray(br_l).reshape(st.W, NT)
        return t

    def vector_step(self, ep: tuple, a: np.ndarray, b: np.ndarray, B: float) -> np.ndarray:
        """A step without a PFS read for every rank at once: the loop's running sums by ``np.cumsum`` along the
        step's columns (a rank with fewer accesses padded with 0.0: a non-negative sum stays as it is)."""
        comp, io, d, by_code = ep[3:]
        W = self.st.W
        n = int((b - a).max()) if W else 0
        idx = a[:, None] + np.arange(n)
        pad = idx >= b[:, None]
        idx[pad] = 0
        tr_v = np.cumsum(_cols(d, idx, pad, np.full(W, B)), axis=1)[:, -1]
        self.stall += np.cumsum(_cols(io, idx, pad), axis=1)[:, -1] if n else 0.0
        self.compute += np.cumsum(_cols(comp, idx, pad), axis=1)[:, -1] if n else 0.0
        for c, (fc, sc) in by_code.items():
            self.fetch[:, c] = np.cumsum(_cols(fc, idx, pad, self.fetch[:, c]), axis=1)[:, -1]
            self.byts[:, c] = np.cumsum(_cols(sc, idx, pad, self.byts[:, c]), axis=1)[:, -1]
        return tr_v

    def exchange(self, ex, k: int, B: float, tr_v: np.ndarray) -> np.ndarray:
        """pls: the exchange's files, then its sends (from the step's start), for every rank; the step's ends."""
        x = ex[1][:, k]
        self.stall = self.stall + x       # + 0.0 where it has none: the same floats as skipping it
        tr_v = tr_v + x
        x = B + ex[0][:, k]
        w = x > tr_v
        self.stall = np.where(w, self.stall + (x - tr_v), self.stall)
        return np.where(w, x, tr_v)


def _exchange_epoch(st: Setup, model, plan: Plan, sizes: np.ndarray, e: int, requests: np.ndarray):
    """Epoch e's arrays for ``_Exchange`` (its PFS requests added to ``requests``): (steps, the accesses' (s, src,
    fill, compute, io (a fixed-rate read's fetch + write), io + compute, per tier code its fetch and bytes), (lo,
    hi) per rank and step, which steps read the PFS, the exchange per step); None for an epoch without steps."""
    W = st.W
    ids, src, kp, counts, rel, steps, req = Window.epoch_arrays(plan, e, sizes, with_chunk=True, transfers_ok=True)
    requests += np.bincount(np.repeat(np.arange(W), counts), weights=req, minlength=W)
    ex = exchange_per_step(model, plan.epoch(e), sizes, W)
    if not steps:
        return steps, None, ex
    s = sizes[ids].astype(np.float64)
    comp = np.full(len(s), st.comp_const) if st.comp_const is not None else s * model.compute_s_per_byte
    fe = s * np.asarray(st.fixed_spb, dtype=np.float64)[src]    # a fixed-rate read's fetch (a PFS read's per step)
    io = fe + s * st.w_spb
    shared = src == SHARED
    codes = [c for c in np.unique(src).tolist() if c != SHARED]
    # per tier code, its reads' fetch seconds and bytes (0.0 elsewhere: the code's own running sum)
    by_code = {c: (fe, s) if len(codes) == 1 else (np.where(src == c, fe, 0.0), np.where(src == c, s, 0.0))
               for c in codes}
    off = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    sh_c = np.concatenate([[0], np.cumsum(shared)])
    lo, hi = off[:, None] + rel[:, :-1], off[:, None] + rel[:, 1:]
    py_step = ((sh_c[hi] - sh_c[lo]) > 0).any(axis=0).tolist()     # the steps with a PFS read (any rank)
    return steps, ((s, src, kp != NO_TIER, comp, io, io + comp, by_code), lo, hi, py_step), ex


def cost_ondemand_exchange(model, plan: Plan, sizes: np.ndarray, t0: float):
    """The ondemand costing of a plan with background transfers (pls, a trainer that reads its own samples): per
    step the per-rank loop where any rank reads the PFS, else every rank's running sums at once (module doc)."""
    st = setup(model, plan)
    x = _Exchange(st)
    vec = st.W >= EXCHANGE_VEC_MIN_RANKS
    B = t0
    step_end: list[float] = []
    epoch_steps: list[int] = []
    for e in range(plan.epochs):
        steps, arrays, ex = _exchange_epoch(st, model, plan, sizes, e, x.requests)
        epoch_steps.append(steps)
        if arrays is None:
            continue
        ep, lo, hi, py_step = arrays
        for k in range(steps):
            a, b = lo[:, k], hi[:, k]
            tr_v = x.loop_step(ep, a, b, B) if py_step[k] or not vec else x.vector_step(ep, a, b, B)
            x.samples += b - a
            if ex is not None:
                tr_v = x.exchange(ex, k, B, tr_v)
            Bn = float(tr_v.max()) if st.W else B
            x.barrier += Bn - tr_v
            B = Bn
            step_end.append(B)
    return result(plan, epoch_steps, step_end, t0, x.compute, x.stall, x.barrier, x.fetch, x.byts,
                  x.samples.astype(np.float64), x.requests)


def tier_fill_ready(model, plan: Plan, sizes: np.ndarray, t0: float, fill_spb: float, w_spb: float, lat: float,
                    K: int):
    """When each rank's tier fills are done (per rank: {sample: time}) and, per node, the latest start the
    tier threads log; the reference's arithmetic (round robin over the tier's threads from t0, γ = nodes).
    Every cached sample is filled from the PFS, also one whose first access the plan serves from a peer."""
    W = plan.world_size
    parts: list[list] = [[] for _ in range(W)]
    for e in range(plan.epochs):
        ids, src, kp, counts, _rel, _steps = Window.epoch_arrays(plan, e, sizes)
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
            start = _fill_tiers(model, rd, ids, kp, sizes[ids].astype(np.float64), t0, fill_spb + w_spb, lat, K)
            if start is not None:
                nd = int(plan.node_map[r])
                fill_starts[nd] = max(fill_starts.get(nd, -np.inf), start)
        ready.append(rd)
    return ready, fill_starts


def _fill_tiers(model, rd: dict, ids: np.ndarray, kp: np.ndarray, s: np.ndarray, t0: float, spb: float, lat: float,
                K: int) -> float | None:
    """One rank's fills, tier by tier (memory, then local): when each sample's fill is done into ``rd`` (the
    earlier of two), the latest start logged (None: no fill)."""
    latest = None
    for code, kind in ((MEMORY, "memory"), (LOCAL, "local")):
        tier = next((t for t in model.p.tiers if t.kind == kind), None)
        sel = np.nonzero(kp == code)[0]
        if not len(sel):
            continue
        thr = max(1, int((tier.threads if tier is not None else 1) // K))
        cost = s[sel] * spb + lat
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
        m = float(starts.max())
        latest = m if latest is None else max(latest, m)
    return latest
