"""DeepIO (Zhu et al., entropy-aware in-memory shuffle; docs/STRATEGIES.md): pure planner.

**Partition.** Rank r owns the contiguous range [r·F/W, (r+1)·F/W) and holds the longest prefix of it
whose summed sample bytes fit ``capacity`` (bytes per rank: samples count their own sizes) in memory, read from the shared FS before epoch 0 (the prologue). When the dataset exceeds the
aggregate memory the partitions cover only part of it: M = the union of the held samples, |M| < F.
Nothing is kept or evicted during training.

**ordered**: the exact global shuffle (DistributedSampler rows); each access reads the rank's own memory if
it holds the sample, the holder's memory (a PEER access) if another rank holds it, else the shared FS.

**opportunistic**: training draws only from memory. Epoch e's stream is a seeded permutation of M (stream
``epoch_rng(seed, e, OPPORTUNISTIC_STREAM, pass)``), followed by fresh permutations of M while it is shorter
than the epoch (W·num samples, num = DistributedSampler's per-rank count, so every epoch has the global
shuffle's sample count and steps). Consecutive W·b slices of the stream are the global batches (the
randomisation: every batch is a uniform draw from everything in memory). Within a global batch, samples
are assigned to their holders first and the surplus is sent to ranks with a deficit, greedily
(``locality.rebalance_batch``: the same rule as locality-aware loading), so a rank reads its own memory
where it can and a peer's memory otherwise; nothing is read from the shared FS after the prologue.
When M is the whole dataset each epoch is a full permutation (of σ_e, not π_e); otherwise samples outside
M are never trained on and samples in M are seen more than once per epoch — ``order_quality`` reports how
much of the dataset each rank sees.
"""

from __future__ import annotations

import numpy as np

from .caches import global_rows
from .locality import rebalanced_epoch
from .plan import MEMORY, PEER, SHARED, Capacity, EpochPlan, Pipeline, Plan, Prologue
from .sampler import batch_bounds, epoch_rng, samples_per_rank
from .semantics import Semantics, no, yes

MODES = ("ordered", "opportunistic")
OPPORTUNISTIC_STREAM = 0xDE10


def partitions(F: int, W: int, capacity: float, sample_nbytes) -> np.ndarray:
    """owner (F,): the rank holding each sample in memory (-1: none): the longest prefix of each range whose
    summed bytes (``sample_nbytes``: per sample, or one size for all) fit ``capacity`` bytes."""
    ids = np.arange(F, dtype=np.int64)
    rng = (ids * W) // F
    start = (np.arange(W, dtype=np.int64) * F + W - 1) // W     # first id of each range
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    cum = np.cumsum(sizes)
    before = cum - sizes                                         # bytes of the ids below each one
    within = cum - before[np.minimum(start, max(F - 1, 0))][rng] if F else cum
    return np.where(within <= capacity, rng, -1)


def memory_stream(seed: int, e: int, in_memory: np.ndarray, length: int) -> np.ndarray:
    """Epoch e's opportunistic stream: seeded permutations of ``in_memory`` concatenated, cut to ``length``."""
    m = len(in_memory)
    parts, have, k = [], 0, 0
    while have < length:
        parts.append(in_memory[epoch_rng(seed, e, OPPORTUNISTIC_STREAM, k).permutation(m)])
        have += m
        k += 1
    return np.concatenate(parts)[:length] if parts else np.zeros(0, np.int64)


def deepio_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
                capacity: float, sample_nbytes, mode: str, pipeline: Pipeline, drop_last: bool = False) -> Plan:
    """The DeepIO plan (module doc). ``capacity``: bytes each rank holds in memory; ``sample_nbytes``: the
    bytes of each sample (or one size for all)."""
    if mode not in MODES:
        raise ValueError(f"deepio mode {mode!r}: one of {MODES}")
    W, F = int(world_size), int(n_samples)
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    owner = partitions(F, W, float(capacity), sizes)
    held = np.nonzero(owner >= 0)[0]
    if not len(held):
        raise ValueError("deepio: no sample fits in memory")
    prologue = Prologue(rank=owner[held], sample=held, src=np.full(len(held), SHARED, np.uint8),
                        dst=np.full(len(held), MEMORY, np.uint8), peer=np.full(len(held), -1, np.int64))
    num = samples_per_rank(F, W, drop_last)
    bounds_row = batch_bounds(num, local_batch)

    def build_ordered(e: int) -> EpochPlan:
        rows, bounds = global_rows(seed, e, F, W, local_batch, drop_last, False)
        W_, n = rows.shape
        h = owner[rows]
        me = np.arange(W_)[:, None]
        source = np.where(h == me, MEMORY, np.where(h >= 0, PEER, SHARED)).astype(np.uint8)
        peer = np.where(source == PEER, h, -1).astype(np.int32)
        return EpochPlan(epoch=e, sample_ids=rows, source=source, bounds=bounds, peer=peer)

    def build_opportunistic(e: int) -> EpochPlan:
        stream = memory_stream(seed, e, held, W * num)
        return rebalanced_epoch(e, lambda s: stream[W * int(bounds_row[s]):W * int(bounds_row[s + 1])], owner, W,
                                bounds_row)

    full = len(held) == F
    if mode == "ordered":
        order = "global shuffle (DistributedSampler); each sample from own memory, a peer's memory, else the shared FS"
        semantics = Semantics(yes(), yes(), no())
    else:
        order = ("opportunistic: global batches drawn from a seeded shuffle of the in-memory samples "
                 f"({len(held)} of {F}), each assigned to its holders first (greedy surplus -> deficit)")
        semantics = Semantics(yes("memory holds the dataset") if full else
                              no(f"only the {len(held)} of {F} samples in memory, some more than once"), no(), yes())
    meta = {"mode": mode, "drop_last": drop_last,
            "partition": "rank r holds the longest prefix of [r*F/W, (r+1)*F/W) whose bytes fit --cache-capacity, "
                         "preloaded",
            "samples_in_memory": int(len(held))}
    cap = Capacity(cache_peak_samples=np.bincount(owner[held], minlength=W).astype(np.int64).tolist(),
                   cache_peak_bytes=np.bincount(owner[held], weights=sizes[held], minlength=W).astype(np.int64).tolist())
    build = build_ordered if mode == "ordered" else build_opportunistic
    return Plan(strategy="deepio", n_samples=F, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, prologue=prologue, meta=meta,
                pipeline=pipeline, order=order, semantics=semantics, capacity=cap)


__all__ = ["MODES", "partitions", "memory_stream", "deepio_plan"]
