"""staging: parallel data staging. Before epoch 0 every rank copies a disjoint piece of the dataset from
the shared tier into node-local storage; when the whole set fits on a node, the pieces are then sent
between nodes by MPI so every node holds all of it. Training follows the global shuffle and reads only
local copies; the staging phase is timed on its own (epoch −1).

If the dataset does not fit (``--if-too-big subset``, the default), each node keeps one subset (F/N) and
trains on it every epoch: the run says so (plan warning, semantics row "staging-subset": not a global
shuffle). If even the subset does not fit, the node stages the first part of its subset (by sample id)
that fits and reads the rest from the shared tier every epoch (each access's source is in the plan; the
summary's plan warning gives the staged fraction). ``--if-too-big redraw``: as the HDMLP thesis'
reference simulator, each epoch draws the subset's size in samples, with replacement, from the staged
part only, whether or not the subset fits (no shared-tier reads after staging; not every sample is seen). ``--if-too-big error`` stops
instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import opt
from ..plan import Plan
from ..plan.semantics import Semantics, no, yes
from ..plan.shuffles import staging_plan, staging_subset_plan
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
from .naive import GLOBAL_SHUFFLE

SUBSET = Semantics(no("per-node subsets"), no(), yes())
REDRAW = Semantics(no("per-node draws with replacement from the staged samples"), no(), yes())


@dataclass(frozen=True, kw_only=True)
class StagingOptions(LocalCopyOptions):
    if_too_big: str = opt("subset", help="when the dataset does not fit on a node: subset (each node trains on "
                                         "its own subset, not a global shuffle; what of the subset does not fit "
                                         "is read from the shared tier every epoch), redraw (as subset, but "
                                         "each epoch draws only from the staged part, with replacement: the "
                                         "HDMLP thesis' Parallel Data Staging) or error",
                          choices=("subset", "redraw", "error"))


@register
class Staging(Strategy):
    name = "staging"
    display = "Parallel Data Staging"
    summary = ("copy the dataset to node-local storage before epoch 0 (disjoint pieces per rank, MPI between "
               "nodes), then read local copies in global-shuffle order")
    semantics = GLOBAL_SHUFFLE
    Options = StagingOptions

    def prologue_rows(self, n_samples: int, nodes: int, ranks_per_node: int, options: StagingOptions,
                      ctx: PlanContext | None = None) -> int:
        # the whole set on every storage group: every sample read once, then sent to every other group; where
        # the sizes and capacities say it does not fit a group (``plan``'s subset plans), each sample is staged
        # once, a few twice (the split's padding: fewer than one per group)
        groups = nodes if options.tier == "local" else nodes * ranks_per_node
        if ctx is not None and float(capacity_sizes(ctx, options.tier).sum()) > capacity_per_group(ctx, options)[0]:
            return int(n_samples) + int(groups)
        return int(n_samples) * int(groups)

    def sim_defaults(self, rules) -> dict:
        # the thesis' staging (prologue in series): beyond a node's capacity, draw from the staged part (as
        # its reference simulator)
        return {"if_too_big": "redraw"} if rules.prologue == "series" else {}

    def plan(self, ctx: PlanContext, options: StagingOptions) -> Plan:
        sizes = capacity_sizes(ctx, options.tier)
        cap, src = capacity_per_group(ctx, options)
        groups = groups_of(ctx, options.tier)
        total = float(sizes.sum())
        code = TIER_CODES[options.tier]
        common: dict[str, Any] = dict(n_samples=ctx.n_samples, world_size=ctx.world_size, epochs=ctx.epochs,
                      local_batch=ctx.local_batch, seed=ctx.seed, drop_last=options.drop_last)
        if total <= cap:
            plan = staging_plan(node_map=ctx.node_map, sample_nbytes=sizes, tiers=[(code, cap)], groups=groups,
                                **common)
            plan = plan.with_capacity(capacity_per_node_bytes=cap, capacity_source=src, needed_per_node_bytes=total)
            return copies_pipeline(plan, options)
        if options.if_too_big == "error":
            check_capacity(np.array([total]), cap, src, "staging the whole dataset")
        beyond = "redraw" if options.if_too_big == "redraw" else "shared"
        plan = staging_subset_plan(groups=groups, node_map=ctx.node_map, tier=code, sample_nbytes=sizes,
                                   capacity=cap, beyond=beyond, **common)
        pro = plan.prologue
        # bytes of each group's distinct staged samples (one pass over the rows, not one per group)
        F = int(ctx.n_samples)
        pairs = np.unique(groups[pro.rank].astype(np.int64) * F + pro.sample)
        need = np.bincount(pairs // F, weights=sizes[pairs % F],
                           minlength=int(groups.max()) + 1)[np.unique(groups)].tolist()
        check_capacity(np.array(need), cap, src, "staging a per-node subset (F/N samples)")   # planner's invariant
        plan = plan.with_capacity(capacity_per_node_bytes=cap, capacity_source=src, needed_per_node_bytes=max(need))
        plan = plan.replace(semantics=REDRAW if beyond == "redraw" else SUBSET)
        return copies_pipeline(plan, options)

    def executor(self, ctx: RunContext, plan: Plan, options: StagingOptions) -> Executor:
        # one store per storage group (a node's directory, or a rank's memory): the group's samples
        pro, groups = plan.prologue, groups_of(ctx, options.tier)
        ids = np.unique(pro.sample[np.isin(pro.rank, np.nonzero(groups == groups[ctx.rank])[0])])
        need = int(capacity_sizes(ctx, options.tier)[ids].sum())
        return copies_executor(ctx, plan, options, need, shared_local=True)
