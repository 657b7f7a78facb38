"""The sample order of a ``tf.data.TFRecordDataset`` pipeline (TFRecord read pattern ``tfdata``): pure NumPy.

DLIO's TensorFlow reader (``dlio_benchmark/reader/tf_reader.py``) lists the files, shards them over the ranks
(file f to rank f mod W when there are at least W files; otherwise every rank reads every file and the records
are sharded after the shuffle), reads them with ``TFRecordDataset(num_parallel_reads=read_threads)``, shuffles
records through a buffer of ``shuffle_size`` and batches. The order dlbench plans for it, per rank and epoch:

1. the rank's files, shuffled with the epoch's generator when ``file_shuffle`` (a seeded file-level shuffle);
2. ``streams`` readers (the loader workers: DataLoader processes for prefetch, 1 for naive), stream k reading
   files k, k+S, ... of that list front to back, record by record;
3. per stream a shuffle buffer of ceil(shuffle_buffer / S) records (tf.data's algorithm: fill the buffer, emit a
   uniformly chosen record and refill its slot with the next one read), so the records buffered in all streams
   together are at most ``shuffle_buffer``, as in TensorFlow's one buffer;
4. each stream's records cut into batches, batches taken round robin over the streams (the order a
   ``DataLoader`` delivers its workers' batches in; batch b is fetched by worker b mod S);
5. every rank keeps the same number of samples (the smallest rank's count; the rest of a rank's records are
   left out of the epoch, as DLIO's ``take`` does), so every rank runs the same steps.

So sample order is constrained: a record is delivered at most ``shuffle_buffer`` records after the one read
before it in its stream, and a file's records come out within a window of the buffer around their file order;
there is no global shuffle. The generator is not TensorFlow's (Philox): the order follows tf.data's rules, not
its random draws. Cost: the shuffle buffer is one Python step per sample (≈ 0.2 µs), at plan time only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .plan import SHARED, SYNC, EpochPlan, Plan
from .sampler import batch_bounds, epoch_rng
from .semantics import Semantics, no, yes

ORDER = "tf.data (tfrecord read pattern tfdata: files per rank, one stream per loader worker, shuffle buffer)"


def shuffle_buffer_order(seq: np.ndarray, buffer: int, rng: np.random.Generator) -> np.ndarray:
    """``seq`` through tf.data's shuffle buffer of ``buffer`` elements (``Dataset.shuffle``)."""
    n = len(seq)
    if buffer <= 1 or n <= 1:
        return np.asarray(seq, dtype=np.int64).copy()
    b = min(buffer, n)
    sizes = np.minimum(b, n - np.arange(n))          # elements in the buffer when output s is drawn
    picks = (rng.random(n) * sizes).astype(np.int64).tolist()
    src = np.asarray(seq, dtype=np.int64).tolist()
    buf = src[:b]
    out = [0] * n
    nxt = b
    for s, k in enumerate(picks):
        out[s] = buf[k]
        if nxt < n:
            buf[k] = src[nxt]
            nxt += 1
        else:
            buf[k] = buf[-1]
            buf.pop()
    return np.asarray(out, dtype=np.int64)


def rank_order(*, first: np.ndarray, count: np.ndarray, world_size: int, rank: int, epoch: int, seed: int,
               streams: int, local_batch: int, shuffle_buffer: int, file_shuffle: bool) -> np.ndarray:
    """Rank ``rank``'s samples in epoch ``epoch`` (before the equal-count cut), per the module docstring.
    ``first``/``count``: each file's first sample and record count."""
    n_files = len(first)
    shard_files = n_files >= world_size
    files = np.arange(rank, n_files, world_size) if shard_files else np.arange(n_files)
    if file_shuffle:
        files = files[epoch_rng(seed, epoch, 7, rank if shard_files else 0).permutation(len(files))]
    s_count = max(1, int(streams))
    per_stream_buffer = max(1, math.ceil(shuffle_buffer / s_count))
    batches: list[list[np.ndarray]] = []
    for k in range(s_count):
        fk = files[k::s_count]
        seq = (np.concatenate([np.arange(first[f], first[f] + count[f], dtype=np.int64) for f in fk])
               if len(fk) else np.zeros(0, np.int64))
        seq = shuffle_buffer_order(seq, per_stream_buffer,
                                   epoch_rng(seed, epoch, 8, rank if shard_files else 0, k))
        batches.append([seq[i:i + local_batch] for i in range(0, len(seq), local_batch)])
    out = []
    for t in range(max((len(b) for b in batches), default=0)):
        for k in range(s_count):
            if t < len(batches[k]):
                out.append(batches[k][t])
    order = np.concatenate(out) if out else np.zeros(0, np.int64)
    return order if shard_files else order[rank::world_size]


def tfdata_plan(*, strategy: str, first: np.ndarray, count: np.ndarray, n_samples: int, world_size: int,
                node_map, epochs: int, local_batch: int, seed: int, streams: int, shuffle_buffer: int,
                file_shuffle: bool, tier: int = SHARED, meta: dict | None = None,
                drop_last_batch: bool = False) -> Plan:
    """The Plan of the tf.data order (module docstring): every sample from ``tier``; equal counts per rank;
    ``drop_last_batch``: a rank's last partial batch is not read (tf.data ``batch(drop_remainder=True)``)."""
    first = np.asarray(first, dtype=np.int64)
    count = np.asarray(count, dtype=np.int64)

    shard = len(first) >= world_size

    def build(e: int) -> EpochPlan:
        kw: dict[str, Any] = dict(first=first, count=count, epoch=e, seed=seed, streams=streams, local_batch=local_batch,
                  shuffle_buffer=shuffle_buffer, file_shuffle=file_shuffle)
        if shard:
            rows = [rank_order(world_size=world_size, rank=r, **kw) for r in range(world_size)]
        else:
            # fewer files than ranks: every rank reads every file in one order and keeps every W-th sample;
            # that order is built once (world size 1 draws the same generators), not once per rank
            full = rank_order(world_size=1, rank=0, **kw)
            rows = [full[r::world_size] for r in range(world_size)]
        n = min(len(r) for r in rows)
        ids = np.stack([r[:n] for r in rows]) if n else np.zeros((world_size, 0), np.int64)
        bounds = np.tile(batch_bounds(n, local_batch, drop_last_batch), (world_size, 1))
        return EpochPlan(epoch=e, sample_ids=ids, source=np.full(ids.shape, tier, dtype=np.uint8), bounds=bounds)

    per_rank = [int(count[r::world_size].sum()) for r in range(world_size)] if shard else \
        [len(range(r, n_samples, world_size)) for r in range(world_size)]
    m = {"samples_left_out_per_epoch": sum(per_rank) - world_size * min(per_rank), "streams": int(streams), "shuffle_buffer": int(shuffle_buffer),
         "file_shuffle": bool(file_shuffle), "drop_last_batch": bool(drop_last_batch),
         "file_sharding": "files per rank" if shard else "every rank reads every file"}
    left = m["samples_left_out_per_epoch"]
    semantics = Semantics(yes() if left == 0 else no(f"{left} samples left out to give every rank the same steps"),
                          no(f"tf.data: files per rank, shuffle buffer of {int(shuffle_buffer)} records"),
                          yes("file shuffle and shuffle buffer redrawn every epoch")
                          if file_shuffle or shuffle_buffer > 1 else no())
    m.update(meta or {})
    return Plan(strategy=strategy, n_samples=n_samples, world_size=world_size, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, meta=m, pipeline=SYNC, order=ORDER,
                read_pattern="tfdata", semantics=semantics)
