"""Pure planners of the cache family (docs/STRATEGIES.md): the bytes of each access come from the PFS, the
rank's own cache, or the cache of the peer that holds the sample. NumPy only; no files, MPI or clocks.

Common tools:
- ``access_table(ep)``: an epoch's valid accesses as flat arrays (rank, column, sample, step) in global
  order (step, rank, column) — the order in which ranks first touch samples.
- ``owner_sources(...)``: given which rank holds each sample before the epoch (``owner``, -1: nobody),
  the source of every access: own cache (MEMORY) if the rank holds it, the holder's cache (PEER) otherwise,
  and for samples nobody holds, the PFS; with ``fill`` the first toucher keeps the sample (cache fill on
  first touch) and later touches in the same epoch (later steps) read it from that rank.

``lbann_plan``: LBANN's distributed in-memory data store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .plan import MEMORY, NO_TIER, PEER, SHARED, Capacity, EpochPlan, Pipeline, Plan, Prologue
from .sampler import batch_bounds, distributed_indices, epoch_permutation


@dataclass(frozen=True)
class Accesses:
    rank: np.ndarray
    col: np.ndarray
    sample: np.ndarray
    step: np.ndarray


def global_rows(seed: int, e: int, n_samples: int, W: int, local_batch: int, drop_last: bool,
                drop_last_batch: bool) -> tuple[np.ndarray, np.ndarray]:
    """The global shuffle's rows (W, n) and step bounds (W, steps + 1) of epoch e (DistributedSampler)."""
    rows = distributed_indices(epoch_permutation(seed, e, n_samples), W, drop_last)
    bounds = np.tile(batch_bounds(rows.shape[1], local_batch, drop_last_batch), (W, 1))
    return rows, bounds


def access_table(rows: np.ndarray, bounds: np.ndarray) -> Accesses:
    """Valid accesses in global order (step, rank, column)."""
    W, n = rows.shape
    col = np.arange(n)
    r_idx, c_idx = np.nonzero((col[None, :] < bounds[:, -1:]) & (rows >= 0))
    # every rank's bounds in one sorted vector (row r shifted by r·(n+1), so rows never overlap): one
    # searchsorted for all ranks (a loop over ranks masking every access was O(W x accesses))
    S = bounds.shape[1]
    flat = (np.asarray(bounds, dtype=np.int64) + (np.arange(W, dtype=np.int64) * (n + 1))[:, None]).ravel()
    step = np.searchsorted(flat, r_idx * (n + 1) + c_idx, side="right") - 1 - r_idx * S
    # nonzero lists (rank, column) in row-major order: a stable sort by step alone gives (step, rank, column)
    # (radix sort on a small integer type)
    order = np.argsort(step.astype(np.int16 if S < 2**15 else np.int64), kind="stable")
    return Accesses(r_idx[order], c_idx[order], rows[r_idx[order], c_idx[order]], step[order])


def owner_sources(rows: np.ndarray, bounds: np.ndarray, owner: np.ndarray, *, fill: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(source, peer, keep, new_owner) for one epoch (module doc). ``owner`` is not modified."""
    W, n = rows.shape
    source = np.full((W, n), SHARED, np.uint8)
    peer = np.full((W, n), -1, np.int32)
    keep = np.full((W, n), NO_TIER, np.uint8)
    new_owner = owner.copy()
    a = access_table(rows, bounds)
    held = owner[a.sample] >= 0
    # held before the epoch: own cache or the holder's
    own = held & (owner[a.sample] == a.rank)
    source[a.rank[own], a.col[own]] = MEMORY
    rem = held & ~own
    source[a.rank[rem], a.col[rem]] = PEER
    peer[a.rank[rem], a.col[rem]] = owner[a.sample[rem]]
    if fill:
        idx = np.nonzero(~held)[0]
        if len(idx):
            # the first touch (global order) reads the PFS and keeps it; touches at later steps read the
            # first toucher's cache; touches in the same step read the PFS too (not kept)
            s_idx = a.sample[idx]
            uniq, first = np.unique(s_idx, return_index=True)
            first_rows = idx[first]
            new_owner[uniq] = a.rank[first_rows]
            keep[a.rank[first_rows], a.col[first_rows]] = MEMORY
            first_step = np.empty(len(owner), np.int64)
            first_step[uniq] = a.step[first_rows]
            later = idx[a.step[idx] > first_step[s_idx]]
            source[a.rank[later], a.col[later]] = PEER
            peer[a.rank[later], a.col[later]] = new_owner[a.sample[later]]
            own_later = later[new_owner[a.sample[later]] == a.rank[later]]
            source[a.rank[own_later], a.col[own_later]] = MEMORY
            peer[a.rank[own_later], a.col[own_later]] = -1
    return source, peer, keep, new_owner


def lbann_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
               mode: str, sample_nbytes=1, drop_last: bool = False, drop_last_batch: bool = False,
               pipeline: Pipeline) -> Plan:
    """LBANN's data store: every rank owns about F/W samples in memory and sends them to the ranks whose
    batch needs them; training follows the exact global shuffle.

    ``preload``: rank r owns the contiguous range [r·F/W, (r+1)·F/W) and reads it from the PFS before epoch 0
    (the prologue). ``dynamic``: nothing is read ahead; a sample's first touch (epoch 0 for all but a
    drop_last tail) reads it from the PFS and the toucher keeps it, becoming its owner. ``sample_nbytes``:
    the bytes of each sample (or one size for all), for the plan's per-rank cache bytes (``cache_peak_bytes``)."""
    W, F = int(world_size), int(n_samples)
    if mode not in ("preload", "dynamic"):
        raise ValueError(f"lbann mode {mode!r}")
    state: dict[str, Any] = {"e": 0, "owner": np.full(F, -1, np.int64)}
    prologue = None
    if mode == "preload":
        own = (np.arange(F, dtype=np.int64) * W) // F
        state["owner"] = own.copy()
        ids = np.arange(F, dtype=np.int64)
        prologue = Prologue(rank=own, sample=ids, src=np.full(F, SHARED, np.uint8), dst=np.full(F, MEMORY, np.uint8),
                            peer=np.full(F, -1, np.int64))
    start_owner = state["owner"].copy()

    def rows_of(e):
        return global_rows(seed, e, F, W, local_batch, drop_last, drop_last_batch)

    def owner_before(e: int) -> np.ndarray:
        if e < state["e"]:
            state["e"], state["owner"] = 0, start_owner.copy()
        if mode == "preload" or (state["owner"] >= 0).all():
            # no epoch changes the owners any more (preload: none ever does; dynamic: every sample is held,
            # and only a first touch of an unheld sample takes an owner)
            state["e"] = max(state["e"], e)
            return state["owner"]
        while state["e"] < e:
            rows, bounds = rows_of(state["e"])
            state["owner"] = owner_sources(rows, bounds, state["owner"], fill=mode == "dynamic")[3]
            state["e"] += 1
        return state["owner"]

    def build(e: int) -> EpochPlan:
        owner = owner_before(e)
        rows, bounds = rows_of(e)
        source, peer, keep, _ = owner_sources(rows, bounds, owner, fill=mode == "dynamic")
        return EpochPlan(epoch=e, sample_ids=rows, source=source, bounds=bounds, peer=peer, keep=keep)

    if mode == "preload":
        owner = start_owner
    else:   # owners after the first touches of every sample: at most what they touched first
        owner = np.full(F, -1, np.int64)
        for e in range(epochs):
            rows, bounds = rows_of(e)
            owner = owner_sources(rows, bounds, owner, fill=True)[3]
            if (owner >= 0).all():
                break
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    peak = np.bincount(owner[owner >= 0], minlength=W)
    peak_bytes = np.bincount(owner[owner >= 0], weights=sizes[owner >= 0], minlength=W)
    meta = {"mode": mode, "drop_last": drop_last, "drop_last_batch": drop_last_batch}
    cap = Capacity(cache_peak_samples=peak.astype(np.int64).tolist(), cache_peak_bytes=peak_bytes.astype(np.int64).tolist())
    return Plan(strategy="lbann", n_samples=F, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, prologue=prologue, meta=meta,
                pipeline=pipeline, order="global shuffle (DistributedSampler); samples come from their owner's memory",
                capacity=cap)


__all__ = ["Accesses", "access_table", "global_rows", "owner_sources", "lbann_plan"]
