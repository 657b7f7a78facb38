"""What staging, local and pls share: options, capacity checks, a rank's store of local copies, and the
executor that fills it in a prologue (reads of the shared tier, then MPI distribution between storage
groups) and then delivers every step from it (plus, for pls, a non-blocking exchange per step).

Storage. ``tier=local``: files under ``--local-dir``/run-<tag>/node<k>/ (staging: one copy per node, shared
by the node's ranks) or node<k>/rank<r>/ (local, pls: a rank's shard). ``tier=memory``: a page-aligned slab
in the rank's process (every rank its own copy). A ``SampleStore`` counts references per sample id, so a
sample that sits twice in one shard (DistributedSampler's padding, or received while still held) is stored
once and removed with its last reference.

Recording. Prologue (epoch −1): one ``read`` per sample from the shared tier (tier SHARED), ``exchange``
intervals of the distribution between nodes (tier PEER, bytes received), and one ``stage`` interval over
the whole prologue (bytes written locally); ``mark_epoch(-1, ...)``. Epochs: one ``read`` per sample from
the store (tier LOCAL or MEMORY) and, for JPEG workloads, a ``decode``; pls adds ``exchange`` intervals
for the CPU time of posting (packing) and completing (waiting, storing) each step's exchange.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import opt
from ..errors import CapacityError, RunError
from ..plan import LOCAL, MEMORY, PEER, SHARED, Plan
from ..storage import PAGE, LocalTier, MemoryTier, aligned_empty, aligned_rows, check_local_dir
from ..timeline import PHASE_ID
from .base import Batch, Executor, RunContext
from .naive import sync_read_epoch
from .stages import SampleStore

TIER_CODES = {"local": LOCAL, "memory": MEMORY}
CHUNK_BYTES = 16 << 20  # at most this much per message of the staging distribution


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


def pipeline_for(threads: int) -> dict:
    """Plan keywords (``pipeline``, ``loader_threads``) for the loader an executor runs (what ``dlbench
    simulate`` costs): ``threads`` loader threads per rank reading ahead, or 0: the trainer reads
    synchronously. The one rule (``cache.pipeline_of`` for options, ``set_pipeline`` for built plans)."""
    t = int(threads)
    return {"pipeline": "prefetch" if t > 0 else "sync", "loader_threads": t if t > 0 else 1}


def set_pipeline(plan: Plan, threads: int) -> Plan:
    """Record ``pipeline_for(threads)`` on a built plan."""
    kw = pipeline_for(threads)
    plan.pipeline, plan.loader_threads = kw["pipeline"], kw["loader_threads"]
    return plan


def groups_of(ctx: RunContext, tier: str) -> np.ndarray:
    """Storage group of every rank: its node for a node-local directory, itself for process memory."""
    return np.asarray(ctx.node_map, dtype=np.int64) if tier == "local" else np.arange(ctx.world_size)


def capacity_per_group(ctx: RunContext, options) -> tuple[float, str]:
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


def capacity_sizes(ctx: RunContext, tier: str) -> np.ndarray:
    """Bytes a sample takes in the tier: its size on disk (local), a page-aligned slot of the largest row
    (memory: MemoryTier's slots)."""
    sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (ctx.n_samples,))
    if tier == "memory":
        stride = -(-max(int(sizes.max()) if len(sizes) else 1, 1) // PAGE) * PAGE
        return np.full(ctx.n_samples, stride, dtype=np.int64)
    return sizes


def fmt_bytes(n: float) -> str:
    return f"{int(n):,} bytes ({n / 1e9:.3g} GB)"


def check_capacity(need_per_group: np.ndarray, cap: float, src: str, what: str) -> None:
    worst = float(np.max(need_per_group)) if len(need_per_group) else 0.0
    if worst > cap:
        raise CapacityError(f"{src}: too small: {what} needs {fmt_bytes(worst)} per node, {fmt_bytes(cap)} "
                            f"available; pass --local-capacity BYTES, use more nodes, or choose another strategy")


class LocalCopyExecutor(Executor):
    """Prologue: read this rank's prologue samples from the shared tier into the store; if
    ``plan.prologue.allgather``, send every piece to one rank of every other storage group (MPI, chunked,
    non-blocking). Epochs: deliver each step from the store. Subclasses hook ``_before_step`` /
    ``_after_step`` (pls's exchange)."""

    def __init__(self, ctx: RunContext, plan: Plan, options, *, private: bool):
        self.ctx, self.plan, self.options = ctx, plan, options
        self.kind = options.tier
        self.code = TIER_CODES[self.kind]
        self.private = private            # a rank-private store (local, pls) or one per group (staging)
        self.groups = groups_of(ctx, self.kind)
        self.sizes = np.broadcast_to(np.asarray(ctx.sample_nbytes, dtype=np.int64), (plan.n_samples,))
        self.reader = ctx.reader_factory()
        self.max_row = int(self.reader.max_row_nbytes)
        self.jpeg = ctx.workload.format.decodes
        b = plan.local_batch
        if self.jpeg:
            self.raw = aligned_rows(1, self.max_row)[0]
            self.rows = aligned_rows(b, ctx.workload.decoded_nbytes)
        else:
            self.rows = aligned_rows(b, self.max_row)
        self.store: SampleStore | None = None
        self.root: Path | None = None
        self.done = False
        self.shared = {"reads": 0, "bytes": 0}
        self.peer = {"messages": 0, "bytes_received": 0, "bytes_sent": 0}
        self.stage_s = 0.0
        self._loader = None
        self.stale_removed: list[str] = []
        self.cleanup_note = ""            # what close() did with the local copies (for the run's message)

    # ---- storage -----------------------------------------------------------------------------------
    def store_need_bytes(self) -> int:
        """Bytes this rank's store object must be able to hold."""
        raise NotImplementedError

    def _open_store(self) -> SampleStore:
        ctx = self.ctx
        need = int(self.store_need_bytes())
        if self.kind == "memory":
            stride = -(-max(self.max_row, 1) // PAGE) * PAGE
            slots = max(1, -(-need // stride))   # need is in slot bytes (capacity_sizes)
            cap, src = capacity_per_group(ctx, self.options)
            if slots * stride > cap:
                raise CapacityError(f"{src}: too small: {slots} samples in page-aligned slots need "
                                    f"{fmt_bytes(slots * stride)} in rank {ctx.rank}'s memory, {fmt_bytes(cap)} "
                                    f"available; pass --local-capacity BYTES or use --tier local")
            io = ctx.io_counters.new("memory", threadsafe=True) if ctx.io_counters is not None else None
            return SampleStore(MemoryTier(slots * stride, self.max_row, io_counters=io), MEMORY)
        node_ranks = int(np.sum(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank]))
        tier, self.root, self.stale_removed = open_local_tier(ctx, need * (node_ranks if self.private else 1),
                                                              need, private=self.private)
        return SampleStore(tier, LOCAL)

    # ---- prologue ----------------------------------------------------------------------------------
    def start(self) -> None:
        ctx, plan = self.ctx, self.plan
        tl, clock = ctx.timeline, ctx.clock
        READ, STAGE = PHASE_ID["read"], PHASE_ID["stage"]
        self.store = self._open_store()
        t_start = clock()
        pro = plan.prologue
        mine = pro.sample[pro.rank == ctx.rank]
        buf = aligned_rows(1, self.max_row)[0]
        written = 0
        read_into, put, add = self.reader.read_into, self.store.put, tl.add
        for sid in mine.tolist():
            t0 = clock()
            n = read_into(sid, buf)
            add(READ, t0, clock(), -1, 0, n, SHARED)
            written += put(sid, buf[:n])
            self.shared["reads"] += 1
            self.shared["bytes"] += n
        if pro.allgather:
            written += self._distribute()
        t_end = clock()
        add(STAGE, t_start, t_end, -1, 0, written, self.code)
        tl.mark_epoch(-1, t_start, t_end)
        self.stage_s = (t_end - t_start) * 1e-9

    def _distribute(self) -> int:
        """Every group must hold every piece: rank p sends its piece to the rank of each other group at
        position (p's position in its group) mod (group size); chunks of ≤ CHUNK_BYTES, non-blocking,
        in rounds. Returns bytes stored."""
        ctx, comm, plan = self.ctx, self.ctx.comm, self.plan
        W, me = plan.world_size, ctx.rank
        groups = self.groups
        members = {int(g): np.nonzero(groups == g)[0] for g in np.unique(groups)}
        pos = {int(r): int(np.nonzero(members[int(groups[r])] == r)[0][0]) for r in range(W)}
        pro = plan.prologue
        pieces = [pro.sample[pro.rank == p] for p in range(W)]

        def chunks(p: int) -> list[np.ndarray]:
            ids = pieces[p]
            cum = np.cumsum(self.sizes[ids])
            cut = (cum - 1) // CHUNK_BYTES if len(ids) else cum
            return [ids[cut == c] for c in np.unique(cut)]

        sends = [(g_mem[pos[me] % len(g_mem)], c) for g, g_mem in members.items() if g != groups[me]
                 for c in [chunks(me)]]
        recvs = [(p, chunks(p)) for p in range(W) if groups[p] != groups[me]
                 and members[int(groups[me])][pos[p] % len(members[int(groups[me])])] == me]
        rounds = max([len(c) for _, c in sends] + [len(c) for _, c in recvs] + [0])
        clock, add = ctx.clock, ctx.timeline.add
        EXCH = PHASE_ID["exchange"]
        written = 0
        for i in range(rounds):
            t0 = clock()
            reqs, inbox, keep = [], [], []
            for src, cs in recvs:
                if i < len(cs):
                    ids = cs[i]
                    buf = aligned_empty(int(self.sizes[ids].sum()))
                    reqs.append(comm.irecv(buf, src, tag=11))
                    inbox.append((ids, buf))
            for dst, cs in sends:
                if i < len(cs):
                    ids = cs[i]
                    buf = aligned_empty(int(self.sizes[ids].sum()))
                    off = 0
                    for sid in ids.tolist():
                        off += self.store.tier.read_into(sid, buf[off:])
                    keep.append(buf)
                    reqs.append(comm.isend(buf, int(dst), tag=11))
                    self.peer["bytes_sent"] += buf.nbytes
            for r in reqs:
                r.wait()
            got = 0
            for ids, buf in inbox:
                off = 0
                for sid in ids.tolist():
                    n = int(self.sizes[sid])
                    written += self.store.put(sid, buf[off:off + n])
                    off += n
                got += buf.nbytes
                self.peer["messages"] += 1
            self.peer["bytes_received"] += got
            add(EXCH, t0, clock(), -1, 0, got, PEER)
        return written

    # ---- epochs ------------------------------------------------------------------------------------
    def _before_step(self, e: int, s: int) -> None:
        return None

    def _after_step(self, e: int, s: int) -> None:
        return None

    def epoch(self, e: int) -> Iterator[Batch]:
        if self.options.loader_threads:
            yield from self._threaded_epoch(e)
        else:
            yield from sync_read_epoch(self.ctx, self.plan, e, self.rows, self.store.read_into, self.code,
                                       raw=self.raw if self.jpeg else None,
                                       decode=self.reader.decode_into if self.jpeg else None,
                                       before_step=self._before_step, after_step=self._after_step)
        if e == self.plan.epochs - 1:
            self.done = True

    def _threaded_epoch(self, e: int) -> Iterator[Batch]:
        """Loader threads (stages.Loader) read the local copies up to ``window`` steps ahead into a ring."""
        from .stages import EpochView, Loader, Ring, Stores

        if self._loader is None:
            b = int(self.plan.local_batch)
            depth = self.options.window + 1
            self._ring = Ring(depth, b, self.rows.shape[1])
            self._raw_ring = Ring(depth, b, self.max_row) if self.jpeg else None
            # the copies are in place before epoch 0 (prologue + barrier): no waiting for samples
            self._loader = Loader(self.ctx, Stores({self.code: self.store}), self._ring, self.options.loader_threads,
                                  self._raw_ring, self.ctx.timeline, wait_for_samples=False)
        view = EpochView(self.plan, e, self.ctx.rank, transfers_handled=True)   # pls's hooks move them
        loader = self._loader
        loader.begin(view)
        try:
            for s in range(view.steps):
                self._before_step(e, s)
                loader.wait(s)
                b0, b1 = int(view.bounds[s]), int(view.bounds[s + 1])
                yield Batch(self._ring[s], view.ids[b0:b1], b1 - b0)
                self._after_step(e, s)
                loader.release(s)
        finally:
            loader.end()

    def extra_timelines(self) -> list:
        return self._loader.timelines if self._loader is not None else []

    # ---- figures and cleanup -----------------------------------------------------------------------
    def stats(self) -> dict:
        st = self.store
        tier_stats = st.tier.stats() if st is not None else {}
        out = {
            "tiers": {
                "shared": {"reads": self.shared["reads"], "bytes": self.shared["bytes"]},
                self.kind: {"reads": st.reads if st else 0, "bytes": st.read_bytes if st else 0,
                            "writes": tier_stats.get("writes", 0), "write_bytes": tier_stats.get("write_bytes", 0),
                            "deletes": tier_stats.get("deletes", 0), "peak_capacity_bytes": tier_stats.get(
                                "capacity_bytes", 0)},
                "peer": {"messages": self.peer["messages"], "bytes": self.peer["bytes_received"],
                         "bytes_sent": self.peer["bytes_sent"]},
            },
            "stage_s": self.stage_s,
        }
        if self.stale_removed:
            out["stale_local_dirs_removed"] = list(self.stale_removed)
        if hasattr(self.reader, "stats"):
            out["shared_tier_throttle"] = self.reader.stats()
        return out

    def close(self) -> None:
        """Delete the local copies on every exit path. After a complete run: wait for the node's ranks, delete
        this rank's copies and the directories that are then empty. After a failure or an interrupt (no
        barrier: other ranks may be gone): remove this rank's directory (rank-private stores) or the node's
        (staging), then this rank's owner marker and the run directory if empty; after an interrupt (every
        rank stops) the whole run directory of this host. A rank killed before it gets
        here leaves its copies to ``remove_stale_run_dirs`` of the next run. ``cleanup_note`` says what was
        done."""
        try:
            if self.root is None:                 # memory tier (freed with the process), or nothing staged yet
                return
            done = self.done and self.store is not None
            if done:
                self.ctx.comm.barrier()      # nobody on the node still reads a shared copy
                self.store.clear()
            self.cleanup_note = remove_local_tier(self.ctx, self.root, private=self.private, done=done,
                                                  interrupted=self.interrupted)
        finally:
            if self._loader is not None:
                self._loader.close()
            self.reader.close()


def open_local_tier(ctx: RunContext, need_per_node: int, cap: int, *, private: bool) -> tuple[LocalTier, Path, list]:
    """The rank's node-local tier under ``--local-dir`` for one run: (tier, the run's directory, stale run
    directories removed). Collective (rank 0's tag names the run directory ``run-<tag>``, broadcast first, so a
    rank that raises below does not leave the others waiting in the broadcast). Removes the copies of killed
    runs (``remove_stale_run_dirs``), checks the free space for ``need_per_node`` bytes (what all the node's
    ranks store there together), opens a tier of ``cap`` bytes in ``node<k>/rank<r>`` (``private``) or
    ``node<k>`` (shared by the node's ranks) and marks this rank an owner of the run directory (undone by
    ``remove_local_tier``)."""
    comm = ctx.comm
    tag = comm.bcast(f"{os.getpid()}-{time.time_ns()}" if comm.rank == 0 else None)
    base = Path(ctx.local_dir) if ctx.local_dir is not None else Path("dlbench-local")
    stale = remove_stale_run_dirs(base)  # copies of runs killed before they could clean up
    check_local_dir(base, int(need_per_node))
    root = base / f"run-{tag}"
    tier = LocalTier(root, int(ctx.node_map[ctx.rank]), max(int(cap), 1), check_free=False,
                     subdir=f"rank{ctx.rank}" if private else "",
                     io_counters=(ctx.io_counters.new("local", threadsafe=True)
                                  if ctx.io_counters is not None else None))
    (root / owner_marker()).touch()
    return tier, root, stale


def remove_local_tier(ctx: RunContext, root: Path, *, private: bool, done: bool, interrupted: bool) -> str:
    """Clean-up of ``open_local_tier``'s directories on every exit path (the caller has already cleared the
    tier after a complete run, ``done``): after a complete run the rank's directory (``private``); after an
    interrupt (every rank stops) the whole run directory of this host (the rank MPI_Abort kills next may never
    reach its own clean-up); after a failure this rank's directory (``private``) or the node's (the others
    still run until the abort reaches them). Then this rank's owner marker and the directories left empty.
    Returns what was done, for the run's message."""
    node_dir = root / f"node{int(ctx.node_map[ctx.rank])}"
    mine = node_dir / f"rank{ctx.rank}" if private else node_dir
    if done:
        if private:
            shutil.rmtree(mine, ignore_errors=True)
    elif interrupted:
        shutil.rmtree(root, ignore_errors=True)
    else:
        shutil.rmtree(mine, ignore_errors=True)
    release_run_dir(root, node_dir)
    return (f"could not remove the local copies in {mine}" if mine.exists() and not done
            else f"local copies under {root} removed")


def release_run_dir(root: Path, node_dir: Path) -> None:
    """This rank's owner marker out of the run directory, then the node's and the run's directories if
    that leaves them empty (other ranks of the node may still hold theirs)."""
    (root / owner_marker()).unlink(missing_ok=True)
    for d in (node_dir, root):
        try:
            d.rmdir()
        except OSError:
            pass


def owner_marker() -> str:
    """``.owner-<host>-<pid>``: one per rank in a run directory while the rank may hold copies there."""
    import socket

    return f".owner-{socket.gethostname()}-{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True                      # exists (another user's) or cannot tell: keep
    return True


def remove_stale_run_dirs(base: Path) -> list[str]:
    """Remove ``run-*`` directories under ``base`` whose every owner (``.owner-<host>-<pid>`` markers) is
    a dead process on this host: the copies of a run that was killed (SIGKILL, MPI_Abort of a peer) before
    its ranks could delete them. Directories without markers, with an owner on another host or with a live
    owner are left alone. Returns the removed paths."""
    import socket

    host = socket.gethostname()
    removed: list[str] = []
    try:
        runs = sorted(Path(base).glob("run-*"))
    except OSError:
        return removed
    for d in runs:
        owners = []
        try:
            for m in d.glob(".owner-*"):
                h, _, pid = m.name[len(".owner-"):].rpartition("-")
                owners.append((h, int(pid) if pid.isdigit() else -1))
        except OSError:
            continue
        if owners and all(h == host and pid > 0 and not _pid_alive(pid) for h, pid in owners):
            shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                removed.append(str(d))
    return removed


def check_delivery_order(plan: Plan) -> None:
    """Invariant of moving transfers (pls): a sample is sent no earlier than the step in which its sender
    trains on it (the sender deletes it when the exchange completes)."""
    for ep in plan:
        t = ep.transfers
        if t is None or not t.move:
            continue
        steps = ep.step_of_columns()
        for r in range(ep.world_size):
            rows = t.sends(r)
            if not len(rows):
                continue
            n = ep.bounds[r, -1]
            ids = ep.sample_ids[r, :n]
            order = np.argsort(ids, kind="stable")
            pos = order[np.searchsorted(ids[order], t.sample[rows])]
            if np.any(t.step[rows] < steps[r, pos]):
                raise RunError(f"{plan.strategy} plan: rank {r} epoch {ep.epoch} sends a sample before training on it")
