"""The sample order of a ``webdataset`` pipeline (layout ``webdataset``, read pattern ``stream``): pure NumPy.

``webdataset.WebDataset(urls, shardshuffle=K, nodesplitter=split_by_node).shuffle(B, initial=I)`` read by a
``DataLoader`` of S workers, as webdataset 1.0 builds it (``webdataset/compat.py``), per rank and epoch:

1. the shard list split by node: rank r takes shards r, r+W, ... (``split_by_node``), then by worker: worker k
   of the rank's list takes every S-th (``split_by_worker``) — shards stay with their rank across epochs;
2. each worker's shards through a shuffle buffer of K shards (``filters.shuffle(K)``, initial min(100, K); K = 0:
   in order);
3. each worker streams its shards front to back (one sequential read per shard) and passes the samples through
   a shuffle buffer of B samples that emits once I are buffered (``filters._shuffle``: each step takes one
   sample, and a second while the buffer holds fewer than B, then emits a uniformly chosen one; the chosen
   slot is refilled with the last);
4. each worker's samples cut into batches, batches taken round robin over the workers (a DataLoader's order);
5. every rank keeps the smallest rank's count (webdataset leaves this to the user, ``with_epoch``: unequal
   counts would stall DDP), the rest left out and counted.

So there is no global shuffle: a sample leaves its worker's stream at most about B samples from where it was
read, and a shard's samples come out close together. The generators are NumPy's, not Python's ``random``
(webdataset's): the rules are webdataset's, not its random draws; the shard and sample shuffles are redrawn
every epoch (webdataset with a fixed ``seed=`` repeats its shard order each epoch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .plan import SHARED, SYNC, EpochPlan, Plan
from .sampler import batch_bounds, epoch_rng
from .semantics import Semantics, no, yes

ORDER = ("webdataset stream (shards split by rank and loader worker, shard shuffle buffer, each shard read "
         "sequentially, sample shuffle buffer)")


def wds_shuffle(seq, bufsize: int, initial: int, rng: np.random.Generator) -> np.ndarray:
    """``seq`` through webdataset's shuffle buffer (``filters._shuffle(bufsize, initial)``)."""
    src = np.asarray(seq, dtype=np.int64).tolist()
    n = len(src)
    if bufsize <= 1 or n <= 1:
        return np.asarray(src, dtype=np.int64)
    initial = min(int(initial), int(bufsize))
    u = rng.random(n).tolist()
    buf: list[int] = []
    out: list[int] = []
    it = p = 0
    while it < n:
        buf.append(src[it])
        it += 1
        if len(buf) < bufsize and it < n:
            buf.append(src[it])
            it += 1
        if len(buf) >= initial:
            k = int(u[p] * len(buf))
            p += 1
            out.append(buf[k])
            buf[k] = buf[-1]
            buf.pop()
    while buf:
        k = int(u[p] * len(buf))
        p += 1
        out.append(buf[k])
        buf[k] = buf[-1]
        buf.pop()
    return np.asarray(out, dtype=np.int64)


def rank_order(*, first: np.ndarray, count: np.ndarray, world_size: int, rank: int, epoch: int, seed: int,
               streams: int, local_batch: int, shuffle_buffer: int, initial: int, shard_shuffle: int) -> np.ndarray:
    """Rank ``rank``'s samples in epoch ``epoch`` (before the equal-count cut), per the module docstring."""
    shards = np.arange(rank, len(first), world_size)
    s_count = max(1, int(streams))
    batches: list[list[np.ndarray]] = []
    for k in range(s_count):
        ws = shards[k::s_count]
        if shard_shuffle > 1:
            ws = wds_shuffle(ws, shard_shuffle, min(100, shard_shuffle), epoch_rng(seed, epoch, 9, rank, k))
        seq = (np.concatenate([np.arange(first[f], first[f] + count[f], dtype=np.int64) for f in ws])
               if len(ws) else np.zeros(0, np.int64))
        seq = wds_shuffle(seq, shuffle_buffer, initial, epoch_rng(seed, epoch, 10, rank, k))
        batches.append([seq[i:i + local_batch] for i in range(0, len(seq), local_batch)])
    out = [batches[k][t] for t in range(max((len(b) for b in batches), default=0))
           for k in range(s_count) if t < len(batches[k])]
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def shard_stream_plan(*, strategy: str, first: np.ndarray, count: np.ndarray, n_samples: int, world_size: int,
                      node_map, epochs: int, local_batch: int, seed: int, streams: int, shuffle_buffer: int,
                      initial: int, shard_shuffle: int, tier: int = SHARED, meta: dict | None = None,
                      drop_last_batch: bool = False) -> Plan:
    """The Plan of the webdataset stream order: every sample from ``tier``; equal counts per rank. The caller
    checks that every rank has a shard."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)

    def build(e: int) -> EpochPlan:
        kw: dict[str, Any] = dict(first=first, count=count, epoch=e, seed=seed, streams=streams,
                                  local_batch=local_batch, shuffle_buffer=shuffle_buffer, initial=initial,
                                  shard_shuffle=shard_shuffle, world_size=world_size)
        rows = [rank_order(rank=r, **kw) for r in range(world_size)]
        n = min(len(r) for r in rows)
        ids = np.stack([r[:n] for r in rows]) if n else np.zeros((world_size, 0), np.int64)
        bounds = np.tile(batch_bounds(n, local_batch, drop_last_batch), (world_size, 1))
        return EpochPlan(epoch=e, sample_ids=ids, source=np.full(ids.shape, tier, dtype=np.uint8), bounds=bounds)

    per_rank = [int(count[r::world_size].sum()) for r in range(world_size)]
    left = sum(per_rank) - world_size * min(per_rank)
    m: dict[str, Any] = {"samples_left_out_per_epoch": left,
                         "streams": int(streams), "shuffle_buffer": int(shuffle_buffer), "initial": int(initial),
                         "shard_shuffle": int(shard_shuffle), "drop_last_batch": bool(drop_last_batch),
                         "file_sharding": "shards per rank, then per loader worker"}
    semantics = Semantics(yes() if left == 0 else no(f"{left} samples left out to give every rank the same steps"),
                          no(f"webdataset: shards per rank and worker, a shuffle buffer of {int(shuffle_buffer)} "
                             f"samples per worker"),
                          yes("shard and sample shuffle buffers redrawn every epoch")
                          if shard_shuffle > 1 or shuffle_buffer > 1 else no())
    m.update(meta or {})
    return Plan(strategy=strategy, n_samples=n_samples, world_size=world_size, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, meta=m, pipeline=SYNC, order=ORDER,
                read_pattern="webdataset", semantics=semantics)
