"""The thesis-rules costing's fast loops (``fastevents`` module doc): no tier fills, no trainer's own reads, no
background transfers, whole-byte sizes. What does not depend on time is costed at load (``events_window.
PlainWindow``: ``events_reads.static_costs``); the loops keep the start-time chains and the window rule's γ,
``events_reads.Reads.fetch``'s window branch inlined (a call per read would cost about a fifth of the loop).
While every loaded access is a window-rule PFS read the loops are cut to that case: the node's own entry leaves
the sorted log while its rank schedules (γ = nodes - bisect_left: ``Reads.by_index``), no per-access kind test.
Per global step: ``ondemand_step_*`` (one request at a time), or ``schedule_*`` (loader threads, their
admissions for every rank at once: ``PlainWindow.admit``) then ``consume_*`` (vectorised across ranks from
``VEC_MIN_RANKS`` ranks, else per rank)."""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, insort

import numpy as np

from ..plan import SHARED, Plan
from .events_reads import Reads, Setup, result
from .events_window import PlainWindow

VEC_MIN_RANKS = 32   # consumption vectorised across ranks from this many ranks (a per-rank loop below)


class _Plain:
    """The fast loops' state: the window, the node logs and every rank's sums of the time-dependent part."""

    def __init__(self, model, plan: Plan, sizes: np.ndarray, st: Setup, ondemand: bool, threads_per_rank, t0: float):
        W = st.W
        self.st, self.plan = st, plan
        self.win = PlainWindow(plan, sizes, st, model.compute_s_per_byte, ondemand=ondemand)
        self.reads = Reads(st)
        self.stall = [0.0] * W
        self.barrier = [0.0] * W
        self.fsh = [0.0] * W           # PFS fetch seconds of window-rule reads
        self.p_thr = max(1, int(round(threads_per_rank or 1)))
        self.free = [[t0] * self.p_thr for _ in range(W)]
        self.counter = [0] * W
        self.AV = [array("d") for _ in range(W)]     # avail, per rank, aligned with the window's lists
        node_arr = np.asarray(plan.node_map, dtype=np.int64)
        self.node_starts = np.searchsorted(node_arr, np.arange(st.nodes)) if st.nodes else np.zeros(0, np.int64)
        grouped = bool(W and np.all(np.diff(node_arr) >= 0) and node_arr[0] == 0 and np.all(np.diff(node_arr) <= 1))
        self.vec = W >= VEC_MIN_RANKS and grouped

    def next_step(self, j: int) -> bool:
        """Load step j (False: every step is costed); at an epoch's first step drop what is consumed."""
        win = self.win
        win.ensure_step(j)
        if j >= win.steps_loaded:
            return False
        if win.ondemand and j in win.epoch_first and j:
            win.cut_step = j
            win.trim([win.step_start[r][j] for r in range(self.st.W)])
        elif not win.ondemand and j in win.epoch_first and j > 1:    # keep step j - 1 (it leaves the buffer now)
            win.cut_step = j - 1
            win.trim([win.step_start[r][j - 1] for r in range(self.st.W)], also=(self.AV,))
        return True

    def barrier_step(self, B: float, ends: list) -> float:
        """Every rank waits for the step's last: the next step's start."""
        Bn = max(B, max(ends)) if ends else B
        barrier = self.barrier
        for r in range(self.st.W):
            barrier[r] += Bn - ends[r]
        return Bn

    def ondemand_step_window(self, j: int, B: float) -> list:
        """Every rank's step j from B, one request at a time, every access a window-rule PFS read."""
        st, win = self.st, self.win
        log, slog, RG, fsh = self.reads.log, self.reads.slog, self.reads.by_index, self.fsh
        S, base, sst = win.S, win.base, win.step_start
        lat, w_spb, comp_const, comp_spb = st.lat, st.w_spb, st.comp_const, win.comp_spb
        inf = float("inf")
        t = [B] * st.W
        for r in range(st.W):
            nd = st.node_of[r]
            own = log[nd]
            lmax = own
            tr = B
            Sr = S[r]
            bs = base[r]
            fs = 0.0
            th = -inf      # γ holds while tr <= th (the smallest logged start >= the tr it was taken at)
            gs = 0.0
            lp = -inf      # the last PFS read's start (tr only grows: the largest)
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
        return t

    def ondemand_step_general(self, j: int, B: float) -> list:
        """Every rank's step j from B, one request at a time: a window-rule read (X None) by its γ, a fill
        (X < 0) or a fixed-rate access (X > 0) by its cost from the load."""
        st, win, reads = self.st, self.win, self.reads
        log, slog, pfs_spb, fsh = reads.log, reads.slog, st.pfs_spb, self.fsh
        S, X, base, sst = win.S, win.X, win.base, win.step_start
        lat, w_spb, comp_const, comp_spb, nn = st.lat, st.w_spb, st.comp_const, win.comp_spb, st.nodes
        inf = float("inf")
        t = [B] * st.W
        for r in range(st.W):
            nd = st.node_of[r]
            own = log[nd]
            lmax = own
            tr = B
            Sr, Xr = S[r], X[r]
            bs = base[r]
            fs = 0.0
            th = -inf      # γ holds while tr <= th (the smallest logged start >= the tr it was taken at)
            gs = 0.0
            lp = -inf      # the last PFS read's start (tr only grows: the largest)
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
                reads.relog(nd, own)
        return t

    def admissions(self, j: int, F0: np.ndarray, FB: np.ndarray, capi: int) -> np.ndarray:
        """How far each rank schedules at step j (absolute index): all of this step's accesses, then while the
        buffer has room. The buffer holds the rank's accesses from this step's first on (the previous steps'
        have left it): the reference admits access a while P(a + 1) - P(step start) <= cap (P: the bytes of
        the first a accesses, exact in whole bytes), so up to the largest a with P(a) <= P(step start) + cap."""
        win = self.win
        blk = win.mats[win.step_epoch[j]]
        kk = j - blk[3]
        bk = blk[4]
        T = bk.Q[bk.rowoff + blk[2][:, kk]] - bk.rowbig + bk.A + capi
        return np.maximum(np.maximum(win.admit(FB, T), bk.E0 + blk[2][:, kk + 1]), F0)

    def schedule_window(self, B: float, F0l: list, Nl: list) -> None:
        """Rank r's loader threads schedule its next Nl[r] accesses (from F0l[r]), every one a window-rule PFS
        read written in series: thread t_ takes every p-th access from its turn on."""
        st, win, p_thr = self.st, self.win, self.p_thr
        log, slog, RG, fsh, AV = self.reads.log, self.reads.slog, self.reads.by_index, self.fsh, self.AV
        S, base, free, counter = win.S, win.base, self.free, self.counter
        lat, w_spb = st.lat, st.w_spb
        inf = float("inf")
        for r in range(st.W):
            n = Nl[r]
            if not n:
                continue
            Sr = S[r]
            f0 = F0l[r] - base[r]
            nd = st.node_of[r]
            own = log[nd]
            lmax = own
            fr = free[r]
            k0 = counter[r]
            counter[r] = (k0 + n) % p_thr
            ev = [0.0] * n
            fs = 0.0
            del slog[bisect_left(slog, own)]
            for t_ in range(p_thr):
                q0 = (t_ - k0) % p_thr
                if q0 >= n:
                    continue
                st_ = st0 = fr[t_] if fr[t_] > B else B
                th = -inf
                gs = 0.0
                ch: list = []
                app = ch.append
                for s in Sr[f0 + q0:f0 + n:p_thr]:
                    if st_ > th:
                        i = bisect_left(slog, st_)
                        th = slog[i]
                        gs = RG[i]
                    fe = s * gs + lat
                    fs += fe
                    st_ += fe + s * w_spb
                    app(st_)
                fr[t_] = st_
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

    def schedule_general(self, B: float, F0l: list, Nl: list) -> None:
        """``schedule_window`` for any access: a window-rule read (X None) by its γ, a fill (X < 0) or a
        fixed-rate access (X > 0) by its cost from the load."""
        st, win, reads, p_thr = self.st, self.win, self.reads, self.p_thr
        log, slog, pfs_spb, fsh, AV = reads.log, reads.slog, st.pfs_spb, self.fsh, self.AV
        S, X, base, free, counter = win.S, win.X, win.base, self.free, self.counter
        lat, w_spb, series, nn = st.lat, st.w_spb, st.series, st.nodes
        inf = float("inf")
        for r in range(st.W):
            n = Nl[r]
            if not n:
                continue
            Sr, Xr, fr = S[r], X[r], free[r]
            f0 = F0l[r] - base[r]
            nd = st.node_of[r]
            own = log[nd]
            lmax = own
            k0 = counter[r]
            counter[r] = (k0 + n) % p_thr
            ev = [0.0] * n
            fs = 0.0
            for t_ in range(p_thr):     # loader thread t_ takes every p-th access from its turn on
                q0 = (t_ - k0) % p_thr
                if q0 >= n:
                    continue
                st_ = fr[t_]
                if st_ < B:
                    st_ = B
                th = -inf       # γ holds while st_ <= th (st_ only grows along the thread)
                gs = 0.0
                lp = -inf
                for f in range(f0 + q0, f0 + n, p_thr):
                    s = Sr[f]
                    x = Xr[f]
                    if x is None:
                        if st_ > th:
                            i = bisect_left(slog, st_)
                            th = slog[i] if i < nn else inf
                            gs = pfs_spb[1 + nn - i - (own >= st_)]
                        fe = s * gs + lat
                        fs += fe
                        if series:
                            e_ = st_ + (fe + s * w_spb)
                        else:
                            w_ = s * w_spb
                            e_ = st_ + (fe if fe > w_ else w_)
                        lp = st_
                    elif x < 0.0:
                        lp = st_
                        e_ = st_ - x
                    else:
                        e_ = st_ + x
                    ev[f - f0] = e_
                    st_ = e_
                fr[t_] = st_
                if lp > lmax:      # starts only grow along a thread: its last PFS read is its latest
                    lmax = lp
            AV[r].fromlist(ev)
            fsh[r] += fs
            if lmax != own:
                log[nd] = lmax
                reads.relog(nd, own)

    def consume_vector(self, j: int, B: float, a0: int, b0: int, cm: np.ndarray, pm: np.ndarray) -> list:
        """Every rank consumes step j's columns a0..b0 at once (e_f = max(avail_f, e_{f-1}) + compute_f; a wait
        on a PFS read logs it): where a rank waits (a_ > e) a_ - e > 0 is added and e becomes a_, elsewhere
        a_ - e <= 0: + max(a_ - e, 0.0) adds 0.0 and max(e, a_) is e (the same floats)."""
        st, win, reads, AV = self.st, self.win, self.reads, self.AV
        log, W, sst, base = reads.log, st.W, win.step_start, win.base
        ends_a = np.full(W, B)
        if b0 <= a0:
            return ends_a.tolist()
        av2 = np.frombuffer(b"".join([AV[r][sst[r][j] - base[r]:sst[r][j + 1] - base[r]] for r in range(W)]),
                            dtype=np.float64).reshape(W, b0 - a0)
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
        lgn = np.maximum.reduceat(lg, self.node_starts)
        for nd in np.nonzero(lgn > np.asarray(log))[0].tolist():
            old = log[nd]
            log[nd] = float(lgn[nd])
            reads.relog(nd, old)
        stall = self.stall
        for r, x in enumerate(wait.tolist()):
            stall[r] += x
        return e.tolist()

    def consume_loop(self, j: int, B: float) -> list:
        """``consume_vector`` rank by rank (any steps: ragged, ranks not grouped by node)."""
        st, win, reads, AV = self.st, self.win, self.reads, self.AV
        log, S, X, base, sst, stall = reads.log, win.S, win.X, win.base, win.step_start, self.stall
        comp_const, comp_spb = st.comp_const, win.comp_spb
        ends = [B] * st.W
        all_w = win.all_window      # X is not kept while every access is a window-rule PFS read
        for r in range(st.W):
            nd = st.node_of[r]
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
                reads.relog(nd, own)
        return ends

    def consume(self, j: int, B: float) -> list:
        """Every rank consumes step j: vectorised where the ranks are grouped by node and the step's columns
        are the same for every rank, else rank by rank; each rank's end."""
        win = self.win
        cm, pm, rel, j0, _sm = win.mats[win.step_epoch[j]]
        kk = j - j0
        a_col, b_col = rel[:, kk], rel[:, kk + 1]
        if self.vec and (a_col == a_col[0]).all() and (b_col == b_col[0]).all():
            return self.consume_vector(j, B, int(a_col[0]), int(b_col[0]), cm, pm)
        return self.consume_loop(j, B)


def cost_plain(model, plan: Plan, sizes: np.ndarray, st: Setup, policy: str, threads_per_rank: float | None,
               t0: float) -> tuple:
    """The fast loops' costing of ``plan`` (``fastevents.cost_events``' arguments): per global step, ondemand
    one request at a time, else the loader threads' admissions, their chains and the consumption."""
    ondemand = policy == "ondemand"
    p = _Plain(model, plan, sizes, st, ondemand, threads_per_rank, t0)
    win = p.win
    B = t0
    step_end: list[float] = []
    capi = math.floor(st.cap)      # held + s <= cap in whole bytes
    F0 = np.zeros(st.W, np.int64)  # each rank's next access to schedule (absolute index)
    FB = np.zeros(st.W, np.int64)  # the block (epoch) its buffer search starts in
    j = -1
    while True:
        j += 1
        if not p.next_step(j):
            break
        if ondemand:
            ends = p.ondemand_step_window(j, B) if win.all_window else p.ondemand_step_general(j, B)
        else:
            end = p.admissions(j, F0, FB, capi)
            F0l, Nl, F0 = F0.tolist(), (end - F0).tolist(), end
            if st.series and win.all_window:
                p.schedule_window(B, F0l, Nl)
            else:
                p.schedule_general(B, F0l, Nl)
            ends = p.consume(j, B)
        B = p.barrier_step(B, ends)
        step_end.append(B)
    fetch_t = win.fetch.copy()
    fetch_t[:, SHARED] += np.asarray(p.fsh, dtype=np.float64)
    if not ondemand:
        fetch_t /= p.p_thr
    stall = np.asarray(p.stall, dtype=np.float64)
    if ondemand:    # the window reads' fetches (their writes are in win.stall)
        stall = stall + np.asarray(p.fsh, dtype=np.float64)
    return result(plan, win.epoch_steps, step_end, t0, win.compute, win.stall + stall, p.barrier, fetch_t,
                  win.bytes, win.samples, win.requests)
