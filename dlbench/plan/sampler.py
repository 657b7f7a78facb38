"""Per-epoch permutations, DistributedSampler rank slices and batch bounds: pure NumPy.

``epoch_permutation(seed, epoch, n)`` is π_e; ``distributed_indices(perm, W, drop_last)`` gives every
rank's row exactly as ``torch.utils.data.DistributedSampler`` would from the same permutation (rank r
takes perm[r::W] after padding the permutation with its own head to a multiple of W, or dropping its tail
with ``drop_last``); ``batch_bounds`` gives step s's slice [bounds[s], bounds[s+1]) of a rank's row.
"""

from __future__ import annotations

import math

import numpy as np


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The generator for (seed, epoch, stream...): independent of the world size and the process."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), int(epoch), *map(int, stream)])))


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """π_e: a permutation of 0..n-1 (int64), a pure function of (seed, epoch, n)."""
    return epoch_rng(seed, epoch).permutation(n).astype(np.int64, copy=False)


def samples_per_rank(n: int, world_size: int, drop_last: bool = False) -> int:
    """DistributedSampler's ``num_samples``: ceil(n/W), or floor(n/W) when dropping the tail."""
    if drop_last and n % world_size:
        return math.ceil((n - world_size) / world_size)
    return math.ceil(n / world_size)


def distributed_indices(perm: np.ndarray, world_size: int, drop_last: bool = False) -> np.ndarray:
    """Rows (W, num_samples): row r is what DistributedSampler gives rank r for this permutation.

    Without drop_last the permutation is padded with its own head (repeated if needed) to W·num_samples,
    so a few samples are seen twice in the epoch; with drop_last its tail is cut."""
    n = len(perm)
    num = samples_per_rank(n, world_size, drop_last)
    total = num * world_size
    if total <= n:
        idx = perm[:total]
    else:
        pad = total - n
        reps = math.ceil(pad / n)
        idx = np.concatenate([perm, np.tile(perm, reps)[:pad]])
    return np.ascontiguousarray(idx.reshape(num, world_size).T)


def batch_bounds(num_samples: int, local_batch: int, drop_last_batch: bool = False) -> np.ndarray:
    """Offsets (steps + 1,) of each step's slice of a rank's row; a last partial batch is kept unless
    ``drop_last_batch``."""
    steps = num_samples // local_batch if drop_last_batch else math.ceil(num_samples / local_batch)
    return np.minimum(np.arange(steps + 1, dtype=np.int64) * local_batch, num_samples)
