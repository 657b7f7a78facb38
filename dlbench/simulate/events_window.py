"""The thesis-rules costing's epochs as the loops read them (``fastevents`` module doc): ``Window``, every rank's
accesses of the loaded epochs as Python lists (the generic loop's), and ``PlainWindow``, the fast loops' (plus
what does not depend on time, computed with NumPy when an epoch is loaded, and the staging buffer's integer byte
prefix sums, ``BufferBlock``). Epochs are loaded as the loops reach them and dropped once consumed."""

from __future__ import annotations

from array import array
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError
from ..plan import NO_TIER, SHARED, Plan
from ..storage.tiers import TIER_NAMES
from .events_reads import KIND_FILL, KIND_WINDOW, Setup, exchange_per_step, static_costs


class Window:
    """Every rank's accesses of the loaded epochs as Python lists (the hot loop's fastest form). Indices
    are absolute (over all epochs); list position = absolute index - ``base[r]``. ``step_start[r][j]``: the
    absolute index of global step j's first access of rank r."""

    def __init__(self, plan: Plan, sizes: np.ndarray, comp_const: float | None, comp_spb: float, model=None):
        W = plan.world_size
        self.plan, self.sizes, self.W = plan, sizes, W
        self.comp_const, self.comp_spb = comp_const, comp_spb
        self.S: list = [[] for _ in range(W)]     # list per rank (PlainWindow: array('d'))
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
        unless ``transfers_ok`` (the generic loop costs them: ``events_reads.exchange_per_step``)."""
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

    def lists(self) -> tuple:
        """The per-rank lists ``trim`` cuts."""
        return self.S, self.SRC, self.FILL, self.COMP, self.IDS, self.KEEP

    def trim(self, keep_from: list, also: tuple = ()) -> None:
        """Drop every rank's accesses before absolute index ``keep_from[r]``, from the window's lists and the
        per-rank lists ``also`` (aligned with them: the loops' avail)."""
        for r in range(self.W):
            k = keep_from[r] - self.base[r]
            if k > 0:
                for lst in self.lists() + also:
                    del lst[r][:k]
                self.base[r] += k


class BufferBlock(NamedTuple):
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



class PlainWindow(Window):
    """``Window`` plus, per access, what does not depend on time, computed with NumPy at load in the
    reference's arithmetic: the kind (``KIND_*``), the write s/β, the whole cost of a fixed-rate access (a
    fill at γ = nodes, an own-tier or peer read; every PFS read too under ``gamma: nodes``); and, per rank,
    the sums over accesses that do not depend on time (compute, samples, bytes and fixed fetch time by tier,
    the sync policy's fixed stall). Per epoch the padded (W, n) compute and PFS flags for the vectorised
    consumption and, for the loader threads' buffer, the accesses' byte prefix sums as integers (``BufferBlock``).
    The sizes are kept per rank in ``array('d')`` (loaded and trimmed as bytes, no float object per access
    until the chains read it)."""

    def __init__(self, plan: Plan, sizes: np.ndarray, st: Setup, comp_spb: float, *, ondemand: bool):
        super().__init__(plan, sizes, st.comp_const, comp_spb)
        W = plan.world_size
        self.S = [array("d") for _ in range(W)]
        self.ptot = np.zeros(W, np.int64)      # bytes of each rank's loaded accesses (the next block's A)
        self.st, self.ondemand = st, ondemand
        self.X: list[list] = [[] for _ in range(W)]    # per access: None, -cost or cost (``X_*`` below)
        self.compute = np.zeros(W)
        self.samples = np.zeros(W)
        self.requests = np.zeros(W)
        self.bytes = np.zeros((W, len(TIER_NAMES)))
        self.fetch = np.zeros((W, len(TIER_NAMES)))
        self.stall = np.zeros(W)
        self.mats: dict = {}     # epoch -> (comp (W, n), pfs (W, n), rel (W, steps + 1), first global step, BufferBlock)
        self.step_epoch: list[int] = []    # the epoch of every loaded global step
        self.cut_step = 0                 # the global step the last trim kept from
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
        window = self.st.fixed_gamma is None and bool(pfs.all()) and not fill.any()
        n = int(counts.max()) if W else 0
        rows = len(s) == W * n      # every rank has n accesses: (W, n) views of the accesses
        if window:      # every access a window-rule PFS read: nothing static but its write
            static = None
            wr = s * self.st.w_spb if self.ondemand else None
            self.bytes[:, SHARED] += np.bincount(rix, weights=s, minlength=W)
        else:
            src = src.astype(np.int64)
            kind, fetch, wr, io, cost = static_costs(self.st, s, src, fill, comp, self.ondemand)
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

    def _block(self, sm: np.ndarray, counts: np.ndarray) -> BufferBlock:
        """The epoch's ``BufferBlock`` from its (W, n) sizes (zero past a rank's count) and per-rank counts."""
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
        return BufferBlock((P + (rows * big)[:, None]).reshape(-1), A, E0, E0 + counts, rowtot, big, rows * (n + 1),
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

    def lists(self) -> tuple:
        return self.S, self.X

    def trim(self, keep_from: list, also: tuple = ()) -> None:
        super().trim(keep_from, also)
        done = [e for e in self.mats if e < self.step_epoch[min(len(self.step_epoch) - 1, self.cut_step)]]
        for e in done:
            del self.mats[e]


