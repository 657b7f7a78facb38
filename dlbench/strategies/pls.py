"""pls: partial local shuffling (docs/STRATEGIES.md). As ``local``, plus: every epoch each rank marks the first
Q·F/W samples of its freshly shuffled shard for exchange; they travel to peers in per-step chunks with
non-blocking MPI (Isend/Irecv of the sample bytes posted at step start, completed at step end, so the
transfer overlaps the step's compute), the peer of each chunk chosen by a seeded cyclic shift so every
shard keeps its size. When a chunk's exchange completes, its sent samples are deleted from local storage
and the received ones stored; they belong to the shard from the next epoch on. Local storage ≤ (1+Q)·F/W.

Executed by the planned executor: the exchange is the plan's ``EpochPlan.transfers`` (``move``), carried out by
the transfer stage ``stages.exchange.Exchange``: one MPI message per (step, sender, receiver) gathered from / scattered
into the samples' places. Memory tier: sent straight from the tier's slots and received straight into slots
reserved for the incoming samples (a sample held already is received into a scratch row and only counted).
Local tier: the files are read into page-aligned rows and sent from there; received into page-aligned rows
and written as files when the exchange completes.

Recorded: ``exchange`` intervals (tier PEER) for posting a step's exchange (reserving slots or reading the
files to send, posting Isend/Irecv) and completing it (waiting, storing what came in, deleting what went;
bytes received, counted under ``bytes_by_tier``'s peer). ``stats()['exchange']`` has bytes sent/received,
``messages`` (exchanges, one per step with a chunk) and the time spent waiting."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import opt
from ..errors import ConfigError
from ..plan import Plan
from ..plan.semantics import Answer, Clause, Semantics, no, yes
from ..plan.shuffles import pls_plan
from . import register
from .base import Executor, PlanContext, RunContext, Strategy
from .local import shard_capacity_check, shard_executor
from .localcopy import TIER_CODES, LocalCopyOptions, check_delivery_order, copies_pipeline

PLS = Semantics(yes("globally"), no(), Clause(Answer.YES, "per-rank subsets mix slowly"))


@dataclass(frozen=True, kw_only=True)
class PlsOptions(LocalCopyOptions):
    exchange_fraction: float = opt(0.1, help="Q: fraction of each rank's shard exchanged with peers per epoch "
                                             "(0 = local shuffling, 1 approaches a global shuffle)", min=0, max=1)


@register
class Pls(Strategy):
    name = "pls"
    display = "Partial local shuffling"
    summary = ("partial local shuffling: local shards plus a fraction Q exchanged with peers every epoch "
               "(non-blocking MPI overlapping compute)")
    semantics = PLS
    Options = PlsOptions
    shorthands = {"pls_q": "exchange_fraction"}

    def run_label(self, options: dict) -> str:
        return f"pls Q={options.get('exchange_fraction')}"

    def plan(self, ctx: PlanContext, options: PlsOptions) -> Plan:
        q = options.exchange_fraction
        if not 0.0 <= q <= 1.0:
            raise ConfigError(f"--exchange-fraction={q}: must be from 0 to 1")
        plan = pls_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                        epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, q=q,
                        drop_last=options.drop_last, tier=TIER_CODES[options.tier])
        check_delivery_order(plan)
        plan = shard_capacity_check(ctx, plan, options, f"pls (the node's shards of (1+Q)·F/W samples, Q={q})")
        return copies_pipeline(plan, options)

    def executor(self, ctx: RunContext, plan: Plan, options: PlsOptions) -> Executor:
        return shard_executor(ctx, plan, options)
