"""The runner on an in-memory format with a fake clock: the phases add up to the wall time."""

import numpy as np
import pytest

from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.metrics import summarize, union_length
from dlbench.run.loop import Loop
from dlbench.run.setup import RunConfig
from dlbench.timeline import PHASE_ID, Timeline


class FakeClock:
    """Time moves only when a fake read or a fake compute step says so."""

    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now

    def advance(self, ns):
        self.now += int(ns)


class SlowMemoryReader:
    """MemoryReader whose reads take nbytes / bandwidth of fake time."""

    def __init__(self, inner, clock, ns_per_byte):
        self.inner, self.clock, self.ns_per_byte = inner, clock, ns_per_byte
        self.max_row_nbytes = inner.max_row_nbytes

    def read_into(self, i, out):
        n = self.inner.read_into(i, out)
        self.clock.advance(n * self.ns_per_byte)
        return n

    def close(self):
        pass


class FakeCompute:
    def __init__(self, clock, step_ns):
        self.clock, self.step_ns, self.steps = clock, step_ns, 0

    def step(self, rows, ids, n, timeline, epoch, step):
        t0 = self.clock()
        self.clock.advance(self.step_ns)
        timeline.add(PHASE_ID["compute"], t0, self.clock(), epoch, step)
        self.steps += 1

    def close(self):
        pass


@pytest.mark.parametrize("verify", [False, True])
def test_naive_phases_add_up_to_wall_time(verify):
    wl = wl_mod.load("cosmoflow", scale="tiny")
    clock = FakeClock()
    mem = MemoryReader(wl, seed=0)
    reader = SlowMemoryReader(mem, clock, ns_per_byte=2)
    cfg = RunConfig(workload="cosmoflow", strategy="naive", epochs=2, batch_size=4, verify=verify)
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: reader, clock=clock)
    tl = Timeline(4096, 0)
    compute = FakeCompute(clock, step_ns=3_000_000)
    out = loop.run(tl, compute=compute)
    a = out["arrays"]
    steps = loop.plan.epoch(0).steps
    assert compute.steps == 2 * steps
    for e in range(2):
        m = a["epoch"] == e
        k = list(a["epochs"]).index(e)
        epoch_ns = a["epoch_end_ns"][k] - a["epoch_start_ns"][k]
        per = {p: union_length(a["start_ns"][m & (a["phase"] == i)], a["end_ns"][m & (a["phase"] == i)])
               for p, i in PHASE_ID.items()}
        # synchronous loader: the trainer's time is stall + compute, nothing else
        assert per["stall"] + per["compute"] == epoch_ns
        # every stalled nanosecond was a read; every read happened during a stall
        assert per["read"] == per["stall"] == wl.sample_nbytes * 2 * steps * 4
        assert per["compute"] == 3_000_000 * steps
    s = summarize([a], workload=wl.name, strategy="naive", ranks=1, nodes=1, epochs=2)
    assert s["exposed_io_share"] == pytest.approx(s["read_share"])
    assert s["exposed_io_share"] + s["au"] == pytest.approx(1.0)
    assert s["read_bytes"] == wl.sample_nbytes * 32 * 2
    if verify:
        assert out["verified"] == 64


def test_verify_catches_wrong_bytes():
    from dlbench.errors import RunError

    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)

    class Corrupt:
        max_row_nbytes = mem.max_row_nbytes

        def read_into(self, i, out):
            n = mem.read_into(i, out)
            if i == 7:
                out[3] ^= 0xFF
            return n

        def close(self):
            pass

    cfg = RunConfig(workload="cosmoflow", strategy="naive", epochs=1, batch_size=4, verify=True, compute_time_s=0.0)
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: Corrupt())
    with pytest.raises(RunError, match="sample 7"):
        loop.run(Timeline(1024, 0))


def test_naive_and_prefetch_consume_the_same_order():
    """Same seed, same order: the DataLoader path delivers exactly naive's sequence."""
    wl = wl_mod.load("hep_cnn", scale="tiny")
    mem = MemoryReader(wl, seed=3)
    seqs = {}
    for strat, opts in (("naive", {}), ("prefetch", {"num_workers": 0}), ("prefetch", {"num_workers": 1})):
        cfg = RunConfig(workload="hep_cnn", strategy=strat, options=opts, epochs=2, batch_size=5, seed=3,
                        compute_time_s=0.0, verify=True)
        loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: MemoryReader(wl, seed=3))
        tl = Timeline(1024, 0)
        got = []

        class Recorder:
            def __init__(self, sink):
                self.sink = sink

            def step(self, rows, ids, n, timeline, epoch, step):
                self.sink.append(np.array(ids[:n]))

            def close(self):
                pass

        loop.run(tl, compute=Recorder(got))
        seqs[(strat, opts.get("num_workers"))] = np.concatenate(got)
    base = seqs[("naive", None)]
    assert len(base) == 2 * 64
    for k, v in seqs.items():
        assert np.array_equal(v, base), k


def _fake_run(clock, *, verify=False, epochs=2, plan_build_ns=0, monkeypatch=None, verify_ns=0):
    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)
    reader = SlowMemoryReader(mem, clock, ns_per_byte=2)
    cfg = RunConfig(workload="cosmoflow", strategy="naive", epochs=epochs, batch_size=4, verify=verify)
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: reader, clock=clock)
    if plan_build_ns:
        build = loop.plan._build

        def slow_build(e):  # a plan whose build is slow (as 1.28 M samples are: 25-330 ms)
            clock.advance(plan_build_ns)
            return build(e)

        loop.plan._build = slow_build
    if verify_ns:   # --verify asks the format driver what a reader delivers (FormatDriver.expected_read_row)
        drv = wl.format.driver()
        real = drv.expected_read_row

        def slow_expected(*a, **k):
            clock.advance(verify_ns)
            return real(*a, **k)

        monkeypatch.setattr(drv, "expected_read_row", slow_expected)
    out = loop.run(Timeline(4096, 0), compute=FakeCompute(clock, step_ns=3_000_000))
    return wl, loop, out["arrays"]


def _phase_ns(a, e, name):
    m = (a["epoch"] == e) & (a["phase"] == PHASE_ID[name])
    return union_length(a["start_ns"][m], a["end_ns"][m])


def _epoch_ns(a, e):
    k = list(a["epochs"]).index(e)
    return a["epoch_end_ns"][k] - a["epoch_start_ns"][k]


def test_plan_build_is_outside_step0_stall():
    """Regression (issue 12): the epoch plan was built inside step 0's stall."""
    clock = FakeClock()
    wl, loop, a = _fake_run(clock, plan_build_ns=50_000_000)
    steps = loop.plan.epoch(0).steps
    for e in range(2):
        st0 = (a["epoch"] == e) & (a["phase"] == PHASE_ID["stall"]) & (a["step"] == 0)
        assert union_length(a["start_ns"][st0], a["end_ns"][st0]) == wl.sample_nbytes * 2 * 4  # reads only
        assert _phase_ns(a, e, "plan") == 50_000_000
        assert _phase_ns(a, e, "stall") + _phase_ns(a, e, "compute") == _epoch_ns(a, e)
        assert _phase_ns(a, e, "compute") == 3_000_000 * steps
    s = summarize([a], workload=wl.name, strategy="naive", ranks=1, nodes=1, epochs=2)
    assert s["plan_time_s"] == pytest.approx([0.05, 0.05])
    assert "plan" not in s["phase_share"]
    assert s["exposed_io_share"] + s["au"] == pytest.approx(1.0)


def test_verify_has_its_own_phase(monkeypatch):
    """Regression (issue 12): --verify's time fell between stall and compute, unrecorded."""
    clock = FakeClock()
    wl, loop, a = _fake_run(clock, verify=True, verify_ns=20_000, monkeypatch=monkeypatch)
    steps = loop.plan.epoch(0).steps
    for e in range(2):
        v = _phase_ns(a, e, "verify")
        assert v == 20_000 * 4 * steps
        assert _phase_ns(a, e, "stall") + v + _phase_ns(a, e, "compute") == _epoch_ns(a, e)
    s = summarize([a], workload=wl.name, strategy="naive", ranks=1, nodes=1, epochs=2)
    assert s["exposed_io_share"] + s["au"] + s["phase_share"]["verify"] == pytest.approx(1.0)


def test_end_to_end_exposed_share_includes_prologue():
    """The prologue (staging before epoch 0) counts in the end-to-end share, not in the per-epoch one."""
    tl = Timeline(64, 0)
    tl.add(PHASE_ID["stage"], 0, 4_000, -1, 0)
    tl.mark_epoch(-1, 0, 4_000)
    tl.add(PHASE_ID["stall"], 4_000, 5_000, 0, 0)
    tl.add(PHASE_ID["compute"], 5_000, 8_000, 0, 0)
    tl.mark_epoch(0, 4_000, 8_000, samples=4)
    s = summarize([tl.arrays()], workload="w", strategy="staging", ranks=1, nodes=1, epochs=1)
    assert s["exposed_io_share"] == pytest.approx(1_000 / 4_000)
    assert s["e2e_exposed_io_share"] == pytest.approx((1_000 + 4_000) / (4_000 + 4_000))
