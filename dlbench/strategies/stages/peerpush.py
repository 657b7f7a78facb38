"""``PeerPush``: a plan's peer reads as non-blocking MPI on the plan's schedule. Every PEER access names its
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

from collections import deque

import numpy as np

from ...errors import RunError
from ...plan import MEMORY, PEER
from ...storage import aligned_empty, flat_span
from ...timeline import PHASE_ID
from ..stage import EpochStage
from .store import SampleStore, Stores
from .view import EpochView

PEER_MESSAGE_BYTES = 256 << 20   # the most bytes of one peer message (PeerPush; >= 1 sample)
TAG_BASE = 1 << 12


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


__all__ = ["PeerPush", "PEER_MESSAGE_BYTES"]
