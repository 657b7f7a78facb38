"""Small executor stages that carry out any plan access by access (CONVENTIONS 8: sampler → source → cache
→ prefetch → batch). ``PlannedExecutor`` (planned.py) glues them; each is testable alone with a fake
reader, a fake clock and, for PeerPush, an in-process two-rank comm (tests/unit/fakecomm.py). Every stage
declares the lifecycle of ``stage.py`` (``Stage.stats``, ``EpochStage.begin/finish``, ``ClosingStage.close``).

- ``SampleStore``: one own tier (memory slab or node-local files) with a reference count per sample id, so
  a sample held twice (DistributedSampler padding, a pinned send) is stored once and removed with its last
  reference; a condition lets a loader thread wait for a sample the trainer is about to store.
- ``Stores``: the rank's own tiers by plan tier code, and where each held sample lives.
- ``Ring``: ``depth`` page-aligned batch buffers; step t uses buffer t mod depth.
- ``Loader``: reads a step's non-peer accesses from their planned source (shared tier through the reader,
  throttled when the system profile models a PFS, or an own tier) into the step's ring buffer (a run the
  plan's ``chunk`` marks is one ``read_run_into`` request when the reader supports runs): inline in
  the trainer (``threads=0``: one request at a time) or by loader threads that run up to the ring's depth
  ahead in exact access order (the staging buffer of HDMLP; each thread has its own reader and timeline).
- ``PeerPush``: a plan's peer reads as non-blocking MPI on the plan's schedule. Every PEER access names its
  sender, so nothing is requested on demand: the receiver posts an Irecv into the batch buffer as soon as
  the step's ring buffer is assigned (up to ``depth - 1`` steps ahead); the sender posts the Isend as soon as
  it holds the sample (at the latest right after the step that stores it), from the memory slot itself
  (pinned by a reference until the send completes) or from a page-aligned row read from its local tier.
  All MPI calls are made by the trainer's thread (no MPI_THREAD_MULTIPLE progress assumptions, no service
  thread, no passive-target RMA whose progress MPICH only makes when the target calls MPI). A message is
  tagged with the receiver's position in its epoch row, so messages can never cross. One message per (step,
  sender, receiver) carries all the samples of that pair and step, gathered from the sender's slots and
  scattered into the receiver's rows by MPI itself (issue 19: per-message overhead dominated small samples).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque

import numpy as np

from ..errors import RunError
from ..plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED
from ..storage import PAGE, aligned_empty, aligned_rows, flat_span
from ..timeline import PHASE_ID, Timeline
from .stage import ClosingStage, EpochStage, Stage

PEER_MESSAGE_BYTES = 256 << 20   # the most bytes of one peer message (PeerPush; >= 1 sample)
WAIT_TIMEOUT_S = 120.0   # a loader waiting this long for a sample the plan says is held: a plan/executor bug
TAG_BASE = 1 << 12


class Stopped(RunError):
    """A wait given up because the loader is stopping (an error elsewhere, the end of the epoch)."""


class SampleStore(ClosingStage):
    """One own tier with a reference count per sample id. Thread-safe: the trainer (peer sends, pins), the
    fill thread (puts, evictions) and loader threads (pinned reads) share it; a reference count change and
    the tier operation it implies happen under one lock, so a slot is never freed or reused while a read or a
    send still uses it."""

    def __init__(self, tier, code: int, cond: threading.Condition | None = None):
        self.tier, self.code = tier, code
        self.refs: dict[int, int] = {}
        self.foreign: set[int] = set()    # held through a store shared with other ranks: theirs to delete
        self.reads = 0
        self.read_bytes = 0
        self.cond = cond or threading.Condition(threading.RLock())

    def __contains__(self, sid) -> bool:
        return int(sid) in self.refs

    def put(self, sid: int, row) -> int:
        """One more reference to ``sid``, storing ``row`` if it is new. The tier write (a file on the local
        tier) is made outside the store's lock, so loader reads and peer sends of other samples go on meanwhile:
        there is one putter (the fill thread, or the trainer), the tier has its own lock, and nobody reads
        ``sid`` before its reference is counted (readers wait for it)."""
        with self.cond:
            r = self.refs.get(sid, 0)
            if r:
                self.refs[sid] = r + 1
                return 0
        n = self.tier.put(sid, row)
        with self.cond:
            self.refs[sid] = self.refs.get(sid, 0) + 1
            self.cond.notify_all()
        return n

    def put_many(self, items) -> int:
        """``put`` for several (sid, row) pairs; a tier with ``put_many`` stores the new ones in one go."""
        new: list = []
        extra: dict[int, int] = {}
        with self.cond:          # references to samples held already (or twice in ``items``): counted now
            for sid, row in items:
                if sid in self.refs:
                    self.refs[sid] += 1
                elif sid in extra:
                    extra[sid] += 1
                else:
                    extra[sid] = 1
                    new.append((sid, row))
        if not new:
            return 0
        many = getattr(self.tier, "put_many", None)
        if many is not None:
            total = many(new)
        else:
            total = 0
            for sid, row in new:
                total += self.tier.put(sid, row)
        with self.cond:
            for sid, k in extra.items():
                self.refs[sid] = self.refs.get(sid, 0) + k
            self.cond.notify_all()
        return total

    def pin(self, sid: int) -> bool:
        """One more reference to ``sid`` if it is held (a send in flight from its slot: an eviction meanwhile
        cannot free it); False if it is not held."""
        with self.cond:
            r = self.refs.get(sid)
            if r is None:
                return False
            self.refs[sid] = r + 1
            return True

    def pin_many(self, sids: list) -> bool:
        """``pin`` for every sample of ``sids`` under one lock, all or none: False (nothing pinned) if one of
        them is not held."""
        with self.cond:
            refs = self.refs
            for sid in sids:
                if sid not in refs:
                    return False
            for sid in sids:
                refs[sid] += 1
            return True

    def release_many(self, sids: list) -> None:
        """``release`` for every sample of ``sids`` under one lock."""
        with self.cond:
            refs = self.refs
            for sid in sids:
                r = refs[sid] - 1
                if r:
                    refs[sid] = r
                else:
                    self._drop(sid)

    def share(self, sids) -> int:
        """Count the samples of ``sids`` another rank of this store's storage group stored (a node-local
        directory shared by the node's ranks) as held: readable here, never deleted by this rank (its store
        is the other rank's to clear). Returns how many were not held already."""
        k = 0
        with self.cond:
            for sid in sids:
                if sid not in self.refs:
                    self.refs[sid] = 1
                    self.foreign.add(sid)
                    k += 1
            self.cond.notify_all()
        return k

    def _drop(self, sid: int) -> None:
        """The last reference to ``sid`` went (under ``cond``): delete it from the tier unless another rank
        stored it."""
        del self.refs[sid]
        if self.foreign and sid in self.foreign:
            self.foreign.discard(sid)
        else:
            self.tier.delete(sid)

    def adopt(self, sid: int) -> None:
        """Count a sample written into the tier directly (``tier.reserve``) as stored."""
        with self.cond:
            if sid in self.refs:
                raise KeyError(f"sample {sid} adopted twice")
            self.refs[sid] = 1
            self.cond.notify_all()

    def release(self, sid: int) -> None:
        with self.cond:
            r = self.refs[sid] - 1
            if r:
                self.refs[sid] = r
            else:
                self._drop(sid)

    def read_into(self, sid: int, out: np.ndarray) -> int:
        n = self.tier.read_into(sid, out)
        self.reads += 1
        self.read_bytes += n
        return n

    def read_pinned(self, sid: int, out: np.ndarray, *, wait: bool, timeout: float = WAIT_TIMEOUT_S,
                    stop=None) -> int:
        """Read a sample while holding a reference, so an eviction meanwhile cannot free its slot; ``wait``:
        until the sample is stored (a fill in another thread), else it must be held now. ``stop()``: give up
        waiting (raises ``Stopped``) once it is true (the loader is ending or a fill failed); whoever sets it
        notifies ``cond``."""
        with self.cond:
            if sid not in self.refs:
                if not wait:
                    raise KeyError(sid)
                if stop is None:
                    ok = self.cond.wait_for(lambda: sid in self.refs, timeout)
                else:
                    ok = self.cond.wait_for(lambda: sid in self.refs or stop(), timeout)
                    if sid not in self.refs and stop():
                        raise Stopped(f"stopped while waiting for sample {sid}")
                if not ok:
                    raise RunError(f"sample {sid} never reached the {('shared', 'local', 'memory')[self.code]} "
                                   f"tier although the plan reads it from there (waited {timeout:.0f} s)")
            self.refs[sid] += 1
        try:
            return self.read_into(sid, out)
        finally:
            self.release(sid)

    def clear(self) -> None:
        with self.cond:
            for sid in list(self.refs):
                self.refs[sid] = 1
                self.release(sid)

    def close(self) -> None:
        """Drop every sample held (the tier's slots or files)."""
        self.clear()

    def stats(self) -> dict:
        """``reads``/``bytes``: reads of this tier (loader, peer sends from the local tier); ``held``: samples now."""
        return {"reads": self.reads, "bytes": self.read_bytes, "held": len(self.refs)}


class Stores(ClosingStage):
    """The rank's own tiers by plan tier code (MEMORY, LOCAL)."""

    def __init__(self, stores: dict[int, SampleStore]):
        self.by_code = dict(stores)

    def __getitem__(self, code: int) -> SampleStore:
        st = self.by_code.get(int(code))
        if st is None:
            raise RunError(f"the plan uses tier {('shared', 'local', 'memory', 'peer')[int(code)]} but this rank "
                           f"has no store for it")
        return st

    def holder(self, sid: int) -> SampleStore | None:
        for st in self.by_code.values():
            if sid in st.refs:
                return st
        return None

    def release(self, sid: int) -> None:
        st = self.holder(sid)
        if st is None:
            raise RunError(f"the plan evicts sample {sid}, which this rank does not hold")
        st.release(sid)

    def clear(self) -> None:
        for st in self.by_code.values():
            st.clear()

    def close(self) -> None:
        self.clear()

    def stats(self) -> dict:
        """Each tier's ``SampleStore.stats()`` by tier name, with the tier's own counters (``writes``,
        ``write_bytes``, ``deletes``, ``capacity_bytes``)."""
        out = {}
        for code, st in self.by_code.items():
            ts = st.tier.stats() if hasattr(st.tier, "stats") else {}
            out[("shared", "local", "memory")[code]] = {
                **st.stats(), **{k: ts.get(k, 0) for k in ("writes", "write_bytes", "deletes", "capacity_bytes")}}
        return out


class Ring(Stage):
    """``depth`` page-aligned batch buffers of ``rows`` rows of ``row_nbytes``.

    ``alloc(rows, row_nbytes)``: where the buffers' memory comes from (default: ``aligned_rows``). The torch
    compute on CUDA with ``--overlap on`` gives page-locked memory (``TorchCompute.host_allocator``): the loader
    reads each batch straight into pinned memory and the device copies it from there, with no staging copy.

    Hand-off of a slot read by an asynchronous consumer (the device copy): the consumer calls ``hold(step,
    done)`` with an object whose ``query()`` says whether it is done with the buffer and ``synchronize()``
    waits until it is (the copy's CUDA event); the executor calls ``settle(step)`` (waits) or ``settled(step)``
    (does not) before step + depth is written into the same buffer or the buffer goes back to the loader
    threads. A slot without a hold is free as soon as the consumer returned (every CPU run)."""

    def __init__(self, depth: int, rows: int, row_nbytes: int, alloc=None):
        self.depth = int(depth)
        block = (alloc or aligned_rows)(self.depth * max(rows, 1), row_nbytes)
        if (block.shape != (self.depth * max(rows, 1), row_nbytes) or block.dtype != np.uint8
                or block.ctypes.data % PAGE or block.strides[0] % PAGE or block.strides[1] != 1):
            raise ValueError(f"Ring: the allocator gave {block.dtype}{block.shape} with strides {block.strides}, "
                             f"not uint8 ({self.depth * max(rows, 1)}, {row_nbytes}) in page-aligned rows")
        self.bufs = [block[i * rows:(i + 1) * rows] for i in range(self.depth)]
        block[:, ::4096] = 0   # fault the pages in now, not on the hot path
        self.pinned = alloc is not None
        self._holds: list = [None] * self.depth     # per slot: what still reads it (``hold``), or None

    def __getitem__(self, step: int) -> np.ndarray:
        return self.bufs[step % self.depth]

    def hold(self, step: int, done) -> None:
        """Step ``step``'s buffer is still read (asynchronously) until ``done`` completes."""
        self._holds[step % self.depth] = done

    def held(self, step: int) -> bool:
        return self._holds[step % self.depth] is not None

    def settle(self, step: int) -> None:
        """Wait until whatever still reads step ``step``'s buffer (``hold``) is done; the buffer is free."""
        j = step % self.depth
        done = self._holds[j]
        if done is not None:
            self._holds[j] = None
            done.synchronize()

    def settled(self, step: int) -> bool:
        """Is step ``step``'s buffer free now (its hold, if any, completed)? Does not wait."""
        j = step % self.depth
        done = self._holds[j]
        if done is None:
            return True
        if not done.query():
            return False
        self._holds[j] = None
        done.synchronize()      # completed: returns at once (and the consumer sees the release)
        return True

    def settle_all(self) -> None:
        for j in range(self.depth):
            self.settle(j)

    def stats(self) -> dict:
        b = self.bufs[0]
        return {"depth": self.depth, "rows": int(b.shape[0]), "row_nbytes": int(b.shape[1])}


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


class Loader(EpochStage, ClosingStage):
    """Reads the non-PEER accesses of each step into its ring buffer, from the planned source.

    ``threads == 0``: ``fill(t)`` reads step t in the calling (trainer) thread. ``threads > 0``: ``begin``
    starts the threads for an epoch; they take accesses in order (a shared counter), wait until step t's
    buffer is free (``release(t)``), read, and count the step done; ``wait(t)`` blocks until it is."""

    def __init__(self, ctx, stores: Stores, ring: Ring, threads: int, raw_ring: Ring | None, timeline, *,
                 decode=None, wait_for_samples: bool = True, first_reader=None):
        self.ctx, self.stores, self.ring, self.threads = ctx, stores, ring, int(threads)
        self.wait_for_samples = wait_for_samples
        self.fills_async = False          # a fill thread stores the plan's keeps (PlannedExecutor)
        # a format with a decode step (``Format.decoder``: JPEG, TFRecord): stored bytes land in ``raw_ring``,
        # ``decode(raw, n, out)`` writes the decoded rows into ``ring``
        if (raw_ring is None) != (decode is None):
            raise ValueError("Loader: a decode step needs a raw ring for the stored bytes, and a raw ring a decode step")
        self.raw_ring, self.decode = raw_ring, decode
        self.read_ring: Ring = ring if raw_ring is None else raw_ring   # where the stored bytes land
        self.cond = threading.Condition()
        n = max(1, self.threads)
        # ``first_reader``: one the caller opened already (each open of the shared tier is an I/O the counters
        # see): it becomes reader 0
        self.readers = ([first_reader] if first_reader is not None else []) + [
            ctx.reader_factory() for _ in range(n - (first_reader is not None))]
        # each loader thread records into its own timeline (spilling with the trainer's when it spills)
        self.timelines = [timeline] if self.threads == 0 else [
            timeline.sibling(100 + k, 1 << 14) if hasattr(timeline, "sibling") else Timeline(1 << 14, ctx.rank,
                                                                                            thread=100 + k)
            for k in range(self.threads)]
        self.shared_reads = self.shared_bytes = 0       # shared-tier requests (a run counts once) and bytes
        self.run_requests = 0                           # requests that read a run of >= 2 samples
        # runs of consecutive samples as one request when every reader can (one shared HDF5 file)
        self.run_reads = decode is None and all(getattr(r, "supports_runs", False) for r in self.readers)
        self._threads: list[threading.Thread] = []
        self._error: BaseException | None = None
        self._stop = False

    # ---- one access ---------------------------------------------------------------------------------
    def _read(self, k: int, view: EpochView, col: int) -> int:
        """Read the request starting at column ``col``; returns the columns it filled."""
        sid = int(view.ids[col])
        code = int(view.src[col])
        t = int(view.step_of[col])
        j = col - int(view.bounds[t])
        tl, clock = self.timelines[k], self.ctx.clock
        m = int(view.run_len[col])
        if m > 1:            # one request for samples sid .. sid+m-1 into rows j .. j+m-1 (plan's ``chunk``)
            t0 = clock()
            n = self.readers[k].read_run_into(sid, m, self.ring[t], j)
            t1 = clock()
            self.shared_reads += 1
            self.run_requests += 1
            self.shared_bytes += n
            tl.add(PHASE_ID["read"], t0, t1, view.epoch, t, n, SHARED)
            return m
        out = self.ring[t][j]
        decode = self.decode
        dst = out if decode is None else self.read_ring[t][j]
        if code == SHARED:
            t0 = clock()
            n = self.readers[k].read_into(sid, dst)
            t1 = clock()
            self.shared_reads += 1
            self.shared_bytes += n
        else:
            st = self.stores[code]
            t0 = clock()
            if not self.wait_for_samples:     # copies in place before epoch 0 (staging, local, pls)
                n = st.read_into(sid, dst)
            else:
                try:   # fills may land in another thread (loader threads, the fill thread): wait for them
                    n = st.read_pinned(sid, dst, wait=bool(self.threads or self.fills_async),
                                       stop=self._stopping)
                except Stopped:
                    if self._error is not None:     # a failed fill (``fail``): its error, not a timeout
                        raise self._error from None
                    raise
                except KeyError:
                    raise RunError(f"plan of {self.ctx.workload.name}: rank {self.ctx.rank} reads sample {sid} "
                                   f"from its {('shared', 'local', 'memory')[code]} tier at epoch {view.epoch} step "
                                   f"{t}, but does not hold it") from None
            t1 = clock()
        tl.add(PHASE_ID["read"], t0, t1, view.epoch, t, n, code)
        if decode is not None:
            decode(dst, n, out)
            tl.add(PHASE_ID["decode"], t1, clock(), view.epoch, t, 0, code)
        return 1

    def _stopping(self) -> bool:
        return self._stop

    def _step_free(self, t: int) -> bool:
        """May a loader thread read into step t's buffer (or is the loader stopping)?"""
        return t < self._free_upto or self._stop

    def fail(self, exc: BaseException) -> None:
        """Another stage failed (the fill thread): record its error for the trainer's next ``wait``/``fill``
        and stop the loader threads, waking them wherever they wait (a step's buffer, a sample's fill)."""
        with self.cond:
            if self._error is None:
                self._error = exc
            self._stop = True
            self.cond.notify_all()
        self._wake_stores()

    def _wake_stores(self) -> None:
        for st in self.stores.by_code.values():
            with st.cond:
                st.cond.notify_all()

    # ---- inline -------------------------------------------------------------------------------------
    def fill(self, view: EpochView, t: int) -> None:
        if self._error is not None:
            raise self._error
        b0 = int(view.bounds[t])
        if view.lists is None:       # once per epoch: plain lists for the per-sample loop below
            view.lists = (view.ids.tolist(), view.src.tolist(), view.run_len.tolist(), view.local.tolist(),
                          np.searchsorted(view.local, view.bounds).tolist())
        ids, src, run_len, local, lb = view.lists
        # the hot path (naive's every access): a single-sample shared-tier read straight into the step's row,
        # locals only; everything else (own tiers, runs, decoding) through ``_read``
        fast = self.decode is None
        # own tiers read directly (no pin: nothing else stores or evicts while the trainer reads inline)
        own = self.stores.by_code if (fast and not self.fills_async and self.wait_for_samples) else {}
        out = self.ring[t]
        read_into = self.readers[0].read_into
        add, clock = self.timelines[0].add, self.ctx.clock
        READ, e = PHASE_ID["read"], view.epoch
        mem = own.get(MEMORY)
        mem_refs = mem.refs if mem is not None else ()
        mem_ids: list[int] = []
        mem_js: list[int] = []
        reads = nbytes = 0
        try:
            for col in local[lb[t]:lb[t + 1]]:     # the step's non-PEER requests (a run: its first column)
                c = src[col]
                if fast and c == SHARED and run_len[col] == 1:
                    t0 = clock()
                    n = read_into(ids[col], out[col - b0])
                    add(READ, t0, clock(), e, t, n, SHARED)
                    reads += 1
                    nbytes += n
                elif c == MEMORY and ids[col] in mem_refs:     # copied below, in one call
                    mem_ids.append(ids[col])
                    mem_js.append(col - b0)
                elif c in own and ids[col] in own[c].refs:     # (not held: the slow path says so)
                    st = own[c]
                    t0 = clock()
                    n = st.read_into(ids[col], out[col - b0])
                    add(READ, t0, clock(), e, t, n, c)
                else:
                    self._read(0, view, col)
        finally:
            self.shared_reads += reads
            self.shared_bytes += nbytes
        if mem_ids:       # one read interval per sample, each copy timed on its own
            assert mem is not None
            got = 0
            for t0, t1, n in mem.tier.read_rows_into(mem_ids, out, mem_js, clock):
                add(READ, t0, t1, e, t, n, MEMORY)
                got += n
            mem.reads += len(mem_ids)
            mem.read_bytes += got

    # ---- threads ------------------------------------------------------------------------------------
    def begin(self, view: EpochView) -> None:
        self._view = view
        self._done = np.zeros(view.steps, dtype=np.int64)
        self._free_upto = self.ring.depth      # steps < this may be written
        self._counter = itertools.count()
        self._stop = self._error is not None
        self._threads = [threading.Thread(target=self._work, args=(k,), daemon=True, name=f"dlbench-loader-{k}")
                         for k in range(self.threads)]
        for th in self._threads:
            th.start()

    def _work(self, k: int) -> None:
        view, cond = self._view, self.cond
        local, step_of = view.local, view.step_of
        try:
            while True:
                i = next(self._counter)
                if i >= len(local) or self._stop:
                    return
                col = int(local[i])
                t = int(step_of[col])
                if t >= self._free_upto:
                    with cond:
                        cond.wait_for(functools.partial(self._step_free, t))
                    if self._stop:
                        return
                m = self._read(k, view, col)
                with cond:
                    self._done[t] += m
                    if self._done[t] == view.need[t]:
                        cond.notify_all()
        except BaseException as exc:  # handed to the trainer at its next wait (the first error wins)
            with cond:
                if self._error is None:
                    self._error = exc
                cond.notify_all()

    def wait(self, t: int) -> None:
        view = self._view
        if self._done[t] < view.need[t] or self._error is not None:
            with self.cond:
                self.cond.wait_for(lambda: self._done[t] >= view.need[t] or self._error is not None)
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def release(self, t: int) -> None:
        """Step t's buffer may be reused (for step t + depth)."""
        with self.cond:
            self._free_upto = t + 1 + self.ring.depth
            self.cond.notify_all()

    def end(self) -> None:
        with self.cond:
            self._stop = True
            self.cond.notify_all()
        self._wake_stores()     # a thread waiting for a sample's fill (``read_pinned``) stops too
        for th in self._threads:
            th.join()
        self._threads = []

    def finish(self, view: EpochView) -> None:
        """End of the epoch ``view``: the loader threads stop and are joined (``end``)."""
        self.end()

    def close(self) -> None:
        self.end()
        for r in self.readers:
            r.close()

    def stats(self) -> dict:
        """Shared-tier requests (a run counts once), their bytes, and the requests that read a run."""
        return {"shared_reads": self.shared_reads, "shared_bytes": self.shared_bytes,
                "run_requests": self.run_requests, "threads": self.threads}


class Filler(ClosingStage):
    """The plan's cache fills (keeps) and evictions of every step, in step order, on one fill thread, so
    writing a fill (a memory copy, or a file on the node-local disk) is not trainer time. Step t's job copies
    its kept rows from the step's ring buffer into the stores, drops the evictions, records a ``stage``
    interval (bytes written) on its own timeline, then hands the ring buffer back (``on_done(t)``: the loader
    may refill it). A job that raises stops the thread and is handed to ``on_error`` (the loader stops and
    raises it to the trainer) and to the next ``wait``. Readers of a sample still being filled wait for it (``SampleStore.read_pinned``); peer
    sends are posted once the sample is held; ``wait(t)`` blocks until step t's job is done."""

    def __init__(self, stores: Stores, timeline, clock, on_error=None):
        import queue

        self.stores = stores
        self.tl = timeline
        self.clock = clock
        self.q: queue.SimpleQueue = queue.SimpleQueue()
        self.cond = threading.Condition()
        self.done_upto = -1          # jobs are numbered by a global step counter (epochs in order)
        self.submitted = -1
        self.error: BaseException | None = None
        self.on_error = on_error     # told the error of a failed job (``Loader.fail``: its waiters stop)
        self.bytes = 0
        self.thread = threading.Thread(target=self._work, daemon=True, name="dlbench-fill")
        self.thread.start()

    def submit(self, g: int, e: int, t: int, keeps: list, evictions: list, on_done) -> None:
        """Job ``g`` (global step): ``keeps`` [(store, sid, row)], ``evictions`` [sid], then ``on_done()``."""
        self.submitted = g
        self.q.put((g, e, t, keeps, evictions, on_done))

    def _work(self) -> None:
        STAGE = PHASE_ID["stage"]
        clock = self.clock
        while True:
            job = self.q.get()
            if job is None:
                return
            g, e, t, keeps, evictions, on_done = job
            try:
                if keeps:
                    t0 = clock()
                    written = 0
                    for st, sid, row in keeps:
                        written += st.put(sid, row)
                    self.bytes += written
                    self.tl.add(STAGE, t0, clock(), e, t, written, keeps[0][0].code)
                for sid in evictions:
                    self.stores.release(sid)
                if on_done is not None:
                    on_done()
            except BaseException as exc:  # handed to the trainer at its next wait
                with self.cond:
                    self.error = exc
                    self.cond.notify_all()
                if self.on_error is not None:
                    self.on_error(exc)
                return
            with self.cond:
                self.done_upto = g
                self.cond.notify_all()

    def is_done(self, g: int) -> bool:
        return self.done_upto >= g

    def wait(self, g: int) -> None:
        if self.done_upto < g or self.error is not None:
            with self.cond:
                self.cond.wait_for(lambda: self.done_upto >= g or self.error is not None)
        if self.error is not None:
            raise self.error

    def drain(self) -> None:
        self.wait(self.submitted)

    def close(self) -> None:
        self.q.put(None)
        self.thread.join()

    def stats(self) -> dict:
        """``bytes`` written into the stores; ``jobs``: steps done (all epochs)."""
        return {"bytes": self.bytes, "jobs": self.done_upto + 1}


def _messages(new_group: np.ndarray, nbytes: np.ndarray, cap: int) -> tuple[list[int], list[int]]:
    """Cut a sequence of samples into messages: a new one where ``new_group`` is set, or where the next sample
    would take the message past ``cap`` bytes (a message holds at least one sample). (first, end) indices.
    Sender and receiver cut the same (step, pair) sequence alike: the sizes are the plan's."""
    starts = np.flatnonzero(new_group)
    if len(starts) and int(np.add.reduceat(nbytes, starts).max()) <= cap:   # no group to cut: vectorised
        first_a = starts.tolist()
        return first_a, first_a[1:] + [len(new_group)]
    first: list[int] = []
    acc = 0
    for i, (g, n) in enumerate(zip(new_group.tolist(), nbytes.tolist())):
        if g or acc + n > cap:
            first.append(i)
            acc = 0
        acc += n
    return first, first[1:] + [len(new_group)]


def _new_group(*keys: np.ndarray) -> np.ndarray:
    """Where a run of equal consecutive values of the ``keys`` taken together begins."""
    n = len(keys[0])
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return change


class PeerPush(EpochStage):
    """The plan's PEER accesses as non-blocking MPI on the plan's schedule (module doc).

    Messages: one per (step, sender, receiver), carrying every sample the sender serves the receiver at that
    step in the receiver's column order (cut into several when they exceed ``PEER_MESSAGE_BYTES``; a message
    holds at least one sample, so 0 means one message per sample). A message of several samples is an MPI
    hindexed datatype over their places in one buffer (``Comm.isend_ranges``): the sender's memory slots
    (pinned until the send completes) and the receiver's batch rows, so MPI gathers and scatters the bytes
    itself (no packing copy, no message per sample). A message with samples from the local tier is read into
    one contiguous send buffer first. Sizes are the plan's: no header. The tag is the receiver's column of
    the message's first sample, so messages can never cross.

    Counts (``stats()["tiers"]["peer"]``): ``messages`` = MPI messages this rank received, ``samples`` = peer
    samples it received, ``bytes`` = their bytes, ``bytes_sent`` = bytes of the samples it served."""

    def __init__(self, ctx, stores: Stores, max_row: int, timeline):
        self.ctx, self.stores, self.comm = ctx, stores, ctx.comm
        self.timeline = timeline
        self.max_row = max_row
        self.cap = int(PEER_MESSAGE_BYTES)
        self.recvs: dict[int, tuple] = {}         # step -> (requests, samples, bytes)
        self.pending: deque = deque()             # messages not sent yet: (step, dst, tag, [sid], nbytes)
        self.inflight: list = []                  # (request, (store, [sid]) pinned or None, pack buffer or None)
        self.packs: list[np.ndarray] = []         # send buffers of messages with local-tier samples
        self.free_packs: list[int] = []
        self._flat: dict[int, tuple] = {}         # id(batch buffer) -> (buffer, flat_span, row stride)
        self.messages = self.samples_received = self.bytes_received = self.bytes_sent = 0
        self.sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (ctx.n_samples,))
        # tags wrap below the MPI's MPI_TAG_UB (>= 32767 by the standard): messages between two ranks keep
        # their order, so a wrapped tag never matches the wrong sample
        self.tag_span = int(getattr(self.comm, "tag_ub", 32767)) - TAG_BASE

    def tag(self, col: int) -> int:
        """The MPI tag of a message: its first column (sender and receiver both know it from the plan)."""
        return TAG_BASE + col % self.tag_span

    def begin(self, view: EpochView) -> None:
        """The epoch's messages, worked out once: what this rank sends, in plan order, and per step what it
        receives (``_recv_plan``)."""
        self._recv_plan(view)
        steps, dst, cols, samples = view.plan_epoch.peer_sends(self.ctx.rank)   # in (step, dst, column) order
        if not len(steps):
            return
        nbytes = self.sizes[samples]
        first, end = _messages(_new_group(steps, dst), nbytes, self.cap)
        csum = np.concatenate(([0], np.cumsum(nbytes))).tolist()
        sids, st_l, d_l, c_l = samples.tolist(), steps.tolist(), dst.tolist(), cols.tolist()
        tag = self.tag
        self.pending.extend((st_l[a], d_l[a], tag(c_l[a]), sids[a:b], csum[b] - csum[a])
                            for a, b in zip(first, end))

    def _recv_plan(self, view: EpochView) -> None:
        """``self._rplan[t]``: step t's messages [(sender, tag, [row j], [bytes])] (rows of the step's batch
        buffer, in the order the sender packs them), its sample count and bytes; steps without PEER left out."""
        self._rplan: dict[int, tuple] = {}
        cols = np.flatnonzero(view.src == PEER)
        if not len(cols):
            return
        steps, peers = view.step_of[cols], view.peer[cols]
        order = np.lexsort((cols, peers, steps))       # by step, then sender, each sender's in column order
        cols, steps, peers = cols[order], steps[order], peers[order]
        n = self.sizes[view.ids[cols]]
        first, end = _messages(_new_group(steps, peers), n, self.cap)
        js = (cols - view.bounds[steps]).tolist()
        n_l, st_l, p_l, c_l = n.tolist(), steps.tolist(), peers.tolist(), cols.tolist()
        for a, b in zip(first, end):
            t = st_l[a]
            msgs, k, nb = self._rplan.get(t, ([], 0, 0))
            msgs.append((p_l[a], self.tag(c_l[a]), js[a:b], n_l[a:b]))
            self._rplan[t] = (msgs, k + b - a, nb + sum(n_l[a:b]))

    def active(self) -> bool:
        """Has the epoch begun (``begin``) anything to receive or send (else the per-step calls are no-ops)?"""
        return bool(self._rplan or self.pending or self.inflight)

    def post_recvs(self, view: EpochView, t: int, buf: np.ndarray) -> None:
        """Irecvs straight into step t's batch buffer ``buf`` (rows) for its PEER accesses."""
        plan = self._rplan.get(t)
        if plan is None:
            return
        clock = self.ctx.clock
        t0 = clock()
        msgs, k, nb = plan
        comm = self.comm
        reqs = []
        for src, tag, js, ns in msgs:
            if len(js) == 1:
                reqs.append(comm.irecv(buf[js[0], :ns[0]], src, tag=tag))
            else:
                f = self._flat.get(id(buf))
                if f is None or f[0] is not buf:
                    f = self._flat[id(buf)] = (buf, flat_span(buf), int(buf.strides[0]))
                stride = f[2]
                reqs.append(comm.irecv_ranges(f[1], [j * stride for j in js], ns, src, tag=tag))
        self.recvs[t] = (reqs, k, nb)
        self.timeline.add(PHASE_ID["exchange"], t0, clock(), view.epoch, t, 0, PEER)

    def wait_recvs(self, view: EpochView, t: int, decode=None) -> None:
        """Complete step t's receives; ``decode(j, n)``: rows decoded from the received bytes (the format's decode step)."""
        item = self.recvs.pop(t, None)
        if item is None:
            return
        reqs, k, got = item
        clock = self.ctx.clock
        t0 = clock()
        for req in reqs:
            req.wait()
        t1 = clock()
        self.messages += len(reqs)
        self.samples_received += k
        self.bytes_received += got
        # the trainer's read of this step's peer samples: a ``read`` of the peer tier (bytes received)
        self.timeline.add(PHASE_ID["read"], t0, t1, view.epoch, t, got, PEER)
        if decode is not None:
            for _src, _tag, js, ns in self._rplan[t][0]:
                for j, n in zip(js, ns):
                    decode(j, n)
            self.timeline.add(PHASE_ID["decode"], t1, clock(), view.epoch, t, 0, PEER)

    def post_sends(self, view: EpochView, upto_step: int) -> None:
        """Post, in plan order, every pending message of a step ≤ ``upto_step`` whose samples this rank
        holds."""
        if not self.pending and not self.inflight:
            return
        clock = self.ctx.clock
        t0 = clock()
        posted = 0
        if self.inflight:
            self._reap()
        pending = self.pending
        while pending and pending[0][0] <= upto_step:
            step, dst, tag, sids, nbytes = pending[0]
            req = self._send(sids, nbytes, dst, tag)
            if req is None:    # not held yet (stored at the end of an earlier step) or evicted since: plan order
                break          # is kept, it is stored (again) later
            pending.popleft()
            self.bytes_sent += nbytes
            posted += 1
        if posted:
            self.timeline.add(PHASE_ID["exchange"], t0, clock(), view.epoch, max(upto_step, 0), 0, PEER)

    def _send(self, sids: list, nbytes: int, dst: int, tag: int):
        """Post one message, or return None (nothing held) if one of its samples is not held now. Samples all
        in memory go from their slots (pinned until the send completes: an eviction meanwhile cannot free
        them); otherwise every sample is copied, or read from the local tier, into a send buffer."""
        mem = self.stores.by_code.get(MEMORY)
        if mem is not None and mem.pin_many(sids):     # all in memory, pinned: sent from their slots
            tier = mem.tier
            if len(sids) == 1:
                req = self.comm.isend(tier.view(sids[0]), dst, tag=tag)
            else:
                offs, ns = tier.offsets(sids)
                req = self.comm.isend_ranges(tier.flat, offs, ns, dst, tag=tag)
            self.inflight.append((req, (mem, sids), None))
            return req
        holder = self.stores.holder
        sts: list[SampleStore] = []
        for sid in sids:
            st = holder(sid)
            if st is None:
                return None
            sts.append(st)
        k = self._pack_buffer(nbytes)
        buf, off = self.packs[k], 0
        for sid, st in zip(sids, sts):
            try:
                if st.code == MEMORY:      # a copy of the pinned slot (not a tier read, as a send from the slot)
                    if not st.pin(sid):
                        raise KeyError(sid)
                    try:
                        v = st.tier.view(sid)
                        buf[off:off + v.size] = v
                        n = v.size
                    finally:
                        st.release(sid)
                else:
                    n = st.read_pinned(sid, buf[off:], wait=False)
            except KeyError:
                self.free_packs.append(k)
                return None
            off += n
        req = self.comm.isend(buf[:off], dst, tag=tag)
        self.inflight.append((req, None, k))
        return req

    def _pack_buffer(self, nbytes: int) -> int:
        """A free send buffer of at least ``nbytes`` (page-aligned; a new one if none is free)."""
        for i, k in enumerate(self.free_packs):
            if self.packs[k].size >= nbytes:
                return self.free_packs.pop(i)
        self.packs.append(aligned_empty(max(int(nbytes), self.max_row), np.uint8))
        return len(self.packs) - 1

    def first_pending_step(self) -> int | None:
        """The step of the earliest send not posted yet (None: all posted)."""
        return self.pending[0][0] if self.pending else None

    def _reap(self) -> None:
        keep = []
        for item in self.inflight:
            if item[0].test():
                self._done(item)
            else:
                keep.append(item)
        self.inflight = keep

    def _done(self, item) -> None:
        _req, pins, k = item
        if pins is not None:
            pins[0].release_many(pins[1])
        if k is not None:
            self.free_packs.append(k)

    def finish(self, view: EpochView) -> None:
        """End of epoch: every send posted and completed (receivers post all their receives this epoch)."""
        if self.pending:
            self.post_sends(view, 1 << 62)
        if self.pending:
            step, dst, _tag, sids, _n = self.pending[0]
            missing = [s for s in sids if self.stores.holder(s) is None] or sids
            raise RunError(f"plan of epoch {view.epoch}: rank {self.ctx.rank} must send sample {missing[0]} to rank "
                           f"{dst} at step {step} but never held it")
        for item in self.inflight:
            item[0].wait()
            self._done(item)
        self.inflight = []

    def stats(self) -> dict:
        """As run.json's ``tiers.peer`` (class doc)."""
        return {"messages": self.messages, "samples": self.samples_received, "bytes": self.bytes_received,
                "bytes_sent": self.bytes_sent}


PROLOGUE_CHUNK_BYTES = 16 << 20   # at most this much per message of the prologue's peer rows (>= 1 sample)
PROLOGUE_TAG = 11
EXCHANGE_TAG = 23


def _pair_chunks(keys: np.ndarray, nbytes: np.ndarray, cap: int) -> dict[int, list[np.ndarray]]:
    """Rows (indices into ``keys``) per key value, in row order, cut into chunks of at most ``cap`` bytes
    (a chunk holds at least one row): the messages between one pair of ranks."""
    out: dict[int, list[np.ndarray]] = {}
    for k in np.unique(keys).tolist():
        rows = np.nonzero(keys == k)[0]
        cum = np.cumsum(nbytes[rows])
        cut = (cum - 1) // cap
        out[int(k)] = [rows[cut == c] for c in np.unique(cut)]
    return out


class Stager(Stage):
    """The plan's prologue for this rank (epoch −1): its reads of the shared tier into its own tiers, then
    the peer rows (staging's distribution between storage groups) as non-blocking MPI: the rows between one
    sender and one receiver go in messages of at most ``PROLOGUE_CHUNK_BYTES``, one per pair per round
    (every pair's i-th message in round i), packed from the sender's store and stored by the receiver as it
    arrives. Recorded: one ``read`` per shared-tier row, one ``exchange`` interval per round (bytes
    received, tier PEER), one ``stage`` interval over the whole prologue (bytes written), and the epoch −1
    mark."""

    def __init__(self, ctx, stores: Stores, reader, max_row: int, timeline):
        self.ctx, self.stores, self.reader, self.tl = ctx, stores, reader, timeline
        self.max_row = int(max_row)
        self.sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (ctx.n_samples,))
        self.reads = self.read_bytes = self.written = 0
        self.messages = self.bytes_received = self.bytes_sent = self.samples_received = 0
        self.stage_s = 0.0

    def run(self, pro) -> None:
        ctx, tl, clock = self.ctx, self.tl, self.ctx.clock
        me = ctx.rank
        reads, sends, recvs = pro.reads(me), pro.sends(me), pro.recvs(me)
        if not (len(reads) or len(sends) or len(recvs)):
            return
        READ, STAGE = PHASE_ID["read"], PHASE_ID["stage"]
        buf = aligned_rows(1, self.max_row)[0]
        read_into, stores, add = self.reader.read_into, self.stores, tl.add
        t_start = clock()
        written = nbytes = 0
        for sid, dst in zip(pro.sample[reads].tolist(), pro.dst[reads].tolist()):
            t0 = clock()
            n = read_into(sid, buf)
            add(READ, t0, clock(), -1, 0, n, SHARED)
            written += stores[dst].put(sid, buf[:n])
            nbytes += n
        self.reads += len(reads)
        self.read_bytes += nbytes
        if len(sends) or len(recvs):
            written += self._transfer(pro, sends, recvs)
        t_end = clock()
        codes = set(pro.dst[np.concatenate([reads, recvs])].tolist())
        add(STAGE, t_start, t_end, -1, 0, written, MEMORY if MEMORY in codes else LOCAL)
        tl.mark_epoch(-1, t_start, t_end)
        self.written += written
        self.stage_s = (t_end - t_start) * 1e-9

    def _transfer(self, pro, sends: np.ndarray, recvs: np.ndarray) -> int:
        """The peer rows: returns the bytes stored."""
        comm, sizes, stores = self.ctx.comm, self.sizes, self.stores
        out_c = _pair_chunks(pro.rank[sends], sizes[pro.sample[sends]], PROLOGUE_CHUNK_BYTES)
        in_c = _pair_chunks(pro.peer[recvs], sizes[pro.sample[recvs]], PROLOGUE_CHUNK_BYTES)
        rounds = max([len(c) for c in out_c.values()] + [len(c) for c in in_c.values()] + [0])
        clock, add = self.ctx.clock, self.tl.add
        EXCH = PHASE_ID["exchange"]
        written = 0
        for i in range(rounds):
            t0 = clock()
            reqs, inbox, keep = [], [], []
            for src, cs in in_c.items():
                if i < len(cs):
                    rows = recvs[cs[i]]
                    b = aligned_empty(int(sizes[pro.sample[rows]].sum()))
                    reqs.append(comm.irecv(b, src, tag=PROLOGUE_TAG))
                    inbox.append((rows, b))
            for dst, cs in out_c.items():
                if i < len(cs):
                    ids = pro.sample[sends[cs[i]]].tolist()
                    b = aligned_empty(int(sizes[ids].sum()))
                    off = 0
                    for sid in ids:
                        st = stores.holder(sid)
                        if st is None:
                            raise RunError(f"prologue: rank {self.ctx.rank} must send sample {sid} to rank {dst} "
                                           f"but does not hold it")
                        off += st.tier.read_into(sid, b[off:])
                    keep.append(b)
                    reqs.append(comm.isend(b, dst, tag=PROLOGUE_TAG))
                    self.bytes_sent += b.nbytes
            for r in reqs:
                r.wait()
            got = 0
            for rows, b in inbox:
                off = 0
                for sid, dst in zip(pro.sample[rows].tolist(), pro.dst[rows].tolist()):
                    n = int(sizes[sid])
                    written += stores[dst].put(sid, b[off:off + n])
                    off += n
                got += b.nbytes
                self.messages += 1
                self.samples_received += len(rows)
            self.bytes_received += got
            add(EXCH, t0, clock(), -1, 0, got, PEER)
        return written

    def stats(self) -> dict:
        """The prologue's shared-tier ``reads``/``read_bytes``, the bytes it stored (``written``), its time
        (``stage_s``) and its peer traffic (``messages``/``samples``/``bytes`` received, ``bytes_sent``)."""
        return {"reads": self.reads, "read_bytes": self.read_bytes, "written": self.written,
                "stage_s": self.stage_s, "messages": self.messages, "samples": self.samples_received,
                "bytes": self.bytes_received, "bytes_sent": self.bytes_sent}


class Exchange(EpochStage):
    """An epoch's background transfers (``EpochPlan.transfers``: pls's exchange) for this rank. Step t's
    rows are posted when step t starts (``post``: one message per peer, non-blocking, so the transfer
    overlaps the step's compute) and completed when it ends (``complete``): the receiver stores what came in
    (it belongs to its store from the next step on), and for a move (``Transfers.move``) the sender drops
    what it sent. Memory tier: sent straight from the samples' slots, received straight into slots reserved
    for new samples (a sample held already goes to a scratch row and only its reference counts). Local tier:
    the files are read into preallocated page-aligned rows and sent from there; received into page-aligned
    rows, written as files on completion. Recorded: one ``exchange`` interval (tier PEER) for posting and
    one for completing (bytes received) a step's transfers."""

    def __init__(self, ctx, stores: Stores, timeline, *, tag: int = EXCHANGE_TAG):
        self.ctx, self.stores, self.tl, self.tag = ctx, stores, timeline, int(tag)
        self.sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (ctx.n_samples,))
        self.row = max(int(self.sizes.max()) if len(self.sizes) else 1, 1)
        self.sendrows = self.recvrows = aligned_rows(0, self.row)
        self._rows: tuple | None = None
        self._pending: tuple | None = None
        self.bytes_sent = self.bytes_received = self.messages = self.samples_received = 0
        self.steps = 0
        self.wait_s = 0.0

    def begin(self, view) -> None:
        """This rank's rows of the epoch's transfers; the page-aligned send and receive rows grown to the most
        samples it sends or receives in one step (faulted in now, not on the step's clock)."""
        t = view.plan_epoch.transfers
        me = self.ctx.rank
        if t is None or not len(t):
            self._rows = None
            return
        snd, rcv = t.sends(me), t.recvs(me)
        self._rows = (t, snd, t.step[snd], rcv, t.step[rcv])
        worst = max([int(np.unique(t.step[r], return_counts=True)[1].max()) for r in (snd, rcv) if len(r)] + [1])
        if worst > len(self.sendrows):
            self.sendrows = aligned_rows(worst, self.row)
            self.recvrows = aligned_rows(worst, self.row)
            self.sendrows[:, ::PAGE] = 0
            self.recvrows[:, ::PAGE] = 0

    def post(self, view, s: int) -> None:
        """Post step ``s``'s sends and receives."""
        if self._rows is None:
            return
        t, snd, snd_step, rcv, rcv_step = self._rows
        a, b = np.searchsorted(snd_step, [s, s + 1])
        c, d = np.searchsorted(rcv_step, [s, s + 1])
        if a == b and c == d:
            return
        ctx, comm, sizes = self.ctx, self.ctx.comm, self.sizes
        clock = ctx.clock
        t0 = clock()
        store = self.stores[t.tier]
        tier = store.tier
        memory = t.tier == MEMORY
        reqs, direct, scratch, nrecv = [], [], [], 0
        j = 0
        rows_in = rcv[c:d]
        n_in = len(np.unique(t.src[rows_in]))
        for src in np.unique(t.src[rows_in]).tolist():     # one message per sender, in row order
            parts = []
            for sid in t.sample[rows_in[t.src[rows_in] == src]].tolist():
                n = int(sizes[sid])
                if memory and sid not in store.refs and sid not in direct:
                    parts.append(tier.reserve(sid, n))
                    direct.append(sid)
                else:      # local tier, or held already (only the reference counts)
                    parts.append(self.recvrows[j, :n])
                    scratch.append((sid, j, n))
                    j += 1
                nrecv += n
            reqs.append(comm.irecv_parts(parts, src, tag=self.tag))
        rows_out = snd[a:b]
        send_ids = t.sample[rows_out].tolist()
        nsent = 0
        j = 0
        for dst in np.unique(t.dst[rows_out]).tolist():
            ids = t.sample[rows_out[t.dst[rows_out] == dst]].tolist()
            if memory:
                parts = [tier.view(sid) for sid in ids]
                c_ = tier.counters
                c_.reads += len(parts)
                c_.read_bytes += sum(int(p.nbytes) for p in parts)
            else:
                parts = []
                for sid in ids:
                    parts.append(self.sendrows[j, :tier.read_into(sid, self.sendrows[j])])
                    j += 1
            nsent += sum(int(p.nbytes) for p in parts)
            reqs.append(comm.isend_parts(parts, dst, tag=self.tag))
        self._pending = (reqs, n_in, send_ids if t.move else [], direct, scratch, nsent, nrecv, store)
        self.tl.add(PHASE_ID["exchange"], t0, clock(), view.epoch, s, 0, PEER)

    def complete(self, view, s: int) -> None:
        """Complete step ``s``'s transfers: wait, store what came in, drop what was moved away."""
        if self._pending is None:
            return
        reqs, n_in, moved, direct, scratch, nsent, nrecv, store = self._pending
        self._pending = None
        clock = self.ctx.clock
        t0 = clock()
        for r in reqs:
            r.wait()
        t1 = clock()
        for sid in direct:
            store.adopt(sid)
        if scratch:
            rows = self.recvrows
            store.put_many([(sid, rows[j, :n]) for sid, j, n in scratch])
        for sid in moved:
            store.release(sid)
        self.tl.add(PHASE_ID["exchange"], t0, clock(), view.epoch, s, nrecv, PEER)
        self.wait_s += (t1 - t0) * 1e-9
        self.bytes_sent += nsent
        self.bytes_received += nrecv
        self.messages += n_in
        self.samples_received += len(direct) + len(scratch)
        self.steps += 1

    def finish(self, view) -> None:
        """End of epoch: nothing in flight (a step posted and not completed is a caller's bug)."""
        if self._pending is not None:
            raise RunError(f"epoch {view.epoch}: rank {self.ctx.rank} ended with a transfer in flight")
        self._rows = None

    def stats(self) -> dict:
        """``bytes_sent``/``bytes_received`` and ``samples`` received over all epochs; ``messages``: steps with a
        transfer (pls's exchanges); ``mpi_messages``: MPI messages received (one per sender per step);
        ``wait_s``: time completing them."""
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received, "messages": self.steps,
                "mpi_messages": self.messages, "samples": self.samples_received, "wait_s": self.wait_s}


__all__ = ["Stager", "Exchange", "SampleStore", "Stores", "Ring", "EpochView", "Loader", "Filler", "PeerPush", "NO_TIER", "LOCAL", "MEMORY"]
