"""Cold reads on demand (``dlbench run --cache keep|drop|direct``) and where the bytes came from.

Modes:

- ``keep`` (default): reads go through the page cache as they come; nothing is evicted.
- ``drop``: before the prologue and before every epoch, one rank per node evicts the dataset's files (and the
  node's local-tier files, when the strategy keeps local copies) from the page cache with
  ``posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`` (no root needed: DONTNEED drops the clean pages of a file
  any reader may open), after an ``os.sync()`` so pages written moments ago (a freshly generated dataset,
  staged copies) are clean and can be dropped; the node's ranks wait at a barrier. Recorded as the
  ``evict`` phase, outside the epoch clock (like ``plan``).
- ``direct``: every read of a layout read by byte offset uses ``O_DIRECT`` (``open_direct``/``pread_direct``):
  the span is widened to ``DIRECT_ALIGN`` (4 KiB: offset, length and buffer), read into a page-aligned bounce
  buffer and the requested bytes copied out (straight into the caller's buffer when all three are already
  aligned). hdf5_shared/hdf5_blocks rows (``preadv`` at the datasets' offsets), jpeg_folders files and the
  local tier's row files. ``hdf5_per_sample`` cannot: libhdf5 opens and reads every per-sample file itself
  (sec2 driver), and h5py has no direct VFD here (``h5py.get_config().direct_vfd``); the run falls back to
  buffered reads with the ``drop`` eviction before every epoch, says so once and records it
  (``dlbench.data.registry.direct_support``, resolved with the mode into a ``ReadPolicy``).

The mode is a ``CacheMode``, parsed once from the option's string (``CacheMode.parse``: run.json and every
message keep the string), and resolved once, with the layout's O_DIRECT support, into the ``ReadPolicy`` the
run carries (``CacheMode.policy``): whether the shared tier and the local tier read with O_DIRECT, whether the
files are evicted (and the eviction verified) before the prologue and every epoch.

Device bytes. Linux counts per process, in ``/proc/<pid>/io``, ``rchar`` (bytes returned by read calls, pipes
and sockets included) and ``read_bytes`` (bytes this process caused to be fetched from a block device; page
cache hits add nothing). Some file systems never add to ``read_bytes`` (tmpfs: there is no device; some
network and overlay set-ups): ``device_accounting(path)`` finds out by evicting a page of a file, reading it
again and checking that ``read_bytes`` grew. Where it does not, the verdict is ``unknown``, never ``warm``.

Verdict of a run (``verdict``): device bytes / requested bytes (the bytes dlbench's read calls asked for from
dataset and local-tier files): >= ``COLD_AT`` (0.9) cold, <= ``WARM_AT`` (0.1) warm, between: mixed.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from enum import Enum

import numpy as np

from ..errors import unknown_choice
from ..units import format_bytes


class CacheMode(Enum):
    """``--cache``: ``keep`` (reads as they come), ``drop`` (evict before the prologue and every epoch),
    ``direct`` (O_DIRECT reads where the layout allows them, else as ``drop``). ``str()`` is the option's
    string (messages, run.json)."""

    KEEP = "keep"
    DROP = "drop"
    DIRECT = "direct"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: CacheMode | str) -> CacheMode:
        """The mode of an option's string (a mode passes through); one line naming the allowed ones else."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise unknown_choice("cache", value, CACHE_MODES) from None

    def policy(self, direct_unsupported: str = "") -> ReadPolicy:
        """This mode resolved into what the run does, given why the layout cannot be read with O_DIRECT
        (``dlbench.data.registry.direct_support``; "" when it can)."""
        shared_direct = self is CacheMode.DIRECT and not direct_unsupported
        return ReadPolicy(mode=self, shared_direct=shared_direct, local_direct=self is CacheMode.DIRECT,
                          evict=self is CacheMode.DROP or (self is CacheMode.DIRECT and not shared_direct),
                          warning=direct_unsupported if self is CacheMode.DIRECT and direct_unsupported else None)


CACHE_MODES = tuple(m.value for m in CacheMode)


@dataclass(frozen=True)
class ReadPolicy:
    """``--cache`` resolved once (``CacheMode.policy``): ``shared_direct`` the shared tier's reads by offset use
    O_DIRECT; ``local_direct`` the node-local copies' reads do; ``evict`` the dataset's files and the node's
    local copies are evicted from the page cache, and the eviction verified (mincore), before the prologue and
    every epoch; ``warning`` why ``direct`` falls back to buffered reads with the eviction (None: it does not)."""

    mode: CacheMode = CacheMode.KEEP
    shared_direct: bool = False
    local_direct: bool = False
    evict: bool = False
    warning: str | None = None
COLD_AT = 0.9
WARM_AT = 0.1
DIRECT_ALIGN = 4096
MEMORY_FS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "shm"})
PROBE_BYTES = 4096


# ---- eviction -----------------------------------------------------------------------------------------

def evict_file(path: str | os.PathLike) -> int:
    """Drop ``path``'s clean pages from the page cache (``POSIX_FADV_DONTNEED`` over the whole file);
    returns the file's size. Dirty pages stay (the kernel starts writing them back): ``evict`` syncs first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def resident_pages(path: str | os.PathLike) -> tuple[int, int]:
    """``(resident, total)`` pages of ``path`` in the page cache, by ``mincore(2)`` over a read-only shared
    mapping (what ``fincore``/``vmtouch`` report; mapping a file reads nothing); ``(0, 0)`` for an empty file.
    Linux only; raises OSError where mmap or mincore fails."""
    import ctypes
    import mmap

    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        libc = _libc()
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap: {os.strerror(err)}", str(path))
    finally:
        os.close(fd)
    try:
        vec = (ctypes.c_ubyte * npages)()
        if libc.mincore(addr, size, vec) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mincore: {os.strerror(err)}", str(path))
        return int((np.frombuffer(bytes(vec), dtype=np.uint8) & 1).sum()), npages
    finally:
        libc.munmap(addr, size)


def resident_bytes(paths) -> tuple[int, int]:
    """``(resident_bytes, total_bytes)`` of the page-cache residency of ``paths`` (pages × page size, each
    file's last page counted whole): the check behind ``--cache drop``'s eviction and cold checkpoint
    restores. Files that vanished count as 0 / 0."""
    import mmap

    res = tot = 0
    for p in paths:
        try:
            r, t = resident_pages(p)
        except FileNotFoundError:
            continue
        res += r
        tot += t
    return res * mmap.PAGESIZE, tot * mmap.PAGESIZE


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _LIBC.mincore.restype = ctypes.c_int
        _LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]
        _LIBC.mmap.restype = ctypes.c_void_p
        _LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _LIBC.munmap.restype = ctypes.c_int
    return _LIBC


def files_under(root: str | os.PathLike) -> list[str]:
    """Every regular file under ``root`` (recursive; [] when it does not exist)."""
    out: list[str] = []
    for d, _dirs, names in os.walk(os.fspath(root)):
        out.extend(os.path.join(d, n) for n in names)
    return out


def evict(paths, *, sync: bool = True) -> dict:
    """Evict every file of ``paths`` (files that vanished meanwhile, e.g. a local copy deleted by a loader
    thread, are skipped). ``sync``: ``os.sync()`` first, so recently written pages are clean and droppable.
    Returns ``{"files", "bytes"}``."""
    if sync:
        os.sync()
    files = nbytes = 0
    for p in paths:
        try:
            nbytes += evict_file(p)
        except FileNotFoundError:
            continue
        files += 1
    return {"files": files, "bytes": int(nbytes)}


# ---- /proc/<pid>/io and the file system -----------------------------------------------------------------

def proc_io(pid: int | str = "self") -> dict:
    """``/proc/<pid>/io`` as ``{name: int}`` ({} where there is none)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except (OSError, ValueError):
        return {}


def fs_of(path: str | os.PathLike, mountinfo: str = "/proc/self/mountinfo") -> tuple[str, str]:
    """(file system type, mount point) of the file system holding ``path`` (the longest mount point that
    prefixes its real path); ("unknown", "") where /proc/self/mountinfo cannot be read."""
    real = os.path.realpath(path)
    best, fstype = "", "unknown"
    try:
        with open(mountinfo) as f:
            for line in f:
                parts = line.split()
                if " - " not in line or len(parts) < 5:
                    continue
                mnt = parts[4].replace("\\040", " ")
                typ = line.split(" - ", 1)[1].split()[0]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, fstype = mnt, typ
    except OSError:
        return "unknown", ""
    return fstype, best


def device_accounting(probe_file: str | os.PathLike) -> dict:
    """Does this process's ``read_bytes`` count reads of ``probe_file``'s file system? Measured: the file is
    synced, evicted whole, its first page read again (``PROBE_BYTES``) and the file evicted again; available
    when ``read_bytes`` grew. Probe a small file (the runner uses the dataset's manifest): evicting a range
    of a large file is unreliable (a large folio straddling the range end is kept; seen on ext4, Linux 6.18).
    Returns ``{"available", "reason", "fs_type", "mount", "probe_file"}``."""
    fstype, mnt = fs_of(probe_file)
    base = {"fs_type": fstype, "mount": mnt, "probe_file": str(probe_file)}
    if not proc_io():
        return {**base, "available": False, "reason": "/proc/self/io cannot be read on this system"}
    if fstype in MEMORY_FS:
        return {**base, "available": False,
                "reason": f"{probe_file} is on {fstype} ({mnt}), a memory-backed file system: no device is read"}
    try:
        fd = os.open(probe_file, os.O_RDONLY)
    except OSError as e:
        return {**base, "available": False, "reason": f"cannot open {probe_file} to probe: {e.strerror}"}
    try:
        try:
            os.fdatasync(fd)
        except OSError:
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        before = proc_io().get("read_bytes", 0)
        got = len(os.pread(fd, PROBE_BYTES, 0))
        grew = proc_io().get("read_bytes", 0) - before
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    if got == 0:
        return {**base, "available": False, "reason": f"{probe_file} is empty: nothing to probe"}
    if grew <= 0:
        return {**base, "available": False,
                "reason": f"read_bytes stayed 0 when an evicted page of {probe_file} was read again ({fstype} at "
                          f"{mnt}): this file system or container does not account device reads per process"}
    return {**base, "available": True, "reason": f"an evicted page re-read added {grew} B to read_bytes"}


# ---- the verdict --------------------------------------------------------------------------------------

def verdict(requested_bytes: int, device_bytes: int, available: bool, reason: str = "") -> tuple[str, str]:
    """(word, one line): ``cold`` when device bytes >= COLD_AT x requested, ``warm`` when <= WARM_AT x,
    ``mixed`` between; ``unknown`` when device bytes are unavailable; ``none`` when no file was read."""
    if not available:
        return "unknown", f"unknown: device bytes unavailable ({reason})"
    if requested_bytes <= 0:
        return "none", "none: no bytes were read from files (samples came from memory or peers)"
    r = device_bytes / requested_bytes
    word = "cold" if r >= COLD_AT else "warm" if r <= WARM_AT else "mixed"
    return word, (f"{word}: {format_bytes(device_bytes, 'MiB')} of {format_bytes(requested_bytes, 'MiB')} requested came from the "
                  f"device ({r:.0%}; cold >= {COLD_AT:.0%}, warm <= {WARM_AT:.0%})")


# ---- O_DIRECT -----------------------------------------------------------------------------------------

def open_direct(path, flag: str = "--cache direct") -> int:
    """``os.open(path, O_RDONLY | O_DIRECT)``; a file system that refuses O_DIRECT (EINVAL) is a one-line
    ConfigError naming it (no silent buffered fallback)."""
    from ..errors import ConfigError

    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno == errno.EINVAL:
            fstype, mnt = fs_of(os.fsdecode(path))
            raise ConfigError(f"{flag}: the file system of {os.fsdecode(path)} ({fstype} at {mnt}) refuses O_DIRECT; "
                              f"use --cache drop (evict before every epoch) instead") from None
        raise


class DirectBuffer:
    """A growing page-aligned bounce buffer for ``pread_direct`` (one per reader: readers are per thread)."""

    __slots__ = ("buf",)

    def __init__(self, nbytes: int = 1 << 20):
        from . import aligned_empty

        self.buf = aligned_empty(max(DIRECT_ALIGN, -(-int(nbytes) // DIRECT_ALIGN) * DIRECT_ALIGN), np.uint8)

    def get(self, nbytes: int) -> np.ndarray:
        if self.buf.size < nbytes:
            from . import aligned_empty

            self.buf = aligned_empty(-(-int(nbytes) // DIRECT_ALIGN) * DIRECT_ALIGN * 2, np.uint8)
        return self.buf


def pread_direct(fd: int, out, nbytes: int, offset: int, bounce: DirectBuffer) -> int:
    """Read ``nbytes`` at ``offset`` of the O_DIRECT descriptor ``fd`` into ``out[:nbytes]`` (a uint8 array or
    writable buffer); returns the bytes delivered (fewer at end of file). The read covers the aligned span
    [offset rounded down, offset + nbytes rounded up to DIRECT_ALIGN): straight into ``out`` when offset,
    length and ``out`` are aligned, else into ``bounce`` and copied."""
    a = DIRECT_ALIGN
    lo = offset - offset % a
    hi = -(-(offset + nbytes) // a) * a
    from . import preadv  # the run's read call (DLBENCH_READ_CALL), as every other data read

    dst = out if isinstance(out, np.ndarray) else np.frombuffer(out, dtype=np.uint8)
    if lo == offset and hi - lo == nbytes and dst.ctypes.data % a == 0:
        got = 0
        while got < nbytes:
            r = preadv(fd, [dst[got:nbytes]], offset + got)
            if r <= 0:
                break
            got += r
        return got
    span = hi - lo
    buf = bounce.get(span)
    got = 0
    while got < span:
        r = preadv(fd, [buf[got:span]], lo + got)
        if r <= 0:
            break
        got += r
    skip = offset - lo
    useful = max(0, min(nbytes, got - skip))
    dst[:useful] = buf[skip:skip + useful]
    return useful




# ---- the run's summary ----------------------------------------------------------------------------------

MLPERF_RATIO = 5.0


def summarize(policy: ReadPolicy, ranks: list[dict], *, dataset_bytes: int, node_mem_bytes: int) -> dict:
    """run.json's ``summary["cache"]`` under ``policy`` from every rank's record (``{"epochs", "evictions",
    "accounting"}``):
    bytes per epoch summed over ranks (epoch -1: the prologue), evictions (time: the slowest rank, files and
    bytes: summed over the node leaders), the verdict over the epochs (the prologue apart) and the MLPerf
    Storage check (dataset >= 5 x a node's RAM, or a cache mode that makes it moot)."""
    acc = next((r.get("accounting") for r in ranks if r.get("accounting")), None) or {
        "available": False, "reason": "not probed (no manifest file in the data directory)"}
    by: dict[int, dict] = {}
    for r in ranks:
        for d in r.get("epochs") or []:
            cur = by.setdefault(int(d["epoch"]), {"epoch": int(d["epoch"]), "requested_bytes": 0,
                                                  "device_read_bytes": 0, "rchar_bytes": 0})
            for k in ("requested_bytes", "device_read_bytes", "rchar_bytes"):
                cur[k] += int(d[k])
    avail, why = bool(acc.get("available")), str(acc.get("reason", ""))
    rows = []
    for e in sorted(by):
        d = by[e]
        d["device_share"] = d["device_read_bytes"] / d["requested_bytes"] if d["requested_bytes"] else None
        d["verdict"] = verdict(d["requested_bytes"], d["device_read_bytes"], avail, why)[0]
        rows.append(d)
    ev: dict[int, dict] = {}
    for r in ranks:
        for x in r.get("evictions") or []:
            cur = ev.setdefault(int(x["before_epoch"]), {"before_epoch": int(x["before_epoch"]), "evict_s": 0.0,
                                                        "files": 0, "bytes": 0})
            cur["evict_s"] = max(cur["evict_s"], float(x["evict_s"]))
            cur["files"] += int(x["files"])
            cur["bytes"] += int(x["bytes"])
    req = sum(d["requested_bytes"] for d in rows if d["epoch"] >= 0)
    dev = sum(d["device_read_bytes"] for d in rows if d["epoch"] >= 0)
    word, line = verdict(req, dev, avail, why)
    ratio = dataset_bytes / node_mem_bytes if node_mem_bytes else None
    meets = bool(ratio is not None and ratio >= MLPERF_RATIO)
    in_memory = acc.get("fs_type") in MEMORY_FS
    mode = policy.mode
    moot = mode in (CacheMode.DROP, CacheMode.DIRECT) and not in_memory
    if in_memory:
        meets = False
        ml = (f"the dataset is on {acc.get('fs_type')} ({acc.get('mount')}), a memory-backed file system: every read "
              f"is a memory read, whatever its size or the cache mode: not met")
    elif meets:
        ml = f"dataset {format_bytes(dataset_bytes, 'GiB', digits=2)} is {ratio:.1f}x a node's RAM (>= {MLPERF_RATIO:g}x): met"
    elif moot:
        ml = (f"dataset {format_bytes(dataset_bytes, 'GiB', digits=2)} is {ratio or 0:.2g}x a node's RAM (< {MLPERF_RATIO:g}x), moot: "
              f"--cache {mode} " + ("reads with O_DIRECT" if policy.shared_direct
                                    else "evicts the dataset before every epoch"))
    else:
        ml = (f"dataset {format_bytes(dataset_bytes, 'GiB', digits=2)} is {ratio or 0:.2g}x a node's RAM (< {MLPERF_RATIO:g}x): not met; "
              f"pass --cache drop or --cache direct for cold reads")
    return {
        "mode": mode.value, "direct_reads": policy.shared_direct, "warning": policy.warning, "device_bytes": acc,
        "per_epoch": rows, "evictions": [ev[k] for k in sorted(ev)], "verdict": word, "verdict_line": line,
        "mlperf": {"dataset_bytes": int(dataset_bytes), "node_mem_bytes": int(node_mem_bytes),
                   "ratio": ratio, "meets_5x": meets, "moot": moot, "ok": meets or moot, "line": ml},
        "definitions": {
            "requested_bytes": "bytes dlbench's read calls asked for from dataset and local-tier files "
                               "(POSIX_BYTES_READ of the shared and local classes; HDF5 metadata not included), "
                               "all ranks and DataLoader workers",
            "device_read_bytes": "read_bytes of /proc/<pid>/io (bytes fetched from a block device), summed over "
                                 "ranks and their DataLoader worker processes, from the end of the previous epoch "
                                 "(or of the prologue) to the end of this one",
            "rchar_bytes": "rchar of /proc/<pid>/io: every byte read calls returned (pipes and sockets included)",
            "verdict": f"device / requested over the epochs: >= {COLD_AT:g} cold, <= {WARM_AT:g} warm, else mixed; "
                       "unknown where device bytes are unavailable",
            "evict": "posix_fadvise DONTNEED of every dataset (and node-local) file by one rank per node, after "
                     "os.sync(), then a barrier; outside the epoch clock (phase evict)",
        },
    }
