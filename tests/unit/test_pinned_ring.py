"""Issue 30's remaining gap: the loader's buffer IS the pinned memory. The planned executor's batch ring allocated by
the compute (``PlannedExecutor.batch_memory``), each batch copied from where the loader put it (``Batch.hold`` →
``StepPipeline.step(hold=...)``), and a ring buffer written again only once the device copy that reads it completed.

The device is a fake whose copies read their source only when their event completes (the worst case of a DMA):
a buffer refilled before its copy completed shows up as a batch whose copied rows are not its samples. The real
``PlannedExecutor`` (inline and with loader threads, with and without the fill thread), ``Ring`` and
``StepPipeline`` run on CPU; the CUDA test (marker gpu) skips without a GPU."""

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from dlbench.compute.ring import StepPipeline
from dlbench.storage import aligned_rows
from dlbench.strategies.stages.ring import Ring

ROW = 64


class DMAEvent:
    def __init__(self, n):
        self.n = n
        self.recorded = self.completed = False
        self.t = None
        self.stream = None
        self.read = None       # (source rows, expected first bytes): the copy this event ends


class DMABackend:
    """A device that runs in record order and completes an event only when the host waits on (or polls past) a
    later one: a copy reads its source at completion, and checks it still holds the batch it was enqueued for."""

    def __init__(self, complete_on_query: bool = False):
        self.log = []
        self.stream = "compute"
        self.compute_stream = "compute"
        self.events = []
        self.pending = None
        self.copies = 0
        self.complete_on_query = complete_on_query   # a fast device: a polled copy has completed
        self.lock = threading.Lock()                 # the fill thread settles holds too

    def event(self):
        ev = DMAEvent(len(self.events))
        self.events.append(ev)
        return ev

    def record(self, ev):
        ev.recorded, ev.stream, ev.t = True, self.stream, len(self.log)
        if self.stream == "copy" and self.pending is not None and ev.read is None:
            ev.read, self.pending = self.pending, None

    class _Ctx:
        def __init__(self, b, name):
            self.b, self.name = b, name

        def __enter__(self):
            self.prev, self.b.stream = self.b.stream, self.name

        def __exit__(self, *exc):
            self.b.stream = self.prev

    def on_copy_stream(self):
        return self._Ctx(self, "copy")

    def on_compute_stream(self):
        return self._Ctx(self, "compute")

    def wait(self, ev):
        assert ev.recorded and ev.stream == "copy"

    def synchronize(self, ev):
        with self.lock:
            for e in self.events[:ev.n + 1]:      # the device runs in order: everything before ev is done
                if e.recorded and not e.completed:
                    e.completed = True
                    if e.read is not None:
                        rows, want = e.read
                        assert np.array_equal(rows[:, 0], want), "a loader buffer was refilled before its copy completed"
                        self.copies += 1

    def done(self, ev):
        if self.complete_on_query:
            self.synchronize(ev)
        return ev.completed

    def host_ns(self, ev):
        return ev.t

    def note(self, what, slot):
        self.log.append((what, slot))

    def resync(self):
        pass


class IdReader:
    """A SampleReader whose every sample's bytes are its id (mod 251)."""

    max_row_nbytes = ROW
    supports_runs = False

    def read_into(self, i: int, out) -> int:
        out[:ROW] = i % 251
        return ROW

    def close(self) -> None:
        return None


def _ctx(samples, batch):
    from dlbench.comm import SerialComm
    from dlbench.data.registry import get_format
    from dlbench.strategies import RunContext
    from dlbench.timeline import Timeline

    wl = SimpleNamespace(name="ids", layout="hdf5_per_sample", decoded_nbytes=ROW, sample_nbytes=ROW,
                         format=get_format("hdf5_per_sample"))
    return RunContext(workload=wl, n_samples=samples, sample_nbytes=np.full(samples, ROW, np.int64), world_size=1,
                      rank=0, node_map=np.zeros(1, np.int64), seed=0, epochs=2, local_batch=batch,
                      comm=SerialComm(), timeline=Timeline(1 << 14, 0), reader_factory=IdReader)


class _Alloc:
    """Stands for the CUDA host allocator (page-locked memory): page-aligned rows, and it counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, rows, row_nbytes):
        self.calls += 1
        return aligned_rows(rows, row_nbytes)


def _train(ex, pipe, epochs, use_hold=True):
    """The loop's part: each batch to the pipeline, copied from the loader's buffer (``hold``)."""
    for e in range(epochs):
        for s, batch in enumerate(ex.epoch(e)):
            rows = batch.rows[:batch.n]
            want = (np.asarray(batch.ids) % 251).astype(np.uint8)

            def copy_convert(src, rows=rows, want=want):
                pipe.b.pending = (rows, want)
                return src

            pipe.step(pinned_source=True, fill=None, source=rows, copy_convert=copy_convert,
                      compute=lambda x: None, epoch=e, step=s, nbytes=rows.nbytes,
                      hold=batch.hold if use_hold else (lambda done: None))
            pipe.collect()
        pipe.drain()


def _executor(threads, window, keep=False, samples=48, batch=4):
    from dlbench.strategies.localcopy import set_pipeline
    from dlbench.strategies.naive import shared_tier_plan
    from dlbench.strategies.planned import PlannedExecutor

    ctx = _ctx(samples, batch)
    plan = set_pipeline(shared_tier_plan("naive", ctx, False), threads, window)
    return PlannedExecutor(ctx, plan, capacity_bytes={}, fill_thread=keep)


@pytest.mark.parametrize("threads,window", [(0, 0), (0, 2), (2, 2), (4, 3)])
@pytest.mark.parametrize("fast", [False, True])
def test_a_ring_buffer_is_refilled_only_after_its_copy_completed(threads, window, fast):
    ex = _executor(threads, window)
    alloc = _Alloc()
    ex.batch_memory(alloc)
    assert alloc.calls == 1 and ex.ring.pinned and ex.ring.depth == window + 1
    fb = DMABackend(complete_on_query=fast)
    pipe = StepPipeline(fb, slots=3)
    ex.start()
    try:
        _train(ex, pipe, 2)
    finally:
        ex.close()
    steps = 2 * 48 // 4
    assert fb.copies == steps                       # every copy read its own batch, from the loader's buffer
    assert pipe.sources == {"pinned": steps, "staged": 0, "held": steps}
    assert fb.log.count(("release", "loader")) == steps   # every buffer handed back through its hold
    assert all(h is None for h in ex.ring._holds)   # nothing held past the epoch


def test_control_a_buffer_released_before_its_copy_is_caught():
    """The same run with the hold dropped (the buffer goes back to the loader as soon as the step returned): the
    loader refills a buffer whose copy has not completed, and the fake device sees it."""
    ex = _executor(2, 2)
    ex.batch_memory(_Alloc())
    pipe = StepPipeline(DMABackend(), slots=3)
    ex.start()
    try:
        with pytest.raises(AssertionError, match="refilled before its copy completed"):
            _train(ex, pipe, 1, use_hold=False)
    finally:
        ex.close()


def test_loader_threads_get_a_buffer_back_as_soon_as_its_copy_completed():
    """With loader threads, a held buffer goes back when its copy is seen complete (polled each step), not only
    when the trainer needs that buffer: on a device whose copies complete by the next poll, step t's buffer is
    released at step t + 1, before the trainer waits for step t + 1's samples."""
    from dlbench.strategies.stages.loader import Loader

    released = []
    orig = Loader.release

    def spy(self, t):
        released.append((t, len(steps)))
        orig(self, t)

    steps: list[int] = []
    ex = _executor(2, 3)
    ex.batch_memory(_Alloc())
    pipe = StepPipeline(DMABackend(complete_on_query=True), slots=3)
    ex.start()
    Loader.release = spy
    try:
        for s, batch in enumerate(ex.epoch(0)):
            steps.append(s)
            pipe.step(pinned_source=True, fill=None, source=batch.rows, copy_convert=lambda x: x,
                      compute=lambda x: None, epoch=0, step=s, nbytes=0, hold=batch.hold)
        pipe.drain()
    finally:
        Loader.release = orig
        ex.close()
    # step t released when step t + 1 was being delivered (len(steps) == t + 1 then)
    assert released == [(t, t + 1) for t in range(len(steps) - 1)]


def test_fill_thread_settles_before_it_hands_the_buffer_back():
    """A cache strategy's fill thread hands the buffer back after storing the keeps: it waits for the copy first."""
    from dlbench.strategies import get, parse_options

    ctx = _ctx(32, 4)
    strat = get("clairvoyant")
    opts = parse_options(strat, {"loader_threads": 2}, where="test", flags=True)
    plan = strat.plan(ctx.plan_context(), opts)
    ex = strat.executor(ctx, plan, opts)
    ex.batch_memory(_Alloc())
    fb = DMABackend()
    pipe = StepPipeline(fb, slots=3)
    ex.start()
    assert ex.filler is not None and ex.threads == 2
    try:
        _train(ex, pipe, 2)
    finally:
        ex.close()
    assert fb.copies == pipe.sources["held"] == 2 * 32 // 4


def test_ring_hold_settle_and_allocator_checks():
    ring = Ring(2, 3, 100, alloc=_Alloc())

    class Done:
        def __init__(self):
            self.ok = False
            self.waited = 0

        def query(self):
            return self.ok

        def synchronize(self):
            self.waited += 1
            self.ok = True

    d = Done()
    ring.hold(5, d)
    assert ring.held(1) and not ring.held(0)        # step 5 is buffer 1, shared with step 1, 3, 7...
    assert not ring.settled(7) and ring.held(7)     # not complete: still held, not waited for
    ring.settle(7)
    assert d.waited == 1 and not ring.held(7) and ring.settled(7)
    with pytest.raises(ValueError, match="page-aligned rows"):
        Ring(2, 3, 100, alloc=lambda r, c: np.zeros((r, c), np.uint8))   # not page-aligned rows
    assert not Ring(2, 3, 100).pinned


def test_batch_memory_after_start_is_refused():
    from dlbench.errors import RunError

    ex = _executor(0, 0)
    ex.start()
    try:
        with pytest.raises(RunError, match="after start"):
            ex.batch_memory(_Alloc())
    finally:
        ex.close()


def test_no_hold_without_a_pinned_ring():
    ex = _executor(2, 2)
    ex.start()
    try:
        assert all(b.hold is None for b in ex.epoch(0))
    finally:
        ex.close()


def test_cpu_compute_offers_no_pinned_memory():
    torch = pytest.importorskip("torch")   # noqa: F841
    from dlbench import workload as W
    from dlbench.compute.torch_step import TorchCompute

    wl = W.load("cosmoflow", scale="tiny")
    for ov in ("on", "off"):
        tc = TorchCompute(wl, 2, device="cpu", overlap=ov)
        assert tc.host_allocator() is None
        tc.close()


def test_padded_rows_cross_as_one_span_and_convert_like_contiguous_rows():
    """A pinned ring's rows are page-aligned (padded): the step copies the span from the first row to the last
    and views it as rows again after the copy; the inputs equal those of the same rows stored contiguously."""
    torch = pytest.importorskip("torch")
    from dlbench import workload as W
    from dlbench.compute.torch_step import TorchCompute
    from dlbench.storage import flat_span

    wl = W.load("hep_cnn", scale="tiny")
    tc = TorchCompute(wl, 3, device="cpu", overlap="on")
    padded = aligned_rows(3, tc.row_nbytes)
    assert not padded.flags.c_contiguous
    padded[:] = np.random.default_rng(0).integers(0, 256, padded.shape, dtype=np.uint8)
    ids = np.arange(3)
    xs, ys = tc._copy_convert(torch.from_numpy(flat_span(padded)), ids, 3, (padded.shape[1], padded.strides[0]))
    xc, yc = tc._copy_convert(torch.from_numpy(np.ascontiguousarray(padded)), ids, 3)
    assert torch.equal(xs, xc)
    for a, b in zip(ys if isinstance(ys, tuple) else (ys,), yc if isinstance(yc, tuple) else (yc,)):
        assert torch.equal(a, b)
    tc.close()


# ----- CUDA ---------------------------------------------------------------------------------------------------

def _cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
def test_cuda_step_from_the_pinned_ring_trains_like_the_synchronous_step():
    """Batches in the compute's own pinned allocation (padded, page-aligned rows), copied from there with the
    hold, train exactly as the synchronous step on the same bytes; every hold is settled by the ring."""
    from dlbench import workload as W
    from dlbench.compute.torch_step import TorchCompute

    wl = W.load("cosmoflow", scale="tiny")
    on = TorchCompute(wl, 4, device="cuda", seed=1, overlap="on")
    off = TorchCompute(wl, 4, device="cuda", seed=1, overlap="off")
    on.keep_losses = off.keep_losses = True
    ring = Ring(2, 4, on.row_nbytes, alloc=on.host_allocator())
    assert ring.pinned
    rng = np.random.default_rng(3)
    for s in range(5):
        ring.settle(s)                                       # the loader's part: the buffer is free
        ring[s][:] = rng.integers(0, 256, ring[s].shape, dtype=np.uint8)
        off.step(np.ascontiguousarray(ring[s]), np.arange(4), 4, None, 0, s)
        on.step(ring[s], np.arange(4), 4, None, 0, s, hold=lambda done, s=s: ring.hold(s, done))
    on.drain()
    ring.settle_all()
    assert on.describe()["h2d_sources"] == {"pinned": 5, "staged": 0, "held": 5}
    np.testing.assert_allclose(on.losses, off.losses, rtol=1e-3)
    on.close()
    off.close()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs CUDA")
@pytest.mark.parametrize("strategy", ["staging", "clairvoyant"])
def test_cuda_loader_threads_batches_cross_from_the_pinned_ring(cli, tmp_path, monkeypatch, strategy):
    """staging / clairvoyant with 4 loader threads, --compute torch on CUDA (--overlap auto = on): every batch
    is copied from the loader's pinned buffer (none staged), handed back through its hold."""
    import json

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / strategy
    r = cli(["run", "--workload", "hep_cnn", "--strategy", strategy, "--loader-threads", "4", "--compute", "torch",
             "--device", "cuda", "--epochs", "2", "--out", out])
    assert r.exit_code == 0, r.output
    comp = json.loads(next(out.rglob("run.json")).read_text())["summary"]["compute"]
    src = comp["h2d_sources"]
    assert src["staged"] == 0 and src["pinned"] == src["held"] > 0, src


class PinnedCompute:
    """A compute object with the torch compute's hand-off (``host_allocator``, ``step(..., hold=)``, ``drain``)
    whose device is the fake above: the run loop's wiring, end to end on CPU."""

    def __init__(self):
        self.alloc = _Alloc()
        self.pipe = StepPipeline(DMABackend(), slots=3)
        self.holds = 0

    def host_allocator(self):
        return self.alloc

    def step(self, rows, ids, n, timeline, epoch, step, hold=None):
        self.holds += hold is not None
        rows = rows[:n]
        want = (np.asarray(ids) % 251).astype(np.uint8)

        def copy_convert(src):
            self.pipe.b.pending = (rows, want)
            return src

        self.pipe.step(pinned_source=True, fill=None, source=rows, copy_convert=copy_convert,
                       compute=lambda x: None, epoch=epoch, step=step, nbytes=rows.nbytes, hold=hold)
        self.pipe.collect()

    def drain(self, timeline=None):
        self.pipe.drain()

    def close(self):
        self.pipe.drain()


class _IdFirstByte:
    """The workload's in-memory reader, with each sample's first byte set to its id (mod 251)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read_into(self, i, out):
        n = self.inner.read_into(i, out)
        out[0] = i % 251
        return n


@pytest.mark.parametrize("strategy,options", [("naive", {}), ("clairvoyant", {"loader_threads": 4})])
def test_run_loop_allocates_the_ring_from_the_compute_and_passes_the_hold(strategy, options):
    from dlbench import workload as wl_mod
    from dlbench.comm import SerialComm
    from dlbench.data.formats import MemoryReader
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.timeline import Timeline

    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)
    cfg = RunConfig(workload="cosmoflow", strategy=strategy, epochs=2, batch_size=4, options=options)
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: _IdFirstByte(mem))
    comp = PinnedCompute()
    out = loop.run(Timeline(1 << 14, 0), compute=comp)
    steps = sum(loop.plan.epoch(e).steps for e in range(2))
    assert comp.alloc.calls == 1 and out["delivered_samples"] == 2 * mem.samples
    assert comp.holds == steps and comp.pipe.b.copies == steps     # every copy read its own batch
    assert comp.pipe.sources == {"pinned": steps, "staged": 0, "held": steps}
