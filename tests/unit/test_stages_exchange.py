"""The transfer stage (``stages.exchange.Exchange``: a plan's ``EpochPlan.transfers``, pls's exchange) and the prologue
stage (``stages.stager.Stager``: shared-tier reads, then the plan's sender -> receiver rows) between two threads through
the in-process two-rank comm (fakecomm.PairComm): no mpiexec."""

import time
from types import SimpleNamespace

import numpy as np
import pytest
from fakecomm import PairComm
from test_stages_fakecomm import MAX_ROW, SIZES, N, _both, _data

from dlbench.plan import LOCAL, MEMORY, PEER, SHARED, SYNC
from dlbench.plan.plan import EpochPlan, Plan, Prologue, Transfers
from dlbench.storage import LocalTier, MemoryTier
from dlbench.strategies.stage import EpochStage
from dlbench.strategies.stages.exchange import Exchange
from dlbench.strategies.stages.stager import Stager
from dlbench.strategies.stages.store import SampleStore, Stores
from dlbench.strategies.stages.view import EpochView
from dlbench.timeline import Timeline

STEPS = 3
# (step, src, dst, sample): rank r holds the samples of its parity, and rank 0 holds sample 9 too
ROWS = [(0, 0, 1, 0), (0, 0, 1, 2), (0, 1, 0, 1),
        (1, 0, 1, 4), (1, 1, 0, 3), (1, 1, 0, 5), (1, 1, 0, 9),
        (2, 1, 0, 0)]     # sample 0 goes back: received at step 0, held from step 1 on


def _ctx(comm):
    return SimpleNamespace(comm=comm, rank=comm.rank, sample_nbytes=SIZES, n_samples=N, clock=time.perf_counter_ns,
                           workload=SimpleNamespace(name="test"))


def _plan(tier: int) -> Plan:
    step, src, dst, sample = (np.array(c) for c in zip(*ROWS))
    tr = Transfers.make(step, src, dst, sample, tier=tier, move=True)
    ids = np.tile(np.arange(STEPS, dtype=np.int64), (2, 1))      # what the ranks consume does not matter here
    ep = EpochPlan(epoch=0, sample_ids=ids, source=np.full(ids.shape, tier, np.uint8),
                   bounds=np.tile(np.arange(STEPS + 1), (2, 1)), transfers=tr)
    return Plan(strategy="test", n_samples=N, world_size=2, node_map=np.arange(2), epochs=1, local_batch=1, seed=0,
                build_epoch=lambda e: ep, pipeline=SYNC)


def _tier(tier: int, r: int, root):
    if tier == MEMORY:
        return MemoryTier(N * 4096, MAX_ROW)
    return LocalTier(root, r, 1 << 20, check_free=False, subdir=f"rank{r}")


@pytest.mark.parametrize("tier", [MEMORY, LOCAL])
def test_exchange_moves_samples_between_two_ranks(tier, tmp_path):
    """Posted at step start, completed at step end: the receiver holds the sender's bytes from then on, the
    sender no longer holds a moved sample; a sample the receiver holds already only gains a reference; every
    figure counted."""
    plan = _plan(tier)
    comms = PairComm.pair()
    assert isinstance(Exchange(_ctx(comms[0]), Stores({}), Timeline(16, 0)), EpochStage)

    def rank(r):
        comm = comms[r]
        store = SampleStore(_tier(tier, r, tmp_path), tier)
        for sid in [s for s in range(N) if s % 2 == r] + ([9] if r == 0 else []):
            store.put(sid, _data(sid))
        tl = Timeline(1 << 10, r)
        ex = Exchange(_ctx(comm), Stores({tier: store}), tl)
        view = EpochView(plan, 0, r)
        ex.begin(view)
        held = []
        for s in range(STEPS):
            ex.post(view, s)
            ex.complete(view, s)
            held.append(dict(store.refs))
        ex.finish(view)
        out = np.zeros(MAX_ROW, np.uint8)
        rows = {sid: out[:store.read_into(sid, out)].copy() for sid in store.refs}
        return held, rows, ex.stats()

    (h0, rows0, st0), (h1, rows1, st1) = _both(rank)
    assert comms[0].pending() == 0
    # rank 1 got 0 and 2 at step 0, 4 at step 1, and sent 0 back at step 2; rank 0 got 1, 3, 5, 9, then 0
    assert 0 in h1[0] and 2 in h1[0] and 1 not in h1[0] and 4 in h1[1]
    assert 0 not in h1[2] and 0 in h0[2] and 0 not in h0[0]
    assert h0[1][9] == 2                                         # held already: one more reference, no copy
    assert 9 not in h1[1]
    for rows in (rows0, rows1):
        for sid, b in rows.items():
            assert np.array_equal(b, _data(sid)), sid
    assert sorted(rows0) == sorted({s for s in range(N) if s % 2 == 0} - {2, 4} | {1, 3, 5, 9})
    assert sorted(rows1) == sorted({s for s in range(N) if s % 2 == 1} - {1, 3, 5, 9} | {2, 4})
    sent0 = int(SIZES[[0, 2, 4]].sum())
    sent1 = int(SIZES[[1, 3, 5, 9, 0]].sum())
    assert st0 == {"bytes_sent": sent0, "bytes_received": sent1, "messages": 3, "mpi_messages": 3, "samples": 5,
                   "wait_s": st0["wait_s"]}
    assert st1["bytes_sent"] == sent1 and st1["bytes_received"] == sent0 and st1["samples"] == 3
    assert st1["messages"] == 3 and st1["mpi_messages"] == 2 and st0["wait_s"] >= 0


def test_exchange_finish_with_a_step_in_flight_fails_in_one_line():
    plan = _plan(MEMORY)
    comms = PairComm.pair()

    def rank(r):
        store = SampleStore(MemoryTier(N * 4096, MAX_ROW), MEMORY)
        for sid in [s for s in range(N) if s % 2 == r] + ([9] if r == 0 else []):
            store.put(sid, _data(sid))
        ex = Exchange(_ctx(comms[r]), Stores({MEMORY: store}), Timeline(64, r))
        view = EpochView(plan, 0, r)
        ex.begin(view)
        ex.post(view, 0)
        try:
            with pytest.raises(Exception, match="in flight"):
                ex.finish(view)
        finally:
            ex.complete(view, 0)
        return True

    assert _both(rank) == [True, True]


class _Reader:
    def __init__(self):
        self.reads = 0

    def read_into(self, sid, out):
        self.reads += 1
        d = _data(sid)
        out[:d.size] = d
        return d.size


@pytest.mark.parametrize("cap", [1 << 20, 2 * MAX_ROW])
def test_stager_reads_then_sends_the_prologue_rows(cap, monkeypatch):
    """Each rank reads half the samples from the shared tier, then the plan's peer rows give it the other half:
    every sample ends up held by both, byte for byte; ``cap`` cuts a pair's rows into several messages (rounds)."""
    from dlbench.strategies.stages import stager as stages

    monkeypatch.setattr(stages, "PROLOGUE_CHUNK_BYTES", cap)
    ids = np.arange(N, dtype=np.int64)
    owner = ids % 2
    pro = Prologue(rank=np.concatenate([owner, 1 - owner]), sample=np.concatenate([ids, ids]),
                   src=np.concatenate([np.full(N, SHARED, np.uint8), np.full(N, PEER, np.uint8)]),
                   dst=np.full(2 * N, MEMORY, np.uint8), peer=np.concatenate([np.full(N, -1), owner]))
    comms = PairComm.pair()

    def rank(r):
        store = SampleStore(MemoryTier(N * 4096, MAX_ROW), MEMORY)
        reader = _Reader()
        tl = Timeline(1 << 10, r)
        st = Stager(_ctx(comms[r]), Stores({MEMORY: store}), reader, MAX_ROW, tl)
        st.run(pro)
        out = np.zeros(MAX_ROW, np.uint8)
        ok = all(np.array_equal(out[:store.read_into(s, out)], _data(s)) for s in range(N))
        return ok, sorted(store.refs), reader.reads, st.stats(), comms[r].recv_messages

    for r, (ok, held, reads, stats, msgs) in enumerate(_both(rank)):
        assert ok and held == list(range(N)) and reads == N // 2
        theirs = int(SIZES[1 - r::2].sum())
        assert stats["reads"] == N // 2 and stats["read_bytes"] == int(SIZES[r::2].sum())
        assert stats["bytes"] == theirs and stats["bytes_sent"] == int(SIZES[r::2].sum())
        assert stats["samples"] == N // 2 and stats["messages"] == msgs
        assert msgs == -(-theirs // cap) and (msgs == 1) == (cap > theirs)
        assert stats["written"] == int(SIZES.sum())


def test_node_shared_store_reads_but_never_deletes_a_mates_copies(tmp_path):
    """Staging's node-local directory shared by a node's ranks: a rank holds what its mate stored
    (``SampleStore.share``) and reads it, but clearing its store removes only its own files."""
    a = SampleStore(LocalTier(tmp_path, 0, 1 << 20, check_free=False), LOCAL)
    b = SampleStore(LocalTier(tmp_path, 0, 1 << 20, check_free=False), LOCAL)
    for sid in (0, 1):
        a.put(sid, _data(sid))
    b.put(2, _data(2))
    assert b.share([0, 1, 2]) == 2 and a.share([2]) == 1
    out = np.zeros(MAX_ROW, np.uint8)
    assert np.array_equal(out[:b.read_into(0, out)], _data(0))
    b.clear()
    files = sorted(p.name for p in (tmp_path / "node0").iterdir())
    assert files == ["0.row", "1.row"] and not b.refs          # b's own file gone, a's kept
    a.clear()
    assert not any((tmp_path / "node0").iterdir())
