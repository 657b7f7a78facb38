"""TorchCompute (contract 6, --compute torch) and calibrate on CPU; GPU paths skip cleanly without CUDA."""

import sys
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dlbench import workload as W  # noqa: E402
from dlbench.calibrate.compute import calibrate, write_profile  # noqa: E402
from dlbench.compute.profile import load_compute_profile  # noqa: E402
from dlbench.compute.torch_step import TorchCompute, resolve_device  # noqa: E402
from dlbench.errors import ConfigError  # noqa: E402

PHASES = ("read", "decode", "transfer", "exchange", "stage", "compute", "checkpoint", "stall", "barrier")


@pytest.fixture
def phase_id(monkeypatch):
    """PHASE_ID from dlbench.timeline, or (before the timeline module is merged) the contract's order."""
    try:
        from dlbench.timeline import PHASE_ID
    except ImportError:
        mod = types.ModuleType("dlbench.timeline")
        mod.PHASES = PHASES
        mod.PHASE_ID = {p: i for i, p in enumerate(PHASES)}
        monkeypatch.setitem(sys.modules, "dlbench.timeline", mod)
        PHASE_ID = mod.PHASE_ID
    return PHASE_ID


class FakeTimeline:
    def __init__(self):
        self.rows = []

    def add(self, phase_id, start_ns, end_ns, epoch, step, nbytes=0, tier=0):
        self.rows.append((phase_id, start_ns, end_ns, epoch, step, nbytes))


def _rows(tc, n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (tc.batch_size, tc.row_nbytes), dtype=np.uint8)


@pytest.mark.parametrize("name", ["cosmoflow", "hep_cnn", "ptychonn"])
def test_step_records_transfer_and_compute_in_order(name, phase_id):
    wl = W.load(name, scale="tiny")
    tc = TorchCompute(wl, 4, device="cpu")
    tl = FakeTimeline()
    batch = _rows(tc, 4)
    for s in range(2):
        tc.step(batch, np.arange(4), 4, tl, epoch=1, step=s)
    kinds = [r[0] for r in tl.rows]
    # synchronous (--overlap off, the CPU default): the compute waited for all of the transfer
    assert kinds == [phase_id["transfer"], phase_id["transfer_exposed"], phase_id["compute"]] * 2
    assert tl.rows[0][1:3] == tl.rows[1][1:3]
    for _pid, t0, t1, ep, _st, _nb in tl.rows:
        assert t1 >= t0 and ep == 1
    assert tl.rows[0][5] == 4 * wl.sample_nbytes  # transfer bytes: the rows moved
    assert tl.rows[2][2] <= tl.rows[3][1], "steps do not overlap"
    d = tc.describe()
    assert d["mode"] == "torch" and d["device_type"] == "cpu" and d["torch"] == str(torch.__version__)
    assert d["parameters"] > 0 and len(d["step_times_s"]) == 2 and d["allreduce_times_s"] == []
    tc.close()


def test_step_trains_the_model_and_partial_batch(phase_id):
    wl = W.load("hep_cnn", scale="tiny")
    tc = TorchCompute(wl, 8, device="cpu", seed=3, grad_bucket="flat")
    p0 = [p.detach().clone() for p in tc.model.parameters()]
    batch = _rows(tc, 8)
    tc.step(batch, np.arange(8), 5, FakeTimeline(), 0, 0)  # last, short batch
    assert any(not torch.equal(a, b.detach()) for a, b in zip(p0, tc.model.parameters()))
    assert all(torch.isfinite(p).all() for p in tc.model.parameters())
    # grads are views of one flat buffer (the allreduce bucket)
    assert all(p.grad.data_ptr() >= tc._flat.data_ptr() for p in tc.model.parameters())


def test_same_seed_same_initial_model():
    wl = W.load("cosmoflow", scale="tiny")
    a = TorchCompute(wl, 2, device="cpu", seed=7)
    b = TorchCompute(wl, 2, device="cpu", seed=7)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))


def test_bad_arguments_are_config_errors():
    wl = W.load("hep_cnn", scale="tiny")
    with pytest.raises(ConfigError, match="batch size=0"):
        TorchCompute(wl, 0, device="cpu")
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        resolve_device("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_requested_without_cuda_is_one_line_error(cli, tmp_path):
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda")
    r = cli(["calibrate", "--workload", "hep_cnn", "--scale", "tiny", "--device", "cuda"])
    assert r.exit_code == 2 and "CUDA is not available" in r.output


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_step_pinned_transfer(phase_id):
    wl = W.load("cosmoflow", scale="tiny")
    tc = TorchCompute(wl, 4, device="cuda", overlap="off")
    tl = FakeTimeline()
    tc.step(_rows(tc, 4), np.arange(4), 4, tl, 0, 0)
    assert tc._pinned["full"].is_pinned() and tc.describe()["device_type"] == "cuda"
    assert [r[0] for r in tl.rows] == [phase_id["transfer"], phase_id["transfer_exposed"], phase_id["compute"]]


def test_calibrate_profile_round_trip(tmp_path):
    wl = W.load("ptychonn", scale="tiny")
    prof = calibrate(wl, batch_size=2, steps=3, warmup=1, device="cpu")
    assert prof["batch_size"] == 2 and prof["steps"] == 3 and len(prof["step_times_s"]) == 3
    assert prof["step_time_s"] == sorted(prof["step_times_s"])[1]
    assert prof["device_type"] == "cpu" and prof["torch"] == str(torch.__version__)
    path = write_profile(prof, tmp_path / "p.yaml")
    st, b, meta = load_compute_profile(path)
    assert (st, b) == (prof["step_time_s"], 2) and meta["workload"] == "ptychonn"
    assert not list(tmp_path.glob("*.tmp"))


def test_load_compute_profile_errors(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("batch_size: 4\n")
    with pytest.raises(ConfigError, match="missing key 'step_time_s'"):
        load_compute_profile(p)
    p.write_text("step_time_s: -1\nbatch_size: 4\n")
    with pytest.raises(ConfigError, match="step_time_s=-1"):
        load_compute_profile(p)
    p.write_text("step_time_s: 0.1\nbatch_size: 0\n")
    with pytest.raises(ConfigError, match="batch_size=0"):
        load_compute_profile(p)


def test_calibrate_default_path_not_in_current_dir(cli, tmp_path, monkeypatch):
    """issue 12: calibrate wrote its profile into the current directory; now results/calibrate/, path printed."""
    monkeypatch.chdir(tmp_path)
    r = cli(["calibrate", "--workload", "hep_cnn", "--scale", "tiny", "--batch-size", "2", "--steps", "2",
             "--warmup", "1", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert "median" in r.output and "wrote results/calibrate/hep_cnn-tiny-cpu-b2.compute.yaml" in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
    assert [p.name for p in (tmp_path / "results" / "calibrate").iterdir()] == ["hep_cnn-tiny-cpu-b2.compute.yaml"]
    st, b, meta = load_compute_profile(tmp_path / "results" / "calibrate" / "hep_cnn-tiny-cpu-b2.compute.yaml")
    assert b == 2 and st > 0 and meta["device_type"] == "cpu" and meta["precision"] == "fp32"


@pytest.mark.parametrize("args,msg", [(["--batch-size", "0"], "--batch-size=0"), (["--steps", "0"], "--steps=0"),
                                      (["--warmup", "-1"], "--warmup=-1")])
def test_cli_calibrate_bad_numbers(cli, tmp_path, monkeypatch, args, msg):
    monkeypatch.chdir(tmp_path)
    r = cli(["calibrate", "--workload", "hep_cnn", "--scale", "tiny", "--device", "cpu", *args])
    assert r.exit_code == 2 and msg in r.output and len(r.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
