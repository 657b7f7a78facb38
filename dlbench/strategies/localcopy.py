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
import signal
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
        self._barrier_passed = False

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
        mine = pro.sample[pro.reads(ctx.rank)]
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
        if (pro.src == PEER).any():
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
        pieces = [pro.sample[pro.reads(p)] for p in range(W)]

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
        # the shared tier: the prologue's reads, and the accesses a partial staging plan reads from it (counted
        # here by the synchronous trainer, by the loader threads in theirs)
        lo = self._loader
        sh_reads = self.shared["reads"] + (lo.shared_reads if lo is not None else 0)
        sh_bytes = self.shared["bytes"] + (lo.shared_bytes if lo is not None else 0)
        out = {
            "tiers": {
                "shared": {"reads": sh_reads, "bytes": sh_bytes},
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

    def peer_stop(self) -> tuple[str, int] | None:
        """(signal, rank) of another rank of this node that is stopping on a signal, or None (kept once
        seen: the last rank out removes the markers with the run directory)."""
        if getattr(self, "_peer_stop", None) is None:
            self._peer_stop = peer_stop(self.root)
        return self._peer_stop

    def close(self) -> None:
        """Delete the local copies on every exit path (idempotent: safe to call again). After a complete
        run: wait for the node's ranks, delete this rank's copies and the directories that are then empty.
        After a failure or an interrupt no rank removes files another live rank of the node may read:
        ``remove_local_tier`` (per-rank directories and owner markers, the last rank out removes the rest).
        ``cleanup_note`` says what was done."""
        try:
            if self.root is None:                 # memory tier (freed with the process), or nothing staged yet
                return
            done = self.done and self.store is not None and not self.interrupted
            if done and not self._barrier_passed:
                self.ctx.comm.barrier()      # nobody on the node still reads a shared copy
                self._barrier_passed = True
                self.store.clear()
            self.peer_stop()
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
                     subdir=f"rank{ctx.rank}" if private else "", direct=getattr(ctx, "cache", "keep") == "direct",
                     io_counters=(ctx.io_counters.new("local", threadsafe=True)
                                  if ctx.io_counters is not None else None))
    (root / owner_marker()).touch()
    comm.barrier()       # every rank's owner marker is in place before any of them can stop (peers to signal)
    node_ranks = np.nonzero(np.asarray(ctx.node_map) == ctx.node_map[ctx.rank])[0]
    if ctx.rank == int(node_ranks[0]):
        spawn_reaper(root)   # the node's guardian: removes the run directory if every owner dies (SIGKILL)
    return tier, root, stale


PEER_WAIT_S = 5.0     # how long an interrupted rank waits for its node's other ranks to release their copies
REAPER_POLL_S = 0.25  # how often the node's guardian looks at the owners of its run directory


def remove_local_tier(ctx: RunContext, root: Path, *, private: bool, done: bool, interrupted: bool) -> str:
    """Clean-up of ``open_local_tier``'s directories on every exit path (idempotent). No rank removes files
    that another live rank of its node may still read: the directories of a run are owned per rank
    (``node<k>/rank<r>``, and the owner marker ``.owner-<host>-<pid>``), the node's shared directory
    (staging) and the run directory are removed by the last owner out.

    - Complete run (``done``; the caller has passed a barrier and cleared the tier): the rank's directory
      (``private``), its marker, the directories left empty.
    - Interrupt: the rank writes its stop marker (``.stop-<host>-<pid>``: signal and rank), forwards SIGTERM
      to the node's other live owners (a SIGTERM sent to one rank stops the node's ranks the same way, each
      removing its own copies and reporting "interrupted"), removes its own directory (``private``) and its
      marker, and waits up to ``PEER_WAIT_S`` for the others to do the same; the last one out removes the
      run directory.
    - Failure: the same without the signal and the wait (the rank's error ends the job).

    A peer that cannot clean up (killed by MPI_Abort or by a launcher's SIGKILL after a second Ctrl-C, or
    blocked in a collective) leaves its marker: the node's guardian (``spawn_reaper``, started by the node's
    first rank when the tier opens) removes the run directory once every owner on this host has ended (and
    the next run's ``remove_stale_run_dirs`` catches anything left). Returns what was done, for the run's
    message."""
    node_dir = root / f"node{int(ctx.node_map[ctx.rank])}"
    mine = node_dir / f"rank{ctx.rank}" if private else None
    if done:
        if mine is not None:
            shutil.rmtree(mine, ignore_errors=True)
        release_run_dir(root, node_dir)
        return f"local copies under {root} removed"
    if interrupted:
        from ..stop import pending

        _write_stop_marker(root, pending() or "SIGINT", ctx.rank)
        for pid in live_peers(root, stopping=False):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
    if mine is not None:
        shutil.rmtree(mine, ignore_errors=True)
    (root / owner_marker()).unlink(missing_ok=True)
    if interrupted:
        t_end = time.monotonic() + PEER_WAIT_S
        while live_peers(root) and time.monotonic() < t_end:
            time.sleep(0.05)
    left = live_peers(root)
    if not left:
        shutil.rmtree(root, ignore_errors=True)
        return (f"could not remove the local copies in {root}" if root.exists()
                else f"local copies under {root} removed")
    return (f"this rank's local copies removed; {root} goes when the node's other "
            f"{'rank ends' if len(left) == 1 else f'{len(left)} ranks end'}")


def release_run_dir(root: Path, node_dir: Path) -> bool:
    """This rank's owner marker out of the run directory, under the directory's lock; returns True (and
    removes the run directory) when no live owner is left, else removes only directories left empty."""
    import fcntl

    try:
        lock = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:                       # the directory is gone already (an earlier call, or the last rank)
        return not root.exists()
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (root / owner_marker()).unlink(missing_ok=True)
        if not live_owners(root):
            shutil.rmtree(root, ignore_errors=True)
            return not root.exists()
        for d in (node_dir, root):
            try:
                d.rmdir()
            except OSError:
                pass
        return False
    finally:
        os.close(lock)


def live_owners(root: Path) -> list[str]:
    """The owner markers of ``root`` whose rank may still use it: a live pid on this host, or any owner on
    another host (cannot tell)."""
    import socket

    host = socket.gethostname()
    out = []
    try:
        markers = list(root.glob(".owner-*"))
    except OSError:
        return out
    for m in markers:
        h, _, pid = m.name[len(".owner-"):].rpartition("-")
        if h != host or not pid.isdigit() or _pid_alive(int(pid)):
            out.append(m.name)
    return out


def owner_marker() -> str:
    """``.owner-<host>-<pid>``: one per rank in a run directory while the rank may hold copies there."""
    import socket

    return f".owner-{socket.gethostname()}-{os.getpid()}"


def _write_stop_marker(root: Path, sig: str, rank: int) -> None:
    import socket

    try:
        (root / f".stop-{socket.gethostname()}-{os.getpid()}").write_text(f"{sig} {int(rank)}\n")
    except OSError:
        pass


def peer_stop(root: Path | None) -> tuple[str, int] | None:
    """(signal, rank) of the first other rank of this host that wrote a stop marker in ``root`` (it is
    being interrupted), or None. A read error of a local copy while a peer stops is that interrupt, not a
    data failure."""
    import socket

    if root is None:
        return None
    me = f".stop-{socket.gethostname()}-{os.getpid()}"
    try:
        marks = sorted((m for m in Path(root).glob(".stop-*") if m.name != me), key=lambda m: m.stat().st_mtime)
    except OSError:
        return None
    for m in marks:
        try:
            sig, rank = m.read_text().split()
            return sig, int(rank)
        except (OSError, ValueError):
            continue
    return None


def live_peers(root: Path, *, stopping: bool = True) -> list[int]:
    """Pids of the other live owners of ``root`` on this host (their ``.owner-<host>-<pid>`` markers);
    ``stopping=False``: only those not already stopping (no ``.stop-`` marker)."""
    import socket

    host, me, out = socket.gethostname(), os.getpid(), []
    try:
        names = os.listdir(root)
    except OSError:
        return out
    for n in names:
        if not n.startswith(".owner-"):
            continue
        h, _, pid = n[len(".owner-"):].rpartition("-")
        if h == host and pid.isdigit() and int(pid) != me and _pid_alive(int(pid)) and (
                stopping or f".stop-{h}-{pid}" not in names):
            out.append(int(pid))
    return out


_REAPER = """
import os, shutil, signal, socket, sys, time
root, poll = sys.argv[1], float(sys.argv[2])
# a stray kill by pid (it shows a python command line next to the ranks) must not take the safety net away:
# it ends when root is gone or its owners are dead, or by SIGKILL
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
host = socket.gethostname()
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
while True:
    try:
        names = os.listdir(root)
    except OSError:
        sys.exit(0)
    owners = [n[len(".owner-"):].rpartition("-") for n in names if n.startswith(".owner-")]
    if not any(h == host and p.isdigit() and alive(int(p)) for h, _, p in owners):
        if all(h == host for h, _, p in owners):
            shutil.rmtree(root, ignore_errors=True)
        sys.exit(0)
    time.sleep(poll)
"""


def spawn_reaper(root: Path) -> int | None:
    """The node's guardian of a run directory: a small detached process (own session, so neither MPI_Abort
    nor a launcher's kill of the job reaches it) that exits as soon as ``root`` is gone (the ranks removed
    it: the normal end) and removes ``root`` once every owner on this host has ended without doing so
    (SIGKILL, MPI_Abort, a launcher's force-abort on a second Ctrl-C). It looks every ``REAPER_POLL_S`` and
    ignores SIGTERM/SIGINT/SIGHUP (only SIGKILL stops it early). Returns its pid (None: it could not start)."""
    import subprocess
    import sys

    # not the benchmark's I/O: no preloaded tracer (LD_PRELOAD, dftracer's settings) follows it, or the trace
    # would hold a process that outlives the run (and may be cut short mid-record)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("DFTRACER_")}
    try:
        return subprocess.Popen([sys.executable, "-S", "-c", _REAPER, str(root), str(REAPER_POLL_S)],
                                start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, close_fds=True, env=env).pid
    except OSError:
        return None  # the next run's remove_stale_run_dirs removes it


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
    removed: list[str] = []
    try:
        runs = sorted(Path(base).glob("run-*"))
    except OSError:
        return removed
    for d in runs:
        try:
            owned = any(True for _ in d.glob(".owner-*"))
        except OSError:
            continue
        if owned and not live_owners(d):
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
