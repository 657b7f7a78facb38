"""Invariants every plan must keep, checked from the plan alone (pure; for tests, ``--dry-run`` and
planners' own asserts). Each raises ``PlanError`` naming the rank, epoch, step and sample.

- ``check_possession``: the possession rule of ``plan.py``: an own-tier access, a peer's send for a PEER
  access, and a background transfer each need the holder to hold the sample at the start of the step
  (from the prologue, a keep or a received transfer at an earlier step or epoch, and not evicted since;
  a prologue with ``groups`` fills one store per group, shared by its ranks);
  within a step: deliveries, then keeps, then transfers landing (moved samples leave the sender), then
  evictions.
- ``check_epoch_cover``: where a strategy promises a full permutation each epoch, every sample is
  consumed at least once (exactly once apart from DistributedSampler's padding).
"""

from __future__ import annotations

import numpy as np

from ..errors import DlbenchError
from ..storage.tiers import TIER_NAMES
from .plan import LOCAL, MEMORY, NO_TIER, PEER, Plan


class PlanError(DlbenchError):
    """A plan breaks one of its invariants (a planner bug)."""

    exit_code = 5


def _holdings_from_prologue(plan: Plan) -> list[dict[int, int]]:
    """What every rank holds after the prologue: its reads of the shared tier, then the peer rows (each
    sender must hold what it sends once the reads are stored); a storage group's ranks share one store."""
    W = plan.world_size
    held: list[dict[int, int]] = [dict() for _ in range(W)]
    pro = plan.prologue
    groups = np.asarray(pro.groups) if pro.groups is not None else None

    def share() -> None:   # one store per storage group (staging's node-local copies)
        if groups is None:
            return
        for g in np.unique(groups):
            members = np.nonzero(groups == g)[0].tolist()
            merged: dict[int, int] = {}
            for r in members:
                merged.update(held[r])
            for r in members:
                held[r] = dict(merged)

    moved = pro.src == PEER
    for r, sid, dst in zip(pro.rank[~moved].tolist(), pro.sample[~moved].tolist(), pro.dst[~moved].tolist()):
        if dst in (LOCAL, MEMORY):
            held[r][sid] = dst
    share()
    if moved.any():
        before = [dict(h) for h in held]
        for r, sid, dst, p in zip(pro.rank[moved].tolist(), pro.sample[moved].tolist(), pro.dst[moved].tolist(),
                                  pro.peer[moved].tolist()):
            if not 0 <= p < W or p == r or sid not in before[p]:
                raise PlanError(f"plan of {plan.strategy}: prologue: rank {p} sends sample {sid} to rank {r} "
                                f"but does not hold it after its reads")
            if dst in (LOCAL, MEMORY):
                held[r][sid] = dst
        share()
    return held


def check_possession(plan: Plan) -> None:
    """Raise PlanError at the first access, send or transfer whose holder does not hold the sample."""
    W = plan.world_size
    held = _holdings_from_prologue(plan)
    for ep in plan:
        e = ep.epoch
        steps_of = ep.step_of_columns()
        keep = ep.keep
        tr, ev = ep.transfers, ep.evictions
        for s in range(ep.steps):
            snapshot = [dict(h) for h in held]
            for r in range(W):
                b0, b1 = ep.bounds[r, s], ep.bounds[r, s + 1]
                for c in range(b0, b1):
                    sid, src = int(ep.sample_ids[r, c]), int(ep.source[r, c])
                    if src in (LOCAL, MEMORY):
                        if snapshot[r].get(sid) != src:
                            raise PlanError(f"plan of {plan.strategy}: rank {r} epoch {e} step {s} reads sample {sid} "
                                            f"from its {TIER_NAMES[src]} tier, which does not hold it")
                    elif src == PEER:
                        p = int(ep.peer[r, c]) if ep.peer is not None else -1
                        if p < 0 or p >= W or p == r:
                            raise PlanError(f"plan of {plan.strategy}: rank {r} epoch {e} step {s} reads sample {sid} "
                                            f"from peer {p}: not another rank")
                        if sid not in snapshot[p]:
                            raise PlanError(f"plan of {plan.strategy}: rank {r} epoch {e} step {s} reads sample {sid} "
                                            f"from rank {p}, which does not hold it then")
            if tr is not None:
                for i in np.nonzero(tr.step == s)[0].tolist():
                    if int(tr.sample[i]) not in snapshot[int(tr.src[i])]:
                        raise PlanError(f"plan of {plan.strategy}: epoch {e} step {s}: rank {int(tr.src[i])} sends "
                                        f"sample {int(tr.sample[i])} it does not hold")
            if keep is not None:
                rr, cc = np.nonzero((keep != NO_TIER) & (steps_of == s))
                for r, c in zip(rr.tolist(), cc.tolist()):
                    held[r][int(ep.sample_ids[r, c])] = int(keep[r, c])
            if tr is not None:
                for i in np.nonzero(tr.step == s)[0].tolist():
                    sid = int(tr.sample[i])
                    if tr.move:
                        held[int(tr.src[i])].pop(sid, None)
                    held[int(tr.dst[i])][sid] = int(tr.tier)
            if ev is not None:
                for i in np.nonzero(ev.step == s)[0].tolist():
                    r, sid = int(ev.rank[i]), int(ev.sample[i])
                    if sid not in held[r]:
                        raise PlanError(f"plan of {plan.strategy}: rank {r} epoch {e} step {s} evicts sample {sid} "
                                        f"it does not hold")
                    del held[r][sid]


def check_epoch_cover(plan: Plan) -> None:
    """Every epoch consumes every sample at least once (full permutation, padding aside)."""
    for ep in plan:
        ids = ep.sample_ids[ep.sample_ids >= 0]
        missing = np.setdiff1d(np.arange(plan.n_samples), ids)
        if len(missing):
            raise PlanError(f"plan of {plan.strategy}: epoch {ep.epoch} never consumes samples "
                            f"{missing[:8].tolist()} ({len(missing)} in all)")


__all__ = ["PlanError", "check_possession", "check_epoch_cover"]
