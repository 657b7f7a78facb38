"""The planned executor: carries out any plan whose accesses name their source (shared tier, an own tier,
or a peer), with cache fills (``keep``) and evictions, by driving the stages of ``stages/`` (one module each). Every
strategy but prefetch is a planner plus this executor (naive, staging, local, pls, the cache family and
surrogatetrain).

Per epoch, for this rank, ``epoch`` drives its stages through the step protocol (``stage.drive``; the stages
and their order: ``epoch_stages``): the loader reads step t's non-peer accesses into ring slot t mod depth
(inline, or by loader threads up to depth − 1 steps ahead), the peer stage posts Irecvs into the same slot for
the PEER accesses and Isends for the samples this rank serves; ``next()`` waits for both, lends the batch
(``Ring.lend``), and on the following ``next()`` (after the trainer's compute) stores what the plan keeps
(``stage`` interval: bytes written), drops what it evicts, hands the slot back and posts the sends that became
possible. That work sits inside the trainer's next ``next()`` call, so the runner counts it as stall: it is I/O
the trainer waits for.

Prologue (``stages.stager.Stager``, epoch −1): the rank's rows reading the shared tier into an own tier (a preload,
staging's piece, a shard) and then the plan's sender → receiver rows (staging's distribution between nodes)
as non-blocking MPI; ``read`` per shared sample, ``exchange`` per round, one ``stage`` interval. With
``shared_local`` the local tier is one directory per node shared by its ranks (staging): what the node's other
ranks stored is held here too (``SampleStore.share``) and cleared by them.

Background transfers (``EpochPlan.transfers``: pls's exchange) are the transfer stage ``stages.exchange.Exchange``:
posted when a step starts, completed after the trainer's step.

Capacity: each own tier is sized by the strategy (``capacity_bytes`` per tier code, computed from the plan's
peak holdings; the cache family's memory tier is a byte arena of the plan's bytes for the rank); a tier that
overflows raises CapacityError naming the option to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import RunError
from ..plan import LOCAL, MEMORY, NO_TIER, Plan
from ..storage import ArenaTier, LocalTier, MemoryTier
from ..storage.localtier import open_local_tier, peer_stop, remove_local_tier
from ..timeline import Timeline
from .base import Batch, Executor, RunContext
from .stage import Stage, drive
from .stages.exchange import Exchange
from .stages.filler import Filler, Keeps
from .stages.loader import Loader
from .stages.peerpush import PeerPush
from .stages.peersteps import PeerSteps
from .stages.ring import Ring
from .stages.stager import Stager
from .stages.store import SampleStore, Stores
from .stages.view import EpochView

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
        self.peer_steps: PeerSteps | None = None
        self.keeps: Keeps | None = None
        self.stage_s = 0.0
        self.done = False
        self.stale_removed: list[str] = []
        self.fill_thread = bool(fill_thread)
        self.filler: Filler | None = None
        self.stager: Stager | None = None
        self.exchange: Exchange | None = None
        self._barrier_passed = False

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
            self.loader.filler = self.filler
        rows = self.ring if self.raw_ring is None else self.raw_ring     # what tiers hold and peers send
        self.keeps = Keeps(ctx, self.stores, rows, self.filler,
                           give_back=self.loader.give_back if self.threads else None)
        self.peer_steps = PeerSteps(self.peers, self.ring, rows, self.filler, decode=self.decode,
                                    strategy=plan.strategy)
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
    def epoch_stages(self, view: EpochView) -> list[Stage]:
        """The stages of epoch ``view``, in the order ``drive`` calls each hook on them: the fill thread (its jobs
        numbered), the step's keeps and evictions (before the slot goes back to the loader), the background
        transfers (posted first, to overlap the step), the loader, the peer stage (receives completed after the
        loader's reads, sends after the keeps are stored), the ring (every slot free at the epoch's end)."""
        assert self.loader is not None and self.peer_steps is not None and self.keeps is not None
        out: list[Stage] = []
        if self.filler is not None:
            out.append(self.filler)
        if self.filler is not None or len(view.evict_ids) or (view.keep != NO_TIER).any():
            out.append(self.keeps)
        if self.exchange is not None:
            out.append(self.exchange)
        return out + [self.loader, self.peer_steps, self.ring]

    def epoch(self, e: int) -> Iterator[Batch]:
        ctx = self.ctx
        if self.loader is None or ctx.timeline is None:
            raise RunError("PlannedExecutor.epoch before start()")
        view = EpochView(self.plan, e, ctx.rank, runs=self.loader.run_reads)
        tr = view.plan_epoch.transfers
        if tr is not None and len(tr) and self.exchange is None:   # background transfers (pls's exchange)
            self.exchange = Exchange(ctx, self.stores, ctx.timeline)
        lend, ids, bounds = self.ring.lend, view.ids, view.bounds.tolist()
        yield from drive(self.epoch_stages(view), view,
                         lambda t: lend(t, ids[bounds[t]:bounds[t + 1]], bounds[t + 1] - bounds[t]))
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
               "cache_fill_bytes": sum(st.stats()["bytes"] for st in (self.keeps, self.filler) if st is not None),
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
