"""Locality-aware loading (Yang & Cong, docs/STRATEGIES.md): pure planner, and the per-global-batch rebalancing
that deepio's opportunistic mode shares.

``locality_plan``:

- **Epoch 0** is the global shuffle (DistributedSampler rows), every access from the shared FS. Each rank
  keeps what it reads, in its access order, while the summed bytes of what it keeps fit ``capacity`` (bytes
  per rank; every sample counts its own size): when the dataset exceeds the aggregate cache, rank r keeps
  the longest prefix of its epoch-0 first reads (its earliest steps) that fits and reads but drops the rest. A sample read twice in epoch 0 (DistributedSampler padding) is kept by its
  first reader only, so every sample has at most one holder. Nothing is kept or evicted after epoch 0.
- **Epochs ≥ 1**: the global batches are the global shuffle's (same membership, step by step); only the
  sample→rank mapping changes (``rebalance_batch``): every held sample goes to its holder, up to the b
  samples a rank consumes at that step (the first b in the global batch's order); a holder's extra samples
  are its surplus; a rank with fewer than b has a deficit. Greedy: the largest surplus is paired with the
  largest deficit (ties: lower rank), min(surplus, deficit) samples move (PEER accesses of the deficit
  rank served by the surplus rank), repeat until no surplus is left. The samples nobody holds then fill
  the remaining deficits, lower ranks first, in the global batch's order, read from the shared FS. Within
  a rank's step the samples keep the global batch's order. Every rank gets exactly b samples per step.
"""

from __future__ import annotations

import heapq

import numpy as np

from .caches import access_table, global_rows
from .plan import MEMORY, NO_TIER, PEER, SHARED, Capacity, EpochPlan, Pipeline, Plan


def rebalance_batch(samples: np.ndarray, owner: np.ndarray, W: int, b: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One global batch of W·b ``samples`` (in the global shuffle's order) re-assigned to ranks (module
    doc). ``owner[k]``: the rank holding sample k, -1: nobody. Returns (ids (W, b), source (W, b) tier codes,
    peer (W, b), stats (moved by peers, from the shared FS))."""
    n = len(samples)
    if n != W * b:
        raise ValueError(f"global batch of {n} samples for {W} ranks x {b}")
    hold = owner[samples]
    dest = np.full(n, -1, np.int64)
    src = np.full(n, SHARED, np.uint8)
    peer = np.full(n, -1, np.int32)
    idx = np.argsort(hold, kind="stable")          # grouped by holder, batch order within a group
    hs = hold[idx]
    starts = np.searchsorted(hs, np.arange(-1, W + 1))
    # every holder keeps its first b (vectorised over the ranks): position j within its group
    held = hs >= 0
    j = np.arange(n) - starts[np.where(held, hs + 1, 0)]
    stay = held & (j < b)
    dest[idx[stay]], src[idx[stay]] = hs[stay], MEMORY
    count = np.diff(starts[1:])                    # samples each rank holds
    deficit = b - np.minimum(count, b)
    sur = np.maximum(count - b, 0)
    sur_flat = idx[held & (j >= b)]                # each rank's surplus, rank by rank, in batch order
    sur_start = np.concatenate(([0], np.cumsum(sur)[:-1]))
    # greedy: the largest surplus to the largest deficit (ties: the lower rank, as argmax), by two heaps
    hs_heap = [(-int(v), int(r)) for r, v in enumerate(sur.tolist()) if v > 0]
    hd_heap = [(-int(v), int(r)) for r, v in enumerate(deficit.tolist()) if v > 0]
    heapq.heapify(hs_heap)
    heapq.heapify(hd_heap)
    taken = [0] * W
    mv_s, mv_d, mv_m, mv_off = [], [], [], []
    while hs_heap:
        ns, s = heapq.heappop(hs_heap)
        nd, d = heapq.heappop(hd_heap)
        m = min(-ns, -nd)
        mv_s.append(s)
        mv_d.append(d)
        mv_m.append(m)
        mv_off.append(taken[s])
        taken[s] += m
        if -ns > m:
            heapq.heappush(hs_heap, (ns + m, s))
        if -nd > m:
            heapq.heappush(hd_heap, (nd + m, d))
    moved = int(sum(mv_m))
    if mv_m:
        M = np.array(mv_m, np.int64)
        first = sur_start[np.array(mv_s, np.int64)] + np.array(mv_off, np.int64)
        within = np.arange(moved) - np.repeat(np.cumsum(M) - M, M)
        go = sur_flat[np.repeat(first, M) + within]
        dest[go], src[go], peer[go] = np.repeat(np.array(mv_d, np.int64), M), PEER, np.repeat(np.array(mv_s), M)
        np.subtract.at(deficit, np.array(mv_d, np.int64), M)
    free = idx[:starts[1]]                         # held by nobody: from the shared FS
    fill = np.repeat(np.arange(W), deficit)
    if len(fill) != len(free):
        raise AssertionError("rebalance: deficits and unheld samples disagree")
    dest[free] = fill
    order = np.lexsort((np.arange(n), dest))
    return (samples[order].reshape(W, b), src[order].reshape(W, b), peer[order].reshape(W, b),
            np.array([moved, len(free)]))


def rebalanced_epoch(e: int, batches, owner: np.ndarray, W: int, bounds_row: np.ndarray) -> EpochPlan:
    """An epoch whose step s consumes global batch ``batches(s)`` re-assigned with ``rebalance_batch``."""
    n = int(bounds_row[-1])
    ids = np.full((W, n), -1, np.int64)
    source = np.full((W, n), SHARED, np.uint8)
    peer = np.full((W, n), -1, np.int32)
    for s in range(len(bounds_row) - 1):
        b0, b1 = int(bounds_row[s]), int(bounds_row[s + 1])
        i, src, p, _ = rebalance_batch(batches(s), owner, W, b1 - b0)
        ids[:, b0:b1], source[:, b0:b1], peer[:, b0:b1] = i, src, p
    return EpochPlan(epoch=e, sample_ids=ids, source=source, bounds=np.tile(bounds_row, (W, 1)), peer=peer)


def global_batch(rows: np.ndarray, b0: int, b1: int) -> np.ndarray:
    """Step [b0, b1)'s global batch in the permutation's order (rank r's column c is π[c·W + r])."""
    return np.ascontiguousarray(rows[:, b0:b1].T).reshape(-1)


def first_reads_kept(rows: np.ndarray, bounds: np.ndarray, capacity: float, F: int, sample_nbytes
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(keep (W, n) uint8, owner (F,)): each rank keeps the longest prefix of the samples it is the first to
    read (global order (step, rank, column)) whose summed bytes (``sample_nbytes``) fit ``capacity`` bytes;
    ``owner[k]`` the rank that keeps k, -1: nobody."""
    W, n = rows.shape
    keep = np.full((W, n), NO_TIER, np.uint8)
    owner = np.full(F, -1, np.int64)
    a = access_table(rows, bounds)
    _u, first = np.unique(a.sample, return_index=True)
    first = np.sort(first)                          # global order
    r = a.rank[first]
    # bytes of each first touch and its rank's earlier first touches
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    order = np.argsort(r, kind="stable")
    rs = r[order]
    cum = np.cumsum(sizes[a.sample[first[order]]])
    starts = np.searchsorted(rs, np.arange(W))
    base = np.concatenate(([0], cum))[starts]                    # bytes before each rank's first touch
    upto = np.empty(len(first), np.int64)
    upto[order] = cum - base[rs]
    kept = first[upto <= capacity]
    keep[a.rank[kept], a.col[kept]] = MEMORY
    owner[a.sample[kept]] = a.rank[kept]
    return keep, owner


def locality_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
                  capacity: float, sample_nbytes, pipeline: Pipeline, drop_last: bool = False) -> Plan:
    """The locality-aware plan (module doc). ``capacity``: bytes each rank's memory cache holds;
    ``sample_nbytes``: the bytes of each sample (or one size for all)."""
    W, F = int(world_size), int(n_samples)
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    rows0, bounds0 = global_rows(seed, 0, F, W, local_batch, drop_last, False)
    keep0, owner = first_reads_kept(rows0, bounds0, float(capacity), F, sizes)

    def build(e: int) -> EpochPlan:
        rows, bounds = global_rows(seed, e, F, W, local_batch, drop_last, False)
        if e == 0:
            return EpochPlan(epoch=0, sample_ids=rows, source=np.full(rows.shape, SHARED, np.uint8), bounds=bounds,
                             peer=np.full(rows.shape, -1, np.int32), keep=keep0)
        br = bounds[0]
        return rebalanced_epoch(e, lambda s: global_batch(rows, int(br[s]), int(br[s + 1])), owner, W, br)

    peak = np.bincount(owner[owner >= 0], minlength=W).astype(np.int64)
    order = ("global shuffle's global batches (DistributedSampler); within each, samples re-assigned to the "
             "ranks that cache them (greedy surplus -> deficit), the rest from the shared FS")
    cap = Capacity(cache_peak_samples=peak.tolist(),
                   cache_peak_bytes=np.bincount(owner[owner >= 0], weights=sizes[owner >= 0],
                                                minlength=W).astype(np.int64).tolist())
    meta = {"kept": "epoch 0: each rank keeps the samples it reads first (its earliest steps) while their bytes fit "
                    "--cache-capacity; nothing is kept or evicted later",
            "drop_last": drop_last, "samples_cached": int((owner >= 0).sum())}
    return Plan(strategy="locality", n_samples=F, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, meta=meta, pipeline=pipeline,
                order=order, capacity=cap)


__all__ = ["rebalance_batch", "rebalanced_epoch", "global_batch", "first_reads_kept", "locality_plan"]
