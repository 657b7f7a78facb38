"""Pure planners for the staging, local-shuffling and partial-local-shuffling (PLS) strategies
(docs/STRATEGIES.md). Each returns a ``Plan``; no files, MPI or clocks. Shared by the executors and
``dlbench simulate``.

- ``staging_plan``: the whole dataset is staged to every node before epoch 0 (each rank reads a disjoint
  piece from the PFS, pieces are then all-gathered between nodes); training follows the global shuffle
  and reads only local copies. Which local tier a sample sits on is fixed by ``tier_of_sample`` (fill the
  fastest tier first). If the dataset does not fit on a node this planner refuses (``CapacityError``):
  training on a node-local subset is ``local_plan``'s order, and the caller must say so.
- ``local_plan``: the dataset is split once into W shards (a seeded permutation, DistributedSampler-style
  slices of F/W); each epoch every rank shuffles only its own shard.
- ``pls_plan``: as local; additionally before each epoch's training every rank marks the first Q·n of its
  freshly shuffled shard for exchange. During epoch e they are sent, in per-step chunks, to a peer chosen
  per step by a seeded cyclic shift k ∈ [1, W−1] (rank r sends chunk i to (r + k_i) mod W and receives from
  (r − k_i) mod W, so every shard keeps its size); from epoch e+1 the sent samples are gone and the
  received ones are part of the shard. Peak storage per rank: (1+Q)·n samples.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import CapacityError, ConfigError
from .plan import LOCAL, MEMORY, PEER, SHARED, SYNC, EpochPlan, ExchangeShare, Plan, Prologue, Transfers
from .sampler import batch_bounds, distributed_indices, epoch_permutation, epoch_rng

_SHARD_STREAM = 1 << 30  # the epoch slot of the one-off shard split (independent of every epoch's stream)


def tier_of_sample(sample_nbytes: np.ndarray, tiers: list[tuple[int, float]], order: np.ndarray | None = None
                   ) -> np.ndarray:
    """Place samples (in ``order``, default by id) on tiers ``[(tier_code, capacity_bytes), ...]`` fastest
    first. Returns the tier code per sample id; raises CapacityError when they do not all fit."""
    sizes = np.asarray(sample_nbytes, dtype=np.float64)
    order = np.arange(len(sizes)) if order is None else np.asarray(order)
    cum = np.cumsum(sizes[order])
    out = np.empty(len(sizes), dtype=np.uint8)
    placed = np.zeros(len(order), dtype=bool)
    lo = 0.0
    for code, cap in tiers:
        sel = (~placed) & (cum <= lo + cap)
        out[order[sel]] = code
        placed |= sel
        lo += cap
    if not placed.all():
        need = float(cum[-1]) if len(cum) else 0.0
        raise CapacityError(f"local tiers hold {lo:.4g} B per node but {need:.4g} B must be stored there; "
                            f"add capacity or use a strategy that keeps a subset (local, pls)")
    return out


def _bounds(W: int, n: int, local_batch: int, drop_last_batch: bool) -> np.ndarray:
    return np.tile(batch_bounds(n, local_batch, drop_last_batch), (W, 1))


def allgather_rows(groups: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Who receives what so that every storage group holds every piece (staging's distribution): sample i is
    held by rank ``owner[i]``; every other group receives it once, at its member in the sender's position in
    its own group (mod the group's size), so the receives spread over a group's ranks. Returns (receiving
    rank, sample) per row, by receiving group, then by sample id (the order a sender sends a receiver its
    samples in)."""
    groups = np.asarray(groups, dtype=np.int64)
    owner = np.asarray(owner, dtype=np.int64)
    _, gi = np.unique(groups, return_inverse=True)
    members = np.argsort(gi, kind="stable")               # ranks by group, each group's in rank order
    counts = np.bincount(gi)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pos = np.empty(len(gi), np.int64)
    pos[members] = np.arange(len(gi)) - starts[gi[members]]
    go, po = gi[owner], pos[owner]
    to, sent = [], []
    for g in range(len(counts)) if len(counts) > 1 else ():
        sel = np.nonzero(go != g)[0]
        to.append(members[starts[g] + po[sel] % counts[g]])
        sent.append(sel)
    z = np.zeros(0, np.int64)
    return (np.concatenate(to) if to else z), (np.concatenate(sent).astype(np.int64) if sent else z)


def staging_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
                 sample_nbytes, tiers: list[tuple[int, float]], drop_last: bool = False,
                 drop_last_batch: bool = False, groups=None) -> Plan:
    """Parallel data staging (see module doc). ``tiers``: [(MEMORY|LOCAL, capacity_bytes per node)] fastest
    first; the whole dataset must fit on each node. ``groups[r]``: rank r's storage group (default: its
    node); with more than one group the prologue's peer rows send every piece to every other group
    (``allgather_rows``)."""
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.float64), (n_samples,))
    placement = tier_of_sample(sizes, tiers)
    W = int(world_size)
    # prologue: rank r reads samples r::W from the PFS into the tier the sample lives on; then every other
    # storage group receives r's piece (``allgather_rows``)
    ids = np.arange(n_samples, dtype=np.int64)
    groups = np.asarray(node_map if groups is None else groups, dtype=np.int64)
    owner = ids % W
    to, sent = allgather_rows(groups, owner)
    rank = np.concatenate([owner, to])
    sample = np.concatenate([ids, sent])
    src = np.concatenate([np.full(n_samples, SHARED, np.uint8), np.full(len(sent), PEER, np.uint8)])
    peer = np.concatenate([np.full(n_samples, -1, np.int64), owner[sent]])
    pro = Prologue(rank=rank, sample=sample, src=src, dst=placement[sample], peer=peer, groups=groups)

    def build(e: int) -> EpochPlan:
        rows = distributed_indices(epoch_permutation(seed, e, n_samples), W, drop_last)
        return EpochPlan(epoch=e, sample_ids=rows, source=placement[rows],
                         bounds=_bounds(W, rows.shape[1], local_batch, drop_last_batch))

    meta = {"staged": "whole dataset on every node",
            "tiers": [[int(c), float(cap)] for c, cap in tiers], "drop_last": drop_last,
            "drop_last_batch": drop_last_batch}
    return Plan(strategy="staging", n_samples=n_samples, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, prologue=pro, meta=meta, pipeline=SYNC,
                order="global shuffle (DistributedSampler)")


def shards(seed: int, n_samples: int, world_size: int, drop_last: bool = False) -> np.ndarray:
    """The one-off split into W shards (W, n) from a seeded permutation."""
    return distributed_indices(epoch_permutation(seed, _SHARD_STREAM, n_samples), world_size, drop_last)


def _shuffle_rows(rows: np.ndarray, seed: int, e: int, stream: int) -> np.ndarray:
    keys = epoch_rng(seed, e, stream).random(rows.shape)
    return np.take_along_axis(rows, np.argsort(keys, axis=1, kind="stable"), axis=1)


def local_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
               drop_last: bool = False, drop_last_batch: bool = False, tier: int = LOCAL) -> Plan:
    """Local shuffling: W fixed shards, each shuffled per epoch by its rank; nothing exchanged."""
    base = shards(seed, n_samples, world_size, drop_last)
    W, n = base.shape
    pro = Prologue(rank=np.repeat(np.arange(W, dtype=np.int64), n), sample=base.reshape(-1).copy(),
                   src=np.full(W * n, SHARED, np.uint8), dst=np.full(W * n, tier, np.uint8),
                   peer=np.full(W * n, -1, np.int64))

    def build(e: int) -> EpochPlan:
        rows = _shuffle_rows(base, seed, e, 1)
        return EpochPlan(epoch=e, sample_ids=rows, source=np.full(rows.shape, tier, np.uint8),
                         bounds=_bounds(W, n, local_batch, drop_last_batch))

    meta = {"shard_samples": int(n), "drop_last": drop_last, "drop_last_batch": drop_last_batch}
    return Plan(strategy="local", n_samples=n_samples, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, prologue=pro, meta=meta, pipeline=SYNC,
                order="local shuffle: each rank sees its own shard every epoch (not a global shuffle)")


def pls_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
             q: float, drop_last: bool = False, drop_last_batch: bool = False, tier: int = LOCAL) -> Plan:
    """Partial local shuffling with exchange fraction ``q`` in [0, 1] (module doc). Epoch e's
    ``transfers`` (``move=True``): the samples each rank sends during epoch e, to whom, at which step."""
    if not (0.0 <= float(q) <= 1.0) or isinstance(q, bool):
        raise ConfigError(f"pls q={q!r}: must be a number from 0 to 1")
    base = shards(seed, n_samples, world_size, drop_last)
    W, n = base.shape
    m = int(math.floor(q * n)) if W > 1 else 0
    steps = len(batch_bounds(n, local_batch, drop_last_batch)) - 1
    pro = Prologue(rank=np.repeat(np.arange(W, dtype=np.int64), n), sample=base.reshape(-1).copy(),
                   src=np.full(W * n, SHARED, np.uint8), dst=np.full(W * n, tier, np.uint8),
                   peer=np.full(W * n, -1, np.int64))
    state: dict[str, Any] = {"e": 0, "shard": base}

    def exchange(e: int, rows: np.ndarray):
        """Who sends what to whom during epoch e (rows: the shuffled shards of epoch e)."""
        send = rows[:, :m]
        chunks = max(1, min(steps, m)) if m else 1
        step_of = (np.arange(m) * chunks) // max(m, 1)           # chunk i of the m samples → step i
        shifts = epoch_rng(seed, e, 2).integers(1, max(W, 2), size=chunks)  # k_i in [1, W-1]
        to = (np.arange(W)[:, None] + shifts[step_of][None, :]) % W
        return send, to, np.broadcast_to(step_of, (W, m))

    def advance(shard: np.ndarray, e: int) -> np.ndarray:
        rows = _shuffle_rows(shard, seed, e, 1)
        if m == 0:
            return shard
        send, to, _ = exchange(e, rows)
        keep = rows[:, m:]
        # rank d receives, for each column j, the sample of the rank that sent to d in column j
        recv = np.empty_like(send)
        cols = np.broadcast_to(np.arange(m), (W, m))
        recv[to, cols] = send
        return np.concatenate([keep, recv], axis=1)

    def shard_at(e: int) -> np.ndarray:
        if e < state["e"]:
            state["e"], state["shard"] = 0, base
        while state["e"] < e:
            state["shard"] = advance(state["shard"], state["e"])
            state["e"] += 1
        return state["shard"]

    def build(e: int) -> EpochPlan:
        rows = _shuffle_rows(shard_at(e), seed, e, 1)
        xfer = None
        if m:
            send, to, step = exchange(e, rows)
            xfer = Transfers.make(step, np.repeat(np.arange(W), m), to, send, tier=tier, move=True)
        return EpochPlan(epoch=e, sample_ids=rows, source=np.full(rows.shape, tier, np.uint8),
                         bounds=_bounds(W, n, local_batch, drop_last_batch), transfers=xfer)

    meta = {"shard_samples": int(n), "storage_samples_per_rank": int(n + m), "drop_last": drop_last,
            "drop_last_batch": drop_last_batch}
    return Plan(strategy="pls", n_samples=n_samples, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, prologue=pro, meta=meta, pipeline=SYNC,
                order=f"partial local shuffle (q={q}): each epoch a global permutation, per-rank subsets mix slowly",
                exchange=ExchangeShare(q=float(q), samples_per_epoch=int(m)))


def staging_subset_plan(*, n_samples: int, world_size: int, groups, node_map=None, epochs: int,
                        local_batch: int, seed: int, drop_last: bool = False, drop_last_batch: bool = False,
                        tier: int = LOCAL, sample_nbytes=None, capacity: float | None = None,
                        beyond: str = "shared") -> Plan:
    """Staging when the dataset does not fit on a node: the dataset is split once into one subset per
    storage group (``groups[r]``: the group of rank r, a node for a node-local directory, the rank itself
    for a per-process memory tier); the ranks of a group read disjoint parts of its subset from the PFS,
    and every epoch the group's subset is shuffled and dealt to its ranks (DistributedSampler-style). The
    order is no longer a global shuffle: each group sees only its subset, every epoch.

    ``capacity`` (bytes per group, with ``sample_nbytes``): when a group's subset holds more, only the
    prefix of its subset in id order that fits is staged (the HDMLP thesis' Parallel Data Staging: its own
    partition, file by file, until the first one that does not fit). ``beyond`` says what happens to the
    rest: ``shared``: every epoch still delivers the whole subset once, the staged samples from the local
    tier and the others from the shared tier (per access: ``source``); ``redraw``: every epoch makes the
    same number of accesses, drawn uniformly with replacement from the staged samples only (what the
    reference simulator does, whether or not the subset fits; not every sample is seen)."""
    if beyond not in ("shared", "redraw"):
        raise ConfigError(f"staging beyond={beyond!r}: must be shared or redraw")
    groups = np.asarray(groups, dtype=np.int64)
    W = int(world_size)
    G = int(groups.max()) + 1
    members = [np.nonzero(groups == g)[0] for g in range(G)]
    K = len(members[0])
    if any(len(m) != K for m in members):
        raise ConfigError(f"staging with a per-node subset needs the same number of ranks in every node; "
                          f"got {[len(m) for m in members]}")
    subsets = shards(seed, n_samples, G, drop_last)          # (G, n_group)
    staged = np.ones(n_samples, dtype=bool)                 # staged[i]: sample i is in its group's store
    staged_b = np.zeros(G)
    pools = []                                              # per group: its staged ids (sorted)
    sizes: np.ndarray | None = None
    cap = 0.0   # read only where sizes (given with capacity)
    if capacity is not None:
        if sample_nbytes is None:
            raise ConfigError("staging_subset_plan: capacity needs sample_nbytes")
        sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.float64), (n_samples,))
        cap = float(capacity)
    ranks, samples = [], []
    for g, mem in enumerate(members):
        uniq = np.unique(subsets[g])
        if sizes is not None:
            # the longest prefix that fits (stop at the first that does not), as clairvoyant.assign_tiers
            k = int(np.searchsorted(np.cumsum(sizes[uniq]), cap, side="right"))
            staged[uniq[k:]] = False
            uniq = uniq[:k]
            staged_b[g] = float(sizes[uniq].sum())
        if not len(uniq):
            raise CapacityError(f"staging: a node's capacity of {float(capacity or 0):.4g} B holds none of its "
                                f"subset; add capacity or use a strategy that reads the shared tier (naive, prefetch)")
        pools.append(uniq)
        for j, r in enumerate(mem):
            part = uniq[j::K]
            ranks.append(np.full(len(part), r, np.int64))
            samples.append(part)
    rk, sm = np.concatenate(ranks), np.concatenate(samples)
    pro = Prologue(rank=rk, sample=sm, src=np.full(len(sm), SHARED, np.uint8), dst=np.full(len(sm), tier, np.uint8),
                   peer=np.full(len(sm), -1, np.int64), groups=groups)

    partial = not staged.all()
    redraw = beyond == "redraw"                             # the reference draws even when the subset fits

    def build(e: int) -> EpochPlan:
        if redraw:   # the subset's size in draws from the staged part, with replacement (seeded per epoch)
            rng = epoch_rng(seed, e, 3)
            drawn = np.stack([pool[rng.integers(0, len(pool), subsets.shape[1])] for pool in pools])
        else:
            drawn = _shuffle_rows(subsets, seed, e, 1)
        per = [distributed_indices(drawn[g], K, drop_last) for g in range(G)]
        n = per[0].shape[1]
        rows = np.empty((W, n), np.int64)
        for g, mem in enumerate(members):
            rows[mem] = per[g]
        src = np.where(staged[rows], np.uint8(tier), np.uint8(SHARED)) if partial else np.full(rows.shape, tier,
                                                                                                np.uint8)
        return EpochPlan(epoch=e, sample_ids=rows, source=src, bounds=_bounds(W, n, local_batch, drop_last_batch))

    order = ("staging-subset: the dataset did not fit on a node, so each node trains on its own subset "
             "every epoch: NOT a global shuffle")
    warning = ("staging: the dataset does not fit in node-local storage; each node trains on its "
               "local subset, so the order is no longer a global shuffle")
    frac: float | None = None
    meta = {"staged": "a subset per node", "groups": groups.tolist(), "group_samples": int(subsets.shape[1]),
            "drop_last": drop_last, "drop_last_batch": drop_last_batch}
    if partial or (redraw and sizes is not None):
        assert sizes is not None   # partial: some sample beyond a node's capacity, which needs sizes
        subset_b = np.array([float(sizes[np.unique(subsets[g])].sum()) for g in range(G)])
        frac = float(staged_b.sum() / subset_b.sum())
        meta["staged_bytes_per_node"] = staged_b.tolist()
        meta["beyond_capacity"] = beyond
        if redraw:
            meta["staged"] = f"the first {frac:.1%} of each node's subset (what fits)"
            order = ("staging-redraw: every epoch each node draws its subset's size in samples, with "
                     "replacement, from the staged part of its subset only: NOT a global shuffle, not every "
                     "sample seen")
            warning = (f"staging: the dataset does not fit in node-local storage; {frac:.1%} of each node's "
                       f"subset is staged and each epoch draws only from the staged samples (with replacement)")
        else:
            meta["staged"] = f"the first {frac:.1%} of each node's subset (what fits); the rest from the shared tier"
            order = ("staging-partial: each node trains on its own subset every epoch (NOT a global shuffle); "
                     "the part beyond node-local capacity is read from the shared tier every epoch")
            warning = (f"staging: even a per-node subset does not fit in node-local storage; {frac:.1%} of it "
                       f"is staged, the other {1 - frac:.1%} is read from the shared tier every epoch")
    return Plan(strategy="staging", n_samples=n_samples, world_size=W,
                node_map=groups if node_map is None else node_map, epochs=epochs, local_batch=local_batch,
                seed=seed, build_epoch=build, prologue=pro, meta=meta, pipeline=SYNC, order=order, warning=warning,
                staged_fraction=frac)


def storage_bytes_per_rank(plan: Plan, sample_nbytes, *, max_work: float = 2e7) -> np.ndarray:
    """Peak bytes each rank stores of its shard (local, pls): its shard plus what it receives during an
    epoch (sent samples are deleted only as they go), maximised over epochs; exact when the plan is small
    (W·n·E ≤ ``max_work``), else the bound (n + m) × the largest sample. Pad duplicates count once."""
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (plan.n_samples,))
    ep0 = plan.epoch(0)
    W, n = ep0.sample_ids.shape
    m = plan.exchange.samples_per_epoch if plan.exchange is not None else 0
    if W * n * plan.epochs > max_work:
        return np.full(W, (n + m) * int(sizes.max()), dtype=np.int64)
    peak = np.zeros(W, dtype=np.int64)
    for ep in plan:
        for r in range(W):
            b = int(sizes[np.unique(ep.rank_samples(r))].sum())
            if ep.transfers is not None:
                t = ep.transfers
                b += int(sizes[t.sample[t.dst == r]].sum())
            peak[r] = max(peak[r], b)
    return peak


__all__ = ["tier_of_sample", "staging_plan", "staging_subset_plan", "local_plan", "pls_plan", "shards",
           "storage_bytes_per_rank", "MEMORY", "LOCAL"]
