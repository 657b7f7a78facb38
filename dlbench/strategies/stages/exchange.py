"""``Exchange``: an epoch's background transfers (``EpochPlan.transfers``: pls's exchange) for this rank."""

from __future__ import annotations

import numpy as np

from ...errors import RunError
from ...plan import MEMORY, PEER
from ...storage import PAGE, aligned_rows
from ...timeline import PHASE_ID
from ..stage import EpochStage
from .store import Stores

EXCHANGE_TAG = 23


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

    def before_step(self, view, t: int) -> None:
        """Step protocol: step t's transfers posted as the step starts (they overlap its compute)."""
        self.post(view, t)

    def after_step(self, view, t: int) -> None:
        """Step protocol: step t's transfers completed after the trainer's step."""
        self.complete(view, t)

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


__all__ = ["Exchange", "EXCHANGE_TAG"]
