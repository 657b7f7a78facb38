"""``Stager``: the plan's prologue (epoch −1) for this rank."""

from __future__ import annotations

import numpy as np

from ...errors import RunError
from ...plan import LOCAL, MEMORY, PEER, SHARED
from ...storage import aligned_empty, aligned_rows
from ...timeline import PHASE_ID
from ..stage import Stage
from .store import Stores

PROLOGUE_CHUNK_BYTES = 16 << 20   # at most this much per message of the prologue's peer rows (>= 1 sample)
PROLOGUE_TAG = 11


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


__all__ = ["Stager", "PROLOGUE_CHUNK_BYTES"]
