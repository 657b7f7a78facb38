"""What staging, local and pls share: options, capacity checks, the planned executor they run on
(``copies_executor``: one own tier holding the plan's local copies). The node-local directories of those copies
and their clean-up on every exit path (owner and stop markers, the node's guardian process, stale directories)
are ``dlbench.storage.localtier``'s.

Storage. ``tier=local``: files under ``--local-dir``/run-<tag>/node<k>/ (staging: one copy per node, shared
by the node's ranks) or node<k>/rank<r>/ (local, pls: a rank's shard). ``tier=memory``: a page-aligned slab
in the rank's process (every rank its own copy). A ``SampleStore`` counts references per sample id, so a
sample that sits twice in one shard (DistributedSampler's padding, or received while still held) is stored
once and removed with its last reference.

Recording (``stages.stager.Stager``, ``stages.exchange.Exchange``, ``stages.loader.Loader``). Prologue (epoch −1): one ``read`` per
sample from the shared tier (tier SHARED), ``exchange`` intervals of the plan's peer rows between nodes (tier
PEER, bytes received), and one ``stage`` interval over the whole prologue (bytes written); ``mark_epoch(-1,
...)``. Epochs: one ``read`` per sample from the store (tier LOCAL or MEMORY) and, for a format with a decode
step (``Format.decoder``), a ``decode``; pls adds ``exchange`` intervals for posting and completing each step's transfers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..errors import CapacityError, RunError
from ..plan import LOCAL, MEMORY, Pipeline, Plan
from ..storage import PAGE
from ..units import format_bytes
from .base import Executor, PlanContext, RunContext

TIER_CODES = {"local": LOCAL, "memory": MEMORY}


@dataclass(frozen=True, kw_only=True)
class LocalCopyOptions:
    tier: str = opt("local", help="where the local copies live: local (files under --local-dir, per node) or "
                                  "memory (in each rank's process)", choices=("local", "memory"))
    local_capacity: float = opt(0.0, help="node-local capacity per node for the copies (0: the system "
                                          "profile's local or memory tiers)", unit="B", min=0)
    drop_last: bool = opt(False, help="drop the permutation's tail instead of padding it to a multiple of the "
                                      "ranks (DistributedSampler drop_last)")
    loader_threads: int = opt(0, help="loader threads per rank reading the local copies ahead in access order (0: "
                                      "the trainer reads each step itself, synchronously)", min=0, max=64)
    window: int = opt(2, help="steps the loader threads read ahead", min=0, max=1024)


def pipeline_for(threads: int, window: int) -> Pipeline:
    """The loader the executor runs and ``dlbench simulate`` costs (``Pipeline.reader_threads``): ``threads``
    loader threads per rank reading up to ``window`` steps ahead, or 0: the trainer reads synchronously. The
    one rule (``cache.pipeline_of`` for options, ``set_pipeline`` for built plans); the executors take the
    loader from the plan only."""
    t = int(threads)
    return Pipeline("prefetch" if t > 0 else "sync", t if t > 0 else 1, max(0, int(window)))


def set_pipeline(plan: Plan, threads: int, window: int) -> Plan:
    """``plan`` (a copy) with the loader ``pipeline_for(threads, window)``."""
    return plan.replace(pipeline=pipeline_for(threads, window))


def copies_pipeline(plan: Plan, options) -> Plan:
    """staging, local, pls: ``options``' loader threads on ``plan``, reading ``options.window`` steps ahead
    (none inline: the trainer reads each step into one batch buffer, no read-ahead ring)."""
    t = int(options.loader_threads)
    return set_pipeline(plan, t, options.window if t else 0)


def groups_of(ctx: PlanContext | RunContext, tier: str) -> np.ndarray:
    """Storage group of every rank: its node for a node-local directory, itself for process memory."""
    return np.asarray(ctx.node_map, dtype=np.int64) if tier == "local" else np.arange(ctx.world_size)


def capacity_per_group(ctx: PlanContext | RunContext, options) -> tuple[float, str]:
    """(bytes a storage group may hold, where that figure comes from)."""
    if options.local_capacity:
        return float(options.local_capacity), "--local-capacity"
    prof = ctx.system
    name = getattr(prof, "name", "?")
    if options.tier == "local":
        cap = prof.tier_capacity_bytes("local") if prof is not None else None
        return (float("inf"), "unbounded") if cap is None else (cap, f"system profile {name}'s local tier")
    cap = ctx.memory_budget_bytes
    if cap is None:
        return float("inf"), "unbounded"
    ranks_on_node = int(np.sum(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank])) or 1
    return cap / ranks_on_node, f"system profile {name}'s memory tier / {ranks_on_node} ranks on the node"


def capacity_sizes(ctx: PlanContext | RunContext, tier: str) -> np.ndarray:
    """Bytes a sample takes in the tier: its size on disk (local), a page-aligned slot of the largest row
    (memory: MemoryTier's slots)."""
    sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (ctx.n_samples,))
    if tier == "memory":
        stride = -(-max(int(sizes.max()) if len(sizes) else 1, 1) // PAGE) * PAGE
        return np.full(ctx.n_samples, stride, dtype=np.int64)
    return sizes


def fmt_bytes(n: float) -> str:
    return format_bytes(n, exact=True, group=True)


def check_capacity(need_per_group: np.ndarray, cap: float, src: str, what: str) -> None:
    worst = float(np.max(need_per_group)) if len(need_per_group) else 0.0
    if worst > cap:
        raise CapacityError(f"{src}: too small: {what} needs {fmt_bytes(worst)} per node, {fmt_bytes(cap)} "
                            f"available; pass --local-capacity BYTES, use more nodes, or choose another strategy")


def copies_executor(ctx: RunContext, plan: Plan, options, need_bytes: int, *, shared_local: bool) -> Executor:
    """The planned executor for a plan of local copies (staging, local, pls): one own tier of ``options.tier``
    sized for ``need_bytes`` (in ``capacity_sizes`` units: page-aligned slots for memory), shared by the node's
    ranks (``shared_local``: staging's node-local directory) or the rank's own; the loader is the plan's
    (``copies_pipeline``)."""
    from .planned import PlannedExecutor

    code = TIER_CODES[options.tier]
    need = max(int(need_bytes), 1)
    if options.tier == "memory":
        sizes = capacity_sizes(ctx, "memory")
        stride = int(sizes[0]) if len(sizes) else PAGE
        slots = max(1, -(-need // stride))
        cap, src = capacity_per_group(ctx, options)
        if slots * stride > cap:
            raise CapacityError(f"{src}: too small: {slots} samples in page-aligned slots need "
                                f"{fmt_bytes(slots * stride)} in rank {ctx.rank}'s memory, {fmt_bytes(cap)} "
                                f"available; pass --local-capacity BYTES or use --tier local")
        need = slots * stride
    return PlannedExecutor(ctx, plan, capacity_bytes={code: need}, capacity_flag="--local-capacity",
                           shared_local=shared_local and options.tier == "local")


def check_delivery_order(plan: Plan) -> None:
    """Invariant of moving transfers (pls): a sample is sent no earlier than the step in which its sender
    trains on it (the sender deletes it when the exchange completes)."""
    K = int(plan.n_samples) + 1
    for ep in plan:
        t = ep.transfers
        if t is None or not t.move or not len(t):
            continue
        steps = ep.step_of_columns()
        # every rank's trained columns by (rank, sample id), one sort for all ranks: a sent sample's first
        # column in its sender's row (the lowest, as a stable sort of the row gives)
        n = ep.sample_ids.shape[1]
        r_idx, c_idx = np.nonzero(np.arange(n)[None, :] < ep.bounds[:, -1:])
        key = r_idx * K + (ep.sample_ids[r_idx, c_idx] + 1)
        order = np.argsort(key, kind="stable")
        ks = key[order]
        q = t.src * K + (t.sample + 1)
        i = np.minimum(np.searchsorted(ks, q), len(ks) - 1)
        hit = order[i]
        bad = (ks[i] != q) | (t.step < steps[r_idx[hit], c_idx[hit]])
        if bad.any():
            r = int(t.src[bad].min())
            raise RunError(f"{plan.strategy} plan: rank {r} epoch {ep.epoch} sends a sample before training on it")
