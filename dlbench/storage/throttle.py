"""Emulating a shared parallel file system (PFS) on one machine.

On one machine every file read comes from the page cache, so every loading strategy looks alike. With a
system profile that throttles the shared tier, every read of the dataset directory really happens and is
then held until the *modelled* time of that read has passed.

The model (HDMLP thesis / NoPFS, the same one ``dlbench simulate`` uses):

    t_read(s) = latency_s + s / r(γ),     r(γ) = min(b_fs, t(γ) / γ)

- ``s``: bytes of the request; ``latency_s``: fixed cost per request;
- ``γ``: the number of reads of the emulated PFS in flight at that moment, across **all processes on the
  machine** (MPI ranks, DataLoader workers, unrelated dlbench runs on the same emulated PFS), the reader
  itself included;
- ``t(γ)``: the aggregate bandwidth the PFS delivers to γ concurrent clients, interpolated linearly
  between the profile's measured points (flat below the first and past the last point);
- ``b_fs``: the bandwidth of one client's link to the PFS (a single client never exceeds it).

MB is 10^6 bytes throughout. Since γ can change while a long read is in flight, the transfer part is
integrated piecewise: the reader re-reads γ at least every ``slice_s`` (5 ms) and drains its remaining
bytes at r(γ) of that slice, so two readers that overlap each get about half of t(2). The latency comes
first, then the transfer; the real read runs inside the modelled interval (it starts at the same instant),
and only the difference is waited. A real read slower than the model is not waited at all (the figure
is then the real one).

γ is kept in a small table in shared memory (``$DLBENCH_PFS_STATE`` or ``/dev/shm``; one file per emulated
PFS, named by a hash of its key): one slot per process holds its pid, its start time and how many reads it
has in flight; γ is the sum of the slots. A process writes only its own slot (an aligned 8-byte store), so
counting costs no lock and no system call; the file lock is taken only to claim or free a slot and to clear
the slots of processes that died while counted (pid gone, or reused by another process: start time
differs) — done when a process claims a slot and about once a second while readers wait.
"""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import os
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError

MB = 1_000_000

# ------------------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PfsModel:
    """Plain numbers of a throttled shared tier. ``aggregate_MBps_by_clients``: ((clients, MB/s), ...)
    points of t(γ), in any order; empty means no contention model (every reader gets ``client_link_MBps``).
    """

    latency_s: float
    client_link_MBps: float
    aggregate_MBps_by_clients: tuple = ()
    _table: tuple = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self):
        where = "the system profile's pfs"
        if not (isinstance(self.latency_s, (int, float)) and math.isfinite(self.latency_s)
                and self.latency_s >= 0):
            raise ConfigError(f"pfs.latency_s={self.latency_s!r} in {where}: must be a number >= 0 (seconds)")
        if not (isinstance(self.client_link_MBps, (int, float)) and self.client_link_MBps > 0):
            raise ConfigError(f"pfs.client_link_MBps={self.client_link_MBps!r} in {where}: must be a number > 0 "
                              f"(MB/s, 1 MB = 10^6 bytes)")
        pts = []
        for p in self.aggregate_MBps_by_clients:
            try:
                c, bw = p
            except (TypeError, ValueError):
                raise ConfigError(f"pfs.aggregate_MBps point {p!r} in {where}: must be (clients, MB/s)") from None
            if not (isinstance(c, (int, float)) and c >= 1 and float(c).is_integer()):
                raise ConfigError(f"pfs.aggregate_MBps clients={c!r} in {where}: must be an integer >= 1")
            if not (isinstance(bw, (int, float)) and math.isfinite(bw) and bw > 0):
                raise ConfigError(f"pfs.aggregate_MBps[{c}]={bw!r} in {where}: must be a number > 0 (MB/s)")
            pts.append((int(c), float(bw)))
        pts.sort()
        if len({c for c, _ in pts}) != len(pts):
            raise ConfigError(f"pfs.aggregate_MBps in {where}: a client count appears twice: {pts}")
        object.__setattr__(self, "aggregate_MBps_by_clients", tuple(pts))
        object.__setattr__(self, "_table", tuple(self._rate(g) for g in range(65)))

    @classmethod
    def from_mapping(cls, latency_s: float, client_link_MBps: float, aggregate_MBps: dict | None) -> PfsModel:
        """From a profile's ``{clients: MB/s}`` mapping (keys may be strings, as YAML may give them)."""
        pts = tuple((int(k), v) for k, v in (aggregate_MBps or {}).items())
        return cls(latency_s, client_link_MBps, pts)

    def aggregate_MBps(self, gamma):
        """t(γ) in MB/s (γ a number or an array): linear between the points, flat below the first and past
        the last; inf with no points. The one definition of the curve: the emulated PFS's throttle and
        ``dlbench simulate`` (``SystemProfile.pfs_aggregate``/``pfs_per_client``) both read it."""
        pts = self.aggregate_MBps_by_clients
        if not pts:
            return math.inf if np.ndim(gamma) == 0 else np.full(np.shape(gamma), math.inf)
        v = np.interp(np.asarray(gamma, dtype=np.float64), [c for c, _ in pts], [b for _, b in pts])
        return float(v) if v.ndim == 0 else v

    def per_client_Bps(self, gamma):
        """r(γ) = min(b_fs, t(γ)/γ) in bytes/s (γ a number or an array, below 1 counted as 1): what each of
        γ concurrent readers gets."""
        g = np.maximum(np.asarray(gamma, dtype=np.float64), 1.0)
        v = np.minimum(float(self.client_link_MBps), self.aggregate_MBps(g) / g) * MB
        return float(v) if v.ndim == 0 else v

    def _rate(self, gamma: int) -> float:
        return self.per_client_Bps(gamma)

    def rate_Bps(self, gamma: int) -> float:
        """r(γ) in bytes/s: what each of γ concurrent readers gets."""
        t = self._table
        return t[gamma] if 0 <= gamma < len(t) else self._rate(gamma)

    def read_time_s(self, nbytes: int, gamma: int = 1) -> float:
        """Modelled time of one read of ``nbytes`` with γ readers throughout."""
        return self.latency_s + nbytes / self.rate_Bps(gamma)

    def fingerprint(self) -> str:
        return f"pfs:{self.latency_s!r}:{self.client_link_MBps!r}:{self.aggregate_MBps_by_clients!r}"


# ------------------------------------------------------------------------------------------------------
# γ: readers in flight across processes
# ------------------------------------------------------------------------------------------------------

_MAGIC = 0x444C42504653_0001  # "DLBPFS" v1
_HEADER = 8                   # int64 words: magic, n_slots, high-water slot count, reserved...
N_SLOTS = 512


def state_dir() -> str:
    """Where the γ tables live: ``$DLBENCH_PFS_STATE``, else /dev/shm, else the temp dir."""
    d = os.environ.get("DLBENCH_PFS_STATE")
    if d:
        return d
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _start_time(pid: int) -> int:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22); 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        return int(s[s.rindex(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _alive(pid: int, start: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start:
        now = _start_time(pid)
        if now and now != start:
            return False  # the pid was reused by another process
    return True


_COUNTERS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child():
    for c in list(_COUNTERS):
        c._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class ReaderCounter:
    """γ of one emulated PFS: the reads in flight across every process of the machine that uses the same
    ``key``. ``enter()``/``exit()`` around a read, ``active()`` reads γ. Safe across threads (a lock per
    process), across ``fork`` (a child claims its own slot) and against crashes (dead processes' slots
    are cleared by ``reap()``)."""

    def __init__(self, key: str, directory: str | None = None):
        self.key = key
        self.directory = directory or state_dir()
        self.path = self.path_for(key, self.directory)
        self._lock = threading.Lock()
        self._open()
        _COUNTERS.add(self)

    @staticmethod
    def path_for(key: str, directory: str | None = None) -> str:
        """The table file of ``key`` (left in place when the last user closes; 16 KiB)."""
        return os.path.join(directory or state_dir(), "dlbench-pfs-" + hashlib.sha1(key.encode()).hexdigest()[:16])

    # -- setup --------------------------------------------------------------------------------------
    def _open(self):
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise ConfigError(f"DLBENCH_PFS_STATE={self.directory}: cannot create the PFS emulation's reader "
                              f"table {self.path} ({e.strerror}); point DLBENCH_PFS_STATE at a writable local "
                              f"directory") from None
        size = 8 * (_HEADER + 3 * N_SLOTS)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
            words = memoryview(mm).cast("q")
            if words[0] != _MAGIC:
                words[1], words[2] = N_SLOTS, 0
                words[0] = _MAGIC
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._fd, self._words = fd, words
        self._mm: mmap.mmap | None = mm
        n = N_SLOTS
        self._counts = words[_HEADER:_HEADER + n]
        self._pids = words[_HEADER + n:_HEADER + 2 * n]
        self._starts = words[_HEADER + 2 * n:_HEADER + 3 * n]
        self._slot = -1
        self._mine = 0
        self._pid = os.getpid()
        self._last_reap = 0.0

    def _forked(self):
        """In a forked child: the inherited slot is the parent's; the inherited file lock is shared with
        the parent, so reopen the file for locking and claim a fresh slot on first use. A counter closed in the
        parent (garbage not yet collected) owns no descriptor: its old number may be another file's by now (a
        DataLoader worker's pipe), so it is left alone."""
        if getattr(self, "_mm", None) is None:
            return
        self._lock = threading.Lock()
        self._slot, self._mine, self._pid = -1, 0, os.getpid()
        try:
            os.close(self._fd)
        except OSError:
            pass
        self._fd = os.open(self.path, os.O_RDWR)

    def __getstate__(self):
        return {"key": self.key, "directory": self.directory}

    def __setstate__(self, state):
        ReaderCounter.__init__(self, state["key"], state["directory"])

    def _claim(self):
        fd = self._fd
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            self._reap_locked()
            pids, hw = self._pids, self._words[2]
            slot = next((i for i in range(N_SLOTS) if pids[i] == 0), -1)
            if slot < 0:
                raise ConfigError(f"the PFS emulation's reader table {self.path} is full ({N_SLOTS} processes); "
                                  f"remove it if no dlbench run is active")
            self._counts[slot] = 0
            self._starts[slot] = _start_time(self._pid)
            pids[slot] = self._pid
            if slot + 1 > hw:
                self._words[2] = slot + 1
            self._slot = slot
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _reap_locked(self) -> int:
        cleared = 0
        pids, counts, starts = self._pids, self._counts, self._starts
        for i in range(self._words[2]):
            p = pids[i]
            if p and p != self._pid and not _alive(p, starts[i]):
                counts[i] = 0
                pids[i] = 0
                cleared += 1
        hw = self._words[2]
        while hw and pids[hw - 1] == 0:
            hw -= 1
        self._words[2] = hw
        return cleared

    def reap(self) -> int:
        """Clear the slots of processes that are gone; returns how many were cleared."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            return self._reap_locked()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._last_reap = time.monotonic()

    # -- hot path -----------------------------------------------------------------------------------
    def enter(self) -> None:
        with self._lock:
            if self._slot < 0:  # first use, or first use after a fork (register_at_fork reset it)
                self._claim()
            self._mine += 1
            self._counts[self._slot] = self._mine

    def exit(self) -> None:
        with self._lock:
            if self._slot >= 0 and self._mine > 0:
                self._mine -= 1
                self._counts[self._slot] = self._mine

    def active(self) -> int:
        """γ: reads in flight on this emulated PFS, machine-wide."""
        return sum(self._counts[:self._words[2]])

    def maybe_reap(self, every_s: float = 1.0) -> None:
        if time.monotonic() - self._last_reap > every_s:
            self.reap()

    def close(self) -> None:
        """Free this process's slot (also done at interpreter exit)."""
        mm = getattr(self, "_mm", None)   # None: closed, or __init__ failed before the map (then __del__ runs)
        if mm is None:
            return
        try:
            if self._slot >= 0 and self._pid == os.getpid():
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                try:
                    self._counts[self._slot] = 0
                    self._pids[self._slot] = 0
                    self._starts[self._slot] = 0
                finally:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
            self._slot = -1
            for v in (self._counts, self._pids, self._starts, self._words):
                v.release()
            mm.close()
            os.close(self._fd)
        except (OSError, ValueError, BufferError):
            pass
        self._mm = None

    def __del__(self):
        self.close()


def _close_all():
    for c in list(_COUNTERS):
        c.close()


import atexit  # noqa: E402

atexit.register(_close_all)


class LocalGamma:
    """A γ source for one process only (tests, or when no shared table is wanted): counts this process's
    reads. Same interface as ReaderCounter."""

    def __init__(self):
        self._n = 0
        self._lock = threading.Lock()

    def enter(self):
        with self._lock:
            self._n += 1

    def exit(self):
        with self._lock:
            self._n -= 1

    def active(self) -> int:
        return self._n

    def maybe_reap(self, every_s: float = 1.0) -> None:
        return None

    def close(self):
        return None


# ------------------------------------------------------------------------------------------------------
# The throttle
# ------------------------------------------------------------------------------------------------------


MAX_WAIT_S = 600.0   # the longest a single emulated read may be held


class Throttle:
    """Applies a PfsModel to reads. ``read(fn, *args)`` counts itself in γ, runs the real read ``fn``
    (which returns the bytes read), then waits until the read's modelled time has passed (module
    docstring). ``clock``/``sleep`` are injectable (seconds, floats) so tests can use a fake clock;
    ``spin_s``: the last part of the final wait is spun instead of slept (``time.sleep`` overshoots by
    ~0.1 ms per call here)."""

    def __init__(self, model: PfsModel, counter=None, *, key: str | None = None,
                 clock=time.perf_counter, sleep=time.sleep, slice_s: float = 0.005, spin_s: float = 0.0002):
        self.model = model
        self.counter = counter if counter is not None else ReaderCounter(key or model.fingerprint())
        self.clock, self.sleep = clock, sleep
        self.slice_s, self.spin_s = float(slice_s), float(spin_s)
        self.reads = 0
        self.bytes = 0
        self.real_s = 0.0    # time spent in the real reads
        self.waited_s = 0.0  # time added to reach the modelled times
        self._stats_lock = threading.Lock()

    def read(self, fn, *args) -> int:
        c, clock = self.counter, self.clock
        c.enter()
        try:
            t0 = clock()
            g = c.active()
            n = fn(*args)
            t1 = clock()
            self._top_up(n, t0, g)
            t2 = clock()
        finally:
            c.exit()
        with self._stats_lock:
            self.reads += 1
            self.bytes += n
            self.real_s += t1 - t0
            self.waited_s += t2 - t1
        return n

    def _top_up(self, n: int, t0: float, gamma: int) -> None:
        """Wait until ``n`` bytes started at ``t0`` have drained at r(γ), γ re-read every slice."""
        model, c, clock, sleep = self.model, self.counter, self.clock, self.sleep
        rate = model.rate_Bps(gamma)
        t = t0 + model.latency_s       # the model has been integrated up to t
        rem = float(n)                 # bytes still to drain after t
        # every modelled wait is bounded: one read that the model holds longer than MAX_WAIT_S even at the
        # best rate is a profile no run can finish, not a wait
        best = max(model.rate_Bps(1), model.rate_Bps(max(1, gamma)))
        if model.latency_s + n / best > MAX_WAIT_S:
            from ..errors import ConfigError

            raise ConfigError(f"system profile: one read of {n:,} bytes would be held "
                              f"{model.latency_s + n / best:.3g} s by the emulated PFS (> {MAX_WAIT_S:g} s): its "
                              f"bandwidths or latency cannot be right")
        slice_s, spin_s = self.slice_s, self.spin_s
        while True:
            now = clock()
            if now > t:
                rem -= (now - t) * rate
                t = now
            if rem <= 1e-6:
                if now >= t:
                    return
                step = 0.0               # only the latency is left
            else:
                rate = model.rate_Bps(max(1, c.active()))
                step = rem / rate
            if step > slice_s:
                target = t + slice_s
                d = target - clock()
                if d > 0:
                    sleep(d)
                c.maybe_reap()
            else:
                target = t + step
                d = target - spin_s - clock()
                if d > 0:
                    sleep(d)
                if spin_s > 0:
                    while clock() < target:
                        pass

    def stats(self) -> dict:
        return {"throttled_reads": self.reads, "throttled_bytes": self.bytes,
                "real_read_s": self.real_s, "throttle_wait_s": self.waited_s}

    def close(self) -> None:
        self.counter.close()


class ThrottledReader:
    """A SampleReader (docs/architecture.md contract 2) whose ``read_into`` goes through a Throttle; everything else
    (``max_row_nbytes``, ``decode_into``, ...) passes through. Counts reads, bytes, real read time and
    the time added by the model (``stats()``)."""

    def __init__(self, reader, throttle: Throttle):
        self.reader = reader
        self.throttle = throttle
        self._read = throttle.read
        self._inner = reader.read_into
        self._counters = getattr(reader, "counters", None)
        if self._counters is not None:
            self.read_into = self._counted_read_into  # type: ignore[method-assign]  # chosen once here: no per-read test

    def read_into(self, i, out) -> int:
        return self._read(self._inner, i, out)

    def _counted_read_into(self, i, out) -> int:
        """As read_into; the modelled wait is added to the read time of the reader's counters (the
        emulated PFS's read takes that long)."""
        th = self.throttle
        w0 = th.waited_s
        n = self._read(self._inner, i, out)
        self._counters.add_read_time(int((th.waited_s - w0) * 1e9))  # type: ignore[union-attr]  # bound only when not None
        return n

    def read_run_into(self, first, count, rows, row0=0) -> int:
        """A run of consecutive samples (``SampleReader.read_run_into``) as ONE throttled request: one
        latency, then all its bytes at r(γ); with counters, the modelled wait is added to their read time."""
        th = self.throttle
        w0 = th.waited_s
        n = self._read(self.reader.read_run_into, first, count, rows, row0)
        if self._counters is not None:
            self._counters.add_read_time(int((th.waited_s - w0) * 1e9))
        return n

    @property
    def max_row_nbytes(self) -> int:
        return self.reader.max_row_nbytes

    def __getattr__(self, name):
        return getattr(self.reader, name)

    def stats(self) -> dict:
        return self.throttle.stats()

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.throttle.close()


def throttle_reader(reader, model: PfsModel | None, *, key: str | None = None, **kw):
    """``reader`` itself when ``model`` is None (no wrapper, no overhead), else a ThrottledReader whose
    γ table is keyed by ``key`` (default: the model's numbers, so every emulation of the same PFS shares
    γ)."""
    if model is None:
        return reader
    return ThrottledReader(reader, Throttle(model, key=key, **kw))


class _ThrottledFactory:
    """Picklable (if ``factory`` is) so spawned DataLoader workers can receive it."""

    def __init__(self, factory, model: PfsModel, key: str | None):
        self.factory, self.model, self.key = factory, model, key

    def __call__(self):
        return throttle_reader(self.factory(), self.model, key=self.key)


def throttled_factory(factory, model: PfsModel | None, *, key: str | None = None):
    """Wrap a reader factory (``RunContext.reader_factory``): ``factory`` itself when unthrottled. The
    throttle and its γ slot are created in the process that calls the factory (a DataLoader worker gets
    its own)."""
    if model is None:
        return factory
    return _ThrottledFactory(factory, model, key)
