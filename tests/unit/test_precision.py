"""--precision for --compute torch and calibrate (issue 12): bf16 autocast on CPU, fp16 only on CUDA (a one-line
error on CPU), recorded in run.json / the compute profile; GPU paths skip without CUDA."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dlbench import workload as W  # noqa: E402
from dlbench.calibrate.compute import calibrate  # noqa: E402
from dlbench.compute.torch_step import TorchCompute, check_precision  # noqa: E402
from dlbench.errors import ConfigError  # noqa: E402


def _batch(tc, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (tc.batch_size, tc.row_nbytes), dtype=np.uint8)


@pytest.mark.parametrize("name", ["hep_cnn", "ptychonn", "cosmoflow"])
def test_bf16_step_on_cpu_trains_with_finite_loss(name):
    wl = W.load(name, scale="tiny")
    tc = TorchCompute(wl, 2, device="cpu", precision="bf16", seed=1)
    tc.keep_losses = True
    p0 = [p.detach().clone() for p in tc.model.parameters()]
    for s in range(2):
        tc.step(_batch(tc, s), np.arange(2), 2, None, 0, s)
    assert len(tc.losses) == 2 and all(np.isfinite(tc.losses))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(p0, tc.model.parameters()))
    assert all(torch.isfinite(p).all() for p in tc.model.parameters())
    assert all(p.dtype == torch.float32 for p in tc.model.parameters()), "master weights stay fp32"
    d = tc.describe()
    assert d["precision"] == "bf16" and d["autocast_dtype"] == "bfloat16" and not d["grad_scaler"]
    assert d["memory_format"] == "contiguous"  # channels-last is for CUDA only
    tc.close()


def test_bf16_autocast_really_runs_the_convolutions_in_bf16():
    wl = W.load("hep_cnn", scale="tiny")
    tc = TorchCompute(wl, 2, device="cpu", precision="bf16")
    seen = []
    conv = next(m for m in tc.model.modules() if isinstance(m, torch.nn.Conv2d))
    conv.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    tc.step(_batch(tc), np.arange(2), 2, None, 0, 0)
    assert seen == [torch.bfloat16]
    tc32 = TorchCompute(wl, 2, device="cpu")
    seen.clear()
    next(m for m in tc32.model.modules() if isinstance(m, torch.nn.Conv2d)).register_forward_hook(
        lambda m, i, o: seen.append(o.dtype))
    tc32.step(_batch(tc32), np.arange(2), 2, None, 0, 0)
    assert seen == [torch.float32]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error")
def test_fp16_on_cpu_is_a_one_line_error(cli, tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="--precision fp16: needs CUDA"):
        check_precision("fp16", "cpu")
    with pytest.raises(ConfigError, match="unknown precision 'fp8'"):
        check_precision("fp8", "cpu")
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "hep_cnn", "--compute", "torch", "--precision", "fp16", "--device", "cpu",
             "--epochs", "1", "--out", tmp_path / "res"])
    assert r.exit_code == 2 and "--precision fp16: needs CUDA" in r.output
    assert len(r.output.strip().splitlines()) == 1
    # checked before anything is generated or written
    assert not (tmp_path / "data").exists() and not (tmp_path / "res").exists()


def test_run_torch_bf16_records_precision(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "hep_cnn", "--compute", "torch", "--precision", "bf16", "--device", "cpu",
             "--epochs", "1", "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    assert "bf16" in r.output
    run = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())
    assert run["config"]["precision"] == "bf16"
    assert run["summary"]["compute"]["precision"] == "bf16"


def test_calibrate_records_precision_and_names_the_file():
    wl = W.load("ptychonn", scale="tiny")
    prof = calibrate(wl, batch_size=2, steps=2, warmup=0, device="cpu", precision="bf16")
    assert prof["precision"] == "bf16" and prof["memory_format"] == "contiguous"
    from dlbench.calibrate.compute import default_profile_path

    assert default_profile_path(prof).name == "ptychonn-tiny-cpu-b2-bf16.compute.yaml"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name", ["hep_cnn", "cosmoflow"])
def test_cuda_precisions_train(name, precision):
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("no bf16 on this GPU")
    wl = W.load(name, scale="tiny")
    tc = TorchCompute(wl, 4, device="cuda", precision=precision)
    tc.keep_losses = True
    for s in range(3):
        tc.step(_batch(tc, s), np.arange(4), 4, None, 0, s)
    assert all(np.isfinite(tc.losses))
    d = tc.describe()
    assert d["precision"] == precision and d["grad_scaler"] == (precision == "fp16")
    assert d["memory_format"] == ("channels_last" if name == "hep_cnn" else "contiguous")
    if name == "hep_cnn":
        w = next(m for m in tc.model.modules() if isinstance(m, torch.nn.Conv2d)).weight
        assert w.is_contiguous(memory_format=torch.channels_last)
        assert w.grad.is_contiguous(memory_format=torch.channels_last)
