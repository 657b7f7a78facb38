"""locality: locality-aware loading (Yang & Cong, docs/STRATEGIES.md; planner: ``plan/locality.py``). Epoch 0 reads
the global shuffle from the shared FS and each rank keeps what it read in its memory cache (its first
reads while their bytes fit ``--cache-capacity``). From epoch 1, each global batch of the global shuffle is re-assigned
so that ranks train on the samples they hold; samples nobody holds come from the shared FS, and ranks with
more than b held samples send the surplus to ranks with a deficit (greedy, largest with largest; non-blocking
MPI on the plan's schedule). Global-batch membership is unchanged: only sample→rank changes."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..plan import Plan
from ..plan.locality import locality_plan
from ..plan.semantics import Answer, Clause, Semantics, yes
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .cache import CacheOptions, check_cache_capacity, need_bytes, pipeline_of, planned_executor

LOCALITY = Semantics(yes(), yes(), Clause(Answer.YES, "sample→rank only"))


@dataclass(frozen=True, kw_only=True)
class LocalityOptions(CacheOptions):
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")


@register
class Locality(Strategy):
    name = "locality"
    display = "Locality-aware"
    summary = ("locality-aware loading: epoch 0 from the shared FS, each rank keeps what it read; later epochs "
               "re-assign each global batch's samples to the ranks that hold them (greedy surplus -> deficit)")
    semantics = LOCALITY
    Options = LocalityOptions

    def plan(self, ctx: PlanContext, options: LocalityOptions) -> Plan:
        cap = need_bytes(ctx, options, "locality")
        plan = locality_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                             epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, capacity=cap,
                             sample_nbytes=ctx.sample_nbytes, drop_last=options.drop_last, pipeline=pipeline_of(options))
        return check_cache_capacity(ctx, plan, options, "locality (what each rank read in epoch 0)")

    def executor(self, ctx: RunContext, plan: Plan, options: LocalityOptions) -> Executor:
        return planned_executor(ctx, plan, options)
