"""naive: every step each rank reads its local batch of π_e from the shared tier, one request per
sample, synchronously, then computes. No prefetch, no cache across epochs. Exact global shuffle
(DistributedSampler order). Carried out by the ``PlannedExecutor`` inline (``sync_read_epoch`` below is
the bare per-sample loop the local-copy strategies still use)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..config import opt
from ..data.registry import get_format
from ..plan import SHARED, Plan, global_shuffle_plan
from ..plan.semantics import Semantics, no, yes
from ..timeline import PHASE_ID
from . import register
from .base import Batch, Executor, PlanContext, RunContext, Strategy

GLOBAL_SHUFFLE = Semantics(yes(), yes(), no())


@dataclass(frozen=True, kw_only=True)
class NaiveOptions:
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")


def shared_tier_plan(name: str, ctx: PlanContext, drop_last: bool, meta: dict | None = None,
                     streams: int = 1, drop_last_batch: bool = False) -> Plan:
    """The DistributedSampler order with every sample read from the shared tier every epoch; a format module
    with a ``shared_read_plan`` picks its own (tfrecord read as ``tf.data`` does: the tf.data order of
    ``streams`` loader streams, ``dlbench.plan.tfdata``). ``drop_last_batch``: every rank's last partial batch
    is not read."""
    wl = ctx.workload   # None where a plan is built without a dataset (the simulator's and planners' contexts)

    def sampler_order(meta: dict | None) -> Plan:
        return global_shuffle_plan(strategy=name, n_samples=ctx.n_samples, world_size=ctx.world_size,
                                   node_map=ctx.node_map, epochs=ctx.epochs, local_batch=ctx.local_batch,
                                   seed=ctx.seed, drop_last=drop_last, drop_last_batch=drop_last_batch, tier=SHARED,
                                   meta=meta)

    layout = wl.layout if wl is not None else None
    if layout is None:
        return sampler_order(meta)
    # a format with a read order of its own (tfrecord: tf.data's, or the sampler's, indexed); default: the sampler's
    return get_format(layout).driver().shared_read_plan(name, ctx, meta=meta, streams=streams,
                                                        drop_last_batch=drop_last_batch, sampler_order=sampler_order)


def sync_read_epoch(ctx: RunContext, plan: Plan, e: int, rows, read_into, tier: int, *, raw=None, decode=None,
                    before_step=None, after_step=None) -> Iterator[Batch]:
    """Yield epoch ``e``'s batches for ``ctx.rank``: each step's samples read one by one with
    ``read_into`` into the reused ``rows`` (JPEGs: into ``raw``, then ``decode`` into the row), one
    ``read`` (and ``decode``) interval per sample tagged with ``tier``. The per-sample loop is the hot path:
    locals only, no allocation."""
    ep = plan.epoch(e)
    ids_all = ep.rank_samples(ctx.rank)
    bounds = ep.bounds[ctx.rank].tolist()
    assert ctx.timeline is not None
    add, clock = ctx.timeline.add, ctx.clock
    READ, DECODE = PHASE_ID["read"], PHASE_ID["decode"]
    for s in range(len(bounds) - 1):
        if before_step is not None:
            before_step(e, s)
        ids = ids_all[bounds[s]:bounds[s + 1]]
        if decode is not None:
            for j, i in enumerate(ids.tolist()):
                t0 = clock()
                n = read_into(i, raw)
                t1 = clock()
                decode(raw, n, rows[j])
                t2 = clock()
                add(READ, t0, t1, e, s, n, tier)
                add(DECODE, t1, t2, e, s, 0, tier)
        else:
            for j, i in enumerate(ids.tolist()):
                t0 = clock()
                n = read_into(i, rows[j])
                add(READ, t0, clock(), e, s, n, tier)
        yield Batch(rows, ids, len(ids))
        if after_step is not None:
            after_step(e, s)


@register
class Naive(Strategy):
    name = "naive"
    display = "Naive"
    summary = "synchronous per-sample reads from the shared tier every step; no prefetch, no cache"
    semantics = GLOBAL_SHUFFLE
    Options = NaiveOptions

    def plan(self, ctx: PlanContext, options: NaiveOptions) -> Plan:
        return shared_tier_plan(self.name, ctx, options.drop_last)

    def executor(self, ctx: RunContext, plan: Plan, options: NaiveOptions) -> Executor:
        # the one executor of planned strategies, inline: the trainer reads each step's samples itself,
        # one request per sample, with no own tier, no read-ahead and no fill thread
        from .planned import PlannedExecutor

        return PlannedExecutor(ctx, plan, capacity_bytes={}, fill_thread=False)
