"""local: local shuffling (PLS with Q = 0). The dataset is split once into W shards of F/W samples (a
seeded permutation), each rank stages its shard to node-local storage before epoch 0 (timed as its own
phase, epoch −1), and every epoch shuffles only its own shard. Nothing is exchanged; each rank sees the
same subset every epoch (not a global shuffle)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..plan import Plan
from ..plan.semantics import Semantics, no, yes
from ..plan.shuffles import local_plan, storage_bytes_per_rank
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .localcopy import (
    TIER_CODES,
    LocalCopyOptions,
    capacity_per_group,
    capacity_sizes,
    check_capacity,
    copies_executor,
    copies_pipeline,
    groups_of,
)

LOCAL_SHUFFLE = Semantics(no("per-rank subsets"), no(), yes())


@dataclass(frozen=True, kw_only=True)
class LocalOptions(LocalCopyOptions):
    pass


def shard_executor(ctx: RunContext, plan: Plan, options) -> Executor:
    """The planned executor with a rank-private store holding the rank's shard (and, for pls, what it
    receives: the plan's peak, ``storage_bytes_per_rank``)."""
    return copies_executor(ctx, plan, options, plan.capacity.of_rank("storage_bytes_per_rank", ctx.rank),
                           shared_local=False)


def shard_capacity_check(ctx: PlanContext, plan: Plan, options, what: str) -> Plan:
    """Per-rank peak storage from the plan, summed per storage group, against the capacity: ``plan`` with the
    figures in its ``capacity``."""
    per_rank = storage_bytes_per_rank(plan, capacity_sizes(ctx, options.tier))
    groups = groups_of(ctx, options.tier)
    per_group = np.bincount(groups, weights=per_rank.astype(np.float64))
    cap, src = capacity_per_group(ctx, options)
    plan = plan.with_capacity(storage_bytes_per_rank=per_rank.tolist(), needed_per_node_bytes=float(per_group.max()),
                              capacity_per_node_bytes=cap, capacity_source=src)
    check_capacity(per_group, cap, src, what)
    return plan


@register
class Local(Strategy):
    name = "local"
    display = "Local shuffling"
    summary = "stage a shard of F/W per rank once, then shuffle within the shard every epoch (no exchange)"
    semantics = LOCAL_SHUFFLE
    Options = LocalOptions

    def plan(self, ctx: PlanContext, options: LocalOptions) -> Plan:
        plan = local_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                          epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed,
                          drop_last=options.drop_last, tier=TIER_CODES[options.tier])
        plan = shard_capacity_check(ctx, plan, options, "local shuffling (the node's shards of F/W samples)")
        return copies_pipeline(plan, options)

    def executor(self, ctx: RunContext, plan: Plan, options: LocalOptions) -> Executor:
        return shard_executor(ctx, plan, options)
