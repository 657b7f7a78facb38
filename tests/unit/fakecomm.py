"""An in-process two-rank comm for stage tests: ``PairComm.pair()`` gives rank 0's and rank 1's endpoints, which
share one mailbox, so each can be driven by its own thread (PeerPush needs both sides progressing at once).

It implements exactly the part of ``dlbench.comm.Comm`` the executor stages use: point-to-point non-blocking
``isend``/``irecv``, the hindexed-datatype path ``isend_ranges``/``irecv_ranges`` (one message gathered from /
scattered into byte ranges of one buffer) and ``isend_parts``/``irecv_parts`` (the same over several buffers), with request objects (``wait``/``test``), plus ``barrier`` and
``allgather``. Matching is MPI's: by (source, tag) in posting order (messages between two ranks never overtake
each other on one tag). It is strict where MPI is:

- a send completes only when the matching receive has taken the bytes (rendezvous): a sender that reuses or
  frees its buffer before its send's ``wait``/``test`` says done is caught, as are deadlocks (a wait gives up
  after ``timeout`` seconds, naming the operation);
- the bytes are copied from the sender's live buffer at matching time, not at posting time;
- a message whose size differs from the receive's is an error (MPI truncates or leaves bytes unset; the stages
  always post exact sizes, so a mismatch is a plan/stage bug).

Counters per endpoint: ``sent_messages``, ``sent_bytes``, ``recv_messages``, ``recv_bytes``.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from collections.abc import Sequence

import numpy as np

from dlbench.comm import Comm


class FakeCommError(RuntimeError):
    pass


class _Send:
    def __init__(self, segs: list[np.ndarray]):
        self.segs = segs             # views of the sender's buffer (read when matched)
        self.nbytes = sum(s.size for s in segs)
        self.done = False


class _Mailbox:
    def __init__(self, size: int):
        self.cond = threading.Condition()
        self.queues: dict[tuple, deque] = defaultdict(deque)   # (src, dst, tag) -> pending _Send in order
        self.barrier = threading.Barrier(size)
        self.slots: list = [None] * size
        # receives on one (src, dst, tag) match sends in their posting order: a ticket per receive
        self.tickets: dict[tuple, int] = defaultdict(int)
        self.served: dict[tuple, int] = defaultdict(int)


def _segments(base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int]) -> list[np.ndarray]:
    if len(offsets) != len(sizes):
        raise FakeCommError(f"{len(offsets)} offsets but {len(sizes)} sizes")
    flat = base.reshape(-1).view(np.uint8)
    segs = []
    for o, n in zip(offsets, sizes):
        o, n = int(o), int(n)
        if o < 0 or n < 0 or o + n > flat.size:
            raise FakeCommError(f"byte range [{o}, {o + n}) outside a buffer of {flat.size} bytes")
        segs.append(flat[o:o + n])
    return segs


def _whole(buf: np.ndarray) -> list[np.ndarray]:
    if not buf.flags.c_contiguous:
        raise FakeCommError("a buffer for isend/irecv must be contiguous")
    return [buf.reshape(-1).view(np.uint8)]


class _Request:
    """``wait()`` / ``test()`` as ``dlbench.comm.Request``."""

    def __init__(self, comm: PairComm, kind: str, peer: int, tag: int, op):
        self.comm, self.kind, self.peer, self.tag, self._op = comm, kind, peer, tag, op
        self._done = False

    def test(self) -> bool:
        if not self._done:
            with self.comm._box.cond:
                self._done = self._op()
        return self._done

    def wait(self) -> None:
        if self._done:
            return
        box = self.comm._box
        with box.cond:
            if not box.cond.wait_for(self._op, self.comm.timeout):
                raise FakeCommError(f"rank {self.comm.rank}: {self.kind} with rank {self.peer} tag {self.tag} not "
                                    f"matched within {self.comm.timeout} s")
        self._done = True


class PairComm(Comm):
    """One endpoint of an in-process comm of ``size`` ranks (module doc)."""

    tag_ub = 32767

    def __init__(self, rank: int, size: int, box: _Mailbox, timeout: float = 10.0):
        self.rank, self.size, self._box, self.timeout = rank, size, box, timeout
        self._set_layout(list(range(size)))      # one rank per node
        self.sent_messages = self.sent_bytes = self.recv_messages = self.recv_bytes = 0

    @staticmethod
    def pair(timeout: float = 10.0) -> tuple[PairComm, PairComm]:
        box = _Mailbox(2)
        return PairComm(0, 2, box, timeout), PairComm(1, 2, box, timeout)

    # ---- point to point ----------------------------------------------------------------------------
    def _check_peer(self, peer: int) -> None:
        if not 0 <= peer < self.size or peer == self.rank:
            raise FakeCommError(f"rank {self.rank}: peer {peer} is not another rank of {self.size}")

    def _post_send(self, segs: list[np.ndarray], dest: int, tag: int) -> _Request:
        self._check_peer(dest)
        msg = _Send(segs)
        box = self._box
        with box.cond:
            box.queues[(self.rank, dest, int(tag))].append(msg)
            box.cond.notify_all()
        self.sent_messages += 1
        self.sent_bytes += msg.nbytes
        return _Request(self, "send", dest, tag, lambda: msg.done)

    def _post_recv(self, segs: list[np.ndarray], source: int, tag: int) -> _Request:
        self._check_peer(source)
        box = self._box
        key = (source, self.rank, int(tag))
        want = sum(s.size for s in segs)
        served = box.served
        with box.cond:
            mine = box.tickets[key]
            box.tickets[key] += 1

        def op() -> bool:          # called with box.cond held
            if served[key] != mine or not box.queues[key]:
                return False
            msg = box.queues[key].popleft()
            if msg.nbytes != want:
                msg.done = True
                served[key] += 1
                box.cond.notify_all()
                raise FakeCommError(f"rank {self.rank}: a {msg.nbytes}-byte message from rank {source} tag {tag} "
                                    f"into a {want}-byte receive")
            src = np.concatenate(msg.segs) if len(msg.segs) != 1 else msg.segs[0]
            off = 0
            for s in segs:
                s[:] = src[off:off + s.size]
                off += s.size
            msg.done = True
            served[key] += 1
            self.recv_messages += 1
            self.recv_bytes += want
            box.cond.notify_all()
            return True

        return _Request(self, "recv", source, tag, op)

    def isend(self, buf: np.ndarray, dest: int, tag: int = 0) -> _Request:
        return self._post_send(_whole(buf), dest, tag)

    def irecv(self, buf: np.ndarray, source: int, tag: int = 0) -> _Request:
        return self._post_recv(_whole(buf), source, tag)

    def isend_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], dest: int,
                     tag: int = 0) -> _Request:
        return self._post_send(_segments(base, offsets, sizes), dest, tag)

    def irecv_ranges(self, base: np.ndarray, offsets: Sequence[int], sizes: Sequence[int], source: int,
                     tag: int = 0) -> _Request:
        return self._post_recv(_segments(base, offsets, sizes), source, tag)

    def isend_parts(self, parts: Sequence[np.ndarray], dest: int, tag: int = 0) -> _Request:
        return self._post_send([q for p in parts for q in _whole(p)], dest, tag)

    def irecv_parts(self, parts: Sequence[np.ndarray], source: int, tag: int = 0) -> _Request:
        return self._post_recv([q for p in parts for q in _whole(p)], source, tag)

    def pending(self) -> int:
        """Messages posted and not yet received (every rank's)."""
        with self._box.cond:
            return sum(len(q) for q in self._box.queues.values())

    # ---- collectives -------------------------------------------------------------------------------
    def barrier(self) -> None:
        self._box.barrier.wait(self.timeout)

    def allgather(self, obj):
        box = self._box
        box.barrier.wait(self.timeout)
        box.slots[self.rank] = obj
        box.barrier.wait(self.timeout)
        out = list(box.slots)
        box.barrier.wait(self.timeout)
        return out
