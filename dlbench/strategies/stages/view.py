"""``EpochView``: one rank's epoch of a plan as flat arrays (what every stage reads per step)."""

from __future__ import annotations

import numpy as np

from ...plan import PEER, SHARED


class EpochView:
    """One rank's epoch of a plan as flat arrays: ids, sources, peers, keeps, step bounds, step of each
    access, and the accesses the loader reads (everything but PEER)."""

    def __init__(self, plan, e: int, rank: int, *, runs: bool = False):
        ep = plan.epoch(e)
        self.epoch = e
        self.ids = ep.rank_samples(rank)
        self.src = ep.rank_sources(rank)
        self.peer = ep.rank_peers(rank)
        self.keep = ep.rank_keep(rank)
        self.bounds = ep.bounds[rank]
        self.steps = len(self.bounds) - 1
        n = len(self.ids)
        self.step_of = np.searchsorted(self.bounds, np.arange(n), side="right") - 1
        # run_len[c]: columns the request starting at c covers (the plan's ``chunk``, when the reader reads
        # runs: ``runs``); 0 for columns an earlier request covers; 1 everywhere without runs
        if runs and ep.chunk is not None:
            self.run_len = np.where(self.src == SHARED, ep.rank_chunk(rank), 1).astype(np.int64)
        else:
            self.run_len = np.ones(n, np.int64)
        self.local = np.nonzero((self.src != PEER) & (self.run_len > 0))[0]    # requests the loader makes
        self.need = (np.bincount(self.step_of[self.local], weights=self.run_len[self.local],
                                 minlength=self.steps).astype(np.int64) if n else np.zeros(self.steps, int))
        ev = ep.evictions
        if ev is not None and len(ev):
            m = ev.rank == rank
            self.evict_step, self.evict_ids = ev.step[m], ev.sample[m]
        else:
            self.evict_step = self.evict_ids = np.zeros(0, np.int64)
        self.plan_epoch = ep
        # (ids, src, run_len, local, local's bounds per step) as lists: Loader.fill
        self.lists: tuple[list, list, list, list, list] | None = None


__all__ = ["EpochView"]
