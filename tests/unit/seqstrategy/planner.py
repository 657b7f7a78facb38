"""sequential's planner: every rank reads its contiguous range of sample ids, in id order, every epoch, from
the shared tier. Pure NumPy (no files, MPI or clocks)."""

from __future__ import annotations

import numpy as np

from dlbench.plan import SHARED, SYNC, EpochPlan, Plan
from dlbench.plan.sampler import batch_bounds


def sequential_plan(*, n_samples: int, world_size: int, node_map: np.ndarray, epochs: int, local_batch: int,
                    seed: int, reverse_odd_epochs: bool = False) -> Plan:
    """Rank r reads ids ``[r*F//W, (r+1)*F//W)`` in order (backwards in odd epochs if ``reverse_odd_epochs``);
    rows shorter than the widest are padded with -1."""
    edges = np.arange(world_size + 1, dtype=np.int64) * n_samples // world_size
    widths = np.diff(edges)
    n_max = int(widths.max())

    def build(e: int) -> EpochPlan:
        ids = np.full((world_size, n_max), -1, dtype=np.int64)
        bounds = np.zeros((world_size, -(-n_max // local_batch) + 1), dtype=np.int64)
        for r in range(world_size):
            row = np.arange(edges[r], edges[r + 1], dtype=np.int64)
            ids[r, :len(row)] = row[::-1] if reverse_odd_epochs and e % 2 else row
            b = batch_bounds(len(row), local_batch)
            bounds[r, :len(b)] = b
            bounds[r, len(b):] = b[-1]
        return EpochPlan(epoch=e, sample_ids=ids, source=np.full(ids.shape, SHARED, dtype=np.uint8), bounds=bounds)

    return Plan(strategy="sequential", n_samples=n_samples, world_size=world_size, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, pipeline=SYNC,
                order="contiguous range per rank, in id order")
