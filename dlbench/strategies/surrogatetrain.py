"""surrogatetrain: SurrogateTrain / SOLAR (docs/STRATEGIES.md): offline epoch ordering, remapping of buffered
samples to the rank that holds them, load balancing at the price of unequal local batches, aggregated chunked
HDF5 loading and a lookahead-evicting per-rank buffer of C/W samples. The planner is
``dlbench/plan/surrogatetrain.py`` (pure); the ``PlannedExecutor`` carries it out (the buffer is the rank's
memory tier; a run of consecutive ids is one hyperslab request of the shared HDF5 file).

Buffer size: ``--buffer-fraction f`` (the aggregate buffer is f of the dataset: ⌈f·F/W⌉ samples per rank) or
``--cache-capacity BYTES`` per rank (in page-aligned slots of the largest sample); with neither, the system
profile's memory tier divided among the node's ranks (the whole dataset without a memory tier).

Sample order: each epoch is a full permutation and each global batch is the global shuffle's (the last one
without DistributedSampler's padding); the epochs' order changes and samples move between ranks within a
global batch. With ``--balance`` (default) ranks' local batches differ (stated in the plan and the summary)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..errors import CapacityError, ConfigError
from ..plan import Plan
from ..plan.surrogatetrain import surrogatetrain_plan
from . import register
from .base import Executor, RunContext, Semantics, Strategy
from .cache import (
    CacheOptions,
    check_cache_capacity,
    memory_capacity_per_rank,
    pipeline_of,
    planned_executor,
    slot_bytes,
)
from .planned import PlannedExecutor

SEMANTICS = Semantics("yes", "yes (the last batch without padding)", "epoch order, sample→rank")


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


def buffer_samples(ctx: RunContext, options: SurrogateTrainOptions) -> tuple[int, str]:
    """(c, where it comes from): the buffer of one rank in samples."""
    F, W = ctx.n_samples, ctx.world_size
    if options.buffer_fraction and options.cache_capacity:
        raise ConfigError(f"--buffer-fraction={options.buffer_fraction} and --cache-capacity="
                          f"{options.cache_capacity:.0f}: give one of them (the buffer as a fraction of the dataset, "
                          f"or bytes per rank)")
    if options.buffer_fraction:
        return math.ceil(options.buffer_fraction * F / W), f"--buffer-fraction {options.buffer_fraction}"
    cap, src = memory_capacity_per_rank(ctx, options)
    if not np.isfinite(cap):
        return math.ceil(F / W), src
    slot = slot_bytes(ctx)
    c = int(cap // slot)
    if c < 1:
        raise CapacityError(f"{src}={cap:,.0f} bytes: smaller than one buffer slot ({slot:,} bytes, the largest "
                            f"sample page-aligned); surrogatetrain needs at least one sample per rank: pass "
                            f"--cache-capacity >= {slot} or --buffer-fraction")
    return min(c, F), src


class SurrogateTrainExecutor(PlannedExecutor):
    """The planned executor plus SurrogateTrain's figures: shared-tier requests and bytes per request, local
    batch sizes (the compute imbalance load balancing buys), and whether runs were read as one request."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.delivered: list[int] = []       # samples per step delivered to this rank (its local batches)

    def epoch(self, e: int):
        for batch in super().epoch(e):
            self.delivered.append(batch.n)
            yield batch

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
                            if self.plan.meta.get("warning") else "off (--no-chunking)"))
        m = self.plan.meta
        out["plan"] = {k: m[k] for k in ("epoch_order", "epoch_order_cost", "identity_order_cost",
                                         "buffer_samples_per_rank", "shared_loads_per_epoch", "buffer_hits_per_epoch",
                                         "shared_requests_per_epoch", "shared_load_reduction_vs_naive",
                                         "local_batch_min", "local_batch_max", "compute_imbalance") if k in m}
        n = [int(x) for x in self.delivered]
        out["local_batch"] = {"min": min(n) if n else 0, "max": max(n) if n else 0,
                              "mean": float(np.mean(n)) if n else 0.0, "steps": len(n)}
        return out


@register
class SurrogateTrain(Strategy):
    name = "surrogatetrain"
    summary = ("SurrogateTrain/SOLAR: epochs reordered to reuse a per-rank buffer of C/W samples, buffered samples "
               "remapped to their holder, loads balanced over ranks, runs of ids read as one HDF5 hyperslab")
    semantics = SEMANTICS
    Options = SurrogateTrainOptions

    def plan(self, ctx: RunContext, options: SurrogateTrainOptions) -> Plan:
        c, src = buffer_samples(ctx, options)
        # runs of consecutive ids are one request only in one shared HDF5 file: elsewhere the plan says one
        # request per sample, as the executor reads them (the simulator costs what runs)
        layout = getattr(ctx.workload, "layout", None)
        chunking = options.chunking and layout in (None, "hdf5_shared")
        plan = surrogatetrain_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                                   epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, buffer_samples=c,
                                   reorder=options.reorder, remap=options.remap, balance=options.balance,
                                   chunking=chunking, eviction=options.eviction, **pipeline_of(options))
        plan.meta["buffer_source"] = src
        plan.meta["semantics"] = SEMANTICS.as_dict()
        if options.chunking and not chunking:
            plan.meta["warning"] = (f"--chunking: layout {layout} is not one shared HDF5 file; runs of consecutive "
                                    f"ids are read one sample per request")
        check_cache_capacity(ctx, plan, options, f"surrogatetrain's buffer ({c:,} samples per rank, {src})",
                             slots=True)
        return plan

    def executor(self, ctx: RunContext, plan: Plan, options: SurrogateTrainOptions) -> Executor:
        return planned_executor(ctx, plan, options, min_samples=1, executor=SurrogateTrainExecutor,
                                slots=True)
