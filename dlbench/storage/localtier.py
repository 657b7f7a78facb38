"""The node-local tier's directories for one run and their clean-up on every exit path: what staging, local and
pls store under ``--local-dir`` (``open_local_tier`` / ``remove_local_tier``), the owner and stop markers of
the ranks using a run directory, the node's guardian process (``spawn_reaper``) and the removal of directories
left by killed runs (``remove_stale_run_dirs``).

Layout: ``<local-dir>/run-<tag>/node<k>/`` (one copy per node, shared by the node's ranks) or
``node<k>/rank<r>/`` (a rank's own shard); markers ``.owner-<host>-<pid>`` and ``.stop-<host>-<pid>`` in the
run directory."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from .counters import CounterSet
from .tiers import LocalTier, check_local_dir


def open_local_tier(comm, base: Path | None, *, node: int, rank: int, first_of_node: bool, need_per_node: int,
                    cap: int, private: bool, direct: bool = False,
                    io_counters: CounterSet | None = None) -> tuple[LocalTier, Path, list]:
    """Rank ``rank``'s (on node ``node``) node-local tier under ``base`` (``--local-dir``; None:
    ``dlbench-local``) for one run: (tier, the run's directory, stale run directories removed). Collective over
    ``comm`` (rank 0's tag names the run directory ``run-<tag>``, broadcast first, so a rank that raises below
    does not leave the others waiting in the broadcast). Removes the copies of killed runs
    (``remove_stale_run_dirs``), checks the free space for ``need_per_node`` bytes (what all the node's ranks
    store there together), opens a tier of ``cap`` bytes in ``node<k>/rank<r>`` (``private``) or ``node<k>``
    (shared by the node's ranks; ``direct``: O_DIRECT reads, ``--cache direct``) and marks this rank an owner
    of the run directory (undone by ``remove_local_tier``); the node's first rank (``first_of_node``) starts
    the node's guardian."""
    tag = comm.bcast(f"{os.getpid()}-{time.time_ns()}" if comm.rank == 0 else None)
    base = Path(base) if base is not None else Path("dlbench-local")
    stale = remove_stale_run_dirs(base)  # copies of runs killed before they could clean up
    check_local_dir(base, int(need_per_node))
    root = base / f"run-{tag}"
    tier = LocalTier(root, int(node), max(int(cap), 1), check_free=False,
                     subdir=f"rank{rank}" if private else "", direct=direct,
                     io_counters=(io_counters.new("local", threadsafe=True) if io_counters is not None else None))
    (root / owner_marker()).touch()
    comm.barrier()       # every rank's owner marker is in place before any of them can stop (peers to signal)
    if first_of_node:
        spawn_reaper(root)   # the node's guardian: removes the run directory if every owner dies (SIGKILL)
    return tier, root, stale


PEER_WAIT_S = 5.0     # how long an interrupted rank waits for its node's other ranks to release their copies
REAPER_POLL_S = 0.25  # how often the node's guardian looks at the owners of its run directory


def remove_local_tier(root: Path, *, node: int, rank: int, private: bool, done: bool, interrupted: bool) -> str:
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
    node_dir = root / f"node{int(node)}"
    mine = node_dir / f"rank{int(rank)}" if private else None
    if done:
        if mine is not None:
            shutil.rmtree(mine, ignore_errors=True)
        release_run_dir(root, node_dir)
        return f"local copies under {root} removed"
    if interrupted:
        from ..stop import pending

        _write_stop_marker(root, pending() or "SIGINT", rank)
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
