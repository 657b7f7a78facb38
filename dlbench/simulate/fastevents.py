"""The thesis-rules costing (``rules: thesis``, γ by the thesis-window rule): ``cost_events``, the one engine,
for any world size, and the model options that mark a plan for it (``trainer_reads_shared``,
``cache_on_local_tier``). It keeps the event order and arithmetic of the reference loop
(tests/oracle/thesis_events.py, at most 256 ranks: tests/unit/test_simulate_fastevents.py holds the engine to it,
every number within 1e-9 relative; its module doc states the rules) without the reference's costs that grow
with the world. The modules:

- ``events_reads``: the per-access cost, once: the rates (``Setup``), the per-read state and cost (``Reads``:
  each node's latest logged PFS-read start; γ = 1 + the other nodes whose logged start is at or after t by one
  bisection in their sorted list, the node's own entry replaced after its rank has scheduled, so every
  comparison is the reference's comparison of the same two floats; a cache fill at γ = nodes, ``gamma:
  nodes``, a fixed-rate own-tier or peer read), the same rule vectorised for what does not depend on time
  (``static_costs``), pls's exchange per step, the result tuple;
- ``events_window``: the epochs as the loops read them, loaded as the loops reach them (a loader thread reads
  ahead across epochs up to the staging buffer) and dropped once consumed; the fast loops' form costs what does
  not depend on time with NumPy at load (access kinds, fixed-rate costs, per-rank sums of compute, samples,
  bytes and fixed fetch time) and holds the staging buffer's byte prefix sums as integers: the reference's
  float sums of whole-byte sizes below 2**53 are exact, so every rank's admissions come from one
  ``searchsorted`` per step (``PlainWindow.admit``);
- ``events_plain``: the fast loops (no tier fills, no trainer's own reads, no background transfers, whole-byte
  sizes: naive, prefetch, staging, ...): the start-time chains and γ per access, the window rule inlined; a
  loader thread's start only grows, so γ is kept until its start passes the next logged start; cut to
  window-rule PFS reads while every loaded access is one; consumption vectorised across ranks from
  ``VEC_MIN_RANKS`` ranks;
- ``events_generic``: the rest by the reference's loop with γ by bisection, each access by ``Reads.fetch``:
  loader threads with tier fills by the tiers' threads (``fill_by_tier_threads``), the trainer's own PFS reads
  (``shared_reads_in_trainer``), background transfers under prefetch or sizes with fractions of a byte; pls
  (ondemand, background transfers) with its steps without a PFS read as running sums for every rank at once.

The reference's scheduling order is sequential across ranks within a step (a rank's γ depends on the reads the
ranks before it scheduled), so each access is still a few Python operations (0.3-0.45 µs here): the cost is
linear in the accesses (steps x ranks x local batch), not in the node count per access. (A fixed-point iteration
over all ranks of a step at once was tried: exact at convergence, but at 1,024 nodes it needs tens to a hundred
rounds per step and is slower than this loop; so was stepping γ's index linearly along a chain: a γ change
crosses many logged starts.)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from ..plan import LOCAL, MEMORY, Plan
from . import events_generic, events_plain
from .events_reads import setup, whole_bytes


def cost_events(model, plan: Plan, sizes: np.ndarray, policy: str, threads_per_rank: float | None,
                t0: float, tier_fill: bool = False):
    """(epoch_times, compute, stall, barrier, fetch_s_by_tier, bytes_by_tier, samples, PFS requests per rank
    where counted) of ``plan`` under the thesis-window rule; ``t0``: when epoch 0 starts (after the prologue).
    ``tier_fill`` (prefetch only): the plan's cache fills are read ahead from the PFS by the node's tier threads
    (``fill_by_tier_threads``; the reference's module doc)."""
    tr0 = plan.epoch(0).transfers if plan.epochs else None
    st = setup(model, plan)
    trainer_shared = policy == "prefetch" and plan.shared_reads_in_trainer
    if (policy == "prefetch" and (tier_fill or trainer_shared)) or (tr0 is not None and len(tr0)) or \
            (policy != "ondemand" and not whole_bytes(sizes, st.cap, plan.local_batch)):
        # background transfers (pls), tier fills, the trainer's own reads, a buffer counted in fractional
        # bytes: the generic loops cost them
        if policy == "ondemand":      # only background transfers bring ondemand here
            return events_generic.cost_ondemand_exchange(model, plan, sizes, t0)
        return events_generic.cost_prefetch_generic(model, plan, sizes, threads_per_rank, t0,
                                                    tier_fill=tier_fill and policy == "prefetch",
                                                    trainer_shared=trainer_shared)
    return events_plain.cost_plain(model, plan, sizes, st, policy, threads_per_rank, t0)


def trainer_reads_shared(plan: Plan, model) -> Plan:
    """``plan`` marked for model option ``shared_reads_in_trainer`` (the ``events`` module doc): under the
    thesis-window costing its loader threads read ahead only what the plan serves from a tier or a peer, the
    trainer reads the PFS accesses itself, in series with compute (the HDMLP thesis' DeepIO)."""
    if model.rules.gamma != "thesis-window":
        raise ConfigError(f"model option shared_reads_in_trainer: needs rules.gamma=thesis-window (the event-driven "
                          f"costing), not {model.rules.gamma}")
    return plan.replace(shared_reads_in_trainer=True)


def cache_on_local_tier(plan: Plan, model) -> Plan:
    """``plan`` with its memory-tier holdings on the node-local tier instead (model option
    ``cache_on_local_tier``): every MEMORY source, keep and prologue destination becomes LOCAL, and the
    thesis-window costing reads a peer's holding at min(b_c, r_local) (``peer_tier``). The HDMLP thesis'
    Locality-aware policy caches on its SSD (``LocalityAwareDataLoadingPolicy._init_from_pfs``: tier 2)."""
    if model.rules.gamma != "thesis-window":
        raise ConfigError(f"model option cache_on_local_tier: needs rules.gamma=thesis-window (the event-driven "
                          f"costing), not {model.rules.gamma}")
    local = next((t for t in model.p.tiers if t.kind == "local"), None)
    if local is None:
        raise ConfigError(f"model option cache_on_local_tier: system profile {model.p.name} has no local tier")
    if plan.capacity.cache_peak_bytes is not None:     # the memory cache's bytes per rank, now on the node's local tier
        per_node = np.bincount(np.asarray(plan.node_map, dtype=np.int64),
                               weights=np.asarray(plan.capacity.cache_peak_bytes, dtype=np.float64),
                               minlength=plan.nodes)
        if per_node.max(initial=0.0) > local.capacity_bytes:
            raise ConfigError(f"model option cache_on_local_tier: plan {plan.strategy} caches "
                              f"{per_node.max():,.0f} bytes on a node; its local tier {local.name} holds "
                              f"{local.capacity_bytes:,.0f}")
    loc = np.uint8(LOCAL)

    def to_local(ep):
        return dataclasses.replace(ep, source=np.where(ep.source == MEMORY, loc, ep.source),
                                   keep=None if ep.keep is None else np.where(ep.keep == MEMORY, loc, ep.keep))

    pro = plan.prologue
    return plan.map_epochs(to_local).replace(prologue=dataclasses.replace(pro, dst=np.where(pro.dst == MEMORY, loc, pro.dst)),
                                             peer_tier=LOCAL)


__all__ = ["cost_events", "trainer_reads_shared", "cache_on_local_tier"]
