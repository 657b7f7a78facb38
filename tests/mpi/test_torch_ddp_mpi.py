"""2 ranks, gloo: gradients averaged each step; parameters identical across ranks after steps on different data."""

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).with_name("torch_ddp_script.py")


@pytest.mark.mpi
@pytest.mark.parametrize("workload", ["hep_cnn", "cosmoflow"])
def test_two_rank_gloo_allreduce_keeps_parameters_identical(run_mpi, tmp_path, workload):
    r = run_mpi([tmp_path, workload], n=2, python_args=(str(SCRIPT),), env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    p0, p1 = (np.load(tmp_path / f"params_{k}.npy") for k in (0, 1))
    assert p0.shape == p1.shape and np.isfinite(p0).all()
    assert np.array_equal(p0, p1), f"parameters differ after averaged steps (max diff {np.abs(p0 - p1).max()})"
    g0, g1 = (np.load(tmp_path / f"grad_{k}.npy") for k in (0, 1))
    assert np.array_equal(g0, g1) and np.abs(g0).sum() > 0
    for k in (0, 1):
        d = json.loads((tmp_path / f"describe_{k}.json").read_text())
        assert d["backend"] == "gloo" and d["world"] == 2 and len(d["allreduce"]) == 2
        assert d["phases"] == ["transfer", "transfer_exposed", "compute", "barrier", "compute"] * 2
