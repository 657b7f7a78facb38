"""deepio: DeepIO's entropy-aware in-memory shuffle (docs/STRATEGIES.md; planner: ``plan/deepio.py``). Each rank
preloads a partition of the dataset into memory before epoch 0 (as much of its range [r·F/W, (r+1)·F/W) as
``--cache-capacity`` bytes hold, each sample counting its own size). ``--deepio-mode ordered`` keeps the exact global shuffle, each sample from the rank's
own memory, a peer's memory (non-blocking MPI on the plan's schedule) or the shared FS. ``--deepio-mode
opportunistic`` trains only on what is in memory: global batches drawn from a seeded shuffle of the
in-memory samples, each sample trained by its holder where it can (the rest sent by peers); its order
quality is in the run's summary (``order_quality``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..plan import Plan
from ..plan.deepio import deepio_plan
from ..plan.semantics import Answer, Clause, Semantics
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .cache import CacheOptions, check_cache_capacity, need_bytes, pipeline_of, planned_executor

DEEPIO = Semantics(Clause(Answer.DEPENDS, "yes (ordered); no unless memory holds the dataset (opportunistic)"),
                   Clause(Answer.DEPENDS, "yes (ordered); no (opportunistic)"),
                   Clause(Answer.DEPENDS, "no (ordered); yes (opportunistic)"))   # each plan states its mode's


@dataclass(frozen=True, kw_only=True)
class DeepioOptions(CacheOptions):
    mode: str = opt("ordered", help="ordered (exact global shuffle from own/peer memory or the shared FS) or "
                                    "opportunistic (batches drawn from memory only)",
                    choices=("ordered", "opportunistic"), flag="--deepio-mode")
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")


@register
class Deepio(Strategy):
    name = "deepio"
    display = "DeepIO"
    summary = ("DeepIO: each rank preloads a partition into memory; ordered keeps the global shuffle (own/peer "
               "memory, else the shared FS), opportunistic draws batches from memory only")
    semantics = DEEPIO
    Options = DeepioOptions

    def plan(self, ctx: PlanContext, options: DeepioOptions) -> Plan:
        cap = need_bytes(ctx, options, f"deepio {options.mode}")
        plan = deepio_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                           epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, capacity=cap,
                           sample_nbytes=ctx.sample_nbytes, mode=options.mode, drop_last=options.drop_last, pipeline=pipeline_of(options))
        return check_cache_capacity(ctx, plan, options, f"deepio {options.mode} (each rank's partition)")

    def executor(self, ctx: RunContext, plan: Plan, options: DeepioOptions) -> Executor:
        return planned_executor(ctx, plan, options)
