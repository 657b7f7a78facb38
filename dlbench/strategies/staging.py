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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..plan import SHARED, Plan
from ..plan.shuffles import staging_plan, staging_subset_plan
from ..timeline import PHASE_ID
from . import register
from .base import Batch, Executor, RunContext, Semantics, Strategy
from .localcopy import (
    TIER_CODES,
    LocalCopyExecutor,
    LocalCopyOptions,
    capacity_per_group,
    capacity_sizes,
    check_capacity,
    groups_of,
    set_pipeline,
)
from .naive import GLOBAL_SHUFFLE

SUBSET = Semantics("no (per-node subsets)", "no", "yes")
REDRAW = Semantics("no (per-node draws with replacement from the staged samples)", "no", "yes")


@dataclass(frozen=True, kw_only=True)
class StagingOptions(LocalCopyOptions):
    if_too_big: str = opt("subset", help="when the dataset does not fit on a node: subset (each node trains on "
                                         "its own subset, not a global shuffle; what of the subset does not fit "
                                         "is read from the shared tier every epoch), redraw (as subset, but "
                                         "each epoch draws only from the staged part, with replacement: the "
                                         "HDMLP thesis' Parallel Data Staging) or error",
                          choices=("subset", "redraw", "error"))


class StagingExecutor(LocalCopyExecutor):
    def store_need_bytes(self) -> int:
        # one store per group: the group's samples (every sample, or the group's subset)
        pro = self.plan.prologue
        g = self.groups[self.ctx.rank]
        ids = np.unique(pro.sample[np.isin(pro.rank, np.nonzero(self.groups == g)[0])])
        return int(capacity_sizes(self.ctx, self.kind)[ids].sum())

    def epoch(self, e: int) -> Iterator[Batch]:
        # a partial staging plan reads some accesses from the shared tier: the loader threads follow each
        # access's source already; the synchronous trainer does it here
        if self.options.loader_threads or "staged_fraction" not in self.plan.meta:
            yield from super().epoch(e)
            return
        yield from self._mixed_sync_epoch(e)
        if e == self.plan.epochs - 1:
            self.done = True

    def _mixed_sync_epoch(self, e: int) -> Iterator[Batch]:
        """The trainer reads each step's samples one by one from the source the plan gives (the local copy
        or the shared tier), one ``read`` (and ``decode``) interval per sample tagged with that tier."""
        ctx, plan = self.ctx, self.plan
        ep = plan.epoch(e)
        ids_all = ep.rank_samples(ctx.rank)
        src_all = ep.rank_sources(ctx.rank)
        bounds = ep.bounds[ctx.rank].tolist()
        add, clock = ctx.timeline.add, ctx.clock
        READ, DECODE = PHASE_ID["read"], PHASE_ID["decode"]
        local_read, shared_read = self.store.read_into, self.reader.read_into
        code = self.code
        decode = self.reader.decode_into if self.jpeg else None
        rows = self.rows
        sh = src_all[:bounds[-1]] == SHARED
        self.shared["reads"] += int(sh.sum())
        self.shared["bytes"] += int(self.sizes[ids_all[:bounds[-1]][sh]].sum())
        for s in range(len(bounds) - 1):
            ids = ids_all[bounds[s]:bounds[s + 1]]
            srcs = src_all[bounds[s]:bounds[s + 1]].tolist()
            for j, i in enumerate(ids.tolist()):
                t = srcs[j]
                read = shared_read if t == SHARED else local_read
                tier = SHARED if t == SHARED else code
                t0 = clock()
                if decode is not None:
                    n = read(i, self.raw)
                    t1 = clock()
                    decode(self.raw, n, rows[j])
                    add(READ, t0, t1, e, s, n, tier)
                    add(DECODE, t1, clock(), e, s, 0, tier)
                else:
                    n = read(i, rows[j])
                    add(READ, t0, clock(), e, s, n, tier)
            yield Batch(rows, ids, len(ids))


@register
class Staging(Strategy):
    name = "staging"
    summary = ("copy the dataset to node-local storage before epoch 0 (disjoint pieces per rank, MPI between "
               "nodes), then read local copies in global-shuffle order")
    semantics = GLOBAL_SHUFFLE
    Options = StagingOptions

    def plan(self, ctx: RunContext, options: StagingOptions) -> Plan:
        sizes = capacity_sizes(ctx, options.tier)
        cap, src = capacity_per_group(ctx, options)
        groups = groups_of(ctx, options.tier)
        total = float(sizes.sum())
        code = TIER_CODES[options.tier]
        common = dict(n_samples=ctx.n_samples, world_size=ctx.world_size, epochs=ctx.epochs,
                      local_batch=ctx.local_batch, seed=ctx.seed, drop_last=options.drop_last)
        if total <= cap:
            plan = staging_plan(node_map=ctx.node_map, sample_nbytes=sizes, tiers=[(code, cap)], groups=groups,
                                **common)
            plan.meta.update(capacity_per_node_bytes=cap, capacity_source=src, needed_per_node_bytes=total)
            return set_pipeline(plan, options.loader_threads)
        if options.if_too_big == "error":
            check_capacity(np.array([total]), cap, src, "staging the whole dataset")
        beyond = "redraw" if options.if_too_big == "redraw" else "shared"
        plan = staging_subset_plan(groups=groups, node_map=ctx.node_map, tier=code, sample_nbytes=sizes,
                                   capacity=cap, beyond=beyond, **common)
        pro = plan.prologue
        need = [float(sizes[np.unique(pro.sample[np.isin(pro.rank, np.nonzero(groups == g)[0])])].sum())
                for g in np.unique(groups)]
        check_capacity(np.array(need), cap, src, "staging a per-node subset (F/N samples)")   # planner's invariant
        plan.meta.update(capacity_per_node_bytes=cap, capacity_source=src, needed_per_node_bytes=max(need),
                         semantics=(REDRAW if beyond == "redraw" else SUBSET).as_dict())
        return set_pipeline(plan, options.loader_threads)

    def executor(self, ctx: RunContext, plan: Plan, options: StagingOptions) -> Executor:
        return StagingExecutor(ctx, plan, options, private=False)
