"""A slowed compute step (``dlbench run --inject slow-rank=R:FACTOR`` on a torch compute; the sleep compute is
slowed by its own step time): the wrapped compute's step, then a wait of (FACTOR−1)× its measured time recorded as
``compute``. The injection itself (parsing, the slowed and failing shared-tier reads) is
``dlbench.storage.inject``'s."""

from __future__ import annotations

import time

from ..storage.inject import wait_ns
from ..timeline import PHASE_ID


class SlowCompute:
    """Torch (or any) compute made FACTOR× slower: after each step, wait (FACTOR−1)× its measured time and
    record the wait as ``compute`` (it is the slow rank's compute)."""

    def __init__(self, inner, factor: float, clock=time.perf_counter_ns):
        self.inner, self.factor, self.clock = inner, float(factor), clock
        self._compute = PHASE_ID["compute"]

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def step(self, rows, ids, n, timeline, epoch, step):
        t0 = self.clock()
        self.inner.step(rows, ids, n, timeline, epoch, step)
        t1 = self.clock()
        wait_ns(int((self.factor - 1) * (t1 - t0)), self.clock)
        timeline.add(self._compute, t1, self.clock(), epoch, step)

    def close(self):
        self.inner.close()
