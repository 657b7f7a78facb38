"""What the cache-family strategies share (clairvoyant, locality, lbann, deepio, surrogatetrain): options
for the rank's cache and the loader, the capacity of the cache tier, and the executor built from the plan
(``PlannedExecutor``).

Capacity. A rank's cache lives in its memory tier (a page-aligned slab of slots the size of the largest
sample) unless a strategy also uses the node-local disk. ``--cache-capacity`` sets the bytes per rank;
0 takes the system profile's memory tier divided among the node's ranks (unbounded without one). The
planner sizes the cache from its own plan (``peak_holdings``) and refuses a plan that does not fit, naming
the figures; nothing falls back to another strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..errors import CapacityError
from ..plan import LOCAL, MEMORY, Plan
from ..storage import PAGE
from .base import Executor, RunContext
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


def slot_bytes(ctx: RunContext) -> int:
    """Bytes one sample takes in the memory tier: a page-aligned slot of the largest stored row."""
    sizes = np.asarray(ctx.sample_nbytes)
    big = int(sizes.max()) if sizes.size else 1
    return -(-max(big, 1) // PAGE) * PAGE


def memory_capacity_per_rank(ctx: RunContext, options) -> tuple[float, str]:
    """(bytes of memory tier one rank may use for its cache, where that figure comes from)."""
    if getattr(options, "cache_capacity", 0):
        return float(options.cache_capacity), "--cache-capacity"
    cap = ctx.memory_budget_bytes
    if cap is None:
        return float("inf"), "unbounded (the system profile has no memory tier)"
    on_node = int(np.sum(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank])) or 1
    name = getattr(ctx.system, "name", "?")
    return cap / on_node, f"system profile {name}'s memory tier / {on_node} ranks on the node"


def capacity_samples(ctx: RunContext, options) -> int:
    """How many samples fit in one rank's cache (slots)."""
    cap, _src = memory_capacity_per_rank(ctx, options)
    if not np.isfinite(cap):
        return ctx.n_samples
    return int(cap // slot_bytes(ctx))


def cache_peak_samples(plan: Plan) -> np.ndarray:
    """(W,) the most samples each rank holds in its memory cache at once: the planner's figure
    (``plan.meta["cache_peak_samples"]``) when it states one, else counted from the plan."""
    if "cache_peak_samples" in plan.meta:
        return np.asarray(plan.meta["cache_peak_samples"], dtype=np.int64)
    return np.array([peak_holdings(plan, r, 1)[MEMORY] for r in range(plan.world_size)], dtype=np.int64)


def check_cache_capacity(ctx: RunContext, plan: Plan, options, what: str) -> None:
    """The plan's peak cache per rank against the capacity (records the figures in ``plan.meta``)."""
    slot = slot_bytes(ctx)
    cap, src = memory_capacity_per_rank(ctx, options)
    peak = cache_peak_samples(plan)
    worst = int(peak.max()) * slot if len(peak) else 0
    plan.meta.update(cache_peak_samples=peak.tolist(), cache_bytes_per_rank=float(worst),
                     cache_capacity_per_rank_bytes=cap, cache_capacity_source=src)
    if worst > cap:
        raise CapacityError(f"{src}: too small: {what} needs {worst:,} bytes of cache per rank "
                            f"({worst // slot:,} samples in {slot:,}-byte slots), {cap:,.0f} available; pass "
                            f"--cache-capacity BYTES, use more ranks, or choose another strategy")


def planned_executor(ctx: RunContext, plan: Plan, options, *, local_bytes: float = 0.0, min_samples: int = 0,
                     executor: type[PlannedExecutor] = PlannedExecutor) -> Executor:
    """The cache family's executor: a memory tier of this rank's peak cache (at least ``min_samples``
    slots), a node-local tier of ``local_bytes`` (the same on every rank: opening it is collective), the
    options' loader threads, window and fill thread. ``executor``: a ``PlannedExecutor`` subclass."""
    peak = cache_peak_samples(plan)
    cap = {MEMORY: float(max(int(peak[ctx.rank]), int(min_samples)) * slot_bytes(ctx)), LOCAL: float(local_bytes)}
    return executor(ctx, plan, capacity_bytes=cap, threads=options.loader_threads, window=options.window,
                    capacity_flag="--cache-capacity", fill_thread=options.fill_thread)


def pipeline_of(options) -> dict:
    """Plan keywords for the loader the executor will run (what ``dlbench simulate`` costs): loader threads
    reading ahead, or the trainer reading synchronously (``localcopy.set_pipeline`` for built plans)."""
    return pipeline_for(options.loader_threads)


__all__ = ["CacheOptions", "slot_bytes", "memory_capacity_per_rank", "capacity_samples", "check_cache_capacity",
           "cache_peak_samples",
           "planned_executor", "pipeline_of"]
