"""``Ring``: the executor's batch buffers, each slot's ownership an explicit state machine (``SlotState``)."""

from __future__ import annotations

import functools
import threading
from enum import IntEnum

import numpy as np

from ...errors import RunError
from ...storage import PAGE, aligned_rows
from ..base import Batch
from ..stage import Stage


class SlotState(IntEnum):
    """Who owns a ring slot. Every step t goes FREE → FILLING → READY (→ HELD) → FREE in slot t mod depth:

    - FREE: nobody reads or writes it.
    - FILLING (``claim(t)``): step t's samples are being written into it (the loader, its threads, peer receives).
    - READY (``lend(t)``): step t's batch, lent to the trainer; after its step still read by the cache fills of
      the step (the fill thread) until the slot is settled.
    - HELD (``hold(t, done)``, the compute's ``Batch.hold``): an asynchronous reader (the device copy) still
      reads it until ``done`` completes.
    - back to FREE (``settle(t)``, or ``settled(t)`` once the hold completed): called by whoever knows the
      step's last reader other than the hold is done (the trainer, or the fill thread after the step's fills).

    A ring used without a loader (the compute's own tests) may ``hold`` a FREE slot it wrote itself. Any other
    transition raises ``RunError``: a slot claimed while its batch is lent or its copy in flight, a batch lent
    before it was filled, a hold on a slot being filled."""

    FREE = 0
    FILLING = 1
    READY = 2
    HELD = 3


class Ring(Stage):
    """``depth`` page-aligned batch buffers of ``rows`` rows of ``row_nbytes``; step t uses slot t mod depth.

    ``alloc(rows, row_nbytes)``: where the buffers' memory comes from (default: ``aligned_rows``). The torch
    compute on CUDA with ``--overlap on`` gives page-locked memory (``TorchCompute.host_allocator``): the loader
    reads each batch straight into pinned memory and the device copies it from there, with no staging copy.

    Slot ownership (``SlotState``): the consumer of a batch lent from a pinned ring (``lend``) calls
    ``hold(step, done)`` with an object whose ``query()`` says whether it is done with the buffer and
    ``synchronize()`` waits until it is (the copy's CUDA event); the executor calls ``settle(step)`` (waits) or
    ``settled(step)`` (does not) before step + depth is written into the same buffer or the buffer goes back
    to the loader threads. A slot without a hold is free as soon as its last reader returned (every CPU run).
    Transitions take a lock (the fill thread settles slots too); they are per step, never per sample."""

    def __init__(self, depth: int, rows: int, row_nbytes: int, alloc=None):
        self.depth = int(depth)
        block = (alloc or aligned_rows)(self.depth * max(rows, 1), row_nbytes)
        if (block.shape != (self.depth * max(rows, 1), row_nbytes) or block.dtype != np.uint8
                or block.ctypes.data % PAGE or block.strides[0] % PAGE or block.strides[1] != 1):
            raise ValueError(f"Ring: the allocator gave {block.dtype}{block.shape} with strides {block.strides}, "
                             f"not uint8 ({self.depth * max(rows, 1)}, {row_nbytes}) in page-aligned rows")
        self.bufs = [block[i * rows:(i + 1) * rows] for i in range(self.depth)]
        block[:, ::4096] = 0   # fault the pages in now, not on the hot path
        self.pinned = alloc is not None
        self._holds: list = [None] * self.depth     # per slot: what still reads it (``hold``), or None
        self.state = [SlotState.FREE] * self.depth  # per slot: its owner (``SlotState``)
        self.step = [-1] * self.depth               # per slot: the step it is FILLING/READY/HELD for
        self._lock = threading.Lock()

    def __getitem__(self, step: int) -> np.ndarray:
        return self.bufs[step % self.depth]

    def _illegal(self, what: str, step: int) -> RunError:
        j = step % self.depth
        return RunError(f"Ring: {what} step {step}: slot {j} is {self.state[j].name} for step {self.step[j]} "
                        f"(SlotState: FREE -> FILLING -> READY [-> HELD] -> FREE)")

    # ---- the transitions -----------------------------------------------------------------------------
    def claim(self, step: int) -> None:
        """FREE → FILLING for ``step`` (after settling the slot's earlier step); a slot already FILLING for
        ``step`` stays so (the peer stage and the loader both write step ``step``)."""
        j = step % self.depth
        if self.state[j] == SlotState.FILLING:
            if self.step[j] == step:
                return
            raise self._illegal("claim for", step)
        if self.step[j] < step:
            self.settle(self.step[j])
        with self._lock:
            if self.state[j] != SlotState.FREE:
                raise self._illegal("claim for", step)
            self.state[j], self.step[j] = SlotState.FILLING, step

    def lend(self, step: int, ids: np.ndarray, n: int) -> Batch:
        """FILLING → READY: step ``step``'s batch of ``n`` samples ``ids`` for the trainer (a pinned ring's
        batch carries ``hold``)."""
        j = step % self.depth
        with self._lock:
            if self.state[j] != SlotState.FILLING or self.step[j] != step:
                raise self._illegal("lend", step)
            self.state[j] = SlotState.READY
        if self.pinned:
            return Batch(self.bufs[j], ids, n, functools.partial(self.hold, step))
        return Batch(self.bufs[j], ids, n)

    def hold(self, step: int, done) -> None:
        """READY → HELD: step ``step``'s buffer is still read (asynchronously) until ``done`` completes."""
        j = step % self.depth
        with self._lock:
            st = self.state[j]
            if not (st == SlotState.FREE or (st == SlotState.READY and self.step[j] == step)):
                raise self._illegal("hold", step)
            self.state[j], self.step[j] = SlotState.HELD, step
            self._holds[j] = done

    def held(self, step: int) -> bool:
        return self._holds[step % self.depth] is not None

    def settle(self, step: int) -> None:
        """READY or HELD → FREE: wait until whatever still reads step ``step``'s slot (``hold``) is done. A slot
        already FREE, or FILLING/READY for a later step (``step``'s use is over), is left as it is."""
        j = step % self.depth
        with self._lock:
            st, owner = self.state[j], self.step[j]
            if st == SlotState.FREE or owner > step:
                return
            if st == SlotState.FILLING:
                raise self._illegal("settle", step)
            done, self._holds[j] = self._holds[j], None
        if done is not None:
            done.synchronize()
        with self._lock:
            self.state[j], self.step[j] = SlotState.FREE, -1

    def settled(self, step: int) -> bool:
        """Is step ``step``'s slot free of its hold now (then settled: FREE)? Does not wait."""
        done = self._holds[step % self.depth]
        if done is not None and not done.query():
            return False
        self.settle(step)       # completed: returns at once (and the consumer sees the release)
        return True

    def settle_all(self) -> None:
        """Every slot FREE (the epoch's end: every step's readers are done)."""
        for j in range(self.depth):
            if self.state[j] != SlotState.FREE:
                self.settle(self.step[j])

    # ---- the step protocol ---------------------------------------------------------------------------
    def finish(self, view) -> None:
        """End of the epoch: every copy of the epoch read its buffer, the next epoch's slots are free."""
        self.settle_all()

    def abort(self, view) -> None:
        """The epoch stopped early: every slot FREE again (a held one once its copy completed), whatever step
        it was at, so a later epoch starts from free slots."""
        for j in range(self.depth):
            with self._lock:
                done, self._holds[j] = self._holds[j], None
                self.state[j], self.step[j] = SlotState.FREE, -1
            if done is not None:
                done.synchronize()

    def stats(self) -> dict:
        b = self.bufs[0]
        return {"depth": self.depth, "rows": int(b.shape[0]), "row_nbytes": int(b.shape[1])}


__all__ = ["Ring", "SlotState"]
