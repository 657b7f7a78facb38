"""Fault injection (``dlbench run --inject``), for tests and for users who want to see how a strategy
copes with a slow rank or a flaky file system.

- ``slow-rank=R:FACTOR``: rank R is FACTOR× slower: each of its shared-tier reads (one sample, or one run
  of consecutive samples read as one request) takes FACTOR× its measured time (the reader waits
  (FACTOR−1)× the read's own duration after it, and adds the wait to the read time of the reader's
  Darshan-style counters, so ``io_counters`` shows the slowed rank) and each compute step
  FACTOR× (sleep compute: FACTOR × the step time; torch compute: the step is followed by (FACTOR−1)× its
  measured time, recorded as compute: ``compute.slow.SlowCompute``). The other ranks are untouched. R must be a rank of the job.
- ``fail-read=P``: each shared-tier read fails with probability P (0 ≤ P < 1) before it reaches the file,
  seeded by (--seed, rank, sample, how many times this process has read the sample, attempt; a run of
  samples read as one request draws for each of its samples before the request), and is
  **retried**, as a loader facing a transient PFS error would, up to ``MAX_ATTEMPTS`` attempts; the number
  of retries is reported in the summary (``injected.read_retries``). A sample whose attempts all fail stops
  the run with one line naming the sample and its file. (Retry rather than fail at once: with P = 0.01 a
  1.28 M-sample epoch would otherwise never finish; P = 1 still gives the clear error.)

Several ``--inject`` flags combine. Reads of node-local copies (staging/local/pls) are not affected: the
injection sits on the shared tier's reader, outermost (above the PFS throttle), in every process that
reads, DataLoader workers included (they report their retries with each batch).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, RunError

MAX_ATTEMPTS = 4


@dataclass(frozen=True)
class Injection:
    slow_rank: int | None = None
    slow_factor: float = 1.0
    fail_read_p: float = 0.0

    @property
    def active(self) -> bool:
        return self.slow_rank is not None or self.fail_read_p > 0

    def describe(self) -> dict:
        return {"slow_rank": self.slow_rank, "slow_factor": self.slow_factor if self.slow_rank is not None else None,
                "fail_read_p": self.fail_read_p, "max_read_attempts": MAX_ATTEMPTS}

    def factor_for(self, rank: int) -> float:
        return self.slow_factor if self.slow_rank is not None and rank == self.slow_rank else 1.0


def parse(specs, world_size: int | None = None) -> Injection:
    """``--inject`` values into an Injection (one-line ConfigError naming the flag on anything wrong)."""
    slow_rank, factor, p = None, 1.0, 0.0
    for spec in specs or ():
        kind, sep, val = str(spec).partition("=")
        kind = kind.strip()
        if not sep:
            raise ConfigError(f"--inject {spec!r}: expected KIND=VALUE; choose slow-rank=R:FACTOR or fail-read=P")
        if kind == "slow-rank":
            r, sep2, f = val.partition(":")
            try:
                slow_rank, factor = int(r), float(f)
            except ValueError:
                raise ConfigError(f"--inject slow-rank={val!r}: expected R:FACTOR, e.g. slow-rank=1:3 (rank 1 "
                                  f"three times slower)") from None
            if not sep2 or slow_rank < 0 or not np.isfinite(factor) or factor < 1 or factor > 1000:
                raise ConfigError(f"--inject slow-rank={val}: R must be a rank >= 0 and FACTOR a number from 1 "
                                  f"to 1000")
        elif kind == "fail-read":
            try:
                p = float(val)
            except ValueError:
                raise ConfigError(f"--inject fail-read={val!r}: expected a probability P, 0 <= P <= 1") from None
            if not 0 <= p <= 1:
                raise ConfigError(f"--inject fail-read={val}: P must be from 0 to 1")
        else:
            raise ConfigError(f"--inject {spec!r}: unknown kind {kind!r}; choose slow-rank=R:FACTOR or fail-read=P")
    if slow_rank is not None and world_size is not None and slow_rank >= world_size:
        raise ConfigError(f"--inject slow-rank={slow_rank}:{factor:g}: rank {slow_rank} is not in this job of "
                          f"{world_size} rank(s) (0..{world_size - 1})")
    return Injection(slow_rank=slow_rank, slow_factor=factor, fail_read_p=p)


def wait_ns(ns: int, clock=time.perf_counter_ns) -> None:
    """Wait ``ns`` nanoseconds: sleep to 200 µs before the deadline, then spin (sleep overshoots ~100 µs)."""
    if ns <= 0:
        return
    deadline = clock() + ns
    left = ns - 200_000
    if left > 0:
        time.sleep(left / 1e9)
    while clock() < deadline:
        pass


def _where(file_of, i: int) -> str:
    """The file (and row) of sample ``i`` for messages."""
    if file_of is None:
        return "file unknown"
    try:
        path, row = file_of(i)
    except Exception:  # noqa: BLE001 - a message helper must not mask the error it describes
        return "file unknown"
    return f"file {path}" + (f" row {row}" if row else "")


class FaultInjectingReader:
    """Wraps a shared-tier SampleReader with the injection of this rank (see the module docstring)."""

    def __init__(self, inner, inj: Injection, *, seed: int, rank: int, n_samples: int, where=None,
                 clock=time.perf_counter_ns):
        self.inner, self.seed, self.rank, self.clock = inner, int(seed), int(rank), clock
        self.factor = inj.factor_for(rank)
        self.p = float(inj.fail_read_p)
        self.limit = int(self.p * 2**32) if self.p < 1 else 2**32
        self.where = where
        self.retries = 0
        self._times = np.zeros(max(int(n_samples), 1), dtype=np.int64) if self.p > 0 else None
        self.max_row_nbytes = getattr(inner, "max_row_nbytes", 0)
        self.decoded_nbytes = getattr(inner, "decoded_nbytes", 0)
        self._counters = getattr(inner, "counters", None)  # Darshan-style counters of the wrapped reader

    def __getattr__(self, name):  # decode_into, decoded_shape, ... of the wrapped reader
        return getattr(self.inner, name)

    def _fails(self, i: int, attempt: int) -> bool:
        k = int(self._times[i])  # type: ignore[index]  # called only when p > 0, where _times is set
        key = np.array([self.seed, self.rank, i, k, attempt], dtype=np.int64).tobytes()
        return zlib.crc32(key) < self.limit

    def _admit(self, i: int) -> None:
        """The injected failures of one read of sample ``i``: retried up to MAX_ATTEMPTS attempts."""
        for attempt in range(MAX_ATTEMPTS):
            if not self._fails(i, attempt):
                break
            self.retries += 1
        else:
            where = _where(self.where, i)
            raise RunError(f"--inject fail-read={self.p:g}: reading sample {i} ({where}) failed "
                           f"{MAX_ATTEMPTS} times in a row (injected fault); no retry left")
        self._times[i] += 1  # type: ignore[index]  # only when p > 0, where _times is set

    def _slow_down(self, t0: int) -> None:
        """The slow rank's wait: (FACTOR−1)× the read's own time, added to the read time of the reader's
        Darshan-style counters (as ThrottledReader does for its modelled wait)."""
        t1 = self.clock()
        wait_ns(int((self.factor - 1) * (t1 - t0)), self.clock)
        if self._counters is not None:
            self._counters.add_read_time(self.clock() - t1)

    def read_into(self, i: int, out) -> int:
        t0 = self.clock()
        if self.p > 0:
            self._admit(i)
        n = self.inner.read_into(i, out)
        if self.factor > 1:
            self._slow_down(t0)
        return n

    def read_run_into(self, first: int, count: int, rows, row0: int = 0) -> int:
        """A run of consecutive samples (``SampleReader.read_run_into``, when the inner reader
        ``supports_runs``): each sample of the run goes through the fail/retry of ``read_into`` before
        the one request, and the slow rank waits (FACTOR−1)× the whole request's time after it."""
        t0 = self.clock()
        if self.p > 0:
            for i in range(first, first + count):
                self._admit(i)
        n = self.inner.read_run_into(first, count, rows, row0)
        if self.factor > 1:
            self._slow_down(t0)
        return n

    def close(self) -> None:
        self.inner.close()


class _InjectingFactory:
    """A picklable reader factory that wraps each reader it opens (DataLoader workers call it)."""

    def __init__(self, factory, inj: Injection, seed: int, rank: int, n_samples: int, where, registry: list):
        self.factory, self.inj, self.seed, self.rank, self.n, self.where = factory, inj, seed, rank, n_samples, where
        self.registry = registry

    def __call__(self):
        r = FaultInjectingReader(self.factory(), self.inj, seed=self.seed, rank=self.rank, n_samples=self.n,
                                 where=self.where)
        self.registry.append(r)
        return r


def injecting_factory(factory, inj: Injection, *, seed: int, rank: int, n_samples: int, where=None,
                      registry: list | None = None):
    """``factory`` itself when nothing is injected into this rank's reads; else a factory of
    FaultInjectingReaders (each appended to ``registry``, to sum their retries in this process)."""
    if inj.fail_read_p <= 0 and inj.factor_for(rank) <= 1:
        return factory
    return _InjectingFactory(factory, inj, seed, rank, n_samples, where, registry if registry is not None else [])
