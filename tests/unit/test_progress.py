"""The live progress line: redraws bounded by the clock (never per sample), figures equal to the run's,
off when not on a terminal."""

import io
import math

import pytest

from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.metrics import per_epoch_table
from dlbench.progress import StepProgress, wanted
from dlbench.run.loop import Loop
from dlbench.run.setup import RunConfig
from dlbench.timeline import PHASE_ID, Timeline


class FakeClock:
    def __init__(self):
        self.now = 1_000_000

    def __call__(self):
        return self.now


class SlowMemoryReader:
    """Reads take nbytes × ns_per_byte of fake time."""

    def __init__(self, inner, clock, ns_per_byte):
        self.inner, self.clock, self.ns_per_byte = inner, clock, ns_per_byte
        self.max_row_nbytes = inner.max_row_nbytes

    def read_into(self, i, out):
        n = self.inner.read_into(i, out)
        self.clock.now += n * self.ns_per_byte
        return n

    def close(self):
        pass


class FakeCompute:
    def __init__(self, clock, step_ns):
        self.clock, self.step_ns = clock, step_ns

    def step(self, rows, ids, n, timeline, epoch, step):
        t0 = self.clock()
        self.clock.now += self.step_ns
        timeline.add(PHASE_ID["compute"], t0, self.clock(), epoch, step)

    def close(self):
        pass


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_wanted_follows_the_terminal_unless_forced():
    assert wanted(None, (_Tty(), _Tty())) is True
    assert wanted(None, (_Tty(), io.StringIO())) is False  # stdout or stderr redirected: off
    assert wanted(True, (io.StringIO(), io.StringIO())) is True
    assert wanted(False, (_Tty(), _Tty())) is False


def test_redraws_bounded_by_the_clock_not_by_steps():
    p = StepProgress(1, file=io.StringIO(), force_terminal=True)
    p.epoch_start(0, 100_000, 0)
    for s in range(100_000):  # 100,000 steps of 1 ms = 100 s of fake time
        p.step(s, s * 1_000_000, s * 1_000_000 + 200_000, 4)
    p.epoch_end(0, 100_000 * 1_000_000)
    p.close()
    assert p.renders <= math.ceil(100 / 0.25) + 2
    f = p.figures(100_000 * 1_000_000)
    assert f["exposed_io_share"] == pytest.approx(0.2) and f["samples_per_s"] == pytest.approx(4000)
    assert f["step"] == 100_000


def test_runner_hook_shows_the_runs_figures():
    wl = wl_mod.load("cosmoflow", scale="tiny")
    clock = FakeClock()
    mem = MemoryReader(wl, seed=0)
    reader = SlowMemoryReader(mem, clock, ns_per_byte=2)
    cfg = RunConfig(workload="cosmoflow", strategy="naive", epochs=2, batch_size=4)
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: reader, clock=clock)
    buf = io.StringIO()
    p = StepProgress(2, file=buf, force_terminal=True)
    out = loop.run(Timeline(4096, 0), compute=FakeCompute(clock, step_ns=300_000_000), progress=p)
    p.close()
    steps = loop.plan.epoch(0).steps
    # 300 ms steps: a redraw at most every 250 ms of the run's own clock, so at most one per step plus the
    # epoch ends, and never more than the steps
    assert 2 <= p.renders <= 2 * steps + 2
    last = per_epoch_table([out["arrays"]], 2)[-1]
    f = p.figures(out["arrays"]["epoch_end_ns"][-1])
    assert f["epoch"] == 2 and f["step"] == steps
    assert f["exposed_io_share"] == pytest.approx(last["phase_time_s"]["stall"] / last["epoch_time_s"], rel=1e-9)
    text = buf.getvalue()
    assert "epoch 2/2" in text and "exposed I/O" in text and f"{steps}/{steps}" in text


def test_cli_run_progress_flag(tmp_path, cli):
    d = tmp_path / "cf"
    assert cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"]).exit_code == 0
    base = ["run", "--data-dir", d, "--epochs", 1, "--compute-time", "0", "--out", tmp_path / "res"]
    off = cli(base)  # CliRunner's streams are not terminals: off by default
    assert off.exit_code == 0 and "exposed I/O 1" not in off.output and "steps  exposed" not in off.output
    on = cli([*base, "--progress"])
    assert on.exit_code == 0, on.output
    assert "steps  exposed I/O" in on.output and "epoch 1/1" in on.output
