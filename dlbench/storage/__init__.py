"""Storage tiers and buffers. ``aligned_empty`` gives page-aligned NumPy buffers: a read into a buffer
that sits a few bytes past a page boundary runs 4–5× slower here (docs/LIMITS.md, the alignment trap), and
every NumPy allocation of ≥ 128 KiB sits at page + 16."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

PAGE = 4096

# ---- the read call of every data read (dataset files and local-tier copies) ---------------------------------
# ``preadv(fd, buffers, offset) -> bytes read``: ``os.preadv`` by default. CPython calls glibc's
# ``preadv64v2`` for it, which Darshan intercepts but dftracer 2.2 does not (it wraps read, pread64, readv,
# preadv64, not the v2 calls): under dftracer every such read would be invisible. ``DLBENCH_READ_CALL=readv``
# (read once, at import) reads with ``lseek`` + ``readv`` instead, calls every POSIX tracer sees, at one
# more system call per read (+0.6 µs on a cached 4 KiB read here: benchmarks/read_call.py); the run records which call it used (``io_counters.read_call``).
# Readers use one descriptor per thread, so the seek + read pair is never interleaved with another thread's.
READ_CALLS = ("preadv", "readv")
READ_CALL = os.environ.get("DLBENCH_READ_CALL", "preadv") or "preadv"


def check_read_call() -> str:
    """``READ_CALL``, or ConfigError (one line) for a value not in ``READ_CALLS`` (the runner checks it before
    anything runs; a read with a bad value raises the same error, never falls back)."""
    if READ_CALL not in READ_CALLS:
        from ..errors import ConfigError

        raise ConfigError(f"DLBENCH_READ_CALL={READ_CALL!r} (environment): choose one of: {', '.join(READ_CALLS)}")
    return READ_CALL


def _lseek_readv(fd: int, buffers, offset: int) -> int:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.readv(fd, buffers)


def _bad_read_call(fd: int, buffers, offset: int) -> int:
    check_read_call()
    raise AssertionError("unreachable")


_READ_CALLS: dict[str, Callable[[int, Any, int], int]] = {"preadv": os.preadv, "readv": _lseek_readv}
preadv: Callable[[int, Any, int], int] = _READ_CALLS.get(READ_CALL, _bad_read_call)


def aligned_empty(shape, dtype=np.uint8, align: int = PAGE) -> np.ndarray:
    """An uninitialised array whose first byte is ``align``-aligned (rows too, if the row size is a
    multiple of ``align``)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n].view(dtype).reshape(shape)


def aligned_rows(n_rows: int, row_nbytes: int, align: int = PAGE) -> np.ndarray:
    """(n_rows, row_nbytes) uint8 whose every row starts on an ``align`` boundary (rows are padded to a
    multiple of ``align``; the returned view hides the padding)."""
    stride = -(-max(row_nbytes, 1) // align) * align
    block = aligned_empty((n_rows, stride), np.uint8, align)
    return block[:, :row_nbytes]


def flat_span(rows: np.ndarray) -> np.ndarray:
    """The contiguous uint8 bytes from ``rows[0, 0]`` to ``rows[-1, -1]`` of a row-strided uint8 array (rows
    of ``aligned_rows``: padded), as a 1-D view of the same memory; row j starts at ``j * rows.strides[0]``.
    An MPI message gathered from (or scattered into) some of the rows uses it as its buffer."""
    if rows.ndim != 2 or rows.dtype != np.uint8 or rows.strides[1] != 1 or rows.strides[0] < rows.shape[1]:
        raise ValueError("flat_span: rows must be a 2-D uint8 array of contiguous, non-overlapping rows")
    n = (rows.shape[0] - 1) * rows.strides[0] + rows.shape[1] if rows.size else 0
    return np.lib.stride_tricks.as_strided(rows, shape=(n,), strides=(1,))


# Tiers and the PFS emulation (imported after the buffer helpers above, which tiers.py uses).
from .counters import CounterSet, IOCounters  # noqa: E402
from .throttle import (  # noqa: E402
    LocalGamma,
    PfsModel,
    ReaderCounter,
    Throttle,
    ThrottledReader,
    throttle_reader,
    throttled_factory,
)
from .tiers import ARENA_ALIGN, ArenaTier, LocalTier, MemoryTier, TierCounters, check_local_dir, free_bytes  # noqa: E402

__all__ = ["PAGE", "READ_CALL", "READ_CALLS", "check_read_call", "preadv", "aligned_empty", "aligned_rows", "PfsModel", "ReaderCounter", "LocalGamma", "Throttle",
           "ThrottledReader", "throttle_reader", "throttled_factory", "LocalTier", "MemoryTier", "ArenaTier", "ARENA_ALIGN",
           "TierCounters", "check_local_dir", "free_bytes", "CounterSet", "IOCounters"]
