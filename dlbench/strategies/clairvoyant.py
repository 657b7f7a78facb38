"""clairvoyant: HDMLP / NoPFS clairvoyant prefetching (docs/STRATEGIES.md; planner: ``plan/clairvoyant.py``).

Every rank computes its own access stream for all epochs from the seed, counts r_k, and caches its
most-accessed samples: in its memory tier (while their bytes fit ``--cache-capacity``) and, with ``--local-cache-capacity``, in a
node-local disk tier under ``--local-dir``. A cached sample is stored by the access that first reads it;
every other access reads the cheapest source that holds the sample at that step: its own tier, a peer's
tier (pushed by non-blocking MPI on the plan's schedule), else the shared FS. The staging buffer is the
planned executor's loader ring, filled in exact access order by ``--loader-threads`` threads (default 2).
Exact global-shuffle order."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..plan import Plan
from ..plan.clairvoyant import TIE_BREAKS, clairvoyant_plan
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .cache import CacheOptions, check_cache_capacity, memory_capacity_per_rank, pipeline_of, planned_executor
from .naive import GLOBAL_SHUFFLE


@dataclass(frozen=True, kw_only=True)
class ClairvoyantOptions(CacheOptions):
    loader_threads: int = opt(2, help="loader threads per rank reading ahead in access order (0: the trainer reads "
                                      "each step itself, synchronously)", min=0, max=64)
    local_cache_capacity: float = opt(0.0, help="clairvoyant: bytes per rank of a node-local disk tier under "
                                                "--local-dir (default $TMPDIR/dlbench-local) for the samples after the "
                                                "memory tier's (0: none)",
                                      unit="B", min=0)
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")
    tie_break: str = opt("first-access", help="order among samples accessed equally often when the tiers are "
                                              "filled: first-access (earlier first access first) or sample-id "
                                              "(lower id first, the HDMLP thesis' reference simulator)",
                         choices=TIE_BREAKS)


@register
class Clairvoyant(Strategy):
    name = "clairvoyant"
    display = "HDMLP (clairvoyant)"
    summary = ("HDMLP/NoPFS: each rank caches its most-accessed samples (known from the seed) in memory, then local "
               "disk; every access from the cheapest holder: own tier, a peer's tier over MPI, else the shared FS")
    semantics = GLOBAL_SHUFFLE
    Options = ClairvoyantOptions

    def plan(self, ctx: PlanContext, options: ClairvoyantOptions) -> Plan:
        plan = clairvoyant_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                                epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed,
                                sample_nbytes=ctx.sample_nbytes, memory_bytes=memory_capacity_per_rank(ctx, options)[0],
                                local_bytes=float(options.local_cache_capacity), drop_last=options.drop_last,
                                tie_break=options.tie_break, pipeline=pipeline_of(options))
        return check_cache_capacity(ctx, plan, options, "clairvoyant's memory tier")

    def executor(self, ctx: RunContext, plan: Plan, options: ClairvoyantOptions) -> Executor:
        # every rank opens the same tiers (opening the local tier is collective): sized by the largest need
        local = int(max(plan.capacity.local_cache_peak_bytes or [0]))
        return planned_executor(ctx, plan, options, local_bytes=float(local))
