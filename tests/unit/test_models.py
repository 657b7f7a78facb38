"""Models per workload: built from the workload's (tiny) sample shapes, forward/backward/optimizer on CPU.

CPU tests use the ``tiny`` presets (documented reduction): cosmoflow (32,32,32,4) int16, deepcam (48,72,16),
ptychonn (32,32,1), hep_cnn (3,32,32); imagenet rows are the real decoded (224,224,3) uint8.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dlbench import workload as W  # noqa: E402
from dlbench.compute import models as M  # noqa: E402
from dlbench.errors import ConfigError  # noqa: E402

CASES = [("ptychonn", None), ("cosmoflow", None), ("deepcam", None), ("deepcam", "deepcam_resnet50"),
         ("hep_cnn", None), ("imagenet", None)]


def _batch(wl, n, seed=0):
    fields = M.row_fields(wl)
    row = fields[-1].offset + fields[-1].nbytes
    return fields, np.random.default_rng(seed).integers(0, 256, (n + 1, row), dtype=np.uint8)


@pytest.mark.parametrize("name,model", CASES)
def test_forward_backward_step_on_tiny_shape(name, model):
    torch.manual_seed(0)
    wl = W.load(name, scale="tiny")
    task = M.make_task(wl, model)
    fields, batch = _batch(wl, 2)
    views = M.split_rows(batch, fields, 2)
    before = batch.copy()
    x, y = task.inputs(views, np.arange(2), 2, torch.device("cpu"))
    data = next(f for f in fields if f.role == "data")
    assert x.shape[0] == 2 and x.numel() == 2 * int(np.prod(data.shape))
    opt = task.optimizer(task.model.parameters())
    p0 = [p.detach().clone() for p in task.model.parameters()]
    out = task.model(x)
    loss = task.loss(out, y)
    assert torch.isfinite(loss), "random bytes must still give a finite loss"
    loss.backward()
    opt.step()
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(p0, task.model.parameters()))
    assert changed > 0
    assert np.array_equal(batch, before), "the caller's batch must not be modified"


def test_output_shapes_match_targets():
    torch.manual_seed(0)
    wl = W.load("deepcam", scale="tiny")
    task = M.make_task(wl)
    fields, batch = _batch(wl, 1)
    x, y = task.inputs(M.split_rows(batch, fields, 1), np.arange(1), 1, torch.device("cpu"))
    with torch.no_grad():
        assert task.model.eval()(x).shape == (1, 3, 48, 72)
    assert y.shape == (1, 48, 72) and int(y.min()) >= 0 and int(y.max()) <= 2
    wl = W.load("ptychonn", scale="tiny")
    task = M.make_task(wl)
    fields, batch = _batch(wl, 3)
    x, (amp, ph) = task.inputs(M.split_rows(batch, fields, 3), np.arange(3), 3, torch.device("cpu"))
    with torch.no_grad():
        a, p = task.model(x)
    assert a.shape == amp.shape == (3, 1, 32, 32) and p.shape == ph.shape
    assert float(p.abs().max()) <= np.pi + 1e-5


# published parameter counts (full shapes): ResNet-50 v1.5 has 25,557,032 at 1,000 classes.
FULL_COUNTS = {"imagenet": 25_557_032, "cosmoflow": 5_597_604, "ptychonn": 1_247_074, "deepcam": 56_454_720,
               "hep_cnn": 600_193}


@pytest.mark.parametrize("name", sorted(FULL_COUNTS))
def test_parameter_counts_full_shapes(name):
    assert M.parameter_count(W.load(name, scale="full")) == FULL_COUNTS[name]


def test_workload_yamls_carry_model_parameter_counts():
    for name, n in FULL_COUNTS.items():
        assert W.load(name, scale="full").model.parameters == n, name


def test_split_rows_views_arrays_at_contract_offsets():
    wl = W.load("cosmoflow", scale="tiny")
    fields = M.row_fields(wl)
    n = 3
    full = np.arange(n * 32 * 32 * 32 * 4, dtype=np.int16).reshape(n, 32, 32, 32, 4)
    par = np.arange(n * 4, dtype=np.float32).reshape(n, 4) + 0.5
    rows = np.concatenate([full.reshape(n, -1).view(np.uint8), par.view(np.uint8)], axis=1)
    assert rows.shape[1] == wl.sample_nbytes
    batch = np.zeros((n + 2, rows.shape[1]), np.uint8)
    batch[:n] = rows
    v = M.split_rows(batch, fields, n)
    assert np.array_equal(v["full"], full) and np.array_equal(v["unitPar"], par)
    assert np.shares_memory(v["full"], batch), "aligned fields must be views, not copies"


def test_split_rows_rejects_short_rows():
    wl = W.load("hep_cnn", scale="tiny")
    with pytest.raises(ValueError, match="row needs"):
        M.split_rows(np.zeros((2, 10), np.uint8), M.row_fields(wl), 2)


def test_imagenet_labels_are_sample_id_mod_classes():
    wl = W.load("imagenet", scale="tiny")
    task = M.make_task(wl)
    fields, batch = _batch(wl, 4)
    ids = np.array([5, 6, 7, 1003])
    _, y = task.inputs(M.split_rows(batch, fields, 4), ids, 4, torch.device("cpu"))
    assert y.tolist() == (ids % wl.classes).tolist()


def test_unknown_model_and_bad_shapes_are_one_line_errors():
    wl = W.load("cosmoflow", scale="tiny")
    with pytest.raises(ConfigError, match="unknown model 'resnet5'.*did you mean 'resnet50'"):
        M.make_task(wl, "resnet5")
    with pytest.raises(ConfigError, match="multiples of 8"):
        M.build_ptychonn((30, 32))
    with pytest.raises(ConfigError, match="must be >= 32"):
        M.build_cosmoflow((16, 16, 16, 4))


def test_models_module_does_not_import_torch_at_import():
    import subprocess
    import sys

    code = "import sys, dlbench.compute.models, dlbench.compute.torch_step, dlbench.calibrate.compute, " \
           "dlbench.compute.distributed, dlbench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
