"""storage.inject.FaultInjectingReader: fail/retry and slow-rank on single reads and on chunked runs."""

import numpy as np
import pytest

from dlbench.errors import RunError
from dlbench.storage.counters import _T, IOCounters
from dlbench.storage.inject import MAX_ATTEMPTS, FaultInjectingReader, Injection


class _Clock:
    """A fake ns clock: +1 µs a call; the fake reader's read takes 1 ms on it."""

    def __init__(self):
        self.t = 0

    def __call__(self):
        self.t += 1_000
        return self.t


class _RunReader:
    """A shared-file reader that supports runs and records each read call in its counters (1 ms each)."""

    supports_runs = True
    max_row_nbytes = 8

    def __init__(self, clock):
        self.clock, self.counters, self.calls = clock, IOCounters("shared", n_files=1), []

    def read_into(self, i, out):
        self.calls.append(("one", i))
        self.clock.t += 1_000_000
        self.counters.read(0, i * 8, 8, 1_000_000)
        out[:8] = i
        return 8

    def read_run_into(self, first, count, rows, row0=0):
        self.calls.append(("run", first, count))
        self.clock.t += 1_000_000
        self.counters.read(0, first * 8, 8 * count, 1_000_000)
        rows[row0:row0 + count, :8] = np.arange(first, first + count, dtype=np.uint8)[:, None]
        return 8 * count

    def close(self):
        pass


def _reader(inj, clock=None):
    clock = clock or _Clock()
    return FaultInjectingReader(_RunReader(clock), inj, seed=0, rank=1, n_samples=64, clock=clock)


def test_read_run_into_applies_fail_read_p_1():
    r = _reader(Injection(fail_read_p=1.0))
    rows = np.zeros((8, 8), dtype=np.uint8)
    with pytest.raises(RunError, match=f"sample 4 .*failed {MAX_ATTEMPTS} times"):
        r.read_run_into(4, 4, rows)
    assert r.inner.calls == [] and r.retries == MAX_ATTEMPTS  # the request never reached the file


def test_read_run_into_retries_like_read_into():
    """The same per-sample fail/retry sequence whether samples are read one by one or as a run."""
    one, run = _reader(Injection(fail_read_p=0.5)), _reader(Injection(fail_read_p=0.5))
    out, rows = np.zeros(8, dtype=np.uint8), np.zeros((16, 8), dtype=np.uint8)
    for i in range(16):
        one.read_into(i, out)
    run.read_run_into(0, 16, rows)
    assert run.retries == one.retries > 0
    assert run.inner.calls == [("run", 0, 16)] and rows[5, 0] == 5
    assert list(run._times[:16]) == [1] * 16


def test_read_run_into_slow_rank_waits_and_counts():
    r = _reader(Injection(slow_rank=1, slow_factor=3.0))
    rows = np.zeros((4, 8), dtype=np.uint8)
    t0 = r.clock.t
    r.read_run_into(0, 4, rows)
    assert r.clock.t - t0 >= 3 * 1_000_000  # the 1 ms request, then (3-1) x its time
    assert r.inner.calls == [("run", 0, 4)]


@pytest.mark.parametrize("run", [False, True])
def test_slow_rank_wait_added_to_counters_read_time(run):
    r = _reader(Injection(slow_rank=1, slow_factor=3.0))
    if run:
        r.read_run_into(0, 4, np.zeros((4, 8), dtype=np.uint8))
    else:
        r.read_into(0, np.zeros(8, dtype=np.uint8))
    # the reader itself recorded 1 ms; the slow rank's wait (>= 2 x 1 ms) is read time too
    assert r.inner.counters.c[_T] >= 3 * 1_000_000
    fast = _reader(Injection(slow_rank=0, slow_factor=3.0))  # another rank is slow: this one untouched
    fast.read_into(0, np.zeros(8, dtype=np.uint8))
    assert fast.inner.counters.c[_T] == 1_000_000
