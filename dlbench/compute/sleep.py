"""Sleep compute: emulate an accelerator's step time on the host, accurately.

``time.sleep`` overshoots by ≈ 100 µs per call here (docs/LIMITS.md: +8 % at 1 ms steps), so a step is
deadline-based: sleep until ``spin_s`` (200 µs) before the deadline, then spin on ``perf_counter_ns``;
the margin widens to 2 × the moving average of the observed sleep overshoot when the machine is loaded.
Step times are fixed or drawn from a normal distribution N(step_time_s, stdev_s) clipped at 0, seeded per
(seed, rank) so every run draws the same sequence. An optional barrier per step emulates the gradient
allreduce (timed as ``barrier``).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..timeline import PHASE_ID

_COMPUTE = PHASE_ID["compute"]
_BARRIER = PHASE_ID["barrier"]
_CHECKPOINT = PHASE_ID["checkpoint"]


class SleepCompute:
    """``SleepCompute(step_time_s, stdev_s=0.0, seed=0, rank=0, barrier=None)``.

    ``barrier``: None, a callable (called once per step), or a Comm (its ``.barrier()``), timed as the
    ``barrier`` phase after ``compute``. ``batch_size``: when given, a batch of ``n`` samples takes
    ``n / batch_size`` of the step time (a short last batch, or the unequal local batches of a strategy that
    balances loads, e.g. surrogatetrain, whose larger batches take longer). ``clock``/``sleep`` are injectable for tests (fake clock).
    """

    def __init__(self, step_time_s: float, stdev_s: float = 0.0, seed: int = 0, rank: int = 0,
                 barrier=None, *, batch_size: int | None = None, spin_s: float = 200e-6,
                 clock: Callable[[], int] = time.perf_counter_ns, sleep: Callable[[float], None] = time.sleep):
        if step_time_s < 0 or stdev_s < 0:
            from ..errors import ConfigError
            raise ConfigError(f"sleep compute: step_time_s={step_time_s!r}, stdev_s={stdev_s!r}; "
                              "both must be >= 0")
        self.step_time_s = float(step_time_s)
        self.stdev_s = float(stdev_s)
        self.rank = int(rank)
        self.batch_size = batch_size
        self._rng = np.random.default_rng([int(seed), int(rank)])
        self._spin_ns = int(spin_s * 1e9)
        self._overshoot_ns = 0.0   # moving average of time.sleep's overshoot (grows on a loaded machine)
        self._clock = clock
        self._sleep = sleep
        if barrier is None or callable(barrier):
            self._barrier = barrier
        elif hasattr(barrier, "barrier"):
            self._barrier = barrier.barrier
        else:
            raise TypeError(f"barrier must be None, a callable or a Comm, not {type(barrier).__name__}")

    def draw_ns(self, n: int | None = None) -> int:
        """This step's duration in ns (normal, clipped at 0; scaled by n / batch_size if set)."""
        t = self.step_time_s
        if self.stdev_s > 0:
            t = max(0.0, float(self._rng.normal(t, self.stdev_s)))
        if self.batch_size and n is not None and n >= 0 and n != self.batch_size:
            t *= n / self.batch_size      # a short last batch, or a strategy's unequal local batches
        return int(round(t * 1e9))

    def wait_until(self, deadline_ns: int) -> int:
        """Sleep to ``spin_s`` before the deadline, then spin. Returns the clock at exit (≥ deadline)."""
        clock = self._clock
        now = clock()
        margin = max(self._spin_ns, int(2 * self._overshoot_ns))
        rest = deadline_ns - now - margin
        if rest > 0:
            self._sleep(rest * 1e-9)
            woke = clock()
            over = woke - (now + rest)
            # moving average of overshoots, each clipped at 1 ms so one preemption does not turn the
            # next steps into pure spinning
            self._overshoot_ns = 0.9 * self._overshoot_ns + 0.1 * min(max(over, 0), 1_000_000)
            now = woke
        while now < deadline_ns:
            now = clock()
        return now

    def step(self, batch, sample_ids, n: int, timeline, epoch: int, step: int) -> None:
        clock = self._clock
        t0 = clock()
        t1 = self.wait_until(t0 + self.draw_ns(n))
        if timeline is not None:
            timeline.add(_COMPUTE, t0, t1, epoch, step)
        if self._barrier is not None:
            self._barrier()
            t2 = clock()
            if timeline is not None:
                timeline.add(_BARRIER, t1, t2, epoch, step)

    def close(self) -> None:
        pass


_BUF: dict[str, np.ndarray] = {}


def _buffer(nbytes: int) -> np.ndarray:
    """One reused, page-aligned write buffer (grown when needed, never per call)."""
    cur = _BUF.get("b")
    if cur is None or cur.nbytes < nbytes:
        raw = np.empty(nbytes + 4096, dtype=np.uint8)
        off = (-raw.ctypes.data) % 4096
        cur = raw[off:off + nbytes]
        cur[:] = 0x5A
        _BUF["b"] = cur
    return cur


def _checkpoint_error(e: OSError, path: Path, nbytes: int):
    """One line for a checkpoint that could not be written: the path, the reason and the free space."""
    import shutil

    from ..errors import OutputError

    try:
        free = f"{shutil.disk_usage(path.parent).free / 1e6:,.1f} MB free"
    except OSError:
        free = "free space unknown"
    what = "disk full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
    return OutputError(f"checkpoint: {what} writing {nbytes:,} bytes to {path} ({free} in {path.parent}); "
                       f"free space there, or pass --checkpoint-every 0")


def write_checkpoint(directory, nbytes: int, timeline=None, epoch: int = 0, step: int = 0, *,
                     chunk_bytes: int = 64 << 20, keep: bool = False) -> float:
    """Emulate a checkpoint: write ``nbytes`` to a file in ``directory`` with fsync (reusing one buffer
    of at most ``chunk_bytes``), time it as ``checkpoint`` (nbytes recorded), then remove the file unless
    ``keep``. Returns the seconds taken."""
    nbytes = int(nbytes)
    chunk = max(1, min(nbytes, int(chunk_bytes)))
    buf = _buffer(chunk).data
    path = Path(directory) / f".dlbench-ckpt-{os.getpid()}-{epoch}-{step}"
    import shutil

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    if free is not None and nbytes > free:
        # refuse before writing: a checkpoint larger than the free space would fill the disk first (and
        # every other writer on it) only to fail at the end
        raise _checkpoint_error(OSError(errno.ENOSPC, "disk full"), path, nbytes)
    t0 = time.perf_counter_ns()
    fd = None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        left = nbytes
        while left > 0:
            left -= os.write(fd, buf[:min(left, chunk)])
        os.fsync(fd)
    except OSError as e:
        if fd is not None:
            os.close(fd)
        path.unlink(missing_ok=True)
        raise _checkpoint_error(e, path, nbytes) from None
    except BaseException:
        if fd is not None:
            os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    t1 = time.perf_counter_ns()
    if timeline is not None:
        timeline.add(_CHECKPOINT, t0, t1, epoch, step, nbytes)
    if not keep:
        try:
            path.unlink()
        except OSError:
            pass
    return (t1 - t0) * 1e-9
