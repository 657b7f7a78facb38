"""sequential: each rank reads its contiguous range of the dataset in id order every epoch, one request per
sample from the shared tier, synchronously (no shuffle: the baseline of a contiguous read pattern)."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.config import opt
from dlbench.plan.semantics import Semantics, no
from dlbench.strategies import register
from dlbench.strategies.base import Executor, PlanContext, RunContext, Strategy

from .planner import sequential_plan


@dataclass(frozen=True, kw_only=True)
class SequentialOptions:
    reverse_odd_epochs: bool = opt(False, help="read the range backwards in odd epochs")


@register
class Sequential(Strategy):
    name = "sequential"
    display = "Sequential"
    summary = "each rank reads its contiguous range in id order every epoch from the shared tier"
    semantics = Semantics(no("a fixed contiguous range per rank"), no(), no())
    Options = SequentialOptions

    def plan(self, ctx: PlanContext, options: SequentialOptions):
        return sequential_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                               epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed,
                               reverse_odd_epochs=options.reverse_odd_epochs)

    def executor(self, ctx: RunContext, plan, options: SequentialOptions) -> Executor:
        from dlbench.strategies.planned import PlannedExecutor

        return PlannedExecutor(ctx, plan, capacity_bytes={}, fill_thread=False)   # the loader: the plan's (sync)
