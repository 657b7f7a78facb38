"""pls: partial local shuffling (docs/STRATEGIES.md). As ``local``, plus: every epoch each rank marks the first
Q·F/W samples of its freshly shuffled shard for exchange; they travel to peers in per-step chunks with
non-blocking MPI (Isend/Irecv of the sample bytes posted at step start, completed at step end, so the
transfer overlaps the step's compute), the peer of each chunk chosen by a seeded cyclic shift so every
shard keeps its size. When a chunk's exchange completes, its sent samples are deleted from local storage
and the received ones stored; they belong to the shard from the next epoch on. Local storage ≤ (1+Q)·F/W.

Transfer: one MPI message per sample, no packing. Memory tier: sent straight from the tier's slots and
received straight into slots reserved for the incoming samples (a sample held already is received into a
scratch row and only counted). Local tier: the files are read into preallocated page-aligned rows and sent
from there; received into page-aligned rows and written as files when the exchange completes.

Recorded: ``exchange`` intervals (tier PEER) for posting a step's exchange (reserving slots or reading the
files to send, posting Isend/Irecv) and completing it (waiting, storing what came in, deleting what went;
bytes received). ``stats()['exchange']`` has bytes sent/received, ``messages`` (exchanges, one per step
with a chunk) and the time spent waiting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import opt
from ..errors import ConfigError, RunError
from ..plan import PEER, Plan
from ..plan.shuffles import pls_plan
from ..storage import PAGE, aligned_rows
from ..storage.tiers import MemoryTier
from ..timeline import PHASE_ID
from . import register
from .base import Executor, RunContext, Semantics, Strategy
from .local import ShardExecutor, shard_capacity_check
from .localcopy import TIER_CODES, LocalCopyOptions, check_delivery_order, set_pipeline

PLS = Semantics("yes (globally)", "no", "per-rank subsets mix slowly")


@dataclass(frozen=True, kw_only=True)
class PlsOptions(LocalCopyOptions):
    exchange_fraction: float = opt(0.1, help="Q: fraction of each rank's shard exchanged with peers per epoch "
                                             "(0 = local shuffling, 1 approaches a global shuffle)", min=0, max=1)


class PlsExecutor(ShardExecutor):
    TAG = 23

    def __init__(self, ctx, plan, options):
        super().__init__(ctx, plan, options, private=True)
        self.xbytes_sent = self.xbytes_recv = self.xmsgs = 0
        self.wait_s = 0.0
        self._pending = None
        self._ep = None
        # the most samples anyone sends or receives in a step: one page-aligned row each, preallocated and
        # faulted in once (fresh memory costs ~1 GB/s on first touch; a file read into a row that is not
        # page-aligned runs 4-5x slower: docs/LIMITS.md)
        worst = 1
        for ep in plan:
            t = ep.transfers
            if t is not None and len(t):
                worst = max(worst, int(np.unique(t.step[t.src == 0], return_counts=True)[1].max()))
        row = max(int(np.max(self.sizes)) if len(self.sizes) else 1, 1)
        self.sendrows = aligned_rows(worst, row)
        self.recvrows = aligned_rows(worst, row)
        self.sendrows[:, ::PAGE] = 0
        self.recvrows[:, ::PAGE] = 0

    def _epoch_rows(self, e: int):
        """This rank's send and receive rows of epoch e's transfers, with their steps (cached per epoch)."""
        if self._ep is None or self._ep[0] != e:
            t = self.plan.epoch(e).transfers
            if t is None or not len(t):
                self._ep = (e, None)
            else:
                me = self.ctx.rank
                snd, rcv = t.sends(me), t.recvs(me)
                self._ep = (e, (t, snd, t.step[snd], rcv, t.step[rcv]))
        return self._ep[1]

    def _before_step(self, e: int, s: int) -> None:
        rows = self._epoch_rows(e)
        if rows is None:
            return
        t, snd, snd_step, rcv, rcv_step = rows
        a, b = np.searchsorted(snd_step, s, side="left"), np.searchsorted(snd_step, s, side="right")
        c, d = np.searchsorted(rcv_step, s, side="left"), np.searchsorted(rcv_step, s, side="right")
        if a == b and c == d:
            return
        ctx, comm = self.ctx, self.ctx.comm
        clock = ctx.clock
        t0 = clock()
        send_ids = t.sample[snd[a:b]].tolist()
        recv_ids = t.sample[rcv[c:d]].tolist()
        if len({int(x) for x in t.dst[snd[a:b]]}) > 1 or len({int(x) for x in t.src[rcv[c:d]]}) > 1:
            raise RunError(f"pls plan: epoch {e} step {s}: a rank exchanges with more than one peer in a step")
        dest = int(t.dst[snd[a]]) if b > a else -1
        src = int(t.src[rcv[c]]) if d > c else -1
        sizes = self.sizes
        store = self.store
        tier = store.tier
        # one message per sample (MPI keeps their order): sent straight from the memory tier's slots, or
        # read from the local tier's files into page-aligned rows; received straight into memory-tier slots
        # reserved for the incoming samples, or into page-aligned rows stored when the exchange completes
        direct, scratch, rparts = [], [], []
        memory = isinstance(tier, MemoryTier)
        for j, sid in enumerate(recv_ids):
            n = int(sizes[sid])
            if memory and sid not in store.refs and sid not in direct:
                rparts.append(tier.reserve(sid, n))
                direct.append(sid)
            else:   # local tier, or held already (the bytes go to scratch, only the reference counts)
                rparts.append(self.recvrows[j, :n])
                scratch.append((sid, j, n))
        rreq = comm.irecv_parts(rparts, src, tag=self.TAG) if rparts else None
        if memory:
            sparts = [tier.view(sid) for sid in send_ids]
            nsent = sum(int(p.nbytes) for p in sparts)
            c = tier.counters
            c.reads += len(sparts)
            c.read_bytes += nsent
        else:
            sparts, rows = [], self.sendrows
            for j, sid in enumerate(send_ids):
                sparts.append(rows[j, :tier.read_into(sid, rows[j])])
            nsent = sum(int(p.nbytes) for p in sparts)
        sreq = comm.isend_parts(sparts, dest, tag=self.TAG) if sparts else None
        nrecv = sum(int(p.nbytes) for p in rparts)
        self._pending = (rreq, sreq, send_ids, direct, scratch, nsent, nrecv)
        ctx.timeline.add(PHASE_ID["exchange"], t0, clock(), e, s, 0, PEER)

    def _after_step(self, e: int, s: int) -> None:
        if self._pending is None:
            return
        rreq, sreq, send_ids, direct, scratch, nsent, nrecv = self._pending
        self._pending = None
        clock = self.ctx.clock
        t0 = clock()
        if rreq is not None:
            rreq.wait()
        if sreq is not None:
            sreq.wait()
        t1 = clock()
        store = self.store
        for sid in direct:
            store.adopt(sid)
        if scratch:
            rows = self.recvrows
            store.put_many([(sid, rows[j, :n]) for sid, j, n in scratch])
        for sid in send_ids:
            store.release(sid)
        self.ctx.timeline.add(PHASE_ID["exchange"], t0, clock(), e, s, nrecv, PEER)
        self.wait_s += (t1 - t0) * 1e-9
        self.xbytes_sent += nsent
        self.xbytes_recv += nrecv
        self.xmsgs += 1

    def stats(self) -> dict:
        out = super().stats()
        out["exchange"] = {"bytes_sent": self.xbytes_sent, "bytes_received": self.xbytes_recv,
                           "messages": self.xmsgs, "wait_s": self.wait_s,
                           "q": float(self.options.exchange_fraction),
                           "samples_per_epoch": int(self.plan.meta.get("exchange_per_epoch_samples", 0))}
        peer = out["tiers"]["peer"]
        peer["messages"] += self.xmsgs
        peer["bytes"] += self.xbytes_recv
        peer["bytes_sent"] += self.xbytes_sent
        return out


@register
class Pls(Strategy):
    name = "pls"
    summary = ("partial local shuffling: local shards plus a fraction Q exchanged with peers every epoch "
               "(non-blocking MPI overlapping compute)")
    semantics = PLS
    Options = PlsOptions

    def plan(self, ctx: RunContext, options: PlsOptions) -> Plan:
        q = options.exchange_fraction
        if not 0.0 <= q <= 1.0:
            raise ConfigError(f"--exchange-fraction={q}: must be from 0 to 1")
        plan = pls_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                        epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, q=q,
                        drop_last=options.drop_last, tier=TIER_CODES[options.tier])
        check_delivery_order(plan)
        shard_capacity_check(ctx, plan, options, f"pls (the node's shards of (1+Q)·F/W samples, Q={q})")
        return set_pipeline(plan, options.loader_threads)

    def executor(self, ctx: RunContext, plan: Plan, options: PlsOptions) -> Executor:
        return PlsExecutor(ctx, plan, options)
