"""Each executor stage alone (strategies/stages/), the MPI ones (PeerPush) between two threads through an in-process
two-rank comm (fakecomm.PairComm): no mpiexec."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from fakecomm import FakeCommError, PairComm

from dlbench.plan import MEMORY, NO_TIER, PEER, SHARED, SYNC
from dlbench.plan.plan import EpochPlan, Evictions, Plan
from dlbench.storage import ArenaTier, MemoryTier
from dlbench.strategies.stage import ClosingStage, EpochStage, Stage
from dlbench.strategies.stages.filler import Filler
from dlbench.strategies.stages.loader import Loader
from dlbench.strategies.stages.peerpush import PeerPush
from dlbench.strategies.stages.ring import Ring
from dlbench.strategies.stages.store import SampleStore, Stores
from dlbench.strategies.stages.view import EpochView
from dlbench.timeline import Timeline

N, STEPS = 32, 4
SIZES = (100 + 37 * np.arange(N)).astype(np.int64)           # every sample its own size
MAX_ROW = int(SIZES.max())


def _data(sid: int) -> np.ndarray:
    return np.random.default_rng(1000 + sid).integers(0, 256, int(SIZES[sid]), dtype=np.uint8)


def _plan(peer_per_step=(2, 2, 2, 1), batch=4, keep_every=0, evict=None) -> Plan:
    """2 ranks; rank r owns the samples of its parity (held in its memory tier). At step s rank r consumes
    ``batch - peer_per_step[s]`` of its own samples (MEMORY) then ``peer_per_step[s]`` of the other rank's
    (PEER, sent by it): the other rank's 9th sample on."""
    own = [[s for s in range(N) if s % 2 == r] for r in range(2)]
    ids = np.full((2, batch * STEPS), -1, np.int64)
    src = np.zeros((2, batch * STEPS), np.uint8)
    peer = np.full((2, batch * STEPS), -1, np.int32)
    keep = np.full((2, batch * STEPS), NO_TIER, np.uint8)
    for r in range(2):
        mine, theirs = iter(own[r]), iter(own[1 - r][9:])
        c = 0
        for s in range(STEPS):
            for k in range(batch):
                if k < batch - peer_per_step[s]:
                    ids[r, c], src[r, c] = next(mine), MEMORY
                else:
                    ids[r, c], src[r, c], peer[r, c] = next(theirs), PEER, 1 - r
                if keep_every and c % keep_every == 0:
                    keep[r, c] = MEMORY
                c += 1
    bounds = np.tile(np.arange(0, batch * STEPS + 1, batch), (2, 1))
    ev = Evictions.make(*evict) if evict is not None else None
    ep = EpochPlan(epoch=0, sample_ids=ids, source=src, bounds=bounds, peer=peer, keep=keep, evictions=ev)
    return Plan(strategy="test", n_samples=N, world_size=2, node_map=np.arange(2), epochs=1, local_batch=batch,
                seed=0, build_epoch=lambda e: ep, pipeline=SYNC)


def _ctx(comm):
    return SimpleNamespace(comm=comm, rank=comm.rank, sample_nbytes=SIZES, n_samples=N, clock=time.perf_counter_ns,
                           workload=SimpleNamespace(name="test"))


def _both(fn, timeout=20):
    """Run ``fn(rank)`` for ranks 0 and 1 in two threads; their results (a rank's exception is re-raised)."""
    out, errs = [None, None], []

    def run(r):
        try:
            out[r] = fn(r)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errs.append(exc)

    ths = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(timeout)
    assert not any(th.is_alive() for th in ths), "a rank hangs"
    if errs:
        raise errs[0]
    return out


@pytest.mark.parametrize("tier_cls", [ArenaTier, MemoryTier])
@pytest.mark.parametrize("depth", [STEPS, 2])
def test_peer_push_two_ranks_rows_and_counters(tier_cls, depth):
    """Half of each rank's batch comes from the other rank: the received rows are the sender's bytes, one
    message per (step, sender, receiver) (a hindexed message of several samples, or one sample alone), counted
    exactly. ``depth`` 2: receives are posted two steps ahead into a ring that wraps, as the executor does."""
    plan = _plan()
    comms = PairComm.pair()

    def rank(r):
        comm = comms[r]
        ctx = _ctx(comm)
        store = SampleStore(tier_cls(1 << 20, MAX_ROW), MEMORY)
        for sid in range(r, N, 2):
            store.put(sid, _data(sid))
        stores = Stores({MEMORY: store})
        ring = Ring(depth, 4, MAX_ROW)
        pp = PeerPush(ctx, stores, MAX_ROW, Timeline(1 << 12, r))
        view = EpochView(plan, 0, r)
        pp.begin(view)
        got = {}
        for s in range(min(depth, STEPS)):
            pp.post_recvs(view, s, ring[s])
        pp.post_sends(view, STEPS)
        for t in range(STEPS):
            pp.wait_recvs(view, t)
            b0 = int(view.bounds[t])
            for j in range(int(view.bounds[t + 1]) - b0):
                if view.src[b0 + j] == PEER:
                    sid = int(view.ids[b0 + j])
                    got[sid] = ring[t][j, :SIZES[sid]].copy()
            if t + depth < STEPS:
                pp.post_recvs(view, t + depth, ring[t + depth])
        pp.finish(view)
        assert store.refs == {sid: 1 for sid in range(r, N, 2)}     # every send's pin released
        return got, pp.stats(), (comm.sent_messages, comm.recv_messages)

    out = _both(rank)
    assert comms[0].pending() == 0
    for r in range(2):
        got, stats, (sent, recvd) = out[r]
        want = [s for s in range(N) if s % 2 == 1 - r][9:]
        assert sorted(got) == want
        for sid in want:
            assert np.array_equal(got[sid], _data(sid)), sid
        nbytes = int(SIZES[want].sum())
        assert stats == {"messages": STEPS, "samples": 7, "bytes": nbytes,
                         "bytes_sent": int(SIZES[[s for s in range(N) if s % 2 == r][9:]].sum())}
        assert sent == recvd == STEPS


def test_peer_push_message_cap_cuts_messages(monkeypatch):
    """A byte cap below two samples: one message per sample (single-sample isend/irecv), same rows."""
    from dlbench.strategies.stages import peerpush as stages

    monkeypatch.setattr(stages, "PEER_MESSAGE_BYTES", 0)
    plan = _plan()
    comms = PairComm.pair()

    def rank(r):
        ctx = _ctx(comms[r])
        store = SampleStore(ArenaTier(1 << 20, MAX_ROW), MEMORY)
        for sid in range(r, N, 2):
            store.put(sid, _data(sid))
        ring = Ring(STEPS, 4, MAX_ROW)
        pp = PeerPush(ctx, Stores({MEMORY: store}), MAX_ROW, Timeline(1 << 12, r))
        view = EpochView(plan, 0, r)
        pp.begin(view)
        for s in range(STEPS):
            pp.post_recvs(view, s, ring[s])
        pp.post_sends(view, STEPS)
        for t in range(STEPS):
            pp.wait_recvs(view, t)
        pp.finish(view)
        last = ring[STEPS - 1][3, :SIZES[view.ids[-1]]]
        return pp.stats(), np.array_equal(last, _data(int(view.ids[-1])))

    for stats, ok in _both(rank):
        assert stats["messages"] == 7 and stats["samples"] == 7 and ok


def test_peer_push_sender_not_holding_the_sample_fails_in_one_line():
    """A plan that makes a rank send a sample it never holds: finish() names the rank, sample and step."""
    from dlbench.errors import RunError

    plan = _plan()
    comms = PairComm.pair(timeout=2)
    ctx = _ctx(comms[0])
    pp = PeerPush(ctx, Stores({MEMORY: SampleStore(ArenaTier(1 << 20, MAX_ROW), MEMORY)}), MAX_ROW,
                  Timeline(1 << 12, 0))
    view = EpochView(plan, 0, 0)
    pp.begin(view)
    with pytest.raises(RunError, match=r"rank 0 must send sample 18 to rank 1 at step 0 but never held it"):
        pp.finish(view)


def test_fake_comm_is_strict_like_mpi():
    """The fake is rendezvous (a send completes when received) and refuses a size mismatch."""
    a, b = PairComm.pair(timeout=0.2)
    x = np.arange(8, dtype=np.uint8)
    req = a.isend(x, 1, tag=5)
    assert not req.test()
    with pytest.raises(FakeCommError, match="not matched"):
        req.wait()
    y = np.zeros(8, np.uint8)
    x[:] = 9                                  # bytes are read when matched, from the live buffer
    b.irecv(y, 0, tag=5).wait()
    assert req.test() and y.tolist() == [9] * 8
    a.isend(x, 1, tag=6)
    with pytest.raises(FakeCommError, match="8-byte message .* into a 4-byte receive"):
        b.irecv(np.zeros(4, np.uint8), 0, tag=6).wait()
    base = np.zeros(16, np.uint8)
    a.isend_ranges(np.arange(16, dtype=np.uint8), [8, 0], [2, 3], 1, tag=7)
    b.irecv_ranges(base, [10, 1], [4, 1], 0, tag=7).wait()
    assert base[10:14].tolist() == [8, 9, 0, 1] and base[1] == 2


class _LogTier:
    """A memory-like tier that logs its operations in order."""

    def __init__(self):
        self.rows, self.log = {}, []

    def put(self, sid, row):
        self.rows[sid] = bytes(row)
        self.log.append(("put", sid))
        return len(row)

    def delete(self, sid):
        del self.rows[sid]
        self.log.append(("delete", sid))


def test_filler_stores_keeps_and_evictions_in_plan_order():
    """The fill thread stores each step's kept rows then drops its evictions, step after step, as the plan
    says (jobs built from the plan as PlannedExecutor builds them), and counts the bytes it wrote."""
    plan = _plan(keep_every=3, evict=([0, 0, 0], [1, 2, 3], [0, 23, 10]))   # keeps 0, 21, 23, 10, 12, 31
    view = EpochView(plan, 0, 0)
    tier = _LogTier()
    stores = Stores({MEMORY: SampleStore(tier, MEMORY)})
    ring = Ring(STEPS, 4, MAX_ROW)
    done = []
    filler = Filler(stores, Timeline(1 << 12, 0), time.perf_counter_ns)
    want, nbytes = [], 0
    for t in range(STEPS):
        b0, b1 = int(view.bounds[t]), int(view.bounds[t + 1])
        for j in range(b1 - b0):
            ring[t][j, :SIZES[view.ids[b0 + j]]] = _data(int(view.ids[b0 + j]))
        kc = np.nonzero(view.keep[b0:b1] != NO_TIER)[0].tolist()
        keeps = [(stores[MEMORY], int(view.ids[b0 + j]), ring[t][j, :SIZES[view.ids[b0 + j]]]) for j in kc]
        lo, hi = np.searchsorted(view.evict_step, [t, t + 1])
        ev = view.evict_ids[lo:hi].tolist()
        filler.submit(t, 0, t, keeps, ev, lambda t=t: done.append(t))
        want += [("put", sid) for _st, sid, _row in keeps] + [("delete", sid) for sid in ev]
        nbytes += sum(len(row) for _st, _sid, row in keeps)
    filler.drain()
    filler.close()
    assert want and ("delete", 0) in want
    assert tier.log == want
    assert done == list(range(STEPS))
    assert filler.stats() == {"bytes": nbytes, "jobs": STEPS}
    for sid, row in tier.rows.items():
        assert row == _data(sid).tobytes()


class _Reader:
    max_row_nbytes = MAX_ROW
    supports_runs = False

    def __init__(self):
        self.closed = False

    def read_into(self, sid, out):
        d = _data(int(sid))
        out[:d.size] = d
        return d.size

    def close(self):
        self.closed = True


@pytest.mark.parametrize("threads", [0, 2])
def test_loader_reads_shared_and_own_tier_rows(threads):
    """The loader fills each step's ring rows from the planned source (shared tier through the reader, the
    memory tier from its store), leaves PEER rows to PeerPush, and counts its shared-tier requests."""
    plan = _plan()
    ep = plan.epoch(0)
    ep.source[0, 1::4] = SHARED                  # one access per step from the shared tier
    view = EpochView(plan, 0, 0)
    store = SampleStore(MemoryTier(1 << 20, MAX_ROW), MEMORY)
    for c in np.flatnonzero(view.src == MEMORY):
        store.put(int(view.ids[c]), _data(int(view.ids[c])))
    reader = _Reader()
    ctx = SimpleNamespace(rank=0, clock=time.perf_counter_ns, workload=SimpleNamespace(name="test"),
                          reader_factory=_Reader)
    ring = Ring(2, 4, MAX_ROW)
    for b in ring.bufs:         # PEER rows stay 0 (the same rows are PEER in steps t and t + 2)
        b[:] = 0
    loader = Loader(ctx, Stores({MEMORY: store}), ring, threads, None, Timeline(1 << 12, 0), first_reader=reader)
    loader.begin(view)
    for t in range(STEPS):
        if threads:
            loader.wait(t)
        else:
            loader.fill(view, t)
        b0 = int(view.bounds[t])
        for j in range(4):
            sid, c = int(view.ids[b0 + j]), int(view.src[b0 + j])
            row = ring[t][j, :SIZES[sid]]
            assert np.array_equal(row, _data(sid)) == (c != PEER), (t, j)
        if threads:
            loader.release(t)
    loader.finish(view)
    assert loader.stats() == {"shared_reads": STEPS, "shared_bytes": int(SIZES[view.ids[view.src == SHARED]].sum()),
                              "run_requests": 0, "threads": threads}
    assert store.stats()["reads"] == int((view.src == MEMORY).sum())
    loader.close()
    assert reader.closed


def test_ring_buffers_are_distinct_aligned_and_wrap():
    ring = Ring(3, 4, 1000)
    for b in ring.bufs:
        b[:] = 0
    assert ring.stats() == {"depth": 3, "rows": 4, "row_nbytes": 1000}
    assert ring[0] is ring[3] and ring[1] is not ring[0]
    assert all(b.ctypes.data % 4096 == 0 for b in ring.bufs)
    ring[0][:] = 1
    assert not ring[1].any() and not ring[2].any()


def test_every_stage_declares_the_protocol():
    """Every stage is a Stage (stats); the per-epoch ones EpochStage (begin/finish); those owning threads,
    readers or samples ClosingStage (close); a stage missing a method of its protocol cannot be built."""
    assert issubclass(Ring, Stage) and not issubclass(Ring, ClosingStage)
    for cls in (SampleStore, Stores, Filler, Loader):
        assert issubclass(cls, ClosingStage), cls
    for cls in (Loader, PeerPush):
        assert issubclass(cls, EpochStage), cls

    class Broken(EpochStage):
        def stats(self):
            return {}

        def begin(self, view):
            pass

    with pytest.raises(TypeError, match="finish"):
        Broken()
    store = SampleStore(MemoryTier(1 << 16, 64), MEMORY)
    store.put(1, np.ones(8, np.uint8))
    assert store.stats() == {"reads": 0, "bytes": 0, "held": 1}
    Stores({MEMORY: store}).close()
    assert store.stats()["held"] == 0
