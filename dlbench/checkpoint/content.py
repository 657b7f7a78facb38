"""A checkpoint's bytes: incompressible, never zeros, different per (seed, rank, checkpoint).

Each rank's state is one contiguous buffer (its files' bytes back to back, in write order) filled before
the timed region by tiling a random block of ``BLOCK`` bytes (a prime just under 1 MiB, PCG64's raw output
for (seed, rank, checkpoint)): no two 4 KiB pages of a file are equal (the block's phase against the
pages repeats only after BLOCK × 4 KiB), every compressor whose window is smaller than the block (gzip's 32
KiB, LZ4's 64 KiB, zstd's window at its fast levels) sees random bytes, and filling costs a memcpy.
A file's CRC-32 is taken here too, so restores can name a damaged file without timing the checksum."""

from __future__ import annotations

import time
import zlib

import numpy as np

BLOCK = 1_048_573   # prime, < 1 MiB


def page_aligned(nbytes: int) -> np.ndarray:
    raw = np.empty(max(1, nbytes) + 4096, dtype=np.uint8)
    off = (-raw.ctypes.data) % 4096
    return raw[off:off + nbytes]


def fill(out: np.ndarray, seed: int, rank: int, checkpoint: int) -> float:
    """Fill ``out`` (uint8) with the state of (seed, rank, checkpoint); returns the seconds it took."""
    t0 = time.perf_counter()
    n = out.nbytes
    bits = np.random.PCG64([int(seed), int(rank), int(checkpoint), 0xC4E])
    first = min(n, BLOCK)
    out[:first] = bits.random_raw(first // 8 + 1).view(np.uint8)[:first]
    done = first
    while done < n:
        k = min(done, n - done)
        out[done:done + k] = out[:k]
        done += k
    # a block of zeros drawn at random is possible only in theory; the content is never all zeros
    return time.perf_counter() - t0


def crc32(buf) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF
