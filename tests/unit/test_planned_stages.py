"""The planned executor's stages (strategies/stages/) on one rank: errors of one stage reach the trainer promptly."""

import threading

import numpy as np
import pytest

from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.run.loop import Loop
from dlbench.run.setup import RunConfig
from dlbench.storage import ArenaTier, MemoryTier
from dlbench.strategies.stages.store import SampleStore, Stopped
from dlbench.timeline import Timeline


class DiskFull(OSError):
    pass


def _run_in_thread(fn, timeout):
    """Run ``fn`` in a thread; (finished, its exception). A run still going after ``timeout`` s hangs."""
    box = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["exc"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(timeout)
    return not th.is_alive(), box.get("exc")


@pytest.mark.parametrize("threads", [0, 2])
def test_fill_error_hang_raises_the_fill_error(monkeypatch, tmp_path, threads):
    """Regression (fix-exec 1, HANG): a fill job that raised left the loader threads waiting for their ring
    buffer forever (threads > 0), or the trainer waited 120 s and reported 'never reached the tier'."""
    def bad_put(self, sid, row):
        raise DiskFull(28, "No space left on device (injected)")

    for cls in (MemoryTier, ArenaTier):     # the cache family's memory tier is an arena (surrogatetrain: slots)
        monkeypatch.setattr(cls, "put", bad_put)
        monkeypatch.setattr(cls, "put_many", lambda self, items: bad_put(self, 0, None), raising=False)
    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)
    cfg = RunConfig(workload="cosmoflow", strategy="clairvoyant", epochs=3, batch_size=4, compute_time_s=0.0,
                    options={"loader_threads": threads, "window": 2, "cache_capacity": 1 << 30},
                    out=str(tmp_path / "res"), local_dir=str(tmp_path / "local"))
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: MemoryReader(wl, seed=0))
    finished, exc = _run_in_thread(lambda: loop.run(Timeline(1 << 14, 0)), timeout=30)
    assert finished, "the run hangs after a failed cache fill"
    assert isinstance(exc, DiskFull), repr(exc)


def test_read_pinned_stall_stops_when_told():
    """Regression (fix-exec 2, STALL): a loader thread waiting in read_pinned for a fill ignored the loader's
    stop and waited the full timeout (120 s) on any error or Ctrl-C mid-epoch."""
    store = SampleStore(MemoryTier(1 << 20, 4096), 2)
    stop = threading.Event()
    out = np.zeros(4096, np.uint8)
    box = {}

    def reader():
        try:
            store.read_pinned(7, out, wait=True, timeout=60, stop=stop.is_set)
        except Stopped as exc:
            box["exc"] = exc

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    stop.set()
    with store.cond:
        store.cond.notify_all()
    th.join(10)
    assert not th.is_alive() and isinstance(box.get("exc"), Stopped)


def _local_ctx(tmp_path, world=4):
    """Rank 0 of ``world`` ranks on one node, a serial comm (the local tier's tag broadcast is a no-op)."""
    from dlbench.strategies import RunContext

    wl = wl_mod.load("cosmoflow", scale="tiny")
    sizes = np.full(MemoryReader(wl, seed=0).samples, wl.sample_nbytes, np.int64)
    return RunContext(workload=wl, n_samples=len(sizes), sample_nbytes=sizes, world_size=world, rank=0,
                      node_map=np.zeros(world, np.int64), seed=0, epochs=2, local_batch=2, comm=SerialComm(),
                      timeline=Timeline(1 << 12, 0), reader_factory=lambda: MemoryReader(wl, seed=0),
                      local_dir=tmp_path / "local")


def _planned(ctx, local_bytes):
    from dlbench.plan import LOCAL, MEMORY, Pipeline
    from dlbench.plan.clairvoyant import clairvoyant_plan
    from dlbench.strategies.planned import PlannedExecutor

    plan = clairvoyant_plan(n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                            epochs=ctx.epochs, local_batch=ctx.local_batch, seed=0, sample_nbytes=ctx.sample_nbytes,
                            memory_bytes=0.0, local_bytes=float(local_bytes), pipeline=Pipeline("prefetch", 2, 2))
    return PlannedExecutor(ctx, plan, capacity_bytes={MEMORY: 0.0, LOCAL: float(local_bytes)})


@pytest.mark.parametrize("name", ["naive", "clairvoyant", "surrogatetrain", "local", "staging"])
def test_executor_takes_the_loader_from_the_plan_not_the_options(tmp_path, name):
    """Issue 16 (one source of truth for the loader pipeline): the executor runs the loader threads and window
    the plan records (what ``dlbench simulate`` costs, ``Plan.reader_threads``), not the options'."""
    from dlbench import strategies
    from dlbench.strategies.localcopy import set_pipeline

    ctx = _local_ctx(tmp_path, world=1)
    st = strategies.get(name)
    extra = {"cache_capacity": 1 << 24} if name in ("clairvoyant", "surrogatetrain") else {}
    opts = strategies.parse_options(st, {**({"loader_threads": 0} if name != "naive" else {}), **extra}, where=name)
    plan = set_pipeline(st.plan(ctx, opts), 3, 5)
    ex = st.executor(ctx, plan, opts)
    try:
        assert (ex.threads, ex.window, ex.ring.depth) == (3, 5, 6) == (plan.pipeline.reader_threads(), plan.pipeline.window, 6)
        sync = set_pipeline(st.plan(ctx, opts), 0, 1)
        assert sync.pipeline.reader_threads() == 0
    finally:
        ex.close()


def test_planned_local_tier_checks_the_node_need_not_one_ranks(monkeypatch, tmp_path):
    """Regression (fix-exec 3): the planned executor checked the free space of the node-local disk for one
    rank's cache although every rank of the node writes its own cache there."""
    from dlbench.errors import CapacityError
    from dlbench.storage import tiers

    cap = 1 << 20
    monkeypatch.setattr(tiers, "free_bytes", lambda p: 3 * cap)    # room for 3 ranks' caches, 4 on the node
    ex = _planned(_local_ctx(tmp_path, world=4), cap)
    with pytest.raises(CapacityError, match="--local-dir"):
        ex._open_stores()
    ex.close()


def test_planned_stale_removed_is_reported_in_stats(tmp_path):
    """Regression (fix-exec 3): the planned executor removed stale run directories of killed runs but never
    reported them (localcopy does, as ``stale_local_dirs_removed``)."""
    import socket

    stale = tmp_path / "local" / "run-killed"
    (stale / "node0").mkdir(parents=True)
    (stale / f".owner-{socket.gethostname()}-{(1 << 22) + 12345}").touch()   # beyond pid_max: dead
    ex = _planned(_local_ctx(tmp_path, world=1), 1 << 20)
    try:
        ex._open_stores()
        assert ex.stats()["stale_local_dirs_removed"] == [str(stale)]
        assert not stale.exists()
    finally:
        ex.close()
    assert not any((tmp_path / "local").glob("run-*"))


class _LockProbeTier:
    """A tier whose writes check, from another thread, that the store's lock is free meanwhile."""

    def __init__(self):
        self.store = None
        self.free_during_write = []
        self.rows = {}

    def _probe(self):
        ok = []

        def other():
            got = self.store.cond.acquire(timeout=5)
            ok.append(got)
            if got:
                self.store.cond.release()

        th = threading.Thread(target=other)
        th.start()
        th.join()
        self.free_during_write.append(ok[0])

    def put(self, sid, row):
        self._probe()
        self.rows[sid] = bytes(row)
        return len(self.rows[sid])

    def delete(self, sid):
        del self.rows[sid]


@pytest.mark.parametrize("many", [False, True])
def test_store_put_lock_not_held_during_tier_write(many):
    """Regression (fix-exec 5): SampleStore.put held the store's lock during the tier write (a file write on
    the local tier), blocking loader reads and peer sends of other samples."""
    tier = _LockProbeTier()
    store = SampleStore(tier, 1)
    tier.store = store
    row = np.arange(8, dtype=np.uint8)
    if many:
        assert store.put_many([(3, row), (4, row), (3, row)]) == 16
    else:
        assert store.put(3, row) == 8 and store.put(4, row) == 8 and store.put(3, row) == 0
    assert tier.free_during_write == [True, True]
    assert store.refs == {3: 2, 4: 1}            # a sample held twice is stored once, counted twice
    store.release(3)
    assert 3 in tier.rows
    store.release(3)
    assert 3 not in tier.rows and store.refs == {4: 1}


def test_store_pin_dead_code_is_the_send_path():
    """Regression (fix-exec 6): SampleStore.pin was unused (PeerPush inlined it, unchecked) and
    wait_present was dead. pin is the send path's pin now: a reference only to a held sample."""
    store = SampleStore(MemoryTier(1 << 16, 4096), 2)
    assert not hasattr(store, "wait_present")
    assert store.pin(5) is False and 5 not in store.refs
    store.put(5, np.ones(16, np.uint8))
    assert store.pin(5) is True and store.refs[5] == 2
    store.release(5)
    store.release(5)
    assert 5 not in store.refs


@pytest.mark.parametrize("threads", [0, 3])
def test_near_copies_pipeline_rule_and_executor_builder_are_one(tmp_path, threads):
    """Regression (fix-exec 7): clairvoyant's and surrogatetrain's executors repeated cache.planned_executor,
    and localcopy.set_pipeline repeated cache.pipeline_of's rule; one of each now, with the same results."""
    from types import SimpleNamespace

    from dlbench import strategies
    from dlbench.plan import LOCAL, MEMORY
    from dlbench.strategies.cache import arena_bytes, pipeline_of
    from dlbench.strategies.localcopy import set_pipeline
    from dlbench.strategies.surrogatetrain import SurrogateTrainExecutor

    ctx = _local_ctx(tmp_path, world=1)
    plan = set_pipeline(_planned(ctx, 0).plan, threads, 2)
    assert plan.pipeline == pipeline_of(SimpleNamespace(loader_threads=threads, window=2))
    for name, local in (("clairvoyant", 1 << 20), ("surrogatetrain", 0)):
        st = strategies.get(name)
        opts = strategies.parse_options(st, {"loader_threads": threads, "cache_capacity": 1 << 24,
                                             **({"local_cache_capacity": local} if local else {})}, where=name)
        ex = st.executor(ctx, st.plan(ctx, opts), opts)
        peak = int(ex.plan.capacity.cache_peak_samples[0])
        assert ex.threads == threads
        if name == "surrogatetrain":      # a best-fit byte arena up to the plan's highest byte (issue 19)
            assert ex.capacity[MEMORY] == ex.plan.capacity.arena_bytes_per_rank[0] >= \
                ex.plan.capacity.cache_peak_bytes[0] and peak >= 1
        else:                             # a byte arena of the plan's bytes for the rank (issue 19)
            assert ex.capacity[MEMORY] == arena_bytes(ctx, ex.plan) >= int(ex.plan.capacity.cache_peak_bytes[0])
        assert ex.capacity[LOCAL] == float(max(ex.plan.capacity.local_cache_peak_bytes or [0]))
        assert isinstance(ex, SurrogateTrainExecutor) == (name == "surrogatetrain")
        ex.close()


def test_loader_end_stall_wakes_a_thread_waiting_for_a_fill(tmp_path):
    """Regression (fix-exec 2, STALL): Loader.end() only notified the loader's own condition, so a loader
    thread waiting in read_pinned for a sample's fill (any error or Ctrl-C mid-epoch) held the join 120 s."""
    from types import SimpleNamespace

    from dlbench.plan import MEMORY
    from dlbench.strategies.stages.loader import Loader
    from dlbench.strategies.stages.ring import Ring
    from dlbench.strategies.stages.store import Stores

    ctx = _local_ctx(tmp_path, world=1)
    store = SampleStore(MemoryTier(1 << 20, 4096), MEMORY)
    loader = Loader(ctx, Stores({MEMORY: store}), Ring(2, 1, 4096), 1, None, Timeline(1 << 10, 0))
    # one step, one access: sample 3 from the memory tier, which nobody ever stores
    view = SimpleNamespace(epoch=0, steps=1, ids=np.array([3]), src=np.array([MEMORY]), bounds=np.array([0, 1]),
                           step_of=np.array([0]), run_len=np.array([1]), local=np.array([0]), need=np.array([1]))
    loader.begin(view)
    th = loader._threads[0]
    th.join(0.3)
    assert th.is_alive()                      # waiting for the fill
    finished, exc = _run_in_thread(loader.end, timeout=10)
    assert finished and exc is None, "Loader.end() waits for the loader thread's read_pinned timeout"
    assert not th.is_alive()
    loader.close()


def test_peer_messages_cut_per_pair_and_byte_cap():
    """PeerPush's messages (issue 19): one per (step, peer) run, cut where the next sample would pass the byte
    cap (at least one sample each); sender and receiver compute the same cuts from the plan's sizes."""
    from dlbench.strategies.stages.peerpush import _messages, _new_group

    g = _new_group(np.array([0, 0, 0, 1, 1, 2, 2]), np.array([1, 1, 1, 2, 2, 2, 3]))
    assert g.tolist() == [True, False, False, True, False, True, True]
    n = np.array([4, 4, 4, 9, 1, 2, 2])
    assert _messages(g, n, 1 << 20) == ([0, 3, 5, 6], [3, 5, 6, 7])        # every group whole
    assert _messages(g, n, 8) == ([0, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 7])  # 12 B and 10 B groups cut
    assert _messages(g, n, 0) == (list(range(7)), list(range(1, 8)))        # one sample each


@pytest.mark.parametrize("name,opts", [("local", {"loader_threads": 3, "window": 4}), ("local", {}),
                                       ("clairvoyant", {"loader_threads": 2}), ("naive", {})])
def test_simulator_costs_the_loader_the_plan_records(name, opts):
    """Issue 16: ``dlbench simulate`` costs ``Pipeline.reader_threads()`` (the field the executor runs), and the
    planner records the options' threads and window on the plan it builds."""
    from dlbench.simulate import SimWorkload, build_plan, load_profile, simulate

    wl, prof = SimWorkload("t", 64, 4, "normal", 2e5, 2e4), load_profile("hdmlp-thesis")
    plan = build_plan(name, wl=wl, nodes=2, ranks_per_node=1, epochs=1, seed=0, profile=prof, sizes=wl.sizes(0),
                      options=opts)
    assert plan.pipeline.reader_threads() == opts.get("loader_threads", 0)
    if opts.get("loader_threads"):
        assert plan.pipeline.window == opts.get("window", 2)
    r = simulate([(name, name, opts)], wl=wl, profile=prof, nodes=2, ranks_per_node=1, epochs=1)[name]
    assert r["plan_loader_threads_per_rank"] == (float(plan.pipeline.reader_threads()) if plan.pipeline.reader_threads() else None)
