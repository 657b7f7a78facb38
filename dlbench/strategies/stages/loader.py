"""``Loader``: reads a step's non-peer accesses from their planned source (the shared tier through the reader,
throttled when the system profile models a PFS, or an own tier) into the step's ring slot (a run the plan's
``chunk`` marks is one ``read_run_into`` request when the reader supports runs): inline in the trainer
(``threads=0``: one request at a time) or by loader threads that run up to the ring's depth ahead in exact access
order (the staging buffer of HDMLP; each thread has its own reader and timeline)."""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque

import numpy as np

from ...errors import RunError
from ...plan import MEMORY, SHARED
from ...timeline import PHASE_ID, Timeline
from ..stage import ClosingStage, EpochStage
from .filler import Filler
from .ring import Ring
from .store import Stopped, Stores
from .view import EpochView


class Loader(EpochStage, ClosingStage):
    """Reads the non-PEER accesses of each step into its ring buffer, from the planned source.

    ``threads == 0``: ``fill(t)`` reads step t in the calling (trainer) thread. ``threads > 0``: ``begin``
    starts the threads for an epoch; they take accesses in order (a shared counter), wait until step t's
    buffer is free (``release(t)``), read, and count the step done; ``wait(t)`` blocks until it is.

    Step protocol (``PlannedExecutor``): ``before_step`` claims the step's ring slot and reads it (inline) or waits
    for the threads (handing back first the slots whose device copy completed); ``after_step`` hands the slot back
    to the threads (``give_back``), unless the fill thread does once the step's fills are copied out of it."""

    def __init__(self, ctx, stores: Stores, ring: Ring, threads: int, raw_ring: Ring | None, timeline, *,
                 decode=None, wait_for_samples: bool = True, first_reader=None):
        self.ctx, self.stores, self.ring, self.threads = ctx, stores, ring, int(threads)
        self.wait_for_samples = wait_for_samples
        # the fill thread storing the plan's keeps (PlannedExecutor): samples may land while this loader reads,
        # and the thread hands the slots back (``give_back``)
        self.filler: Filler | None = None
        self._held: deque[int] = deque()   # pinned ring, threads: steps whose slot waits for its device copy
        # a format with a decode step (``Format.decoder``: JPEG, TFRecord): stored bytes land in ``raw_ring``,
        # ``decode(raw, n, out)`` writes the decoded rows into ``ring``
        if (raw_ring is None) != (decode is None):
            raise ValueError("Loader: a decode step needs a raw ring for the stored bytes, and a raw ring a decode step")
        self.raw_ring, self.decode = raw_ring, decode
        self.read_ring: Ring = ring if raw_ring is None else raw_ring   # where the stored bytes land
        self.cond = threading.Condition()
        n = max(1, self.threads)
        # ``first_reader``: one the caller opened already (each open of the shared tier is an I/O the counters
        # see): it becomes reader 0
        self.readers = ([first_reader] if first_reader is not None else []) + [
            ctx.reader_factory() for _ in range(n - (first_reader is not None))]
        # each loader thread records into its own timeline (spilling with the trainer's when it spills)
        self.timelines = [timeline] if self.threads == 0 else [
            timeline.sibling(100 + k, 1 << 14) if hasattr(timeline, "sibling") else Timeline(1 << 14, ctx.rank,
                                                                                            thread=100 + k)
            for k in range(self.threads)]
        self.shared_reads = self.shared_bytes = 0       # shared-tier requests (a run counts once) and bytes
        self.run_requests = 0                           # requests that read a run of >= 2 samples
        # runs of consecutive samples as one request when every reader can (one shared HDF5 file)
        self.run_reads = decode is None and all(getattr(r, "supports_runs", False) for r in self.readers)
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._stop = False

    # ---- one access ---------------------------------------------------------------------------------
    def _read(self, k: int, view: EpochView, col: int) -> int:
        """Read the request starting at column ``col``; returns the columns it filled."""
        sid = int(view.ids[col])
        code = int(view.src[col])
        t = int(view.step_of[col])
        j = col - int(view.bounds[t])
        tl, clock = self.timelines[k], self.ctx.clock
        m = int(view.run_len[col])
        if m > 1:            # one request for samples sid .. sid+m-1 into rows j .. j+m-1 (plan's ``chunk``)
            t0 = clock()
            n = self.readers[k].read_run_into(sid, m, self.ring[t], j)
            t1 = clock()
            self.shared_reads += 1
            self.run_requests += 1
            self.shared_bytes += n
            tl.add(PHASE_ID["read"], t0, t1, view.epoch, t, n, SHARED)
            return m
        out = self.ring[t][j]
        decode = self.decode
        dst = out if decode is None else self.read_ring[t][j]
        if code == SHARED:
            t0 = clock()
            n = self.readers[k].read_into(sid, dst)
            t1 = clock()
            self.shared_reads += 1
            self.shared_bytes += n
        else:
            st = self.stores[code]
            t0 = clock()
            if not self.wait_for_samples:     # copies in place before epoch 0 (staging, local, pls)
                n = st.read_into(sid, dst)
            else:
                try:   # fills may land in another thread (loader threads, the fill thread): wait for them
                    n = st.read_pinned(sid, dst, wait=bool(self.threads or self.filler is not None),
                                       stop=self._stopping)
                except Stopped:
                    if self._error is not None:     # a failed fill (``fail``): its error, not a timeout
                        raise self._error from None
                    raise
                except KeyError:
                    raise RunError(f"plan of {self.ctx.workload.name}: rank {self.ctx.rank} reads sample {sid} "
                                   f"from its {('shared', 'local', 'memory')[code]} tier at epoch {view.epoch} step "
                                   f"{t}, but does not hold it") from None
            t1 = clock()
        tl.add(PHASE_ID["read"], t0, t1, view.epoch, t, n, code)
        if decode is not None:
            decode(dst, n, out)
            tl.add(PHASE_ID["decode"], t1, clock(), view.epoch, t, 0, code)
        return 1

    def _stopping(self) -> bool:
        return self._stop

    def _step_free(self, t: int) -> bool:
        """May a loader thread read into step t's buffer (or is the loader stopping)?"""
        return t < self._free_upto or self._stop

    def fail(self, exc: BaseException) -> None:
        """Another stage failed (the fill thread): record its error for the trainer's next ``wait``/``fill``
        and stop the loader threads, waking them wherever they wait (a step's buffer, a sample's fill)."""
        with self.cond:
            if self._error is None:
                self._error = exc
            self._stop = True
            self.cond.notify_all()
        self._wake_stores()

    def _wake_stores(self) -> None:
        for st in self.stores.by_code.values():
            with st.cond:
                st.cond.notify_all()

    # ---- inline -------------------------------------------------------------------------------------
    def fill(self, view: EpochView, t: int) -> None:
        if self._error is not None:
            raise self._error
        b0 = int(view.bounds[t])
        if view.lists is None:       # once per epoch: plain lists for the per-sample loop below
            view.lists = (view.ids.tolist(), view.src.tolist(), view.run_len.tolist(), view.local.tolist(),
                          np.searchsorted(view.local, view.bounds).tolist())
        ids, src, run_len, local, lb = view.lists
        # the hot path (naive's every access): a single-sample shared-tier read straight into the step's row,
        # locals only; everything else (own tiers, runs, decoding) through ``_read``
        fast = self.decode is None
        # own tiers read directly (no pin: nothing else stores or evicts while the trainer reads inline)
        own = self.stores.by_code if (fast and self.filler is None and self.wait_for_samples) else {}
        out = self.ring[t]
        read_into = self.readers[0].read_into
        add, clock = self.timelines[0].add, self.ctx.clock
        READ, e = PHASE_ID["read"], view.epoch
        mem = own.get(MEMORY)
        mem_refs = mem.refs if mem is not None else ()
        mem_ids: list[int] = []
        mem_js: list[int] = []
        reads = nbytes = 0
        try:
            for col in local[lb[t]:lb[t + 1]]:     # the step's non-PEER requests (a run: its first column)
                c = src[col]
                if fast and c == SHARED and run_len[col] == 1:
                    t0 = clock()
                    n = read_into(ids[col], out[col - b0])
                    add(READ, t0, clock(), e, t, n, SHARED)
                    reads += 1
                    nbytes += n
                elif c == MEMORY and ids[col] in mem_refs:     # copied below, in one call
                    mem_ids.append(ids[col])
                    mem_js.append(col - b0)
                elif c in own and ids[col] in own[c].refs:     # (not held: the slow path says so)
                    st = own[c]
                    t0 = clock()
                    n = st.read_into(ids[col], out[col - b0])
                    add(READ, t0, clock(), e, t, n, c)
                else:
                    self._read(0, view, col)
        finally:
            self.shared_reads += reads
            self.shared_bytes += nbytes
        if mem_ids:       # one read interval per sample, each copy timed on its own
            assert mem is not None
            got = 0
            for t0, t1, n in mem.tier.read_rows_into(mem_ids, out, mem_js, clock):
                add(READ, t0, t1, e, t, n, MEMORY)
                got += n
            mem.reads += len(mem_ids)
            mem.read_bytes += got

    # ---- threads ------------------------------------------------------------------------------------
    def begin(self, view: EpochView) -> None:
        self._view = view
        self._done = np.zeros(view.steps, dtype=np.int64)
        self._free_upto = self.ring.depth      # steps < this may be written
        self._counter = itertools.count()
        self._stop = self._error is not None
        for s in range(min(self.ring.depth, view.steps) if self.threads else 0):
            self.ring.claim(s)                 # the first slots are the threads' to fill
        self._threads = [threading.Thread(target=self._work, args=(k,), daemon=True, name=f"dlbench-loader-{k}")
                         for k in range(self.threads)]
        for th in self._threads:
            th.start()

    def _work(self, k: int) -> None:
        view, cond = self._view, self.cond
        local, step_of = view.local, view.step_of
        try:
            while True:
                i = next(self._counter)
                if i >= len(local) or self._stop:
                    return
                col = int(local[i])
                t = int(step_of[col])
                if t >= self._free_upto:
                    with cond:
                        cond.wait_for(functools.partial(self._step_free, t))
                    if self._stop:
                        return
                m = self._read(k, view, col)
                with cond:
                    self._done[t] += m
                    if self._done[t] == view.need[t]:
                        cond.notify_all()
        except BaseException as exc:  # handed to the trainer at its next wait (the first error wins)
            with cond:
                if self._error is None:
                    self._error = exc
                cond.notify_all()

    def wait(self, t: int) -> None:
        view = self._view
        if self._done[t] < view.need[t] or self._error is not None:
            with self.cond:
                self.cond.wait_for(lambda: self._done[t] >= view.need[t] or self._error is not None)
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def release(self, t: int) -> None:
        """Step t's buffer may be reused (for step t + depth)."""
        with self.cond:
            self._free_upto = t + 1 + self.ring.depth
            self.cond.notify_all()

    def end(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        self._wake_stores()     # a thread waiting for a sample's fill (``read_pinned``) stops too
        for th in self._threads:
            th.join()
        self._threads = []

    # ---- the step protocol (PlannedExecutor) -------------------------------------------------------
    def before_step(self, view: EpochView, t: int) -> None:
        """Step t's samples in its ring slot: read now (inline, into the slot claimed once step t − depth's fill
        job is done), or waited for (threads; a step with nothing to read waits for its slot's fill job)."""
        f = self.filler
        D = self.ring.depth
        if not self.threads:
            if f is not None and t >= D:
                f.wait(f.base + t - D)       # the slot's last fills are copied out
            self.ring.claim(t)               # a pinned ring: the slot's last device copy completed
            self.fill(view, t)
            return
        if self._held:
            self._return_copied(t)
        if f is not None and t >= D and not view.need[t]:
            f.wait(f.base + t - D)           # nothing to read: the slot comes back with its fill job
        self.wait(t)
        if self._held:
            self._return_copied(t)

    def after_step(self, view: EpochView, t: int) -> None:
        """The trainer is done with step t: its slot back to the threads (a pinned ring: once its device copy
        completed, polled each step), unless the fill thread hands it back after the step's fills."""
        if self.threads and self.filler is None:
            if self.ring.pinned:
                self._held.append(t)
            else:
                self.give_back(view, t)

    def give_back(self, view: EpochView, t: int) -> None:
        """(trainer, or the fill thread) Step t's slot is free once its device copy completed: it becomes step
        t + depth's, for the loader threads."""
        ring = self.ring
        ring.settle(t)
        if t + ring.depth < view.steps:
            ring.claim(t + ring.depth)
        self.release(t)

    def _return_copied(self, t: int) -> None:
        """Hand back the held slots whose copy completed, in order; wait for the copy of step t − depth (step t
        is read into its slot)."""
        held, ring, view = self._held, self.ring, self._view
        while held:
            s = held[0]
            if s <= t - ring.depth:
                ring.settle(s)
            elif not ring.settled(s):
                return
            held.popleft()
            self.give_back(view, s)

    def finish(self, view: EpochView) -> None:
        """End of the epoch ``view``: the loader threads stop and are joined (``end``)."""
        self.end()
        self._held.clear()

    def abort(self, view: EpochView) -> None:
        self.end()
        self._held.clear()

    def close(self) -> None:
        self.end()
        for r in self.readers:
            r.close()

    def stats(self) -> dict:
        """Shared-tier requests (a run counts once), their bytes, and the requests that read a run."""
        return {"shared_reads": self.shared_reads, "shared_bytes": self.shared_bytes,
                "run_requests": self.run_requests, "threads": self.threads}


__all__ = ["Loader"]
