"""``compute.slow.SlowCompute`` (``--inject slow-rank`` on a torch compute): the wrapped step, then (FACTOR−1)× its
measured time recorded as ``compute`` on the timeline. A counting clock stands in for time, so nothing is timed."""

from dlbench.compute.slow import SlowCompute
from dlbench.timeline import PHASE_ID, Timeline


class _Clock:
    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 1
        return self.t


class _Step:
    """A compute whose step takes 1,000 ns of the clock and records it as ``compute``."""

    def __init__(self, clock):
        self.clock, self.closed, self.label = clock, False, "inner"

    def step(self, rows, ids, n, timeline, epoch, step):
        t0 = self.clock.t
        self.clock.t += 1000
        timeline.add(PHASE_ID["compute"], t0, self.clock.t, epoch, step)

    def close(self):
        self.closed = True


def test_slow_compute_waits_factor_minus_one_steps_and_records_it():
    clock = _Clock()
    inner = _Step(clock)
    tl = Timeline(capacity=16)
    slow = SlowCompute(inner, 3.0, clock=clock)
    slow.step(None, None, 0, tl, 0, 0)
    a = tl.arrays()
    assert a["phase"].tolist() == [PHASE_ID["compute"]] * 2
    d = (a["end_ns"] - a["start_ns"]).tolist()
    assert d[0] == 1000
    assert 2 * 1001 <= d[1] <= 2 * 1001 + 3        # (3 - 1) × the step as measured (1,000 ns + the clock's tick)
    assert slow.label == "inner"                    # the wrapped compute's attributes show through
    slow.close()
    assert inner.closed
