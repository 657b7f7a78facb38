"""Pure planning: permutations, rank slices, batches and the Plan type (no files, MPI or clocks)."""

from .plan import (
    LOCAL,
    MEMORY,
    NO_TIER,
    PEER,
    PIPELINES,
    SHARED,
    SYNC,
    Capacity,
    EpochPlan,
    Evictions,
    ExchangeShare,
    Pipeline,
    Plan,
    Prologue,
    Transfers,
)
from .sampler import batch_bounds, distributed_indices, epoch_permutation, epoch_rng, samples_per_rank

__all__ = ["SHARED", "LOCAL", "MEMORY", "PEER", "NO_TIER", "PIPELINES", "SYNC", "Capacity", "EpochPlan", "Evictions",
           "ExchangeShare", "Pipeline", "Plan", "Prologue", "Transfers",
           "batch_bounds", "distributed_indices", "epoch_permutation", "epoch_rng", "samples_per_rank",
           "global_shuffle_plan"]


def global_shuffle_plan(*, strategy: str, n_samples: int, world_size: int, node_map, epochs: int,
                        local_batch: int, seed: int, drop_last: bool = False,
                        drop_last_batch: bool = False, tier: int = SHARED, meta: dict | None = None) -> Plan:
    """The DistributedSampler order (naive, prefetch, and the base of others): every epoch π_e, rank r
    takes π_e[r::W], steps of ``local_batch``; every sample comes from ``tier``."""
    import numpy as np

    def build(e: int) -> EpochPlan:
        rows = distributed_indices(epoch_permutation(seed, e, n_samples), world_size, drop_last)
        bounds = np.tile(batch_bounds(rows.shape[1], local_batch, drop_last_batch), (world_size, 1))
        return EpochPlan(epoch=e, sample_ids=rows, source=np.full(rows.shape, tier, dtype=np.uint8),
                         bounds=bounds)

    m = {"drop_last": drop_last, "drop_last_batch": drop_last_batch}
    m.update(meta or {})
    return Plan(strategy=strategy, n_samples=n_samples, world_size=world_size, node_map=node_map,
                epochs=epochs, local_batch=local_batch, seed=seed, build_epoch=build, meta=m, pipeline=SYNC,
                order="global shuffle (DistributedSampler)")
