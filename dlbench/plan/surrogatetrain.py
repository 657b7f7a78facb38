"""SurrogateTrain / SOLAR's planner (docs/STRATEGIES.md ``surrogatetrain``): pure NumPy, no files, MPI or clocks.

Offline scheduling
------------------
E permutations π_0 .. π_{E-1} are drawn from the seed (π_k = ``epoch_permutation(seed, k, F)``, the same
draws naive uses). With C = the aggregate buffer in samples (W ranks' bytes over the mean sample size, at
most F), the
transition cost ``cost[a][b]`` is the number of samples among the first C of π_b that are NOT among the last C
of π_a (what a FIFO buffer holding the end of epoch a cannot serve at the start of epoch b). The epoch order
is a Hamiltonian path over the E permutations minimising the summed cost (an asymmetric travelling-salesman
path). Heuristic (``order_heuristic``): nearest neighbour started from every permutation, then local search
with 2-opt (segment reversal, re-costed in both directions since the costs are asymmetric) and or-opt
(moving a segment of 1 to 3 epochs) until no move improves. ``order_exact`` (Held-Karp dynamic programme, O(2^E E^2)) gives
the optimum for small E, to compare. SOLAR's code uses particle-swarm optimisation for the same problem.

Run-time schedule (one global step at a time, every rank computes the same schedule)
----------------------------------------------------------------------------------------
Global step s of an epoch consumes the B = W·b samples π[sB:(s+1)B] (the global shuffle's global batch; the
last one is shorter: no DistributedSampler padding, each epoch is exactly a permutation).

- remap (``remap=True``): every sample of the global batch that some rank holds in its buffer is delivered
  by that rank from its memory (global batch membership unchanged, only the sample → rank mapping). This
  happens wherever a held sample appears, which in practice is the first global batches of an epoch.
  ``remap=False``: every sample stays on its DistributedSampler rank (offset j of the global batch → rank
  j mod W) and is a hit only if that rank holds it.
- balance (``balance=True``, with remap): the samples nobody holds are split evenly over the ranks
  (⌊L/W⌋ or ⌈L/W⌉ each; the extra ones go to the ranks with the fewest hits), so a rank's local batch is
  hits + loads and differs between ranks: the compute imbalance is stated in ``meta``
  (``local_batch_min/max``, ``compute_imbalance``) and the executor's batches carry it.
  ``balance=False``: every rank keeps the DistributedSampler batch size (b, or the last batch's share); a
  rank holding more of the batch than that delivers b from memory and the surplus is re-read from the shared
  tier by the ranks with room (SOLAR's behaviour): equal compute, unequal loads.
- chunking: each rank's loads of a step are the samples of a contiguous range of the step's loads sorted by
  id, consumed after its hits, so runs of consecutive ids sit in consecutive columns; ``chunk`` (see
  ``EpochPlan``) marks every run of >= 2 as one request (``chunking=False``: no ``chunk`` array).
- buffer: each rank keeps what it loads (``keep = MEMORY``) in a buffer of ``buffer_bytes``, counted in the
  samples' own sizes (``sample_nbytes``, each rounded up to ``align``; ``buffer_samples=c`` counts every sample
  as 1). When the keeps of a step would overflow it, samples are evicted at the end of the PREVIOUS step (so
  the buffer never holds more; never a sample the rank serves in this step). ``eviction="lookahead"``: the
  buffer retains the samples with the soonest next use while their summed bytes fit (Belady by bytes, a
  prefix of that order; a just-loaded sample needed later than what is retained is not kept), ties (no
  further use) newest first; ``"fifo"``: the oldest go until the step's loads fit, loads kept in order while
  they fit.
- placement (with ``buffer_bytes``): the buffer is one byte range per rank; a kept sample takes the smallest
  free extent that holds it (``BestFit``, freed extents coalesce), in the order the executor stores them
  (each step: its keeps in column order, then the evictions at its end). A keep that fits the summed bytes
  but no free extent (fragmentation) is not kept (``meta["fragmentation_skips"]``), so the executor's arena
  (the same allocator over the same sequence) never overflows; ``capacity.arena_bytes_per_rank`` is each
  rank's highest byte used.
- a sample is held by at most one rank (a load of a sample another rank holds is not kept), so the aggregate
  buffer holds C distinct samples.

``Plan.meta`` notes the epoch order, its cost and the identity order's cost, loads and requests per epoch and
the local-batch spread; the typed fields carry ``max_step_samples`` and in ``capacity`` ``cache_peak_samples``
and (with ``buffer_bytes``) ``cache_peak_bytes`` (the samples' own bytes) and ``arena_bytes_per_rank``.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, insort
from typing import Any

import numpy as np

from .plan import MEMORY, NO_TIER, SHARED, Capacity, EpochPlan, Evictions, Pipeline, Plan
from .sampler import epoch_permutation

# ---- offline scheduling ------------------------------------------------------------------------------------


def transition_costs(perms: np.ndarray, C: int, *, block: int = 1 << 16) -> np.ndarray:
    """(E, E) int64: cost[a, b] = |first C of perms[b] minus last C of perms[a]|, 0 on the diagonal.
    ``perms``: (E, F) permutations of 0..F-1. Computed as C - overlap with a blocked 0/1 matrix product."""
    perms = np.asarray(perms)
    E, F = perms.shape
    C = int(min(max(C, 0), F))
    cost = np.zeros((E, E), dtype=np.int64)
    if C == 0 or E == 0:
        return cost
    last = np.zeros((E, F), dtype=bool)
    first = np.zeros((E, F), dtype=bool)
    rows = np.arange(E)[:, None]
    last[rows, perms[:, F - C:]] = True
    first[rows, perms[:, :C]] = True
    overlap = np.zeros((E, E), dtype=np.float64)
    for lo in range(0, F, block):
        a = last[:, lo:lo + block].astype(np.float32)
        b = first[:, lo:lo + block].astype(np.float32)
        overlap += a @ b.T
    cost = C - np.rint(overlap).astype(np.int64)
    np.fill_diagonal(cost, 0)
    return cost


def path_cost(cost: np.ndarray, order) -> int:
    """Summed transition cost of visiting the epochs in ``order``."""
    o = list(order)
    return int(sum(int(cost[a, b]) for a, b in zip(o, o[1:])))


def _nearest_neighbour(cost: np.ndarray, start: int) -> list[int]:
    """The path that always goes to the cheapest unvisited epoch (ties: the lowest)."""
    E = cost.shape[0]
    row_of = np.asarray(cost, dtype=np.float64)
    seen = np.zeros(E, dtype=bool)
    path = [start]
    seen[start] = True
    for _ in range(E - 1):
        row = np.where(seen, np.inf, row_of[path[-1]])
        nxt = int(np.argmin(row))           # argmin: the first of equal minima, the lowest epoch
        path.append(nxt)
        seen[nxt] = True
    return path


def _improve(cost: np.ndarray, path: list[int]) -> list[int]:
    """2-opt (segment reversal) and or-opt (move a segment of 1-3 epochs) on a path with asymmetric costs,
    best move first until none improves. Every move is scored by its cost change alone, all moves of a kind at
    once: the path is padded with a virtual epoch V (cost 0 to and from everything) at both ends, so every
    move changes a fixed set of edges; a reversal of positions i..j also reverses the edges inside it, whose
    change is a difference of prefix sums of the forward and backward edge costs. O(E^2) per move."""
    E = len(path)
    if E < 3:
        return list(path)
    c = np.zeros((E + 1, E + 1), dtype=np.int64)     # V = E
    c[:E, :E] = cost
    P = np.array([E, *path, E], dtype=np.int64)      # padded: positions 0 and E + 1 are V
    n = E + 2
    # 2-opt: reverse P[i..j], 1 <= i < j <= E
    Ri, Rj = np.triu_indices(E, 1)
    Ri, Rj = Ri + 1, Rj + 1
    # or-opt, per segment length k: segment P[i..i+k-1] (1 <= i <= E-k+1) re-inserted between rest[q-1] and
    # rest[q] (1 <= q <= E+1-k, q != i), rest = P without the segment
    ork = []
    for k in (1, 2, 3):
        if k >= E:
            break
        i = np.arange(1, E - k + 2)[:, None]
        q = np.arange(1, E + 2 - k)[None, :]
        ii, qq = np.broadcast_arrays(i, q)
        ok = ii != qq
        ork.append((k, ii[ok], qq[ok]))
    while True:
        fwd = c[P[:-1], P[1:]]                         # edge m: P[m] -> P[m+1]
        bwd = c[P[1:], P[:-1]]
        F = np.concatenate(([0], np.cumsum(fwd)))      # F[k]: sum of edges m < k
        R = np.concatenate(([0], np.cumsum(bwd)))
        d2 = (c[P[Ri - 1], P[Rj]] + c[P[Ri], P[Rj + 1]] - fwd[Ri - 1] - fwd[Rj]
              + (R[Rj] - R[Ri]) - (F[Rj] - F[Ri]))
        best_d = 0
        best_move: tuple[Any, ...] | None = None   # ("2opt", i, j) | ("or", k, i, q)
        if len(d2):
            m = int(np.argmin(d2))
            if d2[m] < best_d:
                best_d, best_move = int(d2[m]), ("2opt", int(Ri[m]), int(Rj[m]))
        for k, ii, qq in ork:
            a, s0, s1, b = P[ii - 1], P[ii], P[ii + k - 1], P[ii + k]
            left = np.where(qq - 1 < ii, P[qq - 1], P[np.minimum(qq - 1 + k, n - 1)])   # rest[q-1]
            right = np.where(qq < ii, P[qq], P[np.minimum(qq + k, n - 1)])              # rest[q]
            d = (c[a, b] - c[a, s0] - c[s1, b]
                 + c[left, s0] + c[s1, right] - c[left, right])
            m = int(np.argmin(d))
            if d[m] < best_d:
                best_d, best_move = int(d[m]), ("or", k, int(ii[m]), int(qq[m]))
        if best_move is None:
            break
        if best_move[0] == "2opt":
            _, i, j = best_move
            P[i:j + 1] = P[i:j + 1][::-1].copy()
        else:
            _, k, i, q = best_move
            seg = P[i:i + k].copy()
            rest = np.concatenate((P[:i], P[i + k:]))
            P = np.concatenate((rest[:q], seg, rest[q:]))
    return [int(v) for v in P[1:-1]]


def order_heuristic(cost: np.ndarray) -> list[int]:
    """An epoch order with a low summed cost: nearest neighbour from every start, each improved by 2-opt and
    or-opt; the best found (ties: lowest order lexicographically). Deterministic."""
    E = cost.shape[0]
    if E <= 1:
        return list(range(E))
    best: list[int] = []   # E >= 2: set by the first start
    best_c: int | None = None
    for s in range(E):
        p = _improve(cost, _nearest_neighbour(cost, s))
        c = path_cost(cost, p)
        if best_c is None or c < best_c or (c == best_c and p < best):
            best, best_c = p, c
    return best


def order_exact(cost: np.ndarray) -> tuple[list[int], int]:
    """The optimal epoch order (Held-Karp over Hamiltonian paths, any start): (order, cost). E <= 16."""
    E = cost.shape[0]
    if E <= 1:
        return list(range(E)), 0
    if E > 16:
        raise ValueError(f"order_exact: E={E} epochs is too many for the exact search (at most 16)")
    full = (1 << E) - 1
    INF = np.iinfo(np.int64).max // 4
    dp = np.full((1 << E, E), INF, dtype=np.int64)
    par = np.full((1 << E, E), -1, dtype=np.int64)
    for v in range(E):
        dp[1 << v, v] = 0
    for mask in range(1, full + 1):
        for v in range(E):
            cur = dp[mask, v]
            if cur >= INF or not (mask >> v) & 1:
                continue
            for w in range(E):
                if (mask >> w) & 1:
                    continue
                m2 = mask | (1 << w)
                c = cur + int(cost[v, w])
                if c < dp[m2, w]:
                    dp[m2, w] = c
                    par[m2, w] = v
    end = int(np.argmin(dp[full]))
    total = int(dp[full, end])
    order, mask, v = [], full, end
    while v >= 0:
        order.append(v)
        pv = int(par[mask, v])
        mask ^= 1 << v
        v = pv
    return order[::-1], total


# ---- run-time schedule -------------------------------------------------------------------------------------


class BestFit:
    """Best-fit allocator over the bytes [0, capacity): ``take(n)`` returns the start of the smallest free
    extent of >= n bytes (ties: the lowest address; above every freed extent, the untouched top), -1 if none;
    ``free(off, n)`` returns an extent (neighbours coalesce). ``high``: the highest byte end ever used.
    O(log extents) per call. Deterministic: the planner and the executor's arena
    (``strategies.surrogatetrain.BestFitArenaTier``) run it over the same sequence and get the same offsets."""

    __slots__ = ("capacity", "starts", "ends", "bysize", "top", "high")

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.starts: list[int] = []     # free extents below ``top``, sorted, never touching each other or top
        self.ends: list[int] = []
        self.bysize: list[tuple[int, int]] = []     # the same extents as sorted (length, start)
        self.top = 0                    # [top, capacity) is free
        self.high = 0

    def _drop(self, i: int) -> None:
        s, e = self.starts.pop(i), self.ends.pop(i)
        del self.bysize[bisect_left(self.bysize, (e - s, s))]

    def _add(self, i: int, s: int, e: int) -> None:
        self.starts.insert(i, s)
        self.ends.insert(i, e)
        insort(self.bysize, (e - s, s))

    def take(self, n: int) -> int:
        k = bisect_left(self.bysize, (n, -1))
        if k < len(self.bysize):
            ln, s = self.bysize[k]
            i = bisect_left(self.starts, s)
            self._drop(i)
            if ln > n:
                self._add(i, s + n, s + ln)
            return s
        off = self.top
        if off + n > self.capacity:
            return -1
        self.top = off + n
        if self.top > self.high:
            self.high = self.top
        return off

    def free(self, off: int, n: int) -> None:
        starts, ends = self.starts, self.ends
        end = off + n
        i = bisect_left(starts, off)
        if i and ends[i - 1] == off:            # joins the extent before
            i -= 1
            off = starts[i]
            self._drop(i)
        if i < len(starts) and starts[i] == end:   # joins the extent after
            end = ends[i]
            self._drop(i)
        if end == self.top:
            self.top = off
        else:
            self._add(i, off, end)


class _Step:
    """One global step's result: accesses in (rank, column) order, evictions before it, chunk lengths."""

    __slots__ = ("rank", "sample", "source", "keep", "chunk", "ev_rank", "ev_sample")
    rank: np.ndarray        # (n,) int64, sorted
    sample: np.ndarray      # (n,) int64
    source: np.ndarray      # (n,) uint8 tier codes
    keep: np.ndarray        # (n,) uint8 tier codes
    chunk: np.ndarray | None   # (n,) chunk lengths (None: chunking off)
    ev_rank: np.ndarray     # (m,) int64
    ev_sample: np.ndarray   # (m,) int64


def _rank_local_index(ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, i): ``order`` sorts ``ranks`` stably; i[k] is the index of element order[k] within its rank."""
    order = np.argsort(ranks, kind="stable")
    rs = ranks[order]
    first = np.searchsorted(rs, rs, side="left")
    return order, np.arange(len(rs)) - first


class _Engine:
    """The buffer state and the step rule (module doc). ``holder`` (F,): the rank holding each sample or -1;
    ``ins``: when it was inserted (global step); ``nheld`` (W,) samples and ``held`` (W,) units held (``size``
    per sample: aligned bytes, or 1); ``cap``: units per rank; ``raw`` (F,) the samples' own bytes (or None);
    ``place``: run ``BestFit`` per rank (byte buffers of samples of different sizes; with one size every
    free extent holds a sample, so best fit never fails and reaches peak samples x size)."""

    def __init__(self, *, F: int, W: int, b: int, cap: int, size: np.ndarray, raw: np.ndarray | None, place: bool,
                 perms: np.ndarray, order: list[int], remap: bool, balance: bool, chunking: bool, eviction: str):
        self.F, self.W, self.b, self.cap = F, W, b, cap
        self.size, self.raw, self.place = size, raw, bool(place and raw is not None)
        self.B = W * b
        self.S = math.ceil(F / self.B)
        self.perms, self.order = perms, order
        self.E = len(order)
        self.remap, self.balance, self.chunking, self.eviction = remap, balance, chunking, eviction
        self.never = (self.E + 1) * self.S + 1         # "no further use"
        self.reset()

    def reset(self) -> None:
        self.holder = np.full(self.F, -1, np.int64)
        self.ins = np.zeros(self.F, np.int64)
        self.nheld = np.zeros(self.W, np.int64)
        self.held = np.zeros(self.W, np.int64)
        self.peak = np.zeros(self.W, np.int64)
        self.raw_held = np.zeros(self.W, np.int64)
        self.peak_raw = np.zeros(self.W, np.int64)
        self.alloc: list[BestFit] = [BestFit(self.cap) for _ in range(self.W)] if self.place else []
        self.offset = np.full(self.F, -1, np.int64)
        self.skips = 0
        self.e = 0                 # next epoch to build
        self.pending: _Step | None = None
        self._pos: dict[int, np.ndarray] = {}

    def perm(self, e: int) -> np.ndarray:
        return self.perms[self.order[e]]

    def pos(self, e: int) -> np.ndarray:
        """Position of every sample in epoch e's permutation (cached for two epochs)."""
        p = self._pos.get(e)
        if p is None:
            p = np.empty(self.F, np.int64)
            p[self.perm(e)] = np.arange(self.F)
            if len(self._pos) >= 3:
                self._pos.pop(min(self._pos))
            self._pos[e] = p
        return p

    def next_use(self, ids: np.ndarray, e: int, s: int) -> np.ndarray:
        """Global step of each sample's next use after step s of epoch e (``never`` if none)."""
        st = self.pos(e)[ids] // self.B
        out = np.where(st > s, e * self.S + st, self.never)
        later = st <= s
        if e + 1 < self.E and later.any():
            out[later] = (e + 1) * self.S + self.pos(e + 1)[ids[later]] // self.B
        return out

    def targets(self, n: int) -> np.ndarray:
        """DistributedSampler's share of an n-sample global batch per rank (offset j → rank j mod W)."""
        W = self.W
        return np.full(W, n // W, np.int64) + (np.arange(W) < n % W)

    # ---- one global step ---------------------------------------------------------------------------
    def step(self, e: int, s: int) -> _Step:
        F, W, B = self.F, self.W, self.B
        G = self.perm(e)[s * B:min((s + 1) * B, F)]
        n = len(G)
        hr = self.holder[G]
        t = self.targets(n)
        if self.remap:
            hit = hr >= 0
            if not self.balance:       # at most the DistributedSampler share from memory; the surplus re-read
                idx = np.nonzero(hit)[0]
                o, li = _rank_local_index(hr[idx])
                over = idx[o][li >= t[hr[idx][o]]]
                hit[over] = False
            h = np.bincount(hr[hit], minlength=W)
            loads = G[~hit]
            L = len(loads)
            if self.balance:
                q, rem = divmod(L, W)
                nload = np.full(W, q, np.int64)
                if rem:
                    pref = np.lexsort(((np.arange(W) - s) % W, h))    # fewest hits first, rotating ties
                    nload[pref[:rem]] += 1
            else:
                nload = t - h
            load_rank = np.repeat(np.arange(W), nload)
            load_ids = np.sort(loads)
            hit_ids, hit_rank = G[hit], hr[hit]
        else:
            pr = np.arange(n) % W
            hit = hr == pr
            hit_ids, hit_rank = G[hit], pr[hit]
            lr, li = pr[~hit], G[~hit]
            o = np.lexsort((li, lr))
            load_ids, load_rank = li[o], lr[o]
        # keeps and evictions: loads nobody holds are candidates to keep
        cand = self.holder[load_ids] < 0
        keep = np.zeros(len(load_ids), bool)
        ev_rank: list[np.ndarray] = []
        ev_sample: list[np.ndarray] = []
        size = self.size
        hits_per = _sum_by(hit_rank, size[hit_ids], W)
        cand_per = _sum_by(load_rank[cand], size[load_ids[cand]], W)
        over = self.held + cand_per - self.cap
        keep[cand & (over[load_rank] <= 0)] = True
        tight = np.nonzero(over > 0)[0]
        if len(tight):       # the held samples of every rank, grouped by rank (one sort, not a scan per rank)
            held_all = np.nonzero(self.holder >= 0)[0]
            held_all = held_all[np.argsort(self.holder[held_all], kind="stable")]
            cuts = np.searchsorted(self.holder[held_all], np.arange(W + 1), side="left")
        for r in tight.tolist():
            cr = np.nonzero(cand & (load_rank == r))[0]
            held = held_all[cuts[r]:cuts[r + 1]]
            if hits_per[r]:
                held = held[~np.isin(held, hit_ids[hit_rank == r], assume_unique=True)]
            room = self.cap - hits_per[r]               # units for evictable held + new
            if self.eviction == "fifo":
                need = int(over[r])
                old = held[np.argsort(self.ins[held], kind="stable")]
                cum = np.cumsum(size[old])
                k = min(int(np.searchsorted(cum, need, side="left")) + 1, len(old))   # the oldest covering need
                victims = old[:k]
                kept_old = (int(cum[-1]) - (int(cum[k - 1]) if k else 0)) if len(old) else 0
                left = room - kept_old                 # units left for this step's loads
                n_keep = int(np.searchsorted(np.cumsum(size[load_ids[cr]]), left, side="right"))
                keep[cr[:n_keep]] = True
            else:
                pool = np.concatenate([held, load_ids[cr]])
                nu = self.next_use(pool, e, s)       # after this step (hits of this step are not in the pool)
                age = np.concatenate([self.ins[held], np.full(len(cr), np.iinfo(np.int64).max)])
                # retain the soonest next uses (ties: the newest) while their units fit the room
                o = np.lexsort((-age, nu))
                n_ret = int(np.searchsorted(np.cumsum(size[pool[o]]), max(room, 0), side="right"))
                retained = np.zeros(len(pool), bool)
                retained[o[:n_ret]] = True
                victims = held[~retained[:len(held)]]
                keep[cr[retained[len(held):]]] = True
            if len(victims):
                ev_rank.append(np.full(len(victims), r, np.int64))
                ev_sample.append(victims)
        # the rank's accesses: hits (permutation order) then loads (sorted by id)
        rank = np.concatenate([hit_rank, load_rank])
        sample = np.concatenate([hit_ids, load_ids])
        source = np.concatenate([np.full(len(hit_ids), MEMORY, np.uint8), np.full(len(load_ids), SHARED, np.uint8)])
        kp = np.concatenate([np.full(len(hit_ids), NO_TIER, np.uint8),
                             np.where(keep, MEMORY, NO_TIER).astype(np.uint8)])
        o = np.argsort(rank, kind="stable")
        st = _Step()
        st.rank, st.sample, st.source, st.keep = rank[o], sample[o], source[o], kp[o]
        st.chunk = _chunks(st.rank, st.sample, st.source) if self.chunking else None
        st.ev_rank = np.concatenate(ev_rank) if ev_rank else np.zeros(0, np.int64)
        st.ev_sample = np.concatenate(ev_sample) if ev_sample else np.zeros(0, np.int64)
        return st

    def apply(self, st: _Step, tick: int) -> None:
        """The step's evictions (made at the end of the previous step), then its keeps, in the order the
        executor stores them; with ``place`` a keep that finds no free extent is dropped from ``st.keep``."""
        size, raw = self.size, self.raw
        if len(st.ev_sample):
            self.holder[st.ev_sample] = -1
            np.subtract.at(self.nheld, st.ev_rank, 1)
            np.subtract.at(self.held, st.ev_rank, size[st.ev_sample])
            if raw is not None:
                np.subtract.at(self.raw_held, st.ev_rank, raw[st.ev_sample])
            if self.place:
                for r, sid in zip(st.ev_rank.tolist(), st.ev_sample.tolist()):
                    self.alloc[r].free(int(self.offset[sid]), int(size[sid]))
                self.offset[st.ev_sample] = -1
        k = st.keep != NO_TIER
        if self.place and k.any():
            alloc, offset = self.alloc, self.offset
            for i in np.nonzero(k)[0].tolist():       # column order within each rank (st is sorted by rank)
                sid = int(st.sample[i])
                off = alloc[int(st.rank[i])].take(int(size[sid]))
                if off < 0:
                    st.keep[i] = NO_TIER
                    k[i] = False
                    self.skips += 1
                else:
                    offset[sid] = off
        if k.any():
            self.holder[st.sample[k]] = st.rank[k]
            self.ins[st.sample[k]] = tick
            np.add.at(self.nheld, st.rank[k], 1)
            np.add.at(self.held, st.rank[k], size[st.sample[k]])
            if raw is not None:
                np.add.at(self.raw_held, st.rank[k], raw[st.sample[k]])
        np.maximum(self.peak, self.nheld, out=self.peak)
        if raw is not None:
            np.maximum(self.peak_raw, self.raw_held, out=self.peak_raw)

    # ---- one epoch ---------------------------------------------------------------------------------
    def build(self, e: int) -> EpochPlan:
        if e < self.e:
            self.reset()
        while self.e <= e:
            ep = self._next_epoch()
        return ep

    def _next_epoch(self) -> EpochPlan:
        e, S = self.e, self.S
        steps: list[_Step] = []
        for s in range(S):
            st = self.pending if (s == 0 and self.pending is not None) else self.step(e, s)
            if not (s == 0 and self.pending is not None):
                self.apply(st, e * S + s)
            steps.append(st)
        self.pending = None
        if e + 1 < self.E:       # step 0 of the next epoch: its evictions happen at this epoch's last step
            nxt = self.step(e + 1, 0)
            self.apply(nxt, (e + 1) * S)
            self.pending = nxt
        self.e = e + 1
        return _assemble(e, steps, self.W, self.pending)


def _sum_by(rank: np.ndarray, units: np.ndarray, W: int) -> np.ndarray:
    """(W,) int64: the units of each rank's entries."""
    return np.bincount(rank, weights=units, minlength=W).round().astype(np.int64) if len(rank) else \
        np.zeros(W, np.int64)


def _chunks(rank: np.ndarray, sample: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Request length per access (``EpochPlan.chunk``): runs of consecutive ids read from SHARED by one rank."""
    n = len(sample)
    out = np.ones(n, np.int32)
    if n < 2:
        return out
    cont = (rank[1:] == rank[:-1]) & (sample[1:] == sample[:-1] + 1) & (source[1:] == SHARED) & \
           (source[:-1] == SHARED)
    starts = np.nonzero(np.concatenate([[True], ~cont]))[0]
    lengths = np.diff(np.concatenate([starts, [n]]))
    out[:] = 0
    out[starts] = lengths
    return out


def _assemble(e: int, steps: list[_Step], W: int, nxt: _Step | None) -> EpochPlan:
    S = len(steps)
    counts = np.zeros((W, S), np.int64)
    for s, st in enumerate(steps):
        counts[:, s] = np.bincount(st.rank, minlength=W)
    bounds = np.zeros((W, S + 1), np.int64)
    bounds[:, 1:] = np.cumsum(counts, axis=1)
    n_max = int(bounds[:, -1].max()) if W else 0
    ids = np.full((W, n_max), -1, np.int64)
    src = np.full((W, n_max), SHARED, np.uint8)
    keep = np.full((W, n_max), NO_TIER, np.uint8)
    chunk = np.zeros((W, n_max), np.int32) if steps and steps[0].chunk is not None else None
    for s, st in enumerate(steps):
        # column of each access: bounds[r, s] + index within its rank
        first = np.searchsorted(st.rank, np.arange(W), side="left")
        col = bounds[st.rank, s] + np.arange(len(st.rank)) - first[st.rank]
        ids[st.rank, col] = st.sample
        src[st.rank, col] = st.source
        keep[st.rank, col] = st.keep
        if chunk is not None:
            chunk[st.rank, col] = st.chunk  # type: ignore[assignment]  # one engine: every step chunked when the first is
    ev_r, ev_s, ev_x = [], [], []
    for s in range(1, S):
        st = steps[s]
        ev_r.append(st.ev_rank)
        ev_s.append(np.full(len(st.ev_rank), s - 1, np.int64))
        ev_x.append(st.ev_sample)
    if nxt is not None:
        ev_r.append(nxt.ev_rank)
        ev_s.append(np.full(len(nxt.ev_rank), S - 1, np.int64))
        ev_x.append(nxt.ev_sample)
    ev = Evictions.make(np.concatenate(ev_r) if ev_r else [], np.concatenate(ev_s) if ev_s else [],
                        np.concatenate(ev_x) if ev_x else [])
    return EpochPlan(epoch=e, sample_ids=ids, source=src, bounds=bounds, keep=keep, evictions=ev, chunk=chunk)


# ---- the plan ----------------------------------------------------------------------------------------------


def surrogatetrain_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
                        buffer_samples: int | None = None, buffer_bytes: int | None = None, sample_nbytes=None,
                        align: int = 1, reorder: bool = True, remap: bool = True, balance: bool = True,
                        chunking: bool = True, eviction: str = "lookahead", pipeline: Pipeline) -> Plan:
    """SurrogateTrain's plan (module doc). The buffer of each rank: ``buffer_bytes`` with the samples' sizes
    ``sample_nbytes`` (each rounded up to ``align`` bytes, as the executor's arena stores them), or
    ``buffer_samples`` (every sample counts 1, no placement)."""
    F, W, b, E = int(n_samples), int(world_size), int(local_batch), int(epochs)
    if eviction not in ("lookahead", "fifo"):
        raise ValueError(f"eviction {eviction!r}: lookahead or fifo")
    if (buffer_samples is None) == (buffer_bytes is None):
        raise ValueError("surrogatetrain_plan: give buffer_samples or buffer_bytes (with sample_nbytes)")
    if buffer_bytes is not None:
        if sample_nbytes is None:
            raise ValueError("surrogatetrain_plan: buffer_bytes needs sample_nbytes")
        raw = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,)).copy()
        a = max(int(align), 1)
        size = -(-raw // a) * a
        cap = int(buffer_bytes)
        uniform = bool(F) and bool((size == size[0]).all())
        C = min(int(cap * W // max(float(size.mean()), 1.0)), F) if F else 0
    else:
        assert buffer_samples is not None   # exactly one of the two is given (checked above)
        raw, size, cap, uniform = None, np.ones(F, np.int64), int(buffer_samples), True
        C = min(cap * W, F)
    if cap < 0 or F < 1 or W < 1 or b < 1 or E < 1:
        raise ValueError(f"surrogatetrain_plan: F={F}, W={W}, b={b}, E={E}, buffer={cap}")
    perms = np.stack([epoch_permutation(seed, k, F) for k in range(E)])
    cost = transition_costs(perms, C)
    identity = list(range(E))
    order = order_heuristic(cost) if reorder else identity
    eng = _Engine(F=F, W=W, b=b, cap=cap, size=size, raw=raw, place=not uniform, perms=perms, order=order,
                  remap=remap, balance=balance, chunking=chunking, eviction=eviction)
    # one pass for the figures the executor needs up front (batch rows, buffer peak) and the plan's statement
    loads, reqs, hits = [], [], []
    nmin, nmax, imb_num, imb_den = 1 << 62, 0, 0.0, 0.0
    for e in range(E):
        ep = eng.build(e)
        cnt = np.diff(ep.bounds, axis=1)                       # (W, S) local batch sizes
        full = cnt.sum(axis=0) > 0
        nmin, nmax = min(nmin, int(cnt[:, full].min())), max(nmax, int(cnt.max()))
        imb_num += float(cnt.max(axis=0).sum())
        imb_den += float(cnt.mean(axis=0).sum())
        valid = ep.sample_ids >= 0
        loads.append(int((valid & (ep.source == SHARED)).sum()))
        hits.append(int((valid & (ep.source == MEMORY)).sum()))
        reqs.append(ep.requests())
    peak = eng.peak.copy()
    by_bytes = {}
    capacity = Capacity(cache_peak_samples=peak.astype(np.int64).tolist())
    if raw is not None:
        capacity = Capacity(cache_peak_samples=capacity.cache_peak_samples,
                            cache_peak_bytes=eng.peak_raw.astype(np.int64).tolist(),
                            arena_bytes_per_rank=([a.high for a in eng.alloc] if eng.place else
                                                  (peak * int(size[0])).tolist()))
        by_bytes = {"buffer_bytes_per_rank": cap, "arena_align": int(align),
                    "fragmentation_skips": int(eng.skips)}
    eng.reset()
    naive_loads = E * F
    order_text = ("each epoch a full permutation; epochs reordered to reuse the buffer, samples reassigned to the "
                  "rank that buffers them within a global batch")
    meta = {
        "epoch_order": [int(x) for x in order],
        "epoch_order_cost": path_cost(cost, order),
        "identity_order_cost": path_cost(cost, identity),
        "order_heuristic": "nearest neighbour from every start + 2-opt + or-opt (segments of 1-3; asymmetric costs)",
        "buffer_samples_per_rank": cap if raw is None else C // W, "buffer_samples_aggregate": C, **by_bytes,
        "reorder": reorder, "remap": remap, "balance": balance, "chunking": chunking, "eviction": eviction,
        "shared_loads_per_epoch": loads, "buffer_hits_per_epoch": hits, "shared_requests_per_epoch": reqs,
        "shared_load_reduction_vs_naive": naive_loads / max(1, sum(loads)),
        "local_batch_min": nmin, "local_batch_max": nmax,
        "compute_imbalance": imb_num / imb_den - 1.0 if imb_den else 0.0,
        "global_steps_per_epoch": eng.S,
    }
    if E <= 32:
        meta["transition_costs"] = cost.tolist()
    return Plan(strategy="surrogatetrain", n_samples=F, world_size=W, node_map=node_map, epochs=E, local_batch=b,
                seed=seed, build_epoch=eng.build, meta=meta, pipeline=pipeline,
                order=order_text, max_step_samples=nmax, capacity=capacity)


def exact_vs_heuristic(E: int, F: int, C: int, seed: int = 0) -> dict:
    """The heuristic's cost against the optimum (and the identity order) for E permutations of F samples."""
    perms = np.stack([epoch_permutation(seed, k, F) for k in range(E)])
    cost = transition_costs(perms, C)
    h = order_heuristic(cost)
    x, xc = order_exact(cost)
    return {"E": E, "F": F, "C": C, "seed": seed, "heuristic": path_cost(cost, h), "optimum": xc,
            "identity": path_cost(cost, range(E)), "heuristic_order": h, "optimal_order": x}


def brute_force_order(cost: np.ndarray) -> tuple[list[int], int]:
    """Every permutation (tests only, E <= 8)."""
    best = min(itertools.permutations(range(cost.shape[0])), key=lambda p: (path_cost(cost, p), p))
    return list(best), path_cost(cost, best)


__all__ = ["transition_costs", "path_cost", "order_heuristic", "order_exact", "surrogatetrain_plan",
           "exact_vs_heuristic", "brute_force_order"]
