"""lbann: LBANN's distributed in-memory data store (docs/STRATEGIES.md). Every rank owns about F/W samples in
its memory; each step the owners send the samples other ranks' batches need (non-blocking MPI on the plan's
schedule, ``stages.peerpush.PeerPush``). ``--lbann-mode preload`` reads each rank's range from the shared tier before
epoch 0; ``--lbann-mode dynamic`` caches each sample at its first touch (epoch 0). Exact global-shuffle order.
The dataset must fit in the ranks' memory together: otherwise a clear error."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..plan import Plan
from ..plan.caches import lbann_plan
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .cache import CacheOptions, check_cache_capacity, pipeline_of, planned_executor
from .naive import GLOBAL_SHUFFLE


@dataclass(frozen=True, kw_only=True)
class LbannOptions(CacheOptions):
    mode: str = opt("preload", help="preload (each rank reads its range before epoch 0) or dynamic (cache at "
                                    "first touch)",
                    choices=("preload", "dynamic"), flag="--lbann-mode")
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")


@register
class Lbann(Strategy):
    name = "lbann"
    display = "LBANN"
    summary = ("distributed in-memory data store: each rank owns F/W samples in memory and sends them to the ranks "
               "that need them each step (preload or dynamic)")
    semantics = GLOBAL_SHUFFLE
    Options = LbannOptions

    def plan(self, ctx: PlanContext, options: LbannOptions) -> Plan:
        plan = lbann_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                          epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, mode=options.mode,
                          sample_nbytes=ctx.sample_nbytes, drop_last=options.drop_last, pipeline=pipeline_of(options))
        return check_cache_capacity(ctx, plan, options, f"lbann {options.mode} (the dataset in the ranks' memory, "
                                                 f"about F/W samples each)")

    def executor(self, ctx: RunContext, plan: Plan, options: LbannOptions) -> Executor:
        return planned_executor(ctx, plan, options)
