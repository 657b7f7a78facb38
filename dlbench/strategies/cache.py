"""What the cache-family strategies share (clairvoyant, locality, lbann, deepio, surrogatetrain): options
for the rank's cache and the loader, the capacity of the cache tier, and the executor built from the plan
(``PlannedExecutor``).

Capacity counts bytes. A rank's cache lives in its memory tier unless a strategy also uses the node-local
disk. ``--cache-capacity`` sets the bytes per rank; 0 takes the system profile's memory tier divided among
the node's ranks (unbounded without one). The planners (clairvoyant, locality, deepio; lbann holds F/W
samples) admit samples while the sum of their own sizes (the manifest's per-sample bytes) fits; the check
refuses a plan whose per-rank bytes (``cache_peak_bytes``) exceed the capacity, naming the figures; nothing
falls back to another strategy. The executor's memory tier is one preallocated byte arena per rank
(``storage.ArenaTier``) sized to the plan's bytes for that rank. surrogatetrain, whose buffer evicts and
refills, keeps page-aligned slots the size of the largest sample (``slots=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..errors import CapacityError
from ..plan import LOCAL, MEMORY, Pipeline, Plan
from ..storage import ARENA_ALIGN, PAGE
from .base import Executor, PlanContext, RunContext
from .localcopy import pipeline_for
from .planned import PlannedExecutor, peak_holdings


@dataclass(frozen=True, kw_only=True)
class CacheOptions:
    cache_capacity: float = opt(0.0, help="cache bytes per rank in its memory tier (0: the system profile's memory "
                                          "tier / ranks on the node; unbounded without one)", unit="B", min=0)
    loader_threads: int = opt(0, help="loader threads per rank reading ahead in access order (0: the trainer reads "
                                      "each step itself, synchronously)", min=0, max=64)
    window: int = opt(2, help="steps read ahead (loader threads, peer receives)", min=0, max=1024)
    fill_thread: bool = opt(True, help="store cache fills and evictions on a background fill thread (off: the trainer "
                                       "stores them between steps, where they count as stall)")


def slot_bytes(ctx: PlanContext | RunContext) -> int:
    """Bytes one sample takes in the memory tier: a page-aligned slot of the largest stored row."""
    sizes = np.asarray(ctx.sample_nbytes)
    big = int(sizes.max()) if sizes.size else 1
    return -(-max(big, 1) // PAGE) * PAGE


def memory_capacity_per_rank(ctx: PlanContext, options) -> tuple[float, str]:
    """(bytes of memory tier one rank may use for its cache, where that figure comes from)."""
    if getattr(options, "cache_capacity", 0):
        return float(options.cache_capacity), "--cache-capacity"
    cap = ctx.memory_budget_bytes
    if cap is None:
        return float("inf"), "unbounded (the system profile has no memory tier)"
    on_node = int(np.sum(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank])) or 1
    name = getattr(ctx.system, "name", "?")
    return cap / on_node, f"system profile {name}'s memory tier / {on_node} ranks on the node"


def capacity_samples(ctx: PlanContext, options) -> int:
    """How many samples fit in one rank's cache in slots (surrogatetrain's buffer)."""
    cap, _src = memory_capacity_per_rank(ctx, options)
    if not np.isfinite(cap):
        return ctx.n_samples
    return int(cap // slot_bytes(ctx))


def cache_peak_samples(plan: Plan) -> np.ndarray:
    """(W,) the most samples each rank holds in its memory cache at once: the planner's figure
    (``plan.capacity.cache_peak_samples``) when it states one, else counted from the plan."""
    if plan.capacity.cache_peak_samples is not None:
        return np.asarray(plan.capacity.cache_peak_samples, dtype=np.int64)
    return np.array([peak_holdings(plan, r, 1)[MEMORY] for r in range(plan.world_size)], dtype=np.int64)


def cache_peak_bytes(plan: Plan, sample_nbytes) -> np.ndarray:
    """(W,) the most bytes of samples each rank holds in its memory cache at once (every sample its own
    size): the planner's figure (``plan.capacity.cache_peak_bytes``) when it states one, else counted."""
    if plan.capacity.cache_peak_bytes is not None:
        return np.asarray(plan.capacity.cache_peak_bytes, dtype=np.int64)
    return np.array([peak_holdings(plan, r, sample_nbytes)[MEMORY] for r in range(plan.world_size)], dtype=np.int64)


def check_cache_capacity(ctx: PlanContext, plan: Plan, options, what: str, *, slots: bool = False) -> Plan:
    """The plan's peak cache per rank against the capacity, in bytes (``slots``: samples in slots of the
    largest sample): ``plan`` with the figures in its ``capacity`` (a copy)."""
    cap, src = memory_capacity_per_rank(ctx, options)
    peak = cache_peak_samples(plan)
    figures: dict = {}
    if slots:
        slot = slot_bytes(ctx)
        worst = int(peak.max()) * slot if len(peak) else 0
        how = f"{worst // slot:,} samples in {slot:,}-byte slots"
    else:
        pb = cache_peak_bytes(plan, ctx.sample_nbytes)
        figures["cache_peak_bytes"] = pb.tolist()
        r = int(np.argmax(pb)) if len(pb) else 0
        worst = int(pb[r]) if len(pb) else 0
        how = f"the bytes of its {int(peak[r]) if len(peak) else 0:,} samples"
    plan = plan.with_capacity(cache_peak_samples=peak.tolist(), cache_bytes_per_rank=float(worst),
                              cache_capacity_per_rank_bytes=cap, cache_capacity_source=src, **figures)
    if worst > cap:
        raise CapacityError(f"{src}: too small: {what} needs {worst:,} bytes of cache per rank "
                            f"({how}), {cap:,.0f} available; pass "
                            f"--cache-capacity BYTES, use more ranks, or choose another strategy")
    return plan


def need_bytes(ctx: PlanContext, options, what: str) -> float:
    """The cache's capacity in bytes per rank; one that cannot hold the smallest sample is an error naming
    the option."""
    cap, src = memory_capacity_per_rank(ctx, options)
    sizes = np.asarray(ctx.sample_nbytes)
    small = int(sizes.min()) if sizes.size else 0
    if cap < max(small, 1):
        raise CapacityError(f"{src}: too small: {what} caches samples in memory, {cap:,.0f} bytes per rank hold no "
                            f"sample (the smallest is {small:,} bytes); pass --cache-capacity BYTES (at least "
                            f"{max(small, 1):,})")
    return cap


def arena_bytes(ctx: PlanContext | RunContext, plan: Plan) -> int:
    """Bytes of this rank's memory arena: the plan's bytes for the rank, each sample's start aligned to
    ``ARENA_ALIGN`` (at most ``ARENA_ALIGN - 1`` bytes of padding per sample)."""
    pb = cache_peak_bytes(plan, ctx.sample_nbytes)
    n = int(cache_peak_samples(plan)[ctx.rank])
    return int(pb[ctx.rank]) + n * (ARENA_ALIGN - 1) if n else 0


def planned_executor(ctx: RunContext, plan: Plan, options, *, local_bytes: float = 0.0, min_samples: int = 0,
                     executor: type[PlannedExecutor] = PlannedExecutor, slots: bool = False) -> Executor:
    """The cache family's executor: a memory tier holding this rank's planned cache — a byte arena of the
    plan's bytes for the rank (``arena_bytes``), or with ``slots`` page-aligned slots of the largest sample
    for its peak samples (at least ``min_samples``) —, a node-local tier of ``local_bytes`` (the same on
    every rank: opening it is collective), the plan's loader threads and window (``pipeline_of``), the
    options' fill thread.
    ``executor``: a ``PlannedExecutor`` subclass."""
    if slots:
        peak = cache_peak_samples(plan)
        mem = float(max(int(peak[ctx.rank]), int(min_samples)) * slot_bytes(ctx))
    else:
        mem = float(arena_bytes(ctx, plan))
    cap = {MEMORY: mem, LOCAL: float(local_bytes)}
    return executor(ctx, plan, capacity_bytes=cap, capacity_flag="--cache-capacity", fill_thread=options.fill_thread, arena=not slots)


def pipeline_of(options) -> Pipeline:
    """The loader the executor will run (what ``dlbench simulate`` costs): loader threads
    reading ``window`` steps ahead, or the trainer reading synchronously (the window then: the steps whose
    peer receives are posted ahead) (``localcopy.set_pipeline`` for built plans)."""
    return pipeline_for(options.loader_threads, options.window)


__all__ = ["CacheOptions", "slot_bytes", "memory_capacity_per_rank", "capacity_samples", "check_cache_capacity",
           "cache_peak_samples", "cache_peak_bytes", "need_bytes", "arena_bytes",
           "planned_executor", "pipeline_of"]
