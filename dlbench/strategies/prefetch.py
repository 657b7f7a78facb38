"""prefetch: the PyTorch DataLoader baseline. Same order as naive, through a real
``torch.utils.data.DataLoader`` driven by a ``DistributedSampler`` (whose permutation is the plan's π_e),
with ``num_workers``, ``prefetch_factor``, ``pin_memory``. The prefetch window is
num_workers × prefetch_factor batches. Reads still go to the shared tier every epoch.

How a batch travels: a worker reads the step's samples into one uint8 tensor in shared memory
(page-aligned, so no alignment trap and no copy when it is handed to the trainer). Each worker keeps a
ring of prefetch_factor + 2 such buffers, allocated once and reused: a fresh buffer per batch would pay
first-touch page faults (≈ 1 GB/s here, LIMITS.md) on every byte. A buffer is reused only after the
worker has produced prefetch_factor + 1 later batches, and the DataLoader never has more than
prefetch_factor batches of a worker in flight, so the trainer is done with it by then. The worker
returns the buffer with
returns it with the (start, end, bytes) of every read and decode, measured in the worker with the same
monotonic clock; the trainer files those intervals under the worker's thread id. With
``num_workers=0`` the DataLoader reads in the trainer's process, exactly as PyTorch does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np

from ..config import opt
from ..errors import ConfigError
from ..plan import SHARED, Plan
from ..timeline import PHASE_ID, Timeline
from . import register
from .base import Batch, Executor, RunContext, Strategy
from .naive import GLOBAL_SHUFFLE, shared_tier_plan


@dataclass(frozen=True, kw_only=True)
class PrefetchOptions:
    num_workers: int = opt(2, help="DataLoader worker processes (0: read in the trainer's process)", min=0, max=256)
    prefetch_factor: int = opt(2, help="batches prefetched per worker", min=1, max=1024)
    pin_memory: bool = opt(False, help="pin host memory (only meaningful with CUDA)")
    persistent_workers: bool = opt(False, help="keep workers alive across epochs (PyTorch's default: off)")
    drop_last: bool = opt(False, help="DistributedSampler drop_last")


def _shared_rows(n: int, row_nbytes: int):
    """A (n, row_nbytes) uint8 tensor in shared memory (page-aligned; sent between processes without a
    copy)."""
    import torch

    storage = torch.UntypedStorage._new_shared(max(n * row_nbytes, 1))
    return torch.empty(0, dtype=torch.uint8).set_(storage)[: n * row_nbytes].view(n, row_nbytes)


class _StepDataset:
    """Map-style dataset whose index is a whole step (a list of sample ids): one fetch = one batch,
    so IPC is per batch, not per sample."""

    def __init__(self, reader_factory, jpeg: bool, out_nbytes: int, max_raw: int, local_batch: int, ring: int):
        self.reader_factory, self.jpeg = reader_factory, jpeg
        self.out_nbytes, self.max_raw = out_nbytes, max_raw
        self.local_batch, self.ring_size = local_batch, ring
        self._pid, self._reader, self._raw, self._ring, self._next = None, None, None, None, 0

    def _open(self):
        if self._pid != os.getpid():
            self._reader = self.reader_factory()
            self._pid = os.getpid()
            self._ring = [_shared_rows(self.local_batch, self.out_nbytes) for _ in range(self.ring_size)]
            if self.jpeg:
                from ..storage import aligned_empty

                self._raw = aligned_empty(self.max_raw)
        return self._reader

    def __getitem__(self, ids):
        import torch

        reader = self._open()
        n = len(ids)
        rows = self._ring[self._next][:n]
        self._next = (self._next + 1) % self.ring_size
        view = rows.numpy()
        times = np.empty((n, 4), dtype=np.int64)  # read start, read end (= decode start), decode end, bytes
        clock = perf_counter_ns
        read_into = reader.read_into
        if self.jpeg:
            raw, decode = self._raw, reader.decode_into
            for j, i in enumerate(ids):
                t0 = clock()
                nb = read_into(i, raw)
                t1 = clock()
                decode(raw, nb, view[j])
                times[j] = (t0, t1, clock(), nb)
        else:
            for j, i in enumerate(ids):
                t0 = clock()
                nb = read_into(i, view[j])
                t1 = clock()
                times[j] = (t0, t1, t1, nb)
        info = torch.utils.data.get_worker_info()
        # a worker's Darshan-style counters travel back with every batch (cumulative; the trainer keeps the
        # latest per worker reader): a ~25-int list per batch
        cnt = getattr(reader, "counters", None)
        snap = cnt.snapshot() if cnt is not None and info is not None else None
        return rows, np.asarray(ids, dtype=np.int64), times, (info.id + 1 if info is not None else 0), snap



def _identity(x):
    return x


class DataLoaderExecutor(Executor):
    def __init__(self, ctx: RunContext, plan: Plan, options: PrefetchOptions):
        try:
            import torch  # noqa: F401
            from torch.utils.data import BatchSampler, DataLoader, DistributedSampler
        except ImportError:  # pragma: no cover - torch is a core dependency
            raise ConfigError("strategy prefetch needs torch: pip install torch") from None
        self.ctx, self.plan, self.options = ctx, plan, options
        wl = ctx.workload
        jpeg = wl.layout == "jpeg_folders"
        probe = ctx.reader_factory()
        max_raw = probe.max_row_nbytes
        probe.close()
        out_nbytes = wl.decoded_nbytes if jpeg else max_raw

        class PlanDistributedSampler(DistributedSampler):
            """DistributedSampler with dlbench's permutation: the rank's row of the plan, which
            ``dlbench.plan.distributed_indices`` builds with DistributedSampler's own padding and
            striding (tested equal)."""

            def __iter__(inner):
                return iter(plan.epoch(inner.epoch).rank_samples(inner.rank).tolist())

            def __len__(inner):
                return int(plan.epoch(inner.epoch).counts()[inner.rank])

        self.sampler = PlanDistributedSampler(range(plan.n_samples), num_replicas=plan.world_size,
                                              rank=ctx.rank, shuffle=False, drop_last=options.drop_last)
        batches = BatchSampler(self.sampler, batch_size=plan.local_batch, drop_last=False)
        kw = {}
        if options.num_workers > 0:
            kw = {"prefetch_factor": options.prefetch_factor, "persistent_workers": options.persistent_workers}
        pin = options.pin_memory and torch.cuda.is_available()
        ring = options.prefetch_factor + 2
        self.loader = DataLoader(_StepDataset(ctx.reader_factory, jpeg, out_nbytes, max_raw,
                                              plan.local_batch, ring),
                                 sampler=batches, batch_size=None, collate_fn=_identity,
                                 num_workers=options.num_workers, pin_memory=pin, **kw)
        self.worker_timelines = [ctx.timeline] + [Timeline(1 << 14, ctx.rank, thread=w + 1)
                                                  for w in range(options.num_workers)]

    def epoch(self, e: int) -> Iterator[Batch]:
        self.sampler.set_epoch(e)
        READ, DECODE = PHASE_ID["read"], PHASE_ID["decode"]
        jpeg = self.ctx.workload.layout == "jpeg_folders"
        io = self.ctx.io_counters
        for s, (rows, ids, times, w, snap) in enumerate(self.loader):
            if snap is not None and io is not None:
                io.absorb(snap)
            add = self.worker_timelines[w].add
            for t0, t1, t2, nb in times.tolist():
                add(READ, t0, t1, e, s, nb, SHARED)
                if jpeg:
                    add(DECODE, t1, t2, e, s, 0, SHARED)
            yield Batch(rows.numpy(), ids, len(ids))

    def extra_timelines(self) -> list:
        return self.worker_timelines[1:]

    def close(self) -> None:
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


@register
class Prefetch(Strategy):
    name = "prefetch"
    summary = "a real torch DataLoader (DistributedSampler order) with worker processes prefetching batches"
    semantics = GLOBAL_SHUFFLE
    Options = PrefetchOptions

    def plan(self, ctx: RunContext, options: PrefetchOptions) -> Plan:
        return shared_tier_plan(self.name, ctx, options.drop_last,
                                {"prefetch_window_batches": options.num_workers * options.prefetch_factor})

    def executor(self, ctx: RunContext, plan: Plan, options: PrefetchOptions) -> Executor:
        return DataLoaderExecutor(ctx, plan, options)
