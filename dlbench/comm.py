"""Comm: the one way dlbench talks between ranks.

``get_comm()`` returns an ``MPIComm`` when the process runs under an MPI launcher (mpiexec, srun,
...) and a ``SerialComm`` otherwise; mpi4py is imported only inside ``MPIComm``. Comm is passed in,
never global. Sample bytes travel as NumPy buffers (``Isend``/``Irecv``/``Alltoallv``), never pickled.

Nodes: by default a rank's node is found with MPI's shared-memory split (ranks that share memory are
one node). ``ranks_per_node=K`` emulates several nodes on one machine: rank r is on node r // K.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import ConfigError

_MPI_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS",
            "SLURM_STEP_NUM_TASKS", "HYDRA_CONTROL_FD", "MPICH_INTERFACE_HOSTNAME")


def under_mpi_launcher() -> bool:
    """True when an MPI launcher started this process (so mpi4py must be initialised)."""
    if os.environ.get("DLBENCH_NO_MPI"):
        return False
    if os.environ.get("DLBENCH_FORCE_MPI"):
        return True
    env = os.environ
    if "SLURM_STEP_NUM_TASKS" in env and "PMI_FD" not in env and "PMIX_RANK" not in env \
            and "PMI_RANK" not in env and "OMPI_COMM_WORLD_SIZE" not in env:
        # srun without an MPI plugin environment: still launch MPI only if more than one task
        return int(env.get("SLURM_STEP_NUM_TASKS", "1")) > 1
    return any(k in env for k in _MPI_ENV)


class Request:
    """A pending non-blocking operation; ``wait()`` completes it."""

    def __init__(self, req: Any = None, keep: Any = None):
        self._req = req
        self._keep = keep   # buffers to keep alive until the operation is done

    def wait(self) -> None:
        if self._req is not None:
            self._req.Wait()
            self._req = None
            self._keep = None

    def test(self) -> bool:
        if self._req is None:
            return True
        done = self._req.Test()
        if done:
            self._req = None
            self._keep = None
        return bool(done)


class _Multi:
    """Several MPI requests completed together (``Wait`` = Waitall)."""

    def __init__(self, MPI: Any, reqs: list):
        self._MPI, self._reqs = MPI, reqs

    def Wait(self) -> None:
        self._MPI.Request.Waitall(self._reqs)

    def Test(self) -> bool:
        return bool(self._MPI.Request.Testall(self._reqs))


class Comm:
    """Interface shared by SerialComm and MPIComm."""

    rank: int = 0
    size: int = 1
    ranks_per_node: int = 1
    layout_source: str | None = None  # where the node layout came from (flag, allocation, shm split)

    # ---- layout ----------------------------------------------------------------------------
    def node_of(self, rank: int) -> int:
        return self._node_of[rank]

    @property
    def node(self) -> int:
        return self.node_of(self.rank)

    @property
    def nodes(self) -> int:
        return int(max(self._node_of)) + 1

    def node_ranks(self, node: int | None = None) -> list[int]:
        node = self.node if node is None else node
        return [r for r in range(self.size) if self._node_of[r] == node]

    @property
    def node_map(self) -> np.ndarray:
        """``node_map[r]`` = node of rank r (what planners take)."""
        return np.asarray(self._node_of, dtype=np.int64)

    def _set_layout(self, node_of: Sequence[int]) -> None:
        # renumber nodes 0..N-1 in order of first rank
        seen: dict[int, int] = {}
        self._node_of = [seen.setdefault(int(n), len(seen)) for n in node_of]
        counts = np.bincount(self._node_of)
        self.ranks_per_node = int(counts.max())

    # ---- collectives (implemented by subclasses) ------------------------------------------
    def barrier(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.barrier")

    def bcast(self, obj: Any, root: int = 0) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.bcast")

    def gather(self, obj: Any, root: int = 0) -> list | None:
        raise NotImplementedError(f"{type(self).__name__}.gather")

    def allgather(self, obj: Any) -> list:
        raise NotImplementedError(f"{type(self).__name__}.allgather")

    def allreduce(self, value: Any, op: str = "sum") -> Any:
        raise NotImplementedError(f"{type(self).__name__}.allreduce")

    def abort(self, message: str, code: int = 1) -> None:
        raise NotImplementedError(f"{type(self).__name__}.abort")

    # ---- failing as one job ----------------------------------------------------------------
    def agree(self, settings: dict, what: str = "the configuration") -> None:
        """Every rank must run with the same ``settings`` (a flat or nested dict of JSON-able values). One
        collective when they agree (an allgather of a SHA-256 of them); when they do not, every rank raises the
        same ConfigError naming the first setting (in rank 0's order) that differs and the ranks' values. Ranks
        started with different arguments (an MPMD line, a node with another environment) used to run
        mismatched collectives: a hang, or rank 0's settings silently run by every rank."""
        if self.size == 1:
            return
        digest = _settings_digest(settings)
        if len(set(self.allgather(digest))) == 1:
            return
        raise ConfigError(first_difference(self.allgather(_flat(settings)), what))

    def settle(self, exc: BaseException | None) -> None:
        """An agreed point: every rank tells whether it failed since the last one (``exc``, None: it did not).
        When any rank failed, every rank raises the lowest failed rank's error (its class and exit code, the
        message prefixed with the rank when the ranks disagree), marked ``once`` so the CLI prints it on rank 0
        only; no rank is left waiting in a collective for one that stopped. Serially: re-raises ``exc``."""
        if self.size == 1:
            if exc is not None:
                raise exc
            return
        mine = None if exc is None else _describe(exc)
        _raise_first(self.allgather(mine), self.rank, exc)


def _raise_first(said: Sequence, rank: int, exc: BaseException | None) -> None:
    """``Comm.settle``'s verdict from every rank's ``_describe`` (None: no failure)."""
    size = len(said)
    failed = [(r, m) for r, m in enumerate(said) if m is not None]
    if failed:
        r, (cls_name, msg, code) = failed[0]
        from . import errors

        cls = getattr(errors, cls_name, None)
        if not (isinstance(cls, type) and issubclass(cls, errors.DlbenchError)):
            cls = errors.RunError
        everyone_same = len(failed) == size and len({m[1] for _, m in failed}) == 1
        if not everyone_same:
            others = len(failed) - 1
            msg = f"rank {r}: {msg}" + (f" (and {others} other rank{'s' if others > 1 else ''} failed too)"
                                        if others else "")
        err = cls(msg)
        err.exit_code = code
        err.once = True  # type: ignore[attr-defined]
        if exc is not None:
            raise err from None
        raise err


def fail_together(exc: BaseException) -> None:
    """A rank of a multi-rank job that stopped before it created its comm (a bad flag on its command line
    only, checked before MPI starts) would leave the other ranks waiting in MPI's first collective forever.
    It starts MPI and joins that collective (``MPIComm``'s first allgather) with its error: every rank then
    raises the first failed rank's error (``once``), so the job ends as one. Raises that error; returns
    when there is no multi-rank launcher, no mpi4py, or MPI was already started (the comm's own checks
    apply then)."""
    if not under_mpi_launcher():
        return
    said = launcher_world_size()
    if said is None or said[1] <= 1:
        return
    mod = sys.modules.get("mpi4py.MPI")
    if mod is not None and mod.Is_initialized():
        return
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return
    MPIComm(startup_error=_describe(exc))


def _describe(exc: BaseException) -> tuple[str, str, int]:
    """(error class name, one-line message, exit code) of a rank's failure, for ``Comm.settle``."""
    from .errors import DlbenchError

    if isinstance(exc, DlbenchError):
        return type(exc).__name__, str(exc), int(exc.exit_code)
    return "RunError", " ".join(f"{type(exc).__name__}: {exc}".split()), 5


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _settings_digest(settings: dict) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(_flat(settings), sort_keys=True, default=repr).encode()).hexdigest()


def first_difference(settings: Sequence[dict], what: str = "the configuration") -> str:
    """The line for ranks that disagree: the first key of rank 0's (flat) settings whose value differs on
    some rank, with rank 0's value and the first differing rank's."""
    import json

    def same(a, b) -> bool:
        return json.dumps(a, sort_keys=True, default=repr) == json.dumps(b, sort_keys=True, default=repr)

    keys = list(settings[0]) + [k for s in settings[1:] for k in s if k not in settings[0]]
    missing = object()
    for k in keys:
        v0 = settings[0].get(k, missing)
        for r, s in enumerate(settings[1:], start=1):
            v = s.get(k, missing)
            if not same(None if v0 is missing else v0, None if v is missing else v):
                def show(x):
                    return "unset" if x is missing else repr(x)
                return (f"ranks were started with different arguments: {what} differs at '{k}': {show(v0)} on "
                        f"rank 0, {show(v)} on rank {r}; start every rank with the same command line")
    return f"ranks were started with different arguments: {what} differs"  # pragma: no cover - digests differ


class SerialComm(Comm):
    """One process: every collective is the identity."""

    def __init__(self, ranks_per_node: int | None = None):
        self.rank, self.size = 0, 1
        self._set_layout([0])

    def barrier(self) -> None:
        return None

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def gather(self, obj: Any, root: int = 0) -> list:
        return [obj]

    def allgather(self, obj: Any) -> list:
        return [obj]

    def allreduce(self, value: Any, op: str = "sum") -> Any:
        return value

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv: np.ndarray,
                  recv_counts: Sequence[int]) -> None:
        n = int(send_counts[0])
        recv.reshape(-1)[:n] = send.reshape(-1)[:n]

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        raise RuntimeError("isend on a serial Comm: no peer")

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        raise RuntimeError("irecv on a serial Comm: no peer")

    def isend_parts(self, parts: Sequence[np.ndarray], dest: int, tag: int = 0) -> Request:
        raise RuntimeError("isend on a serial Comm: no peer")

    def irecv_parts(self, parts: Sequence[np.ndarray], source: int, tag: int = 0) -> Request:
        raise RuntimeError("irecv on a serial Comm: no peer")

    def isend_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], dest: int,
                     tag: int = 0) -> Request:
        raise RuntimeError("isend on a serial Comm: no peer")

    def irecv_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], source: int,
                     tag: int = 0) -> Request:
        raise RuntimeError("irecv on a serial Comm: no peer")

    def abort(self, message: str, code: int = 1) -> None:
        sys.stderr.write(message.rstrip() + "\n")
        sys.stderr.flush()
        os._exit(code)


class MPIComm(Comm):
    """mpi4py-backed Comm over COMM_WORLD (or a given communicator)."""

    _OPS = ("sum", "max", "min")

    def __init__(self, ranks_per_node: int | None = None, comm: Any = None,
                 startup_error: tuple[str, str, int] | None = None):
        import mpi4py

        mpi4py.rc.threads = True
        mpi4py.rc.thread_level = "multiple"
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.tag_ub = int(self.comm.Get_attr(MPI.TAG_UB) or 32767)
        # the first collective: the layout's own collectives differ with and without --ranks-per-node
        # a rank that failed before it created its comm joins here with its error (``fail_together``)
        both = self.comm.allgather((ranks_per_node, startup_error)) if self.size > 1 else \
            [(ranks_per_node, startup_error)]
        _raise_first([e for _k, e in both], self.rank, None)
        said = [k for k, _e in both]
        if len(set(said)) > 1:
            raise ConfigError(first_difference([{"--ranks-per-node": k} for k in said], "the node layout"))
        if ranks_per_node is not None:
            if ranks_per_node < 1:
                raise ConfigError(f"--ranks-per-node={ranks_per_node}: must be >= 1")
            node_of = [r // ranks_per_node for r in range(self.size)]
        else:
            shm = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            first = shm.allreduce(self.rank, op=MPI.MIN)
            shm.Free()
            node_of = self.comm.allgather(first)
        self._set_layout(node_of)

    def barrier(self) -> None:
        self.comm.Barrier()

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def gather(self, obj: Any, root: int = 0) -> list | None:
        return self.comm.gather(obj, root=root)

    def allgather(self, obj: Any) -> list:
        return self.comm.allgather(obj)

    def allreduce(self, value: Any, op: str = "sum") -> Any:
        if op not in self._OPS:
            raise ValueError(f"op={op!r}: choose one of {self._OPS}")
        mpi_op = {"sum": self.MPI.SUM, "max": self.MPI.MAX, "min": self.MPI.MIN}[op]
        if isinstance(value, np.ndarray):
            out = np.empty_like(value)
            self.comm.Allreduce(value, out, op=mpi_op)
            return out
        return self.comm.allreduce(value, op=mpi_op)

    def alltoallv(self, send: np.ndarray, send_counts: Sequence[int], recv: np.ndarray,
                  recv_counts: Sequence[int]) -> None:
        """Exchange byte buffers; counts are in elements of the buffers' dtype."""
        sc = np.asarray(send_counts, dtype=np.int64)
        rc = np.asarray(recv_counts, dtype=np.int64)
        sd = np.concatenate(([0], np.cumsum(sc)[:-1]))
        rd = np.concatenate(([0], np.cumsum(rc)[:-1]))
        self.comm.Alltoallv([send, (sc, sd)], [recv, (rc, rd)])

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> Request:
        return Request(self.comm.Isend(buf, dest=dest, tag=tag), keep=buf)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> Request:
        return Request(self.comm.Irecv(buf, source=source, tag=tag), keep=buf)

    # One message per part, each contiguous: measured here (2 ranks, PyPI MPICH, shared memory), 16 × 262 KB
    # per step run at ~3.7 GB/s this way against ~2 GB/s for one hindexed message gathered from the same
    # parts (MPICH packs a non-contiguous send slowly) and ~6 GB/s for one contiguous 4 MB message.
    def isend_parts(self, parts: Sequence[np.ndarray], dest: int, tag: int = 0) -> Request:
        """Send every buffer of ``parts`` as its own message, in order (match with ``irecv_parts`` of the
        same sizes: MPI keeps the order of messages between two ranks on one tag)."""
        Isend = self.comm.Isend
        return Request(_Multi(self.MPI, [Isend(p, dest=dest, tag=tag) for p in parts]), parts)

    def irecv_parts(self, parts: Sequence[np.ndarray], source: int, tag: int = 0) -> Request:
        """Receive one message into every buffer of ``parts``, in order (each filled completely)."""
        Irecv = self.comm.Irecv
        return Request(_Multi(self.MPI, [Irecv(p, source=source, tag=tag) for p in parts]), parts)

    # ONE message gathered from (scattered into) byte ranges of one buffer: an MPI hindexed datatype over the
    # buffer, so MPI moves the parts itself (no packing copy in Python, no message per part). Measured here
    # (2 ranks, PyPI MPICH, shared memory; issue 19): 8 parts of 12 KB ~80-95 us per exchange against
    # ~160-220 us as 8 messages; 8 parts of 262 KB ~320-460 us against ~400-580 us as 8 messages. The same
    # datatype with absolute addresses from MPI_BOTTOM is ~10x slower for large parts (MPICH's slow path):
    # displacements are relative to a real buffer.
    def isend_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], dest: int,
                     tag: int = 0) -> Request:
        """Send the byte ranges ``base[offsets[i]:offsets[i] + sizes[i]]`` as one message, in order. ``base``:
        a contiguous byte buffer (``flat_span``), kept unchanged by the caller until the send completes."""
        MPI = self.MPI
        t = MPI.BYTE.Create_hindexed(list(sizes), list(offsets)).Commit()
        try:     # a datatype freed while a send uses it stays valid for that send (MPI standard)
            return Request(self.comm.Isend([base, 1, t], dest=dest, tag=tag), keep=base)
        finally:
            t.Free()

    def irecv_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], source: int,
                     tag: int = 0) -> Request:
        """Receive one message into the (disjoint) byte ranges of ``base``, filled in order."""
        MPI = self.MPI
        t = MPI.BYTE.Create_hindexed(list(sizes), list(offsets)).Commit()
        try:
            return Request(self.comm.Irecv([base, 1, t], source=source, tag=tag), keep=base)
        finally:
            t.Free()

    def abort_on_signal(self, grace_s: float = 3.0) -> None:
        """SIGINT/SIGTERM must end a rank even while its main thread waits in an MPI call (a peer that stopped
        or never came): Python runs a signal handler only between bytecodes, so a rank blocked in a collective
        ignored SIGTERM (only SIGKILL ended the job). A daemon thread wakes on the signal (``set_wakeup_fd``);
        if the main thread has not taken it ``grace_s`` later (``stop.pending()`` still None: it is inside
        MPI), the thread prints one line and aborts the job (exit 130/143). Main thread only; idempotent. (A
        signal left at SIG_DFL ends the process by itself.)"""
        import signal
        import threading

        if getattr(self, "_watchdog", None) is not None or threading.current_thread() is not threading.main_thread():
            return
        r, w = os.pipe()
        os.set_blocking(w, False)
        try:
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # pragma: no cover - not the main thread of the main interpreter
            os.close(r)
            os.close(w)
            return
        self._watchdog = threading.Thread(target=self._signal_watch, args=(r, grace_s), daemon=True,
                                          name="dlbench-signal-watch")
        self._watchdog.start()

    def _signal_watch(self, fd: int, grace_s: float) -> None:
        import signal
        import time

        from .stop import pending

        while True:
            try:
                data = os.read(fd, 64)
            except OSError:  # pragma: no cover
                return
            if not data:  # pragma: no cover
                return
            nums = [b for b in data if b in (signal.SIGINT, signal.SIGTERM)]
            if not nums:
                continue
            name = signal.Signals(nums[0]).name
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and pending() is None:
                time.sleep(0.05)
            if pending() is not None:   # the main thread took it: its own clean-up and abort follow
                continue
            code = 143 if name == "SIGTERM" else 130
            self.abort(f"dlbench: interrupted by {name} on rank {self.rank} while it waited for other ranks (in "
                       f"MPI); the job is ended", code)

    def abort(self, message: str, code: int = 1) -> None:
        """Print the message and end the whole job. The pause lets the launcher forward this rank's
        stderr before MPI_Abort kills the job (otherwise the message can be lost)."""
        import time

        sys.stderr.write(message.rstrip() + "\n")
        sys.stderr.flush()
        time.sleep(0.5)
        unlink_mpi_shm()
        self.comm.Abort(code)
        # MPI_Abort can return when the launcher is already ending the job (Ctrl-C reached mpiexec too):
        # end here, or the caller would go on and say it all again
        sys.stdout.flush()
        os._exit(code)


def unlink_mpi_shm(maps: str = "/proc/self/maps") -> list[str]:
    """Unlink the shared-memory segments MPICH mapped for this job (``/dev/shm/mpich_shm_*``, found in this
    process's memory map). MPICH removes them in MPI_Finalize; MPI_Abort kills the job's processes before
    any of them can, leaving a 2 MB file in /dev/shm per aborted job. Every process of the node has it
    mapped by now, so unlinking the name changes nothing for the live job. Returns the paths removed."""
    out: list[str] = []
    try:
        with open(maps) as f:
            paths = {line.split(None, 5)[5].strip() for line in f if "/mpich_shm_" in line and
                     len(line.split(None, 5)) == 6}
    except OSError:
        return out
    for p in sorted(paths):
        if p.endswith(" (deleted)") or not os.path.basename(p).startswith("mpich_shm_"):
            continue
        try:
            os.unlink(p)
            out.append(p)
        except OSError:
            pass
    return out


def launcher_world_size(env=None) -> tuple[str, int] | None:
    """What the launcher's environment says the job's size is: ``(variable, N)`` for the first variable
    found, or None. Only variables that an MPI launcher sets per process and that count the whole job:
    ``OMPI_COMM_WORLD_SIZE`` (Open MPI), ``PMI_SIZE`` (MPICH Hydra, Intel MPI, Slurm's PMI-1/2),
    ``MPI_LOCALNRANKS`` (Hydra: ranks on this node, a lower bound), ``SLURM_STEP_NUM_TASKS`` only inside an
    srun step (``SLURM_STEP_ID`` numeric: a batch script's own shell has no such step and is not a
    multi-rank job). ``PMIX_SIZE`` is not used: PMIx implementations differ in whether and what they export.
    """
    env = os.environ if env is None else env
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_LOCALNRANKS"):
        v = env.get(k, "").strip()
        if v.isdigit():
            return k, int(v)
    if env.get("SLURM_STEP_ID", "").strip().isdigit():
        v = env.get("SLURM_STEP_NUM_TASKS", "").strip()
        if v.isdigit():
            return "SLURM_STEP_NUM_TASKS", int(v)
    return None


def check_launcher_matches(size: int, library_version: str, env=None) -> None:
    """A launcher that started N > 1 processes while MPI's COMM_WORLD has ``size`` 1 means mpi4py is bound to
    another MPI than the launcher's: every process would run an independent 1-rank job. Stop, naming both."""
    said = launcher_world_size(env)
    if said is None or size != 1 or said[1] <= 1:
        return
    lib = (library_version or "unknown").strip().splitlines()[0].strip() if library_version else "unknown"
    raise ConfigError(
        f"MPI launcher/library mismatch: the launcher set {said[0]}={said[1]} but mpi4py's MPI ({lib}) sees "
        f"COMM_WORLD of size 1, so every process would run its own 1-rank job; launch with the mpiexec of the "
        f"MPI mpi4py was built against (python -c 'import mpi4py; print(mpi4py.get_config())'), or rebuild "
        f"mpi4py against your launcher's MPI")


def get_comm(ranks_per_node: int | None = None) -> Comm:
    """MPIComm under an MPI launcher, SerialComm otherwise. Stops when the launcher's environment says N > 1
    ranks but MPI's COMM_WORLD has one (``check_launcher_matches``)."""
    if ranks_per_node is not None and ranks_per_node < 1:
        raise ConfigError(f"--ranks-per-node={ranks_per_node}: must be >= 1 (ranks per emulated node), or "
                          f"leave it out to use MPI's shared-memory split")
    if under_mpi_launcher():
        source = "--ranks-per-node"
        if ranks_per_node is None:  # the scheduler's allocation (two slurmd on one host: not the shm split)
            from .provenance import ranks_per_node_from_allocation

            said = launcher_world_size()
            ranks_per_node, source = ranks_per_node_from_allocation(said[1] if said else None)
        try:
            comm = MPIComm(ranks_per_node=ranks_per_node)
            comm.layout_source = source
        except ImportError:
            raise ConfigError("running under an MPI launcher but mpi4py is not installed; "
                              "pip install 'dlbench[mpi]' (or mpi4py built against your MPI)") from None
        if comm.size == 1:
            check_launcher_matches(comm.size, comm.MPI.Get_library_version())
        if source == "--ranks-per-node" and ranks_per_node is not None and ranks_per_node > comm.size:
            raise ConfigError(f"--ranks-per-node={ranks_per_node}: more than the job's {comm.size} rank(s); allowed: "
                              f"1 to {comm.size} (ranks per emulated node), or leave it out to use MPI's "
                              f"shared-memory split")
        comm.abort_on_signal()
        return comm
    return SerialComm()
