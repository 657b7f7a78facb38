"""The plan's cache fills (keeps) and evictions: ``Keeps``, the stage that works out each step's, and ``Filler``, the
fill thread that stores them off the trainer's clock (``--fill-thread``)."""

from __future__ import annotations

import functools
import queue
import threading

import numpy as np

from ...plan import NO_TIER
from ...timeline import PHASE_ID
from ..stage import ClosingStage, Stage
from .ring import Ring
from .store import Stores
from .view import EpochView


class Filler(ClosingStage):
    """The plan's cache fills (keeps) and evictions of every step, in step order, on one fill thread, so
    writing a fill (a memory copy, or a file on the node-local disk) is not trainer time. Step t's job copies
    its kept rows from the step's ring buffer into the stores, drops the evictions, records a ``stage``
    interval (bytes written) on its own timeline, then hands the ring buffer back (``on_done(t)``: the loader
    may refill it). A job that raises stops the thread and is handed to ``on_error`` (the loader stops and
    raises it to the trainer) and to the next ``wait``. Readers of a sample still being filled wait for it (``SampleStore.read_pinned``); peer
    sends are posted once the sample is held; ``wait(t)`` blocks until step t's job is done."""

    def __init__(self, stores: Stores, timeline, clock, on_error=None):
        self.stores = stores
        self.tl = timeline
        self.clock = clock
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.cond = threading.Condition()
        self.done_upto = -1          # jobs are numbered by a global step counter (epochs in order)
        self.submitted = -1
        self.error: BaseException | None = None
        self.on_error = on_error     # told the error of a failed job (``Loader.fail``: its waiters stop)
        self.bytes = 0
        self.base = 0                # the job number of this epoch's step 0 (``begin``)
        self._next = 0
        self.thread = threading.Thread(target=self._work, daemon=True, name="dlbench-fill")
        self.thread.start()

    def submit(self, g: int, e: int, t: int, keeps: list, evictions: list, on_done) -> None:
        """Job ``g`` (global step): ``keeps`` [(store, sid, row)], ``evictions`` [sid], then ``on_done()``."""
        self.submitted = g
        self.q.put((g, e, t, keeps, evictions, on_done))

    def _work(self) -> None:
        STAGE = PHASE_ID["stage"]
        clock = self.clock
        while True:
            job = self.q.get()
            if job is None:
                return
            g, e, t, keeps, evictions, on_done = job
            try:
                if keeps:
                    t0 = clock()
                    written = 0
                    for st, sid, row in keeps:
                        written += st.put(sid, row)
                    self.bytes += written
                    self.tl.add(STAGE, t0, clock(), e, t, written, keeps[0][0].code)
                for sid in evictions:
                    self.stores.release(sid)
                if on_done is not None:
                    on_done()
            except BaseException as exc:  # handed to the trainer at its next wait
                with self.cond:
                    self.error = exc
                    self.cond.notify_all()
                if self.on_error is not None:
                    self.on_error(exc)
                return
            with self.cond:
                self.done_upto = g
                self.cond.notify_all()

    def is_done(self, g: int) -> bool:
        return self.done_upto >= g

    def wait(self, g: int) -> None:
        if self.done_upto < g or self.error is not None:
            with self.cond:
                self.cond.wait_for(lambda: self.done_upto >= g or self.error is not None)
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        self.wait(self.submitted)

    def begin(self, view: EpochView) -> None:
        """The epoch's jobs are numbered from ``base`` (the global step of its step 0)."""
        self.base, self._next = self._next, self._next + view.steps

    def finish(self, view: EpochView) -> None:
        """End of the epoch: every job of it done (its fills stored, its slots handed back)."""
        self.drain()

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()

    def stats(self) -> dict:
        """``bytes`` written into the stores; ``jobs``: steps done (all epochs)."""
        return {"bytes": self.bytes, "jobs": self.done_upto + 1}


class Keeps(Stage):
    """After each step, what the plan keeps (``EpochView.keep``: the step's rows stored in an own tier) and evicts:
    handed to the fill thread as the step's job (``Filler``; with loader threads, the job hands the ring slot
    back once the rows are copied out of it, ``Loader.give_back``), else stored here, by the trainer (one
    ``stage`` interval per step with keeps). ``rows``: the ring the kept bytes are copied from (a decoding
    format's raw ring: what tiers hold is the stored bytes)."""

    def __init__(self, ctx, stores: Stores, rows: Ring, filler: Filler | None, give_back=None):
        self.ctx, self.stores, self.rows, self.filler = ctx, stores, rows, filler
        self.give_back = give_back    # (view, t) → the slot back to the loader threads, or None (inline)
        self.written = 0              # bytes stored by the trainer (the fill thread counts its own)

    def begin(self, view: EpochView) -> None:
        self._keep, self._ids, self._bounds = view.keep, view.ids, view.bounds.tolist()
        self._any_keep = bool((view.keep != NO_TIER).any())
        self._any_evict = len(view.evict_ids) > 0

    def after_step(self, view: EpochView, t: int) -> None:
        keep, ids = self._keep, self._ids
        b0, b1 = self._bounds[t], self._bounds[t + 1]
        kc = np.nonzero(keep[b0:b1] != NO_TIER)[0].tolist() if self._any_keep else ()
        if self._any_evict:
            lo, hi = np.searchsorted(view.evict_step, [t, t + 1])
            evictions = view.evict_ids[lo:hi].tolist()
        else:
            evictions = []
        sizes, kept_rows = self.ctx.sample_nbytes, self.rows[t]
        keeps = [(self.stores[int(keep[b0 + j])], int(ids[b0 + j]), kept_rows[j, :int(sizes[int(ids[b0 + j])])])
                 for j in kc]
        f = self.filler
        if f is not None:
            f.submit(f.base + t, view.epoch, t, keeps, evictions,
                     None if self.give_back is None else functools.partial(self.give_back, view, t))
            return
        if keeps:
            clock = self.ctx.clock
            t0 = clock()
            written = sum(st.put(sid, row) for st, sid, row in keeps)
            self.written += written
            self.ctx.timeline.add(PHASE_ID["stage"], t0, clock(), view.epoch, t, written, keeps[0][0].code)
        for sid in evictions:
            self.stores.release(sid)

    def stats(self) -> dict:
        """``bytes`` stored by the trainer (without a fill thread)."""
        return {"bytes": self.written}


__all__ = ["Filler", "Keeps"]
