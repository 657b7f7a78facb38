"""Issue 30: the overlapped host-to-device path (compute/ring.py) — its order driven by a fake stream/event backend
on CPU; TorchCompute under --overlap on (host backend) equal to the synchronous step; the plain gradients of one
rank equal to the flat bucket's; the transfer split in the summary, report, compare, CSV and trace; --precision
picking the measured step time of sleep compute. CUDA tests (marker gpu) skip without a GPU."""

import json

import numpy as np
import pytest

from dlbench.compute.ring import StepPipeline, split_transfer
from dlbench.errors import ConfigError


class FakeEvent:
    def __init__(self, log, name):
        self.log, self.name = log, name
        self.recorded = False
        self.completed = False
        self.stream = None
        self.t = None


class FakeBackend:
    """Streams and events that never complete on their own: an event completes only when the host synchronizes
    on it (or ``complete_all``), the worst case for a pipeline that must not reuse a slot too early. Records
    the order of fill, copy, wait and release; checks, at every fill, that the copy that last read the slot
    has completed."""

    def __init__(self):
        self.log = []
        self.stream = "compute"
        self.slot_copy = {}          # slot -> the copy_end event of the copy that last read it
        self._last_copy_ev = None
        self.clock = 0
        self.n = 0
        self.compute_stream = "compute"

    def event(self):
        self.n += 1
        return FakeEvent(self.log, self.n)

    def record(self, ev):
        self.clock += 10
        ev.recorded, ev.stream, ev.t = True, self.stream, self.clock
        if self.stream == "copy":
            self._last_copy_ev = ev

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
        assert ev.recorded and ev.stream == "copy", "the compute stream waits on the copy's event"

    def synchronize(self, ev):
        assert ev.recorded
        ev.completed = True

    def done(self, ev):
        return ev.completed

    def host_ns(self, ev):
        return ev.t

    def note(self, what, slot):
        self.log.append((what, slot))
        if what == "copy" and slot is not None:
            self.slot_copy[slot] = self._last_copy_ev

    def check_fill(self, j):
        ev = self.slot_copy.get(j)
        assert ev is None or ev.completed, f"slot {j} overwritten before its copy completed"

    def resync(self):
        pass


def _run(pipe, fb, steps, pinned=False, held=None):
    def fill(j):
        fb.check_fill(j)
        return f"slot{j}"

    for k in range(steps):
        copied = {}

        def copy_convert(src, copied=copied):
            assert fb.stream == "copy"
            copied["src"] = src
            return ("x", src)

        def compute(inputs, copied=copied):
            assert fb.stream == "compute" and inputs[1] == copied["src"]

        pipe.step(pinned_source=pinned, fill=fill, source=f"batch{k}", copy_convert=copy_convert,
                  compute=compute, epoch=0, step=k, nbytes=100)
        if held is not None:   # the loader's buffer goes back now: its copy must be done
            held.append(fb._last_copy_ev.completed)


def test_ring_order_fill_copy_wait_release_and_no_early_overwrite():
    fb = FakeBackend()
    pipe = StepPipeline(fb, slots=3)
    _run(pipe, fb, 7)
    # first lap: fill, copy, wait per slot; from step 3 on each fill is preceded by the release of its slot
    assert fb.log[:9] == [("fill", 0), ("copy", 0), ("wait", 0), ("fill", 1), ("copy", 1), ("wait", 1),
                          ("fill", 2), ("copy", 2), ("wait", 2)]
    assert fb.log[9:13] == [("release", 0), ("fill", 0), ("copy", 0), ("wait", 0)]
    fills = [s for w, s in fb.log if w == "fill"]
    assert fills == [0, 1, 2, 0, 1, 2, 0]
    assert pipe.sources == {"pinned": 0, "staged": 7, "held": 0}


def test_ring_check_fails_when_a_slot_is_reused_before_its_copy():
    """The fake catches the bug it is there for: a ring that refills a slot without waiting for its copy."""
    fb = FakeBackend()
    pipe = StepPipeline(fb, slots=2)
    pipe.slot_for = lambda k: k % 2          # no wait on the slot's copy event
    with pytest.raises(AssertionError, match="overwritten before its copy completed"):
        _run(pipe, fb, 3)


def test_pinned_source_is_copied_in_place_and_held_until_copied():
    fb = FakeBackend()
    pipe = StepPipeline(fb, slots=3)
    held = []
    _run(pipe, fb, 4, pinned=True, held=held)
    assert held == [True] * 4                  # every batch handed back only after its copy completed
    assert [w for w, _ in fb.log] == ["copy", "wait", "release"] * 4
    assert pipe.sources == {"pinned": 4, "staged": 0, "held": 0}


def test_at_most_depth_steps_in_flight():
    fb = FakeBackend()
    pipe = StepPipeline(fb, slots=3, depth=2)
    computes = []
    orig = fb.record

    def record(ev):
        orig(ev)
        if fb.stream == "compute":
            computes.append(ev)

    fb.record = record
    for _k in range(6):
        _run(pipe, fb, 1)
        ends = computes[1::2]                  # compute_start, compute_end per step
        assert sum(not e.completed for e in ends) <= 2


@pytest.mark.parametrize("cs,ce,prev,want", [
    (100, 200, None, 100),      # first step: all exposed
    (100, 200, 50, 100),        # the device idled before the copy: all exposed
    (100, 200, 150, 150),       # half hidden behind the previous compute
    (100, 200, 250, 200),       # the previous compute outlasted the copy: all overlapped
])
def test_split_transfer(cs, ce, prev, want):
    assert split_transfer(cs, ce, prev) == want


def test_collect_files_records_in_order_with_the_split():
    fb = FakeBackend()
    pipe = StepPipeline(fb, slots=3)
    _run(pipe, fb, 3)
    got = []
    pipe.collect(got.append)                          # files what completed (here: what the ring waited for)
    pipe.drain(got.append)
    assert [r.step for r in got] == [0, 1, 2]
    assert got[0].exposed_start == got[0].copy_start   # nothing before the first step
    for a, b in zip(got, got[1:]):
        assert b.exposed_start == split_transfer(b.copy_start, b.copy_end, a.compute_end)
    assert not pipe.collect(got.append)


# ----- TorchCompute under --overlap ---------------------------------------------------------------------------

torch = pytest.importorskip("torch")

from dlbench import workload as W  # noqa: E402
from dlbench.compute.torch_step import TorchCompute, resolve_overlap  # noqa: E402
from dlbench.timeline import PHASE_ID  # noqa: E402


class Tl:
    def __init__(self):
        self.rows = []

    def add(self, phase_id, start_ns, end_ns, epoch, step, nbytes=0, tier=0):
        self.rows.append((phase_id, start_ns, end_ns, epoch, step, nbytes))


def _batch(tc, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (tc.batch_size, tc.row_nbytes), dtype=np.uint8)


def test_overlap_on_cpu_equals_the_synchronous_step():
    wl = W.load("hep_cnn", scale="tiny")
    runs = {}
    for ov in ("off", "on"):
        tc = TorchCompute(wl, 4, device="cpu", seed=1, overlap=ov)
        tc.keep_losses = True
        tl = Tl()
        for s in range(3):   # a loader's buffer may be wider than the row: 8 spare bytes per row
            wide = np.random.default_rng(s).integers(0, 256, (tc.batch_size, tc.row_nbytes + 8), dtype=np.uint8)
            tc.step(wide, np.arange(4), 4 if s < 2 else 3, tl, 0, s)
        tc.drain(tl)
        runs[ov] = (tc.losses, [p.detach().clone() for p in tc.model.parameters()], tl, tc.describe())
        tc.close()
    assert runs["on"][0] == runs["off"][0]
    assert all(torch.equal(a, b) for a, b in zip(runs["on"][1], runs["off"][1]))
    tl, d = runs["on"][2], runs["on"][3]
    per_step = [[r[0] for r in tl.rows if r[4] == s] for s in range(3)]
    # a synchronous device: the compute waited for every transfer
    assert all(k == [PHASE_ID["transfer"], PHASE_ID["transfer_exposed"], PHASE_ID["compute"]] for k in per_step)
    assert d["overlap"] == "on" and d["h2d_sources"] == {"pinned": 0, "staged": 3, "held": 0}
    assert len(d["step_times_s"]) == 3 and d["transfer_exposed_times_s"] == d["transfer_times_s"]
    assert runs["off"][3]["overlap"] == "off" and runs["off"][3]["h2d_sources"] is None


def test_plain_gradients_equal_the_flat_bucket():
    """The fix for the slow fp16 step: one rank keeps torch's own per-parameter gradients; losses and
    parameters are those of the flat bucket of strided views (bit for bit on CPU), in fp32 and bf16."""
    wl = W.load("hep_cnn", scale="tiny")
    for precision in ("fp32", "bf16"):
        out = {}
        for gb in ("flat", "plain"):
            tc = TorchCompute(wl, 4, device="cpu", seed=2, grad_bucket=gb, precision=precision)
            tc.keep_losses = True
            for s in range(2):
                tc.step(_batch(tc, s), np.arange(4), 4, None, 0, s)
            grads_are_views = all(p.grad is not None and p.grad.data_ptr() >= tc._flat.data_ptr()
                                  for p in tc.model.parameters()) if tc._flat is not None else False
            out[gb] = (tc.losses, [p.detach().clone() for p in tc.model.parameters()], grads_are_views,
                       tc.describe()["grad_bucket"])
            tc.close()
        assert out["flat"][0] == out["plain"][0]
        assert all(torch.equal(a, b) for a, b in zip(out["flat"][1], out["plain"][1]))
        assert out["flat"][2] and out["flat"][3] == "flat" and out["plain"][3] == "plain"


def test_overlap_choices():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_overlap("auto", cpu) == "off" and resolve_overlap("auto", cuda) == "on"
    assert resolve_overlap("auto", cuda, world=2) == "off" and resolve_overlap("on", cpu) == "on"
    with pytest.raises(ConfigError, match="--overlap on: .* 2 ranks"):
        resolve_overlap("on", cuda, world=2)
    with pytest.raises(ConfigError, match="unknown overlap 'sometimes'"):
        resolve_overlap("sometimes", cpu)


def test_summary_splits_the_transfer_and_au_counts_only_compute():
    from dlbench.metrics import summarize

    P = PHASE_ID
    a = {"start_ns": np.array([0, 0, 50, 100, 100]), "end_ns": np.array([100, 50, 100, 400, 100]),
         "phase": np.array([P["transfer"], P["transfer_overlapped"], P["transfer_exposed"], P["compute"],
                            P["stall"]], dtype=np.uint8),
         "epoch": np.zeros(5, np.int32), "step": np.zeros(5, np.int32), "nbytes": np.zeros(5, np.int64),
         "tier": np.zeros(5, np.uint8), "epochs": np.array([0]), "epoch_start_ns": np.array([0]),
         "epoch_end_ns": np.array([400]), "epoch_samples": np.array([4])}
    s = summarize([a], workload="w", strategy="naive")
    assert s["phase_share"]["transfer_exposed"] == pytest.approx(50 / 400)
    assert s["phase_share"]["transfer_overlapped"] == pytest.approx(50 / 400)
    assert s["au"] == pytest.approx(300 / 400)
    assert "transfer_exposed" in s["definitions"] and "transfer_overlapped" in s["definitions"]


def test_run_overlap_on_cpu_reports_the_split_everywhere(cli, tmp_path, monkeypatch):
    """A CPU run with --overlap on: run.json's summary, report, compare, the TimeLogger CSV and the trace all
    carry transfer_exposed (all of the transfer on a CPU) and transfer_overlapped (none)."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "hep_cnn", "--compute", "torch", "--device", "cpu", "--overlap", "on",
             "--epochs", "1", "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    run_json = next((tmp_path / "res").rglob("run.json"))
    run = json.loads(run_json.read_text())
    s = run["summary"]
    assert s["compute"]["overlap"] == "on"
    assert run["config"]["overlap"] == "on"
    ps = s["phase_share"]
    assert ps["transfer_exposed"] > 0 and ps["transfer_overlapped"] == 0
    assert s["phase_time_s"]["transfer_exposed"] == pytest.approx(s["phase_time_s"]["transfer"])
    rep = cli(["report", str(run_json.parent)])
    assert rep.exit_code == 0 and "host-to-device exposed / overlapped" in rep.output, rep.output
    cmp_ = cli(["compare", str(run_json.parent), "--format", "csv"])
    assert cmp_.exit_code == 0 and "transfer_exposed_share" in cmp_.output.splitlines()[0]
    csv_text = (run_json.parent / "timelogger.csv").read_text()
    assert " transfer_exposed, Host To Device Waited For" in csv_text
    trace = json.loads((run_json.parent / "trace.json").read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"transfer", "transfer_exposed", "compute"} <= names


def test_overlap_needs_torch_compute(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "hep_cnn", "--overlap", "on", "--epochs", "1", "--out", tmp_path / "res"])
    assert r.exit_code == 2 and "--overlap=on: applies to --compute torch" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "res").exists()


def test_precision_picks_the_measured_step_time_for_sleep():
    cosmo = W.load("cosmoflow", scale="tiny")
    ch = {p: cosmo.choose_step_time("h100", None, p) for p in ("fp32", "bf16", "fp16")}
    assert (ch["bf16"].step_time_s, ch["fp16"].step_time_s) == (0.0111, 0.0105)
    assert ch["bf16"].kind == "measured" and "bf16" in ch["bf16"].source
    assert ch["fp32"].step_time_s != ch["bf16"].step_time_s
    assert W.load("imagenet", scale="tiny").choose_step_time(None, None, "bf16").step_time_s == 0.0279
    with pytest.raises(ConfigError, match="workload hep_cnn in bf16 has no step time"):
        W.load("hep_cnn", scale="tiny").choose_step_time(None, None, "bf16")


def test_run_sleep_bf16_uses_the_bf16_entry(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "cosmoflow", "--precision", "bf16", "--accelerator", "h100", "--epochs", "1",
             "--dry-run", "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    assert "0.0111" in r.output, r.output


# ----- CUDA ---------------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("name", ["cosmoflow", "hep_cnn"])
def test_cuda_overlap_trains_like_the_synchronous_step(name):
    wl = W.load(name, scale="tiny")
    out = {}
    for ov in ("off", "on"):
        tc = TorchCompute(wl, 4, device="cuda", seed=1, overlap=ov)
        tc.keep_losses = True
        tl = Tl()
        for s in range(4):
            tc.step(_batch(tc, s), np.arange(4), 4, tl, 0, s)
        tc.drain(tl)
        out[ov] = (tc.losses, tl, tc.describe())
        tc.close()
    np.testing.assert_allclose(out["on"][0], out["off"][0], rtol=1e-3)
    tl, d = out["on"][1], out["on"][2]
    assert d["overlap"] == "on" and d["h2d_sources"]["staged"] == 4
    assert [r[4] for r in tl.rows if r[0] == PHASE_ID["compute"]] == [0, 1, 2, 3]
    for e, t in zip(d["transfer_exposed_times_s"], d["transfer_times_s"]):
        assert 0 <= e <= t + 1e-9


@pytest.mark.gpu
@gpu
def test_cuda_pinned_batch_is_copied_in_place():
    wl = W.load("cosmoflow", scale="tiny")
    tc = TorchCompute(wl, 4, device="cuda", overlap="on")
    pinned = torch.empty((4, tc.row_nbytes), dtype=torch.uint8, pin_memory=True)
    pinned.copy_(torch.from_numpy(_batch(tc)))
    for s in range(3):
        tc.step(pinned.numpy(), np.arange(4), 4, None, 0, s)
    tc.drain()
    assert tc.describe()["h2d_sources"] == {"pinned": 3, "staged": 0, "held": 0}
    tc.close()


@pytest.mark.gpu
@gpu
def test_cuda_fp16_plain_gradients_equal_the_flat_bucket():
    wl = W.load("cosmoflow", scale="tiny")
    out = {}
    for gb in ("flat", "plain"):
        tc = TorchCompute(wl, 4, device="cuda", seed=2, grad_bucket=gb, precision="fp16", overlap="off")
        tc.keep_losses = True
        for s in range(3):
            tc.step(_batch(tc, s), np.arange(4), 4, None, 0, s)
        out[gb] = tc.losses
        tc.close()
    np.testing.assert_allclose(out["plain"], out["flat"], rtol=1e-3)


@pytest.mark.gpu
@gpu
def test_cuda_prefetch_pin_memory_batches_cross_from_the_pinned_buffer(cli, tmp_path, monkeypatch):
    """prefetch --pin-memory: the DataLoader's pin thread pins each batch, and the step copies it from there
    (no second host copy); without --pin-memory every batch goes through a pinned slot."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    got = {}
    for pin in ("--pin-memory", "--no-pin-memory"):
        out = tmp_path / pin
        r = cli(["run", "--workload", "hep_cnn", "--strategy", "prefetch", "--num-workers", "1", pin,
                 "--compute", "torch", "--device", "cuda", "--epochs", "1", "--out", out])
        assert r.exit_code == 0, r.output
        got[pin] = json.loads(next(out.rglob("run.json")).read_text())["summary"]["compute"]["h2d_sources"]
    assert got["--pin-memory"]["staged"] == 0 and got["--pin-memory"]["pinned"] > 0
    assert got["--no-pin-memory"]["pinned"] == 0 and got["--no-pin-memory"]["staged"] > 0
