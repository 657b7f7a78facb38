"""``--cache keep|drop|direct`` on one rank, around the epoch loop: the page-cache evictions before the
prologue and every epoch, O_DIRECT for the shared tier where the layout allows it, and the bytes requested
and read from the device per epoch (``dlbench.storage.pagecache`` does the work; this is the loop's side).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..comm import Comm
    from ..storage.counters import CounterSet
    from ..storage.pagecache import CacheMode
    from ..strategies.base import Executor
    from ..timeline import Timeline
    from ..workload import Workload


class CacheControl:
    """``--cache keep|drop|direct`` on one rank (``dlbench.storage.pagecache``): what is read with O_DIRECT,
    the eviction before the prologue and every epoch (``drop``, and ``direct`` where a layout falls back to
    buffered reads), and per epoch the bytes requested from files and those that reached the device (this
    process and the executor's child processes still running, ``Executor.unreaped_io``)."""

    def __init__(self, mode: CacheMode, workload: Workload, manifest, data_dir: Path | None, comm: Comm,
                 local_root: Path, *, probe: bool = True):
        from ..data.manifest import MANIFEST_NAME
        from ..data.registry import direct_support
        from ..storage import pagecache

        # data_dir None: a fake reader (tests): nothing on disk to evict or probe; probe False: --dry-run
        self.comm, self.manifest = comm, manifest
        self.data_dir = Path(data_dir) if data_dir is not None and probe else None
        self.pc = pagecache
        # the mode resolved once, with the layout's O_DIRECT support, into what the run does (RunContext.cache)
        self.policy = mode.policy(direct_support(workload.layout)[1] if mode is pagecache.CacheMode.DIRECT else "")
        if mode is pagecache.CacheMode.DIRECT:
            paths = list(getattr(manifest, "paths", []) or [])
            if self.policy.shared_direct and paths and self.data_dir is not None:   # a file system that refuses O_DIRECT: one line now, not mid-run
                os.close(pagecache.open_direct(os.fsencode(str(self.data_dir / paths[0]))))
            if probe and local_root.is_dir():
                probe_file = local_root / f".dlbench-direct-probe-{os.getpid()}"
                try:
                    probe_file.write_bytes(b"\0" * pagecache.DIRECT_ALIGN)
                    os.close(pagecache.open_direct(os.fsencode(str(probe_file)), flag="--cache direct (--local-dir)"))
                finally:
                    probe_file.unlink(missing_ok=True)
        self.leader = comm.rank == min(comm.node_ranks())   # one rank per node evicts
        self.accounting: dict | None = None
        if comm.rank == 0 and self.data_dir is not None and (self.data_dir / MANIFEST_NAME).exists():
            self.accounting = pagecache.device_accounting(self.data_dir / MANIFEST_NAME)
        self.epochs: list[dict] = []
        self.evictions: list[dict] = []
        self._mark: tuple[int, int, int] = (0, 0, 0)

    def evict_before(self, e: int, timeline: Timeline, clock: Callable[[], int], executor: Executor) -> None:
        """Evict (node leader) and wait at the barrier; the ``evict`` phase interval, tagged with the epoch it
        precedes (the prologue's: epoch 0, so the prologue's bounds stay the staging's own)."""
        if not self.policy.evict:
            return
        from ..timeline import PHASE_ID

        t0 = clock()
        got: dict = {"files": 0, "bytes": 0}
        self.comm.barrier()   # every rank is done with the prologue / last epoch (its local copies all written)
        res: dict = {}
        if self.leader:
            paths: list[str] = ([str(self.data_dir / p) for p in self.manifest.paths]
                                if self.data_dir is not None else [])
            local = executor.local_copies_dir()     # the node's local copies (staging, local, pls, caches)
            if local is not None:
                paths += self.pc.files_under(local)
            # the eviction verified (mincore): the evicted files' resident bytes before and after
            before, total = self.pc.resident_bytes(paths)
            got = self.pc.evict(paths)
            after, _ = self.pc.resident_bytes(paths)
            res = {"resident_before_bytes": before, "resident_after_bytes": after, "resident_total_bytes": total}
        self.comm.barrier()
        t1 = clock()
        timeline.add(PHASE_ID["evict"], t0, t1, max(e, 0), -1, got["bytes"])
        self.evictions.append({"before_epoch": e, "evict_s": (t1 - t0) * 1e-9, **got, **res})

    def _totals(self, executor: Executor, io: CounterSet) -> tuple[int, int, int]:
        """(requested bytes, rchar, read_bytes) so far: this process plus the executor's live child processes
        (a DataLoader's workers). Linux adds a child's /proc/<pid>/io to its parent's when the parent reaps it
        (a DataLoader's workers at the end of every epoch, unless persistent), so reaped workers are already
        in /proc/self/io; the executor reports the ones still alive (``Executor.unreaped_io``)."""
        from ..counters import IDX

        own = self.pc.proc_io()
        child_rc, child_rb = executor.unreaped_io()
        rc, rb = own.get("rchar", 0) + child_rc, own.get("read_bytes", 0) + child_rb
        b = IDX["POSIX_BYTES_READ"]
        req = sum(vec[b] for cls, vec in io.totals().items() if cls in ("shared", "local"))
        return int(req), int(rc), int(rb)

    def epoch_io(self, e: int | None, executor: Executor, io: CounterSet) -> None:
        """``e`` None: mark the start (before the prologue); else record epoch ``e``'s bytes since the last mark
        (-1: the prologue): epoch e's bytes run from the end of e - 1 to its end, so what loader threads read
        between epochs (while the plan is built and the cache evicted) counts toward the epoch it serves."""
        now = self._totals(executor, io)
        if e is not None:
            start = self._mark
            self.epochs.append({"epoch": e, "requested_bytes": now[0] - start[0], "rchar_bytes": now[1] - start[1],
                                "device_read_bytes": now[2] - start[2]})
        self._mark = now

    def skip_io(self, executor: Executor, io: CounterSet) -> None:
        """Move the mark past bytes read outside every epoch's work (DLIO's evaluation after an epoch): they
        are no epoch's requested or device bytes."""
        self._mark = self._totals(executor, io)

    def rank_record(self) -> dict:
        return {"epochs": self.epochs, "evictions": self.evictions, "accounting": self.accounting}

