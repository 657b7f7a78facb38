"""Recording Darshan-style counters on the read path (names and aggregation: ``dlbench.counters``).

``IOCounters(cls)`` holds one file class's counters of one process as a plain list of ints (a list item
``+=`` is the cheapest update Python has: no per-read allocation, no dict) and Darshan's
``last_byte_read`` per file (a list indexed by the reader's file number, or a dict keyed by sample id for
the tiers). Readers and tiers call ``read(f, offset, nbytes, dt_ns)`` once per read call, ``open()`` per
file open (``h5f_open`` for an HDF5 file), ``h5d_read(nbytes)`` per ``H5Dread``. Not locked: a reader belongs to one thread (formats.py).
A tier that several threads read gets ``LockedIOCounters`` (``CounterSet.new(..., threadsafe=True)``).

``CounterSet``: a process's counters of one run, one ``IOCounters`` per ``new()`` call (per reader or
tier), plus the snapshots that DataLoader worker processes shipped back (``absorb``: the latest snapshot
per worker reader replaces the earlier ones, so cumulative snapshots are never double counted).
``totals()`` combines everything into ``{class: raw vector}``.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left

from ..counters import BUCKET_EDGES, IDX, N, combine

_OPENS, _READS, _BYTES = IDX["POSIX_OPENS"], IDX["POSIX_READS"], IDX["POSIX_BYTES_READ"]
_B0 = IDX["POSIX_SIZE_READ_0_100"]
_SEQ, _CONSEC, _MAXB = IDX["POSIX_SEQ_READS"], IDX["POSIX_CONSEC_READS"], IDX["POSIX_MAX_BYTE_READ"]
_T, _TMAX = IDX["POSIX_F_READ_TIME"], IDX["POSIX_F_MAX_READ_TIME"]
_W, _WB, _WT = IDX["POSIX_WRITES"], IDX["POSIX_BYTES_WRITTEN"], IDX["POSIX_F_WRITE_TIME"]
_H5O, _H5R, _H5B = IDX["H5D_OPENS"], IDX["H5D_READS"], IDX["H5D_BYTES_READ"]
_H5F = IDX["H5F_OPENS"]
_MR, _MB, _MMIN, _MMAJ, _MDEV = (IDX[k] for k in ("MMAP_READS", "MMAP_BYTES_READ", "MMAP_MINOR_FAULTS",
                                                   "MMAP_MAJOR_FAULTS", "MMAP_DEVICE_BYTES_READ"))


class IOCounters:
    """One file class's counters in one process. ``n_files``: files the reader numbers 0..n_files-1
    (``last_byte_read`` kept in a list); 0: keyed by any int (a dict, for the tiers)."""

    __slots__ = ("cls", "c", "last", "token", "last_dt")

    def __init__(self, cls: str, n_files: int = 0):
        self.cls = cls
        self.c = [0] * N
        self.last: list[int] | dict[int, int] = [0] * int(n_files) if n_files else {}
        self.token: tuple[int, str] | None = None  # set when a worker process ships this object's snapshots
        self.last_dt = 0   # the last read's time (``add_read_time`` lengthens it)

    def open(self, n: int = 1) -> None:
        self.c[_OPENS] += n

    def read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        """One read call of ``nbytes`` at ``offset`` of file ``f`` that took ``dt_ns``."""
        c = self.c
        c[_READS] += 1
        c[_BYTES] += nbytes
        c[_B0 + bisect_left(BUCKET_EDGES, nbytes)] += 1
        last = self.last
        lb = last[f] if type(last) is list else last.get(f, 0)  # type: ignore[union-attr]  # not a list: the dict
        if offset > lb:
            c[_SEQ] += 1
            if offset == lb + 1:
                c[_CONSEC] += 1
        end = offset + nbytes - 1
        last[f] = end
        if end > c[_MAXB]:
            c[_MAXB] = end
        c[_T] += dt_ns
        self.last_dt = dt_ns
        if dt_ns > c[_TMAX]:
            c[_TMAX] = dt_ns

    def open_read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        """An open followed by one read (a tier's file read whole): one call instead of two."""
        self.c[_OPENS] += 1
        self.read(f, offset, nbytes, dt_ns)

    def copy_read(self, nbytes: int, dt_ns: int) -> None:
        """A read without a file offset (the memory tier: a copy out of a slot)."""
        c = self.c
        c[_READS] += 1
        c[_BYTES] += nbytes
        c[_B0 + bisect_left(BUCKET_EDGES, nbytes)] += 1
        c[_T] += dt_ns
        self.last_dt = dt_ns
        if dt_ns > c[_TMAX]:
            c[_TMAX] = dt_ns

    def copy_reads(self, nbytes: list, dt_ns: list) -> None:
        """``copy_read`` for several copies at once (``nbytes[i]`` bytes in ``dt_ns[i]``): the same counts."""
        if not nbytes:
            return
        c = self.c
        c[_READS] += len(nbytes)
        c[_BYTES] += sum(nbytes)
        last_n, b = -1, 0
        for n in nbytes:
            if n != last_n:
                last_n, b = n, _B0 + bisect_left(BUCKET_EDGES, n)
            c[b] += 1
        c[_T] += sum(dt_ns)
        self.last_dt = dt_ns[-1]
        m = max(dt_ns)
        if m > c[_TMAX]:
            c[_TMAX] = m

    def add_read_time(self, dt_ns: int) -> None:
        """Time added to the last read (the PFS emulation's modelled wait, which the throttle spends after
        the real read): the cumulative time grows, and the maximum if that read, so lengthened, is now the
        slowest."""
        c = self.c
        c[_T] += dt_ns
        self.last_dt += dt_ns
        if self.last_dt > c[_TMAX]:
            c[_TMAX] = self.last_dt

    def write(self, nbytes: int, dt_ns: int, count: int = 1) -> None:
        """``count`` write calls of ``nbytes`` in all, taking ``dt_ns``."""
        c = self.c
        c[_W] += count
        c[_WB] += nbytes
        c[_WT] += dt_ns

    def h5d_open(self, n: int = 1) -> None:
        self.c[_H5O] += n

    def h5f_open(self, posix_opens: int = 1) -> None:
        """An HDF5 file opened (H5F_OPENS) with ``posix_opens`` descriptors (HDF5's, and dlbench's own beside
        it for pread)."""
        c = self.c
        c[_H5F] += 1
        c[_OPENS] += posix_opens

    def h5d_read(self, nbytes: int) -> None:
        c = self.c
        c[_H5R] += 1
        c[_H5B] += nbytes

    def h5d_open_read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        """A dataset opened and read whole with H5Dread: H5D_OPENS, H5D_READS, H5D_BYTES_READ, and the
        POSIX read of its data at ``offset`` (``offset`` < 0: not contiguous, counted without an offset)."""
        c = self.c
        c[_H5O] += 1
        c[_H5R] += 1
        c[_H5B] += nbytes
        if offset >= 0:
            self.read(f, offset, nbytes, dt_ns)
        else:
            self.copy_read(nbytes, dt_ns)

    def mmap_read(self, nbytes: int, dt_ns: int, minflt: int, majflt: int) -> None:
        """One copy of ``nbytes`` out of a memory map taking ``dt_ns``, with the page faults it took."""
        c = self.c
        c[_MR] += 1
        c[_MB] += nbytes
        c[_MMIN] += minflt
        c[_MMAJ] += majflt
        c[_T] += dt_ns

    def mmap_device_bytes(self, nbytes: int) -> None:
        """Bytes the process fetched from the block device while its maps were read."""
        self.c[_MDEV] += nbytes

    def snapshot(self) -> tuple:
        """(token, class, raw vector copy): what a worker process ships to the trainer."""
        if self.token is None:
            self.token = (os.getpid(), os.urandom(8).hex())
        return (self.token, self.cls, list(self.c))


class LockedIOCounters(IOCounters):
    """IOCounters for an object that several threads read at once (a tier behind loader threads): every
    update under a lock (≈ 0.1 µs uncontended), so no count is lost between a read and its store."""

    __slots__ = ("lock",)

    def __init__(self, cls: str, n_files: int = 0):
        super().__init__(cls, n_files)
        self.lock = threading.Lock()

    def open(self, n: int = 1) -> None:
        with self.lock:
            IOCounters.open(self, n)

    def read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        with self.lock:
            IOCounters.read(self, f, offset, nbytes, dt_ns)

    def open_read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        with self.lock:
            self.c[_OPENS] += 1
            IOCounters.read(self, f, offset, nbytes, dt_ns)

    def copy_read(self, nbytes: int, dt_ns: int) -> None:
        with self.lock:
            IOCounters.copy_read(self, nbytes, dt_ns)

    def copy_reads(self, nbytes: list, dt_ns: list) -> None:
        with self.lock:
            IOCounters.copy_reads(self, nbytes, dt_ns)

    def add_read_time(self, dt_ns: int) -> None:
        with self.lock:
            IOCounters.add_read_time(self, dt_ns)

    def write(self, nbytes: int, dt_ns: int, count: int = 1) -> None:
        with self.lock:
            IOCounters.write(self, nbytes, dt_ns, count)

    def h5d_open(self, n: int = 1) -> None:
        with self.lock:
            IOCounters.h5d_open(self, n)

    def h5f_open(self, posix_opens: int = 1) -> None:
        with self.lock:
            IOCounters.h5f_open(self, posix_opens)

    def h5d_read(self, nbytes: int) -> None:
        with self.lock:
            IOCounters.h5d_read(self, nbytes)

    def h5d_open_read(self, f: int, offset: int, nbytes: int, dt_ns: int) -> None:
        with self.lock:
            IOCounters.h5d_open_read(self, f, offset, nbytes, dt_ns)

    def snapshot(self) -> tuple:
        with self.lock:
            return IOCounters.snapshot(self)


class CounterSet:
    """A process's counters of one run: ``new(cls, n_files)`` for each reader or tier, ``absorb`` for the
    snapshots of other processes (DataLoader workers), ``totals()`` for ``{class: raw vector}``."""

    def __init__(self):
        self._mine: list[IOCounters] = []
        self._shipped: dict = {}

    def new(self, cls: str, n_files: int = 0, *, threadsafe: bool = False) -> IOCounters:
        """Counters for one reader (one thread: plain) or one tier (``threadsafe``: read by several threads)."""
        c = (LockedIOCounters if threadsafe else IOCounters)(cls, n_files)
        self._mine.append(c)
        return c

    def absorb(self, snapshot) -> None:
        """Keep a worker's cumulative snapshot (the latest per token)."""
        token, cls, vec = snapshot
        self._shipped[token] = (cls, vec)

    def totals(self) -> dict:
        by: dict[str, list] = {}
        for c in self._mine:
            by.setdefault(c.cls, []).append(c.c)
        for cls, vec in self._shipped.values():
            by.setdefault(cls, []).append(vec)
        return {cls: combine(vs) for cls, vs in by.items()}
