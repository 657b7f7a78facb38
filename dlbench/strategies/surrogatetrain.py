"""surrogatetrain: SurrogateTrain / SOLAR (docs/STRATEGIES.md): offline epoch ordering, remapping of buffered
samples to the rank that holds them, load balancing at the price of unequal local batches, aggregated chunked
HDF5 loading and a lookahead-evicting per-rank buffer of C/W samples. The planner is
``dlbench/plan/surrogatetrain.py`` (pure); the ``PlannedExecutor`` carries it out (the buffer is the rank's
memory tier; a run of consecutive ids is one hyperslab request of the shared HDF5 file).

Buffer size, in bytes per rank: ``--buffer-fraction f`` (the aggregate buffer is f of the dataset: ⌈f·F/W⌉
samples of the dataset's mean size per rank) or ``--cache-capacity BYTES``; with neither, the system profile's
memory tier divided among the node's ranks (the whole dataset without a memory tier). The planner admits and
evicts by the samples' own bytes (each rounded up to ``ARENA_ALIGN``) and places them best-fit in the
rank's byte range; the executor's memory tier is a byte arena running the same allocator
(``BestFitArenaTier``), sized to the plan's highest byte for the rank.

Sample order: each epoch is a full permutation and each global batch is the global shuffle's (the last one
without DistributedSampler's padding); the epochs' order changes and samples move between ranks within a
global batch. With ``--balance`` (default) ranks' local batches differ (stated in the plan and the summary)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..data.registry import get_format
from ..errors import CapacityError, ConfigError
from ..plan import MEMORY, Plan
from ..plan.semantics import Answer, Clause, Semantics, yes
from ..plan.surrogatetrain import BestFit, surrogatetrain_plan
from ..storage import ARENA_ALIGN, ArenaTier
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .cache import CacheOptions, check_cache_capacity, memory_capacity_per_rank, pipeline_of, planned_executor
from .planned import PlannedExecutor
from .stage import Stage
from .stages.store import SampleStore, Stores
from .stages.view import EpochView

SEMANTICS = Semantics(yes(), yes("the last batch without padding"), Clause(Answer.YES, "epoch order, sample→rank"))


@dataclass(frozen=True, kw_only=True)
class SurrogateTrainOptions(CacheOptions):
    buffer_fraction: float = opt(0.0, help="aggregate buffer as a fraction of the dataset (C/W "
                                           "samples per rank); 0: --cache-capacity bytes per rank", min=0, max=1)
    reorder: bool = opt(True, help="order the epochs' permutations to reuse the buffer "
                                   "(--no-reorder: in drawing order)")
    remap: bool = opt(True, help="deliver each buffered sample from the rank that holds it "
                                 "(--no-remap: DistributedSampler's rank)")
    balance: bool = opt(True, help="split each step's loads evenly over the ranks (unequal "
                                   "local batches); --no-balance: equal batches, surplus re-read")
    chunking: bool = opt(True, help="read runs of consecutive sample ids as one HDF5 hyperslab "
                                    "request (--no-chunking: one request per sample)")
    eviction: str = opt("lookahead", help="buffer eviction: lookahead (farthest next use first, "
                                          "then FIFO) or fifo", choices=("lookahead", "fifo"))


def _aligned(sizes) -> np.ndarray:
    a = np.asarray(sizes, dtype=np.int64)
    return -(-a // ARENA_ALIGN) * ARENA_ALIGN


def buffer_bytes(ctx: PlanContext, options: SurrogateTrainOptions) -> tuple[int, str]:
    """(bytes of one rank's buffer, where that figure comes from)."""
    F, W = ctx.n_samples, ctx.world_size
    if options.buffer_fraction and options.cache_capacity:
        raise ConfigError(f"--buffer-fraction={options.buffer_fraction} and --cache-capacity="
                          f"{options.cache_capacity:.0f}: give one of them (the buffer as a fraction of the dataset, "
                          f"or bytes per rank)")
    sizes = _aligned(np.broadcast_to(np.asarray(ctx.sample_nbytes), (F,)))
    if options.buffer_fraction:
        per_rank = math.ceil(options.buffer_fraction * F / W)
        return int(per_rank * -(-int(sizes.sum()) // F)), f"--buffer-fraction {options.buffer_fraction}"
    cap, src = memory_capacity_per_rank(ctx, options)
    if not np.isfinite(cap):
        return int(sizes.sum()), src
    small = int(sizes.min())
    if cap < small:
        raise CapacityError(f"{src}={cap:,.0f} bytes: smaller than the smallest sample ({small:,} bytes, "
                            f"{ARENA_ALIGN}-byte aligned); surrogatetrain needs room for at least one sample per rank: "
                            f"pass --cache-capacity >= {small} or --buffer-fraction")
    return int(cap), src


class BestFitArenaTier(ArenaTier):
    """The memory tier of surrogatetrain's buffer: ``ArenaTier``'s one preallocated byte arena, with the
    evicted samples' extents reused by the planner's allocator (``plan.surrogatetrain.BestFit``, each sample
    rounded up to ``ARENA_ALIGN``). The executor stores and drops samples in the plan's order, so every
    sample lands where the planner placed it and a planned sample never finds the arena full."""

    def __init__(self, capacity_bytes: int, row_nbytes: int, **kw):
        super().__init__(capacity_bytes, row_nbytes, **kw)
        self._alloc = BestFit(self.capacity_bytes)

    def _place(self, sid: int, nbytes: int) -> int:
        off = self._alloc.take(-(-nbytes // ARENA_ALIGN) * ARENA_ALIGN)
        if off < 0:
            raise CapacityError(
                f"{self.flag}={self.capacity_bytes}: memory tier full: storing sample {sid} needs "
                f"{nbytes} bytes in one free extent ({len(self._at)} samples, {self.used_bytes} bytes of "
                f"rows); the plan placed it elsewhere: the executor stored or dropped samples out of "
                f"the plan's order")
        return off

    def _unplace(self, off: int, nbytes: int) -> None:
        self._alloc.free(off, -(-nbytes // ARENA_ALIGN) * ARENA_ALIGN)


class LocalBatches(Stage):
    """A stage that records the samples of every step this rank trains on (its local batch: unequal under
    ``--balance``), as the step's batch is lent."""

    def __init__(self) -> None:
        self.delivered: list[int] = []

    def before_step(self, view: EpochView, t: int) -> None:
        self.delivered.append(int(view.bounds[t + 1] - view.bounds[t]))

    def stats(self) -> dict:
        n = self.delivered
        return {"min": min(n) if n else 0, "max": max(n) if n else 0,
                "mean": float(np.mean(n)) if n else 0.0, "steps": len(n)}


class SurrogateTrainExecutor(PlannedExecutor):
    """The planned executor plus SurrogateTrain's figures: shared-tier requests and bytes per request, local
    batch sizes (the compute imbalance load balancing buys), and whether runs were read as one request."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.local_batches = LocalBatches()  # samples per step delivered to this rank (its local batches)
        # the arena: the plan's highest byte for this rank (its peak bytes plus what best fit leaves between)
        self.capacity[MEMORY] = float(self.plan.capacity.of_rank("arena_bytes_per_rank", self.ctx.rank))

    def _open_stores(self) -> None:
        cap = int(self.capacity.get(MEMORY, 0))
        tier = BestFitArenaTier(cap, self.max_row, flag=self.capacity_flag, io_counters=self._counters("memory"))
        self.stores = Stores({MEMORY: SampleStore(tier, MEMORY)} if cap > 0 else {})

    def epoch_stages(self, view: EpochView) -> list[Stage]:
        return super().epoch_stages(view) + [self.local_batches]

    def stats(self) -> dict:
        out = super().stats()
        ld = self.loader
        reqs = ld.shared_reads if ld else 0
        byts = ld.shared_bytes if ld else 0
        runs = bool(ld and ld.run_reads)
        out["requests"] = reqs
        out["bytes_per_request"] = byts / reqs if reqs else 0.0
        out["run_requests"] = ld.run_requests if ld else 0
        out["chunking"] = ("one request per run of consecutive ids" if runs else
                           (f"per-sample reads: layout {self.ctx.workload.layout} has no run reads"
                            if self.plan.warning else "off (--no-chunking)"))
        out["plan"] = self.plan.notes(("epoch_order", "epoch_order_cost", "identity_order_cost",
                                       "buffer_bytes_per_rank", "buffer_samples_per_rank",
                                       "arena_bytes_per_rank", "fragmentation_skips",
                                       "shared_loads_per_epoch", "buffer_hits_per_epoch",
                                       "shared_requests_per_epoch", "shared_load_reduction_vs_naive",
                                       "local_batch_min", "local_batch_max", "compute_imbalance"),
                                      arena_bytes_per_rank=self.plan.capacity.arena_bytes_per_rank)
        out["local_batch"] = self.local_batches.stats()
        return out


@register
class SurrogateTrain(Strategy):
    name = "surrogatetrain"
    display = "SurrogateTrain"
    summary = ("SurrogateTrain/SOLAR: epochs reordered to reuse a per-rank buffer of C/W samples, buffered samples "
               "remapped to their holder, loads balanced over ranks, runs of ids read as one HDF5 hyperslab")
    semantics = SEMANTICS
    Options = SurrogateTrainOptions

    def run_label(self, options: dict) -> str:
        """The ablation's rows: the buffer and the techniques switched off."""
        s = self.name + (f" buf={options.get('buffer_fraction')}" if options.get("buffer_fraction") else "")
        s += "".join(f" no-{k}" for k in ("reorder", "remap", "balance", "chunking") if options.get(k) is False)
        s += " fifo" if options.get("eviction") == "fifo" else ""
        s += f" threads={options['loader_threads']}" if options.get("loader_threads") else ""
        return s

    def plan(self, ctx: PlanContext, options: SurrogateTrainOptions) -> Plan:
        cap, src = buffer_bytes(ctx, options)
        # runs of consecutive ids are one request only in one shared HDF5 file: elsewhere the plan says one
        # request per sample, as the executor reads them (the simulator costs what runs)
        layout = ctx.workload.layout if ctx.workload is not None else None   # None: any layout (simulated)
        fmt = get_format(layout) if layout is not None else None
        chunking = options.chunking and (fmt is None or fmt.reads_runs)
        plan = surrogatetrain_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                                   epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, buffer_bytes=cap,
                                   sample_nbytes=ctx.sample_nbytes, align=ARENA_ALIGN,
                                   reorder=options.reorder, remap=options.remap, balance=options.balance,
                                   chunking=chunking, eviction=options.eviction, pipeline=pipeline_of(options))
        plan = plan.replace(semantics=SEMANTICS)
        plan.meta["buffer_source"] = src      # a note, on this strategy's own copy
        if options.chunking and not chunking:
            plan = plan.replace(warning=f"--chunking: layout {layout} does not read runs of samples as one request "
                                        f"(hdf5_shared does); runs of consecutive ids are read one sample per request")
        what = f"surrogatetrain's buffer ({cap:,} bytes per rank, {src})"
        plan = check_cache_capacity(ctx, plan, options, what)
        mem, msrc = memory_capacity_per_rank(ctx, options)
        arena = max(plan.capacity.arena_bytes_per_rank or [0])
        if arena > mem:          # the samples' bytes fit, their aligned extents in best-fit order do not
            raise CapacityError(f"{msrc}: too small: {what} needs an arena of {arena:,} bytes per rank (its "
                                f"samples {ARENA_ALIGN}-byte aligned, placed best fit), {mem:,.0f} available; pass "
                                f"--cache-capacity BYTES or a smaller --buffer-fraction")
        return plan

    def executor(self, ctx: RunContext, plan: Plan, options: SurrogateTrainOptions) -> Executor:
        return planned_executor(ctx, plan, options, executor=SurrogateTrainExecutor)
