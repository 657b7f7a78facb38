"""The planned executor: carries out any plan whose accesses name their source (shared tier, an own tier,
or a peer), with cache fills (``keep``) and evictions, by gluing the stages of ``stages.py``. Every
strategy but prefetch is a planner plus this executor (naive, staging, local, pls, the cache family and
surrogatetrain).

Per epoch, for this rank: the loader reads step t's non-peer accesses into ring buffer t mod depth (inline,
or by loader threads up to depth − 1 steps ahead), the peer stage posts Irecvs into the same buffer for the
PEER accesses and Isends for the samples this rank serves; ``next()`` waits for both, yields the batch,
and on the following ``next()`` (after the trainer's compute) stores what the plan keeps (``stage``
interval: bytes written), drops what it evicts, and posts the sends that became possible. That work sits
inside the trainer's next ``next()`` call, so the runner counts it as stall: it is I/O the trainer waits
for.

Prologue (``stages.Stager``, epoch −1): the rank's rows reading the shared tier into an own tier (a preload,
staging's piece, a shard) and then the plan's sender → receiver rows (staging's distribution between nodes)
as non-blocking MPI; ``read`` per shared sample, ``exchange`` per round, one ``stage`` interval. With
``shared_local`` the local tier is one directory per node shared by its ranks (staging): what the node's other
ranks stored is held here too (``SampleStore.share``) and cleared by them.

Background transfers (``EpochPlan.transfers``: pls's exchange) are the transfer stage ``stages.Exchange``:
posted when a step starts, completed after the trainer's step.

Capacity: each own tier is sized by the strategy (``capacity_bytes`` per tier code, computed from the plan's
peak holdings; the cache family's memory tier is a byte arena of the plan's bytes for the rank); a tier that
overflows raises CapacityError naming the option to change.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RunError
from ..plan import LOCAL, MEMORY, NO_TIER, Plan
from ..storage import ArenaTier, LocalTier, MemoryTier
from ..storage.localtier import open_local_tier, peer_stop, remove_local_tier
from ..timeline import PHASE_ID, Timeline
from .base import Batch, Executor, RunContext
from .stages import EpochView, Exchange, Filler, Loader, PeerPush, Ring, SampleStore, Stager, Stores

if TYPE_CHECKING:
    from ..data.formats import SampleReader


def peak_holdings(plan: Plan, rank: int, sample_nbytes) -> dict[int, int]:
    """Peak bytes ``rank`` holds in each own tier over the plan (prologue, keeps, evictions), counting a
    sample once per tier. Pure; used by planners for capacity checks and by the executor to size tiers."""
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (plan.n_samples,))
    held: dict[int, dict[int, int]] = {MEMORY: {}, LOCAL: {}}
    cur = {MEMORY: 0, LOCAL: 0}
    peak = dict(cur)
    pro = plan.prologue
    for sid, dst in zip(pro.sample[pro.rank == rank].tolist(), pro.dst[pro.rank == rank].tolist()):
        if dst in held and sid not in held[dst]:
            held[dst][sid] = 1
            cur[dst] += int(sizes[sid])
    peak = dict(cur)
    for ep in plan:
        n = ep.bounds[rank, -1]
        keep = ep.rank_keep(rank)
        ids = ep.sample_ids[rank, :n]
        steps = np.searchsorted(ep.bounds[rank], np.arange(n), side="right") - 1
        ev = ep.evictions
        ev_rows = np.nonzero(ev.rank == rank)[0] if ev is not None and len(ev) else np.zeros(0, np.int64)
        kept = np.nonzero(keep != NO_TIER)[0]
        ki = ei = 0
        for s in range(ep.steps):
            while ki < len(kept) and steps[kept[ki]] == s:
                c = int(kept[ki])
                code, sid = int(keep[c]), int(ids[c])
                if sid not in held[code]:
                    held[code][sid] = 1
                    cur[code] += int(sizes[sid])
                ki += 1
            for code in cur:
                peak[code] = max(peak[code], cur[code])
            while ei < len(ev_rows) and ev.step[ev_rows[ei]] == s:
                sid = int(ev.sample[ev_rows[ei]])
                for code in held:
                    if held[code].pop(sid, None) is not None:
                        cur[code] -= int(sizes[sid])
                ei += 1
    return peak


class PlannedExecutor(Executor):
    """Executes ``plan`` for ``ctx.rank`` (module doc). ``capacity_bytes``: {tier code: bytes this rank's
    tier may hold}; the loader is the plan's: ``plan.pipeline.reader_threads()`` loader threads (0: inline,
    synchronous), ``plan.pipeline.window`` steps read ahead (ring depth = window + 1); ``arena``: the memory tier is a byte arena (``ArenaTier``: samples take their own
    bytes), else page-aligned slots of the largest row (``MemoryTier``)."""

    def __init__(self, ctx: RunContext, plan: Plan, *, capacity_bytes: dict[int, float],
                 capacity_flag: str = "--cache-capacity", fill_thread: bool = True,
                 arena: bool = False, shared_local: bool = False):
        self.ctx, self.plan = ctx, plan
        self.shared_local = bool(shared_local)   # one local store per node, shared by its ranks (staging)
        self.arena = bool(arena)
        self.threads, self.window = plan.pipeline.reader_threads(), plan.pipeline.window
        self.decode = ctx.workload.format.decoder(ctx.workload)   # the format's decode step, or None
        assert ctx.reader_factory is not None and ctx.timeline is not None, "a run's context: reader and timeline"
        reader = ctx.reader_factory()     # the loader's first reader (opened once: the counters see opens)
        self._reader: SampleReader | None = reader
        self.max_row = int(reader.max_row_nbytes)
        self.row_nbytes = self.max_row if self.decode is None else ctx.workload.decoded_nbytes
        self.capacity = dict(capacity_bytes)
        self.capacity_flag = capacity_flag
        self.root: Path | None = None
        self.stores = Stores({})
        rows = plan.max_step_samples or plan.local_batch
        self.ring = Ring(self.window + 1, rows, self.row_nbytes)
        # a decoding format: the stored bytes (what tiers hold and peers send) in a ring of their own, decoded
        # into ``ring``
        self.raw_ring = None if self.decode is None else Ring(self.window + 1, rows, self.max_row)
        self.loader: Loader | None = None
        self.peers: PeerPush | None = None
        self.stage_s = 0.0
        self.stage_bytes = 0
        self.done = False
        self.stale_removed: list[str] = []
        self.fill_thread = bool(fill_thread)
        self.filler: Filler | None = None
        self.stager: Stager | None = None
        self.exchange: Exchange | None = None
        self._barrier_passed = False
        self._gstep = 0

    # ---- set-up ------------------------------------------------------------------------------------
    def batch_memory(self, alloc) -> None:
        """Allocate the batch ring with ``alloc(rows, row_nbytes)`` (before ``start``): the torch compute on CUDA
        with ``--overlap on`` gives page-locked memory, so the loader reads each batch straight into pinned
        memory and the device copies it from there (no staging copy). The compute then holds each step's buffer
        (``Batch.hold``) until its copy completed; ``epoch`` reuses a buffer only after that (``Ring.settle``)."""
        if self.loader is not None:
            raise RunError("PlannedExecutor.batch_memory after start()")
        r = self.ring
        self.ring = Ring(r.depth, r.bufs[0].shape[0], r.bufs[0].shape[1], alloc=alloc)

    def _open_stores(self) -> None:
        ctx = self.ctx
        stores = {}
        tier: ArenaTier | MemoryTier | LocalTier
        for code, cap in self.capacity.items():
            if cap <= 0:
                continue
            if code == MEMORY:
                tier = (ArenaTier if self.arena else MemoryTier)(int(cap), self.max_row, flag=self.capacity_flag,
                                                                 io_counters=self._counters("memory"))
            elif code == LOCAL:   # collective: every rank opens it (strategies size it by the largest need)
                on_node = np.nonzero(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank])[0]
                node_ranks = 1 if self.shared_local else len(on_node)
                assert ctx.comm is not None, "a run's context: the comm"
                tier, self.root, self.stale_removed = open_local_tier(
                    ctx.comm, ctx.local_dir, node=int(ctx.node_map[ctx.rank]), rank=ctx.rank,
                    first_of_node=ctx.rank == int(on_node[0]), need_per_node=int(cap) * node_ranks, cap=int(cap),
                    private=not self.shared_local, direct=ctx.cache.local_direct, io_counters=ctx.io_counters)
            else:
                raise RunError(f"tier code {code}: not an own tier")
            stores[code] = SampleStore(tier, code)
        self.stores = Stores(stores)

    def plan_keeps_or_evicts(self) -> bool:
        """Do the plan's first epochs store or drop samples during training (else no fill thread; a later
        epoch's fills would then be stored by the trainer between steps)?"""
        for e in range(min(2, self.plan.epochs)):
            ep = self.plan.epoch(e)
            if (ep.keep is not None and (ep.keep != NO_TIER).any()) or (ep.evictions is not None and len(ep.evictions)):
                return True
        return False

    def _counters(self, cls: str):
        """Darshan-style counters of a tier (thread-safe: loader threads read it while the trainer fills)."""
        io = self.ctx.io_counters
        return io.new(cls, threadsafe=True) if io is not None else None

    def start(self) -> None:
        ctx, plan = self.ctx, self.plan
        self._open_stores()
        tl = ctx.timeline
        assert tl is not None
        self.loader = Loader(ctx, self.stores, self.ring, self.threads, self.raw_ring, tl, decode=self.decode,
                             first_reader=self._reader)
        self._reader = None
        self.peers = PeerPush(ctx, self.stores, self.max_row, tl)
        if self.fill_thread and (self.plan_keeps_or_evicts()):
            ftl = tl.sibling(200, 1 << 14) if hasattr(tl, "sibling") else Timeline(1 << 14, ctx.rank, thread=200)
            self.filler = Filler(self.stores, ftl, ctx.clock, on_error=self.loader.fail)
            self.loader.fills_async = True
        pro = plan.prologue
        self.stager = Stager(ctx, self.stores, self.loader.readers[0], self.max_row, tl)
        self.stager.run(pro)
        self.stage_s = self.stager.stage_s
        if self.shared_local and pro.groups is not None and LOCAL in self.stores.by_code:
            # what the node's other ranks stored in the shared directory is held here too (read after the
            # runner's barrier before epoch 0), theirs to delete
            g = np.asarray(pro.groups)
            mates = np.isin(pro.rank, np.nonzero(g == g[ctx.rank])[0]) & (pro.dst == LOCAL)
            self.stores[LOCAL].share(np.unique(pro.sample[mates]).tolist())

    # ---- epochs ------------------------------------------------------------------------------------
    def epoch(self, e: int) -> Iterator[Batch]:
        ctx = self.ctx
        loader, peers, ring, filler = self.loader, self.peers, self.ring, self.filler
        tl, clock = ctx.timeline, ctx.clock
        if loader is None or peers is None or tl is None:
            raise RunError("PlannedExecutor.epoch before start()")
        view = EpochView(self.plan, e, ctx.rank, runs=loader.run_reads)
        tr = view.plan_epoch.transfers
        if tr is not None and len(tr) and self.exchange is None:   # background transfers (pls's exchange)
            self.exchange = Exchange(ctx, self.stores, ctx.timeline)
        exchange = self.exchange
        if exchange is not None:
            exchange.begin(view)
        D = ring.depth
        base = self._gstep            # the fill thread's job number of this epoch's step 0
        peers.begin(view)
        raw_ring, decode = self.raw_ring, self.decode
        recv_ring = ring if raw_ring is None else raw_ring
        posted = 0                    # steps whose peer receives are posted
        # a pinned ring (``batch_memory``): the compute holds step t's buffer until its device copy completed.
        # Inline, the loader settles the hold before it reads step t + D into the buffer; loader threads get the
        # buffer back (``release``) once the copy completed: polled every step, waited for only when the step
        # the trainer needs next is to be read into it (``held``: steps whose release waits for their copy)
        pinned = ring.pinned
        held: deque[int] = deque()

        def settle_release(t: int) -> None:
            """(fill thread) step t's buffer back to the loader threads once its copy completed."""
            ring.settle(t)
            loader.release(t)

        def release_copied(t: int) -> None:
            """Hand back to the loader threads the held buffers whose copy completed, in order; wait for the
            copy of step t − D (step t is read into its buffer)."""
            while held:
                s = held[0]
                if s <= t - D:
                    ring.settle(s)
                elif not ring.settled(s):
                    return
                held.popleft()
                loader.release(s)

        def post_recvs_upto(limit: int, block: bool) -> None:
            """Irecvs of steps < limit into their ring buffers, once the buffer's last fill job is done."""
            nonlocal posted
            while posted < min(limit, view.steps):
                s = posted
                if filler is not None and s >= D and not filler.is_done(base + s - D):
                    if not block:
                        return
                    filler.wait(base + s - D)
                if pinned and s >= D:
                    ring.settle(s)            # the buffer's last device copy (step s − D) completed
                peers.post_recvs(view, s, recv_ring[s])
                posted += 1

        def post_sends(t_next: int, upto: int) -> None:
            """Sends up to step ``upto``; those a peer needs at ``t_next`` must go now (the receiver blocks on
            them before its next barrier): wait for this rank's fills if one is still being stored."""
            peers.post_sends(view, upto)
            first = peers.first_pending_step()
            if first is not None and first <= t_next and filler is not None:
                filler.wait(base + t_next - 1)
                peers.post_sends(view, upto)
                first = peers.first_pending_step()
            if first is not None and first <= t_next:
                raise RunError(f"plan of {self.plan.strategy}: rank {ctx.rank} must send a sample at epoch {e} step "
                               f"{first} that it does not hold then")

        peer_io = peers.active()      # this epoch has peer accesses or sends (else no per-step peer calls)
        if peer_io:
            post_recvs_upto(D, block=False)
            post_sends(0, D - 1)
        if self.threads:
            loader.begin(view)
        STAGE = PHASE_ID["stage"]
        keep, ids, bounds = view.keep, view.ids, view.bounds.tolist()
        any_keep = bool((keep != NO_TIER).any())
        any_evict = len(view.evict_ids) > 0
        sizes = ctx.sample_nbytes
        try:
            for t in range(view.steps):
                if exchange is not None:
                    exchange.post(view, t)      # overlaps the step (completed after the trainer's compute)
                if self.threads:
                    if held:
                        release_copied(t)
                    loader.wait(t)
                    if held:
                        release_copied(t)
                else:
                    if filler is not None and t >= D:
                        filler.wait(base + t - D)     # the buffer's last fills are copied out
                    if pinned:
                        ring.settle(t)                # the buffer's last device copy completed
                    loader.fill(view, t)
                if peer_io:
                    post_recvs_upto(t + 1, block=True)
                    if decode is not None and raw_ring is not None:   # received stored rows: decode into the batch
                        raw_t, out_t = raw_ring[t], ring[t]
                        peers.wait_recvs(view, t, lambda j, n, a=raw_t, b=out_t: decode(a[j], n, b[j]))
                    else:
                        peers.wait_recvs(view, t)
                b0, b1 = bounds[t], bounds[t + 1]
                buf = ring[t]
                kept_rows = buf if raw_ring is None else raw_ring[t]
                yield (Batch(buf, ids[b0:b1], b1 - b0, functools.partial(ring.hold, t)) if pinned
                       else Batch(buf, ids[b0:b1], b1 - b0))
                # after the trainer's step: fills and evictions (fill thread, or here), the buffer back to the
                # loader, sends and receives
                kc = np.nonzero(keep[b0:b1] != NO_TIER)[0].tolist() if any_keep else ()
                if any_evict:
                    lo, hi = np.searchsorted(view.evict_step, [t, t + 1])
                    evictions = view.evict_ids[lo:hi].tolist()
                else:
                    evictions = []
                keeps = [(self.stores[int(keep[b0 + j])], int(ids[b0 + j]),
                          kept_rows[j, :int(sizes[int(ids[b0 + j])])]) for j in kc]
                if filler is not None:
                    filler.submit(base + t, e, t, keeps, evictions,
                                  None if not self.threads else (lambda t=t: loader.release(t)) if not pinned
                                  else functools.partial(settle_release, t))
                else:
                    if keeps:
                        t0 = clock()
                        written = sum(st.put(sid, row) for st, sid, row in keeps)
                        self.stage_bytes += written
                        tl.add(STAGE, t0, clock(), e, t, written, keeps[0][0].code)
                    for sid in evictions:
                        self.stores.release(sid)
                    if self.threads:
                        if pinned:
                            held.append(t)
                        else:
                            loader.release(t)
                if exchange is not None:
                    exchange.complete(view, t)
                if peer_io:
                    post_recvs_upto(t + 1 + D, block=False)
                    post_sends(t + 1, t + D)
            if filler is not None:
                filler.drain()
            if pinned:                        # every copy of the epoch read its buffer: the next epoch's are free
                ring.settle_all()
                held.clear()
            peers.finish(view)
            if exchange is not None:
                exchange.finish(view)
        finally:
            if self.threads:
                loader.end()
            self._gstep = base + view.steps
        if e == self.plan.epochs - 1:
            self.done = True

    # ---- figures and cleanup -----------------------------------------------------------------------
    def local_copies_dir(self) -> Path | None:
        """This node's directory under the run's node-local directory (``node<k>``: its ranks' copies), once
        a local tier is open."""
        return None if self.root is None else self.root / f"node{int(self.ctx.node_map[self.ctx.rank])}"

    def extra_timelines(self) -> list:
        out = list(self.loader.timelines) if (self.loader is not None and self.threads) else []
        return out + ([self.filler.tl] if self.filler is not None else [])

    def stats(self) -> dict:
        """run.json's ``strategy_stats`` of this rank, each figure from the stage that counts it: the shared tier's
        requests (the prologue's reads and the loader's), each own tier (``Stores``), the peer tier (prologue
        moves, peer accesses, background transfers), the prologue's time, cache fills, and pls's ``exchange``."""
        lo = self.loader.stats() if self.loader is not None else {"shared_reads": 0, "shared_bytes": 0}
        pro = self.stager.stats() if self.stager is not None else {}
        tiers: dict = {"shared": {"reads": lo["shared_reads"] + pro.get("reads", 0),
                                  "bytes": lo["shared_bytes"] + pro.get("read_bytes", 0)}}
        tiers.update(self.stores.stats())
        pp = self.peers.stats() if self.peers is not None else {}
        ex = self.exchange.stats() if self.exchange is not None else {}
        tiers["peer"] = {"messages": pp.get("messages", 0) + pro.get("messages", 0) + ex.get("mpi_messages", 0),
                         "samples": pp.get("samples", 0) + pro.get("samples", 0) + ex.get("samples", 0),
                         "bytes": pp.get("bytes", 0) + pro.get("bytes", 0) + ex.get("bytes_received", 0),
                         "bytes_sent": pp.get("bytes_sent", 0) + pro.get("bytes_sent", 0) + ex.get("bytes_sent", 0)}
        out = {"tiers": tiers, "stage_s": pro.get("stage_s", 0.0),
               "cache_fill_bytes": self.stage_bytes + (self.filler.stats()["bytes"] if self.filler is not None else 0),
               "loader": {"threads": self.threads, "window_steps": self.window, "fill_thread": self.filler is not None}}
        if self.exchange is not None:
            out["exchange"] = {"bytes_sent": ex["bytes_sent"], "bytes_received": ex["bytes_received"],
                               "messages": ex["messages"], "wait_s": ex["wait_s"],
                               "q": self.plan.exchange.q if self.plan.exchange else 0.0,
                               "samples_per_epoch": self.plan.exchange.samples_per_epoch if self.plan.exchange else 0}
        if self.stale_removed:
            out["stale_local_dirs_removed"] = list(self.stale_removed)
        reader = self.loader.readers[0] if self.loader else None
        if reader is not None and hasattr(reader, "stats"):
            out["shared_tier_throttle"] = reader.stats()
        return out

    def peer_stop(self) -> tuple[str, int] | None:
        """(signal, rank) of another rank of this node that is stopping on a signal, or None (kept once
        seen: the last rank out removes the markers with the run directory)."""
        if getattr(self, "_peer_stop", None) is None:
            self._peer_stop = peer_stop(self.root)
        return self._peer_stop

    def close(self) -> None:
        """Stop the loader threads and delete this rank's copies on every exit path (idempotent): its own
        directory under the run's (other ranks of the node may still be running), its owner marker, then
        what is left if it is the node's last rank out (``remove_local_tier``). A node-shared local store
        (staging) is cleared only after a complete run, once every rank has passed a barrier (nobody on the
        node still reads a copy); after a failure or an interrupt its files are left to the last rank out."""
        done = self.done and not self.interrupted
        try:
            if self.filler is not None:
                self.filler.close()
            if self.loader is not None:
                self.loader.close()
            if self._reader is not None:       # never started
                self._reader.close()
                self._reader = None
        finally:
            try:
                if self.shared_local and LOCAL in self.stores.by_code:
                    if done and not self._barrier_passed:
                        assert self.ctx.comm is not None
                        self.ctx.comm.barrier()
                        self._barrier_passed = True
                    for code, st in self.stores.by_code.items():
                        if code != LOCAL or done:
                            st.clear()
                else:
                    self.stores.clear()
            finally:
                if self.root is not None:
                    self.peer_stop()
                    self.cleanup_note = remove_local_tier(
                        self.root, node=int(self.ctx.node_map[self.ctx.rank]), rank=self.ctx.rank,
                        private=not self.shared_local, done=done, interrupted=self.interrupted)


__all__ = ["PlannedExecutor", "peak_holdings"]
