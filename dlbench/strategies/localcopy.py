"""What staging, local and pls share: options, capacity checks, the planned executor they run on
(``copies_executor``: one own tier holding the plan's local copies), and the node-local directories of those
copies with their clean-up on every exit path (``open_local_tier`` / ``remove_local_tier``, owner and stop
markers, the node's guardian process).

Storage. ``tier=local``: files under ``--local-dir``/run-<tag>/node<k>/ (staging: one copy per node, shared
by the node's ranks) or node<k>/rank<r>/ (local, pls: a rank's shard). ``tier=memory``: a page-aligned slab
in the rank's process (every rank its own copy). A ``SampleStore`` counts references per sample id, so a
sample that sits twice in one shard (DistributedSampler's padding, or received while still held) is stored
once and removed with its last reference.

Recording (``stages.Stager``, ``stages.Exchange``, ``stages.Loader``). Prologue (epoch −1): one ``read`` per
sample from the shared tier (tier SHARED), ``exchange`` intervals of the plan's peer rows between nodes (tier
PEER, bytes received), and one ``stage`` interval over the whole prologue (bytes written); ``mark_epoch(-1,
...)``. Epochs: one ``read`` per sample from the store (tier LOCAL or MEMORY) and, for a format with a decode
step (``Format.decoder``), a ``decode``; pls adds ``exchange`` intervals for posting and completing each step's transfers.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import opt
from ..errors import CapacityError, RunError
from ..plan import LOCAL, MEMORY, Plan
from ..storage import PAGE, LocalTier, check_local_dir
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


def pipeline_for(threads: int, window: int) -> dict:
    """Plan keywords (``pipeline``, ``loader_threads``, ``window``) for the loader the executor runs and
    ``dlbench simulate`` costs (``Plan.reader_threads``): ``threads`` loader threads per rank reading up to
    ``window`` steps ahead, or 0: the trainer reads synchronously. The one rule (``cache.pipeline_of`` for
    options, ``set_pipeline`` for built plans); the executors take the loader from the plan only."""
    t = int(threads)
    return {"pipeline": "prefetch" if t > 0 else "sync", "loader_threads": t if t > 0 else 1,
            "window": max(0, int(window))}


def set_pipeline(plan: Plan, threads: int, window: int) -> Plan:
    """Record ``pipeline_for(threads, window)`` on a plan the planner built."""
    kw = pipeline_for(threads, window)
    plan.pipeline, plan.loader_threads, plan.window = kw["pipeline"], kw["loader_threads"], kw["window"]
    return plan


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
    return f"{int(n):,} bytes ({n / 1e9:.3g} GB)"


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


def open_local_tier(ctx: RunContext, need_per_node: int, cap: int, *, private: bool) -> tuple[LocalTier, Path, list]:
    """The rank's node-local tier under ``--local-dir`` for one run: (tier, the run's directory, stale run
    directories removed). Collective (rank 0's tag names the run directory ``run-<tag>``, broadcast first, so a
    rank that raises below does not leave the others waiting in the broadcast). Removes the copies of killed
    runs (``remove_stale_run_dirs``), checks the free space for ``need_per_node`` bytes (what all the node's
    ranks store there together), opens a tier of ``cap`` bytes in ``node<k>/rank<r>`` (``private``) or
    ``node<k>`` (shared by the node's ranks) and marks this rank an owner of the run directory (undone by
    ``remove_local_tier``)."""
    comm = ctx.comm
    assert comm is not None, "a run's context: the comm"
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
    out: list[str] = []
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

    host, me = socket.gethostname(), os.getpid()
    out: list[int] = []
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
