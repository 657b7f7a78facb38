"""Overlapped host-to-device transfer for ``--compute torch`` (``--overlap on``): the ordering logic, apart from CUDA.

How a step runs (``StepPipeline.step``), as a training loop written the usual way runs it:

1. **Bound the queue.** At most ``depth`` steps are in flight on the device: before step k is enqueued the host
   waits for step k − depth's compute to finish (a real loop gets the same bound from ``loss.item()``).
2. **The host source.** A batch already in pinned (page-locked) memory, e.g. a DataLoader batch pinned by its pin
   thread (``--pin-memory``), is copied from where it lies: no host copy. Any other batch is copied into slot
   k mod ``slots`` of a ring of pinned host buffers; a slot is written only after the copy that last read it has
   completed (the host waits on that copy's event: ``release``).
3. **Copy and convert on the side stream.** The host→device copy (``non_blocking``) and the input conversion
   (dtype, layout, normalisation) are enqueued on the copy stream between two events (``copy_start``,
   ``copy_end``); the compute stream waits on ``copy_end`` (``wait``) and then runs forward, loss, backward and
   the optimizer between ``compute_start`` and ``compute_end``. The host does not wait for the compute: it goes
   back to the loader, and the next batch's copy runs while this step computes.
4. **Hold the source until its copy is done.** A batch copied from the loader's own (pinned) buffer is handed back
   to the loader only after its copy completed. When the loader can take it back later (``hold``: the planned
   executor's ring of pinned batch buffers, ``Batch.hold``), the step does not wait: it hands the loader a
   ``CopyDone`` of the copy's ``copy_end`` event, and the loader waits on it (``release``) only before it writes
   into that buffer again. Otherwise (a DataLoader batch) the host waits on ``copy_end`` before the step returns
   (the compute goes on).

Timing, on the device clock (events), translated to the host's ``perf_counter_ns`` by the backend:
``transfer`` = [copy_start, copy_end]; the part of it the compute stream had to wait for, ``transfer_exposed``
= the transfer after the previous step's ``compute_end`` (the compute stream was idle then, waiting for the
copy); ``transfer_overlapped`` = the transfer before it (hidden behind the previous step's compute). The first
step of a run, and every step on a synchronous backend, is exposed in full. An interval is filed on the
timeline once its events have completed (``collect``; ``drain`` at the end of an epoch waits for all).

The backend is the only part that knows CUDA (``CudaBackend``); ``HostBackend`` runs the same order on the
host, synchronously (every copy exposed), and the unit tests drive the pipeline with a fake backend that records
the order of fill, copy, wait and release.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class StepRecord:
    """One step's device intervals, host clock (ns), once its events completed."""

    epoch: int
    step: int
    nbytes: int
    copy_start: int
    copy_end: int
    compute_start: int
    compute_end: int
    exposed_start: int     # transfer_exposed = [exposed_start, copy_end]; transfer_overlapped = [copy_start, exposed_start]


def split_transfer(copy_start: int, copy_end: int, prev_compute_end: int | None) -> int:
    """Where the exposed part of a transfer starts: the copy before the previous step's compute ended is
    overlapped, the rest exposed. No previous step (or a synchronous device): all exposed."""
    if prev_compute_end is None:
        return copy_start
    return min(max(prev_compute_end, copy_start), copy_end)


class CopyDone:
    """A copy from the loader's buffer, for the loader (``strategies.stages.ring.Ring.hold``): ``query()``, has it completed;
    ``synchronize()``, wait until it has (then the buffer may be written)."""

    __slots__ = ("b", "ev")

    def __init__(self, backend, ev):
        self.b, self.ev = backend, ev

    def query(self) -> bool:
        return bool(self.b.done(self.ev))

    def synchronize(self) -> None:
        self.b.synchronize(self.ev)
        self.b.note("release", "loader")


class StepPipeline:
    """Ring of ``slots`` pinned host buffers, at most ``depth`` steps in flight, copies on the backend's copy
    stream ordered before the compute by events (module docstring). ``backend``: ``CudaBackend``,
    ``HostBackend`` or a test fake with the same methods."""

    def __init__(self, backend, slots: int = 3, depth: int | None = None):
        if slots < 1:
            raise ValueError(f"slots={slots}: need at least 1")
        self.b = backend
        self.slots = int(slots)
        self.depth = int(depth if depth is not None else slots)
        self._slot_copy: list[Any] = [None] * self.slots   # the copy_end event of the copy that last read slot j
        self._inflight: deque = deque()                     # compute_end events of steps not yet known finished
        self._pending: deque = deque()                      # (events, epoch, step, nbytes) to resolve
        self._prev_end: int | None = None                   # host ns of the previous resolved step's compute_end
        self._k = 0
        # batches copied from the loader's pinned buffer / through a slot; ``held``: of the pinned, those the loader
        # took back once copied (``hold``: no host wait in the step)
        self.sources = {"pinned": 0, "staged": 0, "held": 0}
        self.records: list[StepRecord] = []                 # kept when keep_records (tests, calibration)
        self.keep_records = False

    def slot_for(self, k: int) -> int:
        """Slot k mod slots, after the copy that last read it has completed (``release``)."""
        j = k % self.slots
        ev = self._slot_copy[j]
        if ev is not None:
            self.b.synchronize(ev)
            self.b.note("release", j)
            self._slot_copy[j] = None
        return j

    def step(self, *, pinned_source: bool, fill: Callable[[int], Any], source: Any,
             copy_convert: Callable[[Any], Any], compute: Callable[[Any], None], epoch: int, step: int,
             nbytes: int, hold: Callable[[CopyDone], None] | None = None) -> None:
        """One step. ``fill(j)``: copy the batch into slot j, returning the host source to copy from (only
        called when ``pinned_source`` is false); ``source``: the batch itself when it is pinned;
        ``copy_convert(src)``: enqueue host→device copy and conversion (on the copy stream), returns the inputs;
        ``compute(inputs)``: enqueue the training step (on the compute stream); ``hold(done)``: the loader takes
        its (pinned) buffer back only once ``done`` (the copy) completed; without it the step waits for the copy."""
        b = self.b
        k = self._k
        self._k += 1
        while len(self._inflight) >= self.depth:             # bound the device queue
            b.synchronize(self._inflight.popleft())
        j = None
        if pinned_source:
            src = source
            self.sources["pinned"] += 1
        else:
            j = self.slot_for(k)
            src = fill(j)
            b.note("fill", j)
            self.sources["staged"] += 1
        cs, ce, c0, c1 = b.event(), b.event(), b.event(), b.event()
        with b.on_copy_stream():
            b.record(cs)
            inputs = copy_convert(src)
            b.record(ce)
        b.note("copy", j)
        b.wait(ce)                                            # the compute stream waits for the copy
        b.note("wait", j)
        with b.on_compute_stream():
            b.record(c0)
            compute(inputs)
            b.record(c1)
        if j is not None:
            self._slot_copy[j] = ce
        elif hold is not None:                                # the loader's buffer: it waits for the copy
            hold(CopyDone(b, ce))
            self.sources["held"] += 1
        else:                                                 # the loader's buffer: back only once copied
            b.synchronize(ce)
            b.note("release", None)
        self._inflight.append(c1)
        self._pending.append(((cs, ce, c0, c1), epoch, step, nbytes))

    def collect(self, add: Callable[[StepRecord], None] | None = None, wait: bool = False) -> int:
        """File the steps whose events completed (all of them, waiting, when ``wait``), in order; returns how
        many. ``add(record)`` receives each (the compute object files it on the timeline)."""
        n = 0
        while self._pending:
            (cs, ce, c0, c1), epoch, step, nbytes = self._pending[0]
            if wait:
                self.b.synchronize(c1)
            elif not self.b.done(c1):
                break
            self._pending.popleft()
            t = [self.b.host_ns(ev) for ev in (cs, ce, c0, c1)]
            rec = StepRecord(epoch, step, nbytes, t[0], t[1], t[2], t[3], split_transfer(t[0], t[1], self._prev_end))
            self._prev_end = t[3]
            if self.keep_records:
                self.records.append(rec)
            if add is not None:
                add(rec)
            n += 1
        if wait:
            self._inflight.clear()
        return n

    def drain(self, add: Callable[[StepRecord], None] | None = None) -> int:
        """Wait for every step in flight and file them (end of an epoch, calibration, close)."""
        n = self.collect(add, wait=True)
        self.b.resync()
        return n


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class HostBackend:
    """Synchronous: the copy and the compute run in the host's order, an event is the host time it was recorded
    at. Used for ``--overlap on`` on a CPU device (nothing to overlap with: every transfer is exposed)."""

    def __init__(self):
        self._null = _NullCtx()

    def event(self) -> list[int]:
        return [0]

    def record(self, ev) -> None:
        ev[0] = time.perf_counter_ns()

    def on_copy_stream(self):
        return self._null

    def on_compute_stream(self):
        return self._null

    def wait(self, ev) -> None:
        pass

    def synchronize(self, ev) -> None:
        pass

    def done(self, ev) -> bool:
        return True

    def host_ns(self, ev) -> int:
        return ev[0]

    def note(self, what: str, slot) -> None:
        pass

    def resync(self) -> None:
        pass


class CudaBackend:
    """CUDA streams and events. The copy stream is a side stream; the compute stream the device's current one.
    Event times are translated to ``perf_counter_ns`` through an anchor event recorded right after a device
    synchronize (re-anchored at every ``resync``: clock drift stays below a microsecond per epoch)."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.device = device
        self.copy_stream = torch.cuda.Stream(device=device)
        self.compute_stream = torch.cuda.current_stream(device)
        self.resync()

    def resync(self) -> None:
        torch = self.torch
        torch.cuda.synchronize(self.device)
        self._anchor = torch.cuda.Event(enable_timing=True)
        self._anchor.record(self.compute_stream)
        self._anchor.synchronize()
        self._anchor_ns = time.perf_counter_ns()

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def record(self, ev) -> None:
        ev.record(self.torch.cuda.current_stream(self.device))

    def on_copy_stream(self):
        return self.torch.cuda.stream(self.copy_stream)

    def on_compute_stream(self):
        return self.torch.cuda.stream(self.compute_stream)

    def wait(self, ev) -> None:
        self.compute_stream.wait_event(ev)

    def synchronize(self, ev) -> None:
        ev.synchronize()

    def done(self, ev) -> bool:
        return bool(ev.query())

    def host_ns(self, ev) -> int:
        return self._anchor_ns + int(round(self._anchor.elapsed_time(ev) * 1e6))

    def note(self, what: str, slot) -> None:
        pass
