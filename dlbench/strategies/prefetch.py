"""prefetch: the PyTorch DataLoader baseline. Same order as naive, through a real
``torch.utils.data.DataLoader`` driven by a ``DistributedSampler`` (whose permutation is the plan's π_e),
with ``num_workers``, ``prefetch_factor``, ``pin_memory``. The prefetch window is
num_workers × prefetch_factor batches. Reads still go to the shared tier every epoch.

How a batch travels: a worker reads the step's samples into one uint8 tensor in shared memory
(page-aligned, so no alignment trap and no copy when it is handed to the trainer). Each worker keeps a
ring of prefetch_factor + 2 such buffers, allocated once and reused: a fresh buffer per batch would pay
first-touch page faults (≈ 1 GB/s here, docs/LIMITS.md) on every byte. A buffer is reused only after the
worker has produced prefetch_factor + 1 later batches, and the DataLoader never has more than
prefetch_factor batches of a worker in flight, so the trainer is done with it by then. The worker
returns the buffer with the (start, end, bytes) of every read and decode, measured in the worker with the same
monotonic clock; the trainer files those intervals under the worker's thread id. With
``num_workers=0`` the DataLoader reads in the trainer's process, exactly as PyTorch does.

Page-cache accounting: a worker also returns its process's /proc/self/io counters (``rchar``,
``read_bytes``) since it opened its reader; the executor keeps the latest per worker process and reports
their sum in ``stats()["worker_io"]``, so the runner's page-cache check covers the workers' reads too;
``unreaped_io()`` gives the live workers' counters for the runner's per-epoch accounting.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..config import opt
from ..errors import ConfigError
from ..plan import SHARED, Plan
from ..timeline import PHASE_ID, Timeline
from . import register
from .base import Batch, Executor, PlanContext, RunContext, Strategy
from .localcopy import set_pipeline
from .naive import GLOBAL_SHUFFLE, shared_tier_plan

if TYPE_CHECKING:
    from torch.utils.data import Dataset


@dataclass(frozen=True, kw_only=True)
class PrefetchOptions:
    num_workers: int = opt(2, help="DataLoader worker processes (0: read in the trainer's process)", min=0, max=256)
    prefetch_factor: int = opt(2, help="batches prefetched per worker", min=1, max=1024)
    pin_memory: bool = opt(False, help="pin host memory (only meaningful with CUDA)")
    persistent_workers: bool = opt(False, help="keep workers alive across epochs (PyTorch's default: off)")
    drop_last: bool = opt(False, help="DistributedSampler drop_last")
    drop_last_batch: bool = opt(False, help="drop every rank's last partial batch of an epoch (DataLoader "
                                            "drop_last; DLIO's loaders do)")


def _shared_rows(n: int, row_nbytes: int):
    """A (n, row_nbytes) uint8 tensor in shared memory (page-aligned; sent between processes without a
    copy)."""
    import torch

    storage = torch.UntypedStorage._new_shared(max(n * row_nbytes, 1))
    return torch.empty(0, dtype=torch.uint8).set_(storage)[: n * row_nbytes].view(n, row_nbytes)


class StepDataset:
    """Map-style dataset whose index is a whole step (a list of sample ids): one fetch = one batch,
    so IPC is per batch, not per sample."""

    def __init__(self, reader_factory, decode, out_nbytes: int, max_raw: int, local_batch: int, ring: int):
        self.reader_factory, self.decode = reader_factory, decode   # decode: the format's step (None: rows as read)
        self.out_nbytes, self.max_raw = out_nbytes, max_raw
        self.local_batch, self.ring_size = local_batch, ring
        self._pid: int | None = None          # the process whose reader and ring these are (set per worker)
        self._reader: Any = None
        self._raw: np.ndarray | None = None
        self._ring: list[Any] = []
        self._next = 0

    def _open(self):
        if self._pid != os.getpid():
            self._io0 = _proc_io_pair()
            self._reader = self.reader_factory()
            self._pid = os.getpid()
            self._ring = [_shared_rows(self.local_batch, self.out_nbytes) for _ in range(self.ring_size)]
            if self.decode is not None:
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
        decode = self.decode
        if decode is not None:
            raw = self._raw
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
        ids = np.asarray(ids, dtype=np.int64)
        if info is None:  # num_workers=0: the trainer's own /proc/self/io and counters count these reads
            return rows, ids, times, 0, None, None
        rc, rb = _proc_io_pair()  # ≈ 10 µs per batch, against ≈ 700 µs of IPC per batch (docs/LIMITS.md)
        # a worker's Darshan-style counters travel back with every batch (cumulative; the trainer keeps the
        # latest per worker reader): a ~25-int list per batch
        cnt = getattr(reader, "counters", None)
        s3 = sys.modules.get("dlbench.storage.s3")   # the shared tier is S3: the worker's request counters too
        return (rows, ids, times, info.id + 1,
                (self._pid, rc - self._io0[0], rb - self._io0[1], getattr(reader, "retries", 0),
                 s3.worker_payload() if s3 is not None else None),
                cnt.snapshot() if cnt is not None else None)



def _proc_io_pair() -> tuple[int, int]:
    """(rchar, read_bytes) of this process from /proc/self/io ((0, 0) where there is none)."""
    try:
        with open("/proc/self/io", "rb") as f:
            rc = rb = 0
            for line in f:
                if line.startswith(b"rchar:"):
                    rc = int(line.split()[1])
                elif line.startswith(b"read_bytes:"):
                    rb = int(line.split()[1])
            return rc, rb
    except OSError:
        return 0, 0


def _parent_of(pid: int) -> int:
    """The parent pid of ``pid`` from /proc/<pid>/stat (-1 when it is gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def identity_collate(x):
    """The DataLoader's ``collate_fn``: a fetch of ``StepDataset`` is already one batch (module level, so worker
    processes can pickle it)."""
    return x


class DataLoaderExecutor(Executor):
    def __init__(self, ctx: RunContext, plan: Plan, options: PrefetchOptions):
        try:
            import torch  # noqa: F401
            from torch.utils.data import BatchSampler, DataLoader, DistributedSampler
        except ImportError:  # pragma: no cover - torch is a core dependency
            raise ConfigError("strategy prefetch needs torch: pip install torch") from None
        assert ctx.reader_factory is not None and ctx.timeline is not None, "a run's context: reader and timeline"
        self.ctx, self.plan, self.options = ctx, plan, options
        wl = ctx.workload
        self.decode = decode = wl.format.decoder(wl)   # the format's decode step, or None
        probe = ctx.reader_factory()
        max_raw = probe.max_row_nbytes
        probe.close()
        out_nbytes = max_raw if decode is None else wl.decoded_nbytes

        class PlanDistributedSampler(DistributedSampler):
            """DistributedSampler with dlbench's permutation: the rank's row of the plan, which
            ``dlbench.plan.distributed_indices`` builds with DistributedSampler's own padding and
            striding (tested equal)."""

            def __iter__(inner):
                return iter(plan.epoch(inner.epoch).rank_samples(inner.rank).tolist())

            def __len__(inner):
                return int(plan.epoch(inner.epoch).counts()[inner.rank])

        # DistributedSampler only takes len() of its dataset; torch's stubs ask for a Dataset
        self.sampler = PlanDistributedSampler(cast("Dataset[int]", range(plan.n_samples)), num_replicas=plan.world_size,
                                              rank=ctx.rank, shuffle=False, drop_last=options.drop_last)
        batches = BatchSampler(self.sampler, batch_size=plan.local_batch, drop_last=False)
        kw: dict[str, Any] = {}
        if options.num_workers > 0:
            kw = {"prefetch_factor": options.prefetch_factor, "persistent_workers": options.persistent_workers}
        pin = options.pin_memory and torch.cuda.is_available()
        ring = options.prefetch_factor + 2
        # a map-style dataset by duck typing (__getitem__/__len__), as DataLoader takes it
        dataset = cast("Dataset[Any]", StepDataset(ctx.reader_factory, decode, out_nbytes, max_raw,
                                                    plan.local_batch, ring))
        self.loader: DataLoader[Any] = DataLoader(dataset, sampler=batches, batch_size=None, collate_fn=identity_collate,
                                                  num_workers=options.num_workers, pin_memory=pin, **kw)
        self.worker_io: dict[int, tuple] = {}  # worker pid -> (rchar, read_bytes, read retries) since it started
        # the workers' intervals are filed in the trainer under thread w+1 (spilling with the trainer's)
        self.worker_timelines = [ctx.timeline] + [
            ctx.timeline.sibling(w + 1, 1 << 14) if isinstance(ctx.timeline, Timeline)
            else Timeline(1 << 14, ctx.rank, thread=w + 1) for w in range(options.num_workers)]

    def epoch(self, e: int) -> Iterator[Batch]:
        self.sampler.set_epoch(e)
        READ, DECODE = PHASE_ID["read"], PHASE_ID["decode"]
        decodes = self.decode is not None
        io, counters = self.worker_io, self.ctx.io_counters
        try:
            yield from self._epoch(e, READ, DECODE, decodes, io, counters)
        except Exception as exc:
            root = worker_root_error(exc)
            if root is exc:
                raise
            raise root from None

    def _epoch(self, e, READ, DECODE, decodes, io, counters) -> Iterator[Batch]:
        for s, (rows, ids, times, w, wio, snap) in enumerate(self.loader):
            if wio is not None:
                io[wio[0]] = wio[1:]
                if wio[4] is not None:   # S3 request counters (dlbench.storage.s3)
                    from ..storage.s3 import absorb_worker

                    absorb_worker(wio[4])
            if snap is not None and counters is not None:
                counters.absorb(snap)
            add = self.worker_timelines[w].add
            for t0, t1, t2, nb in times.tolist():
                add(READ, t0, t1, e, s, nb, SHARED)
                if decodes:
                    add(DECODE, t1, t2, e, s, 0, SHARED)
            yield Batch(rows.numpy(), ids, len(ids))

    def stats(self) -> dict:
        rc = sum(v[0] for v in self.worker_io.values())
        rb = sum(v[1] for v in self.worker_io.values())
        rt = sum(v[2] for v in self.worker_io.values())  # --inject fail-read retries in the workers
        return {"worker_io": {"rchar": int(rc), "read_bytes": int(rb), "processes": len(self.worker_io),
                              "read_retries": int(rt)}}

    def extra_timelines(self) -> list[Timeline]:
        return self.worker_timelines[1:]

    def unreaped_io(self) -> tuple[int, int]:
        """(rchar, read_bytes) of the workers still alive and not yet reaped (each read from its own
        /proc/<pid>/io: its counters start at 0 at fork). A reaped worker's bytes are already in the trainer's
        /proc/self/io, so it is not counted here."""
        from ..storage.pagecache import proc_io

        rc = rb = 0
        me = os.getpid()
        for pid in self.worker_io:
            if _parent_of(pid) == me:      # still our child: not yet in our own counters
                w = proc_io(pid)
                rc += w.get("rchar", 0)
                rb += w.get("read_bytes", 0)
        return rc, rb

    def close(self) -> None:
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()


def worker_root_error(exc: BaseException) -> BaseException:
    """The error a DataLoader worker raised, without the worker's traceback: torch re-raises it in the
    trainer as the same type with the message "Caught X in DataLoader worker process N. Original Traceback
    (most recent call last): ..." (~1,200 characters). Returns the same type with the root message (the
    traceback's last line after ``module.Type: ``), or ``exc`` itself when it did not come from a worker."""
    msg = str(exc)
    if "Original Traceback" not in msg or "in DataLoader worker process" not in msg:
        return exc
    t = type(exc)
    names = [f"{t.__module__}.{t.__qualname__}: ", f"{t.__qualname__}: "]
    root = next((msg.rpartition(n)[2] for n in names if n in msg), msg.strip().splitlines()[-1])
    root = " ".join(root.split())
    try:
        return t(root)
    except Exception:  # noqa: BLE001 - a type that cannot be built from one message
        from ..errors import RunError

        return RunError(f"{t.__name__} in a DataLoader worker: {root}")


@register
class Prefetch(Strategy):
    name = "prefetch"
    display = "StagingPool (prefetch)"   # the HDMLP thesis' name of a prefetching loader
    summary = "a real torch DataLoader (DistributedSampler order) with worker processes prefetching batches"
    semantics = GLOBAL_SHUFFLE
    Options = PrefetchOptions

    def plan(self, ctx: PlanContext, options: PrefetchOptions) -> Plan:
        plan = shared_tier_plan(self.name, ctx, options.drop_last,
                                {"prefetch_window_batches": options.num_workers * options.prefetch_factor},
                                streams=max(1, options.num_workers), drop_last_batch=options.drop_last_batch)
        # num_workers processes read ahead (0: the DataLoader reads in the trainer, synchronously)
        return set_pipeline(plan, options.num_workers, options.num_workers * options.prefetch_factor)

    def executor(self, ctx: RunContext, plan: Plan, options: PrefetchOptions) -> Executor:
        return DataLoaderExecutor(ctx, plan, options)
