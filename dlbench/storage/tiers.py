"""Storage tiers below the shared file system.

- ``shared``: the dataset directory (the PFS), read through a SampleReader (``dlbench.data.formats``),
  optionally throttled (``throttle.py``).
- ``local``: a node-local directory (``--local-dir``), one subdirectory per node (``node<k>``), so several
  emulated nodes on one machine (``--ranks-per-node``) each get their own. ``LocalTier`` stores one file per
  sample row, written atomically (temporary file + rename) and read with ``os.preadv`` into the caller's
  (page-aligned) buffer; with ``direct=True`` (``--cache direct``) through ``O_DIRECT``
  (``pagecache.pread_direct``: the file's 4 KiB-aligned span into a bounce buffer, then copied).
- ``memory``: ``MemoryTier``, a preallocated, page-aligned slab of fixed-size slots in the process.

Both tiers have the same interface: ``put(sample_id, row) -> nbytes``, ``read_into(sample_id, out) ->
nbytes``, ``delete(sample_id)``, ``sample_id in tier``, ``used_bytes``, ``capacity_bytes``, ``counters``
(reads, bytes read, writes, bytes written, deletes). Capacity is accounted per tier object: a strategy that
runs several ranks per node gives each rank its share of the node's capacity (or one tier to the node).
A full tier raises CapacityError saying how much is needed and how much is available; a strategy never
falls back silently.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CapacityError, ConfigError
from ..units import format_bytes
from . import PAGE, aligned_empty, aligned_rows, flat_span, preadv

if TYPE_CHECKING:
    from .counters import IOCounters

class Tier(IntEnum):
    """Where a sample's bytes come from, the one tier enumeration: its value is the uint8 code plans store
    (``dlbench.plan``'s ``SHARED`` .. ``PEER`` are these values as plain ints, what the hot paths compare),
    ``label`` the name results use (``bytes_by_tier``, ``tier_io``)."""

    SHARED = 0      # the dataset directory (the PFS)
    LOCAL = 1       # node-local storage
    MEMORY = 2      # process memory
    PEER = 3        # another rank's tier, over the network

    @property
    def label(self) -> str:
        return self.name.lower()


TIER_NAMES = tuple(t.label for t in Tier)   # labels by code: ("shared", "local", "memory", "peer")


@dataclass
class TierCounters:
    reads: int = 0
    read_bytes: int = 0
    writes: int = 0
    write_bytes: int = 0
    deletes: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def free_bytes(path: str | os.PathLike) -> int:
    """Bytes an unprivileged user may still write on the file system holding ``path``."""
    st = os.statvfs(path)
    return int(st.f_bavail) * int(st.f_frsize)


def check_local_dir(path: str | os.PathLike, needed_bytes: int = 0, *, flag: str = "--local-dir") -> Path:
    """Check (and create, if only the last component is missing) a node-local directory: its parent must
    exist, it must be a writable directory (a temporary file is created and removed), and its file system
    must have ``needed_bytes`` free. Raises ConfigError / CapacityError with one line naming ``flag``."""
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag}={path}: not a directory")
    if not p.exists():
        parent = p.parent
        if not parent.is_dir():
            raise ConfigError(f"{flag}={path}: parent directory {parent} does not exist; create it or choose "
                              f"another node-local directory")
        try:
            p.mkdir(exist_ok=True)
        except OSError as e:
            raise ConfigError(f"{flag}={path}: cannot create it ({e.strerror}); choose a writable "
                              f"node-local directory") from None
    probe = p / f".dlbench-probe-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{flag}={path}: not writable ({e.strerror}); choose a writable node-local "
                          f"directory") from None
    if needed_bytes > 0:
        free = free_bytes(p)
        if free < needed_bytes:
            raise CapacityError(f"{flag}={path}: too small: {format_bytes(needed_bytes, exact=True)} needed, "
                                f"{format_bytes(free, exact=True)} available on its file system")
    return p


class LocalTier:
    """Sample rows as files under ``root_dir/node<node>/``. ``capacity_bytes``: what this tier may hold
    (checked against the file system's free space at construction unless ``check_free=False``)."""

    name = "local"

    def __init__(self, root_dir: str | os.PathLike, node: int, capacity_bytes: int, *,
                 flag: str = "--local-dir", check_free: bool = True, subdir: str = "", io_counters=None,
                 direct: bool = False):
        capacity_bytes = int(capacity_bytes)
        if capacity_bytes <= 0:
            raise ConfigError(f"local tier capacity_bytes={capacity_bytes}: must be > 0")
        root = check_local_dir(root_dir, capacity_bytes if check_free else 0, flag=flag)
        self.root, self.flag, self.node = root, flag, int(node)
        self.dir = root / f"node{self.node}"
        self.dir.mkdir(exist_ok=True)
        if subdir:  # a rank's private part of its node's directory (rows of the same id in two shards)
            self.dir = self.dir / subdir
            self.dir.mkdir(parents=True, exist_ok=True)
        self._dirs = str(self.dir) + os.sep
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()
        self.counters = TierCounters()
        self.io_counters = io_counters  # Darshan-style (dlbench.storage.counters.IOCounters), class "local"
        self.direct = bool(direct)
        if direct:   # O_DIRECT reads; the buffered read_into stays free of any mode test
            self._bounce = threading.local()
            self.read_into = self._read_into_direct  # type: ignore[method-assign]  # chosen once here: no per-read test

    def path_of(self, sample_id: int) -> str:
        return f"{self._dirs}{int(sample_id)}.row"

    def __contains__(self, sample_id) -> bool:
        return int(sample_id) in self._sizes or os.path.exists(self.path_of(sample_id))

    def __len__(self) -> int:
        return len(self._sizes)

    def put(self, sample_id: int, row) -> int:
        """Store ``row`` (any buffer) as sample ``sample_id``'s file, atomically; replaces an older copy."""
        sid = int(sample_id)
        mv = memoryview(row).cast("B")
        n = mv.nbytes
        with self._lock:
            old = self._sizes.get(sid, 0)
            avail = self.capacity_bytes - self.used_bytes + old
            if n > avail:
                raise CapacityError(
                    f"{self.flag}={self.root}: node-local tier of node {self.node} is full: storing sample {sid} "
                    f"needs {n} bytes, {max(avail, 0)} of capacity_bytes={self.capacity_bytes} available "
                    f"({self.used_bytes} used by {len(self._sizes)} samples)")
            self.used_bytes += n - old
            self._sizes[sid] = n
        final = self.path_of(sid)
        tmp = f"{self._dirs}.{sid}.tmp{os.getpid()}.{threading.get_ident()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            io = self.io_counters
            try:
                off = 0
                while off < n:
                    t0 = perf_counter_ns()
                    got = os.write(fd, mv[off:])
                    if io is not None:
                        io.write(got, perf_counter_ns() - t0)
                    off += got
            finally:
                os.close(fd)
            if io is not None:
                io.open()
            os.replace(tmp, final)
        except OSError as e:
            with self._lock:
                self.used_bytes -= n - old
                if old:
                    self._sizes[sid] = old
                else:
                    self._sizes.pop(sid, None)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise CapacityError(
                    f"{self.flag}={self.root}: file system full while storing sample {sid} ({n} bytes); "
                    f"{format_bytes(free_bytes(self.root), exact=True)} available") from None
            raise
        c = self.counters
        c.writes += 1
        c.write_bytes += n
        return n

    def read_into(self, sample_id: int, out: np.ndarray) -> int:
        """Read sample ``sample_id``'s row into ``out[:nbytes]`` (``out``: uint8, ideally page-aligned);
        returns nbytes. Rows stored by another process of the node are found too."""
        sid = int(sample_id)
        fd = os.open(self.path_of(sid), os.O_RDONLY)
        try:
            n = self._sizes.get(sid)
            if n is None:
                n = os.fstat(fd).st_size
            if n > out.nbytes:
                raise ValueError(f"buffer of {out.nbytes} bytes too small for sample {sid} ({n} bytes)")
            view = memoryview(out).cast("B")  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
            off = 0
            io = self.io_counters
            while off < n:
                if io is None:
                    got = preadv(fd, [view[off:n]], off)
                else:
                    t0 = perf_counter_ns()
                    got = preadv(fd, [view[off:n]], off)
                    if off == 0:  # the open of this read, counted with its first read call
                        io.open_read(sid, off, got, perf_counter_ns() - t0)
                    else:
                        io.read(sid, off, got, perf_counter_ns() - t0)
                if got <= 0:
                    raise OSError(errno.EIO, f"short read of {self.path_of(sid)}: {off} of {n} bytes")
                off += got
        finally:
            os.close(fd)
        c = self.counters
        c.reads += 1
        c.read_bytes += n
        return n

    def _read_into_direct(self, sample_id: int, out: np.ndarray) -> int:
        """``read_into`` through O_DIRECT (several loader threads may read one tier: a bounce buffer each)."""
        from .pagecache import DirectBuffer, open_direct, pread_direct

        sid = int(sample_id)
        bounce = getattr(self._bounce, "buf", None)
        if bounce is None:
            bounce = self._bounce.buf = DirectBuffer()
        fd = open_direct(self.path_of(sid))
        try:
            n = self._sizes.get(sid)
            if n is None:
                n = os.fstat(fd).st_size
            if n > out.nbytes:
                raise ValueError(f"buffer of {out.nbytes} bytes too small for sample {sid} ({n} bytes)")
            t0 = perf_counter_ns()
            got = pread_direct(fd, out.reshape(-1).view(np.uint8), n, 0, bounce)
            if self.io_counters is not None:
                self.io_counters.open_read(sid, 0, got, perf_counter_ns() - t0)
            if got != n:
                raise OSError(errno.EIO, f"short read of {self.path_of(sid)}: {got} of {n} bytes")
        finally:
            os.close(fd)
        c = self.counters
        c.reads += 1
        c.read_bytes += n
        return n

    def delete(self, sample_id: int) -> None:
        sid = int(sample_id)
        with self._lock:
            n = self._sizes.pop(sid, None)
            if n is not None:
                self.used_bytes -= n
        try:
            os.unlink(self.path_of(sid))
        except FileNotFoundError:
            if n is None:
                raise KeyError(sid) from None
        self.counters.deletes += 1

    def clear(self) -> None:
        """Remove every row this tier stored (the node directory is left, empty of them)."""
        for sid in list(self._sizes):
            self.delete(sid)

    def stats(self) -> dict:
        return {"tier": self.name, "node": self.node, "dir": str(self.dir), "capacity_bytes": self.capacity_bytes,
                "used_bytes": self.used_bytes, "samples": len(self._sizes), **self.counters.as_dict()}

    def close(self) -> None:
        return None


class _RowTier:
    """What ``MemoryTier`` and ``ArenaTier`` share on top of their own ``reserve``/``view``: storing a row,
    copying one out, and counting a step's copies (``read_rows_into``)."""

    counters: TierCounters
    io_counters: IOCounters | None   # Darshan-style, class "memory" (None: not counted)

    if TYPE_CHECKING:   # each subclass defines them
        def reserve(self, sample_id: int, nbytes: int) -> np.ndarray: ...

        def view(self, sample_id: int) -> np.ndarray: ...

    def put(self, sample_id: int, row) -> int:
        src = np.frombuffer(memoryview(row).cast("B"), dtype=np.uint8)
        dst = self.reserve(sample_id, src.nbytes)
        t0 = perf_counter_ns()
        dst[...] = src
        if self.io_counters is not None:
            self.io_counters.write(src.nbytes, perf_counter_ns() - t0)
        return src.nbytes

    def read_into(self, sample_id: int, out: np.ndarray) -> int:
        src = self.view(sample_id)
        n = src.shape[0]
        io = self.io_counters
        if io is None:
            out[:n] = src
        else:
            t0 = perf_counter_ns()
            out[:n] = src
            io.copy_read(n, perf_counter_ns() - t0)
        c = self.counters
        c.reads += 1
        c.read_bytes += n
        return n

    def _count_rows(self, out: list) -> list:
        """Count ``read_rows_into``'s copies [(start, end, nbytes)] as ``read_into`` counts one; returns them."""
        ns = [r[2] for r in out]
        if self.io_counters is not None:
            self.io_counters.copy_reads(ns, [b - a for a, b, _n in out])
        c = self.counters
        c.reads += len(out)
        c.read_bytes += sum(ns)
        return out


class MemoryTier(_RowTier):
    """Rows in one preallocated slab of ``capacity_bytes // stride`` slots, ``stride`` = ``row_nbytes``
    rounded up to a page (every slot page-aligned). A slot map sends sample id → slot; freed slots are
    reused. ``reserve(sample_id, nbytes)`` hands out the slot's view so a reader (or an MPI receive) can fill it
in place. The slab's pages are touched at construction (no first-touch cost on the hot path)."""

    name = "memory"

    def __init__(self, capacity_bytes: int, row_nbytes: int, *, flag: str = "memory tier capacity_bytes",
                 io_counters=None):
        capacity_bytes, row_nbytes = int(capacity_bytes), int(row_nbytes)
        if row_nbytes <= 0:
            raise ConfigError(f"memory tier row_nbytes={row_nbytes}: must be > 0")
        stride = -(-row_nbytes // PAGE) * PAGE
        slots = capacity_bytes // stride if capacity_bytes > 0 else 0
        if slots < 1:
            raise CapacityError(f"{flag}={capacity_bytes}: too small for one sample: {stride} bytes needed "
                                f"(a {row_nbytes}-byte row in a page-aligned slot)")
        self.flag = flag
        self.capacity_bytes = capacity_bytes
        self.row_nbytes, self.stride, self.slots = row_nbytes, stride, int(slots)
        self.slab = aligned_rows(self.slots, row_nbytes)
        # fault every page in now: first touch costs ~1 GB/s here (docs/LIMITS.md), and a slot filled by a
        # receive or a read must run at copy speed, not at page-fault speed
        self.slab[:, ::PAGE] = 0
        self.flat, self._stride_b = flat_span(self.slab), int(self.slab.strides[0])
        self._slot: dict[int, int] = {}
        self._nbytes = np.zeros(self.slots, dtype=np.int64)
        self._free = list(range(self.slots - 1, -1, -1))
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.counters = TierCounters()
        self.io_counters = io_counters  # Darshan-style (copies: no offsets), class "memory"

    def __contains__(self, sample_id) -> bool:
        return int(sample_id) in self._slot

    def __len__(self) -> int:
        return len(self._slot)

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def reserve(self, sample_id: int, nbytes: int) -> np.ndarray:
        """The slot for ``sample_id`` (allocated if new) as a writable uint8 view of ``nbytes``."""
        sid, nbytes = int(sample_id), int(nbytes)
        if nbytes > self.row_nbytes:
            raise ValueError(f"sample {sid}: {nbytes} bytes exceed the tier's row size {self.row_nbytes}")
        with self._lock:
            slot = self._slot.get(sid)
            if slot is None:
                if not self._free:
                    raise CapacityError(
                        f"{self.flag}={self.capacity_bytes}: memory tier full: storing sample {sid} needs "
                        f"{self.stride} more bytes, 0 available ({self.slots} slots of {self.stride} bytes, all "
                        f"used; {self.used_bytes} bytes of rows)")
                slot = self._free.pop()
                self._slot[sid] = slot
            self.used_bytes += nbytes - int(self._nbytes[slot])
            self._nbytes[slot] = nbytes
        self.counters.writes += 1
        self.counters.write_bytes += nbytes
        return self.slab[slot, :nbytes]

    def read_rows_into(self, sample_ids: list, rows: np.ndarray, js: list, clock) -> list:
        """``read_into`` of several samples, sample ``sample_ids[i]`` into ``rows[js[i]]``, in one call (the
        inline loader's own-memory reads of a step): each copy timed on its own with ``clock`` and counted as
        ``read_into`` counts it. Returns [(start, end, nbytes)] per sample."""
        slot_of, nb, slab, full = self._slot, self._nbytes, self.slab, self.row_nbytes
        out = []
        for sid, j in zip(sample_ids, js):
            slot = slot_of[sid]
            n = int(nb[slot])
            if n == full:
                t0 = clock()
                rows[j] = slab[slot]
            else:
                t0 = clock()
                rows[j, :n] = slab[slot, :n]
            out.append((t0, clock(), n))
        return self._count_rows(out)

    def view(self, sample_id: int) -> np.ndarray:
        """Read-only access without a copy (valid until the sample is deleted)."""
        slot = self._slot[int(sample_id)]
        return self.slab[slot, :int(self._nbytes[slot])]

    def offset(self, sample_id: int) -> tuple[int, int]:
        """(offset in ``flat``, bytes) of the sample's slot, for an MPI message gathered from slots without a
        copy (``Comm.isend_ranges(tier.flat, ...)``; valid until the sample is deleted)."""
        slot = self._slot[int(sample_id)]
        return slot * self._stride_b, int(self._nbytes[slot])

    def offsets(self, sample_ids) -> tuple[list[int], list[int]]:
        """``offset`` of several samples: ([offset in ``flat``], [bytes])."""
        slots = [self._slot[sid] for sid in sample_ids]
        stride, nb = self._stride_b, self._nbytes
        return [s * stride for s in slots], [int(nb[s]) for s in slots]

    def delete(self, sample_id: int) -> None:
        sid = int(sample_id)
        with self._lock:
            slot = self._slot.pop(sid)
            self.used_bytes -= int(self._nbytes[slot])
            self._nbytes[slot] = 0
            self._free.append(slot)
        self.counters.deletes += 1

    def stats(self) -> dict:
        return {"tier": self.name, "capacity_bytes": self.capacity_bytes, "slots": self.slots,
                "slot_bytes": self.stride, "used_bytes": self.used_bytes, "samples": len(self._slot),
                **self.counters.as_dict()}

    def close(self) -> None:
        self._slot.clear()


ARENA_ALIGN = 64   # each sample's first byte in an ArenaTier (a cache line)


class ArenaTier(_RowTier):
    """Rows in one preallocated byte arena of ``capacity_bytes``: a sample takes its own size (its start
    aligned to ``ARENA_ALIGN``), not a slot of the largest row, so a tier of C bytes holds samples while
    their bytes fit C. Allocation is a bump pointer: one lookup and two stores per sample, nothing allocated
    on the hot path; a deleted sample's bytes are reused only when it is the newest one or the arena is empty
    again (the cache family's plans never evict; a plan that evicts and refills uses ``MemoryTier``'s
    slots). A sample that does not
    fit is a CapacityError naming the flag. The arena's pages are touched at construction. Same interface
    as ``MemoryTier`` (``flat``: the arena; ``offset``/``offsets`` for MPI messages gathered from it)."""

    name = "memory"

    def __init__(self, capacity_bytes: int, row_nbytes: int, *, flag: str = "memory tier capacity_bytes",
                 io_counters=None):
        capacity_bytes, row_nbytes = int(capacity_bytes), int(row_nbytes)
        if row_nbytes <= 0:
            raise ConfigError(f"memory tier row_nbytes={row_nbytes}: must be > 0")
        if capacity_bytes <= 0:
            raise CapacityError(f"{flag}={capacity_bytes}: too small for one sample")
        self.flag = flag
        self.capacity_bytes = capacity_bytes
        self.row_nbytes = row_nbytes
        self.flat = aligned_empty((capacity_bytes,), np.uint8)
        self.flat[::PAGE] = 0          # fault every page in now (docs/LIMITS.md: first touch ~1 GB/s)
        self._at: dict[int, tuple[int, int]] = {}      # sample id -> (offset, nbytes)
        self._top = 0
        self._lock = threading.Lock()
        self.used_bytes = 0
        self.counters = TierCounters()
        self.io_counters = io_counters

    def __contains__(self, sample_id) -> bool:
        return int(sample_id) in self._at

    def __len__(self) -> int:
        return len(self._at)

    def reserve(self, sample_id: int, nbytes: int) -> np.ndarray:
        """The bytes for ``sample_id`` (allocated if new) as a writable uint8 view of ``nbytes``."""
        sid, nbytes = int(sample_id), int(nbytes)
        with self._lock:
            at = self._at.get(sid)
            if at is not None and at[1] >= nbytes:
                off = at[0]
                self.used_bytes += nbytes - at[1]
            else:
                if at is not None:
                    raise ValueError(f"sample {sid}: {nbytes} bytes exceed the {at[1]} stored for it")
                off = self._place(sid, nbytes)
                self.used_bytes += nbytes
            self._at[sid] = (off, nbytes)
        self.counters.writes += 1
        self.counters.write_bytes += nbytes
        return self.flat[off:off + nbytes]

    def _place(self, sid: int, nbytes: int) -> int:
        """The offset of a new sample's ``nbytes`` (under the lock): the next aligned byte past the newest."""
        off = -(-self._top // ARENA_ALIGN) * ARENA_ALIGN
        if off + nbytes > self.capacity_bytes:
            raise CapacityError(
                f"{self.flag}={self.capacity_bytes}: memory tier full: storing sample {sid} needs "
                f"{nbytes} more bytes, {max(self.capacity_bytes - off, 0)} available ({len(self._at)} "
                f"samples, {self.used_bytes} bytes of rows)")
        self._top = off + nbytes
        return off

    def _unplace(self, off: int, nbytes: int) -> None:
        """A deleted sample's bytes (under the lock): free when it was the newest, or the arena is empty."""
        if not self._at:                # empty: the whole arena is free again
            self._top = 0
        elif off + nbytes == self._top:      # the newest sample: its bytes are free again
            self._top = off

    def read_rows_into(self, sample_ids: list, rows: np.ndarray, js: list, clock) -> list:
        """``MemoryTier.read_rows_into``: several samples, ``sample_ids[i]`` into ``rows[js[i]]``, each copy
        timed with ``clock``; returns [(start, end, nbytes)]."""
        at, flat = self._at, self.flat
        out = []
        for sid, j in zip(sample_ids, js):
            off, n = at[sid]
            t0 = clock()
            rows[j, :n] = flat[off:off + n]
            out.append((t0, clock(), n))
        return self._count_rows(out)

    def view(self, sample_id: int) -> np.ndarray:
        """Read-only access without a copy (valid until the sample is deleted)."""
        off, n = self._at[int(sample_id)]
        return self.flat[off:off + n]

    def offset(self, sample_id: int) -> tuple[int, int]:
        """(offset in ``flat``, bytes) of the sample."""
        return self._at[int(sample_id)]

    def offsets(self, sample_ids) -> tuple[list[int], list[int]]:
        """``offset`` of several samples: ([offset in ``flat``], [bytes])."""
        at = [self._at[sid] for sid in sample_ids]
        return [a[0] for a in at], [a[1] for a in at]

    def delete(self, sample_id: int) -> None:
        sid = int(sample_id)
        with self._lock:
            off, n = self._at.pop(sid)
            self.used_bytes -= n
            self._unplace(off, n)
        self.counters.deletes += 1

    def stats(self) -> dict:
        return {"tier": self.name, "capacity_bytes": self.capacity_bytes, "arena_bytes": self.capacity_bytes,
                "used_bytes": self.used_bytes, "samples": len(self._at), **self.counters.as_dict()}

    def close(self) -> None:
        self._at.clear()
