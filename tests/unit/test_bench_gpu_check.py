"""Smoke tests (tiny arguments, CPU) of issue 30's benchmarks: benchmarks/gpu_check.py's plumbing (--cpu-smoke:
calibrate, generate, a torch run with and without --overlap and its sleep emulation, the final table) and
benchmarks/torch_step_overhead.py. They measure nothing about a GPU."""

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_cpu_smoke(tmp_path, capsys):
    gc = _load("gpu_check")
    rc = gc.main(["--cpu-smoke", "--workload", "hep_cnn", "--out", str(tmp_path / "out"),
                  "--shm", str(tmp_path / "data")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "strategy | AU torch % | AU torch off % | AU emulated %" in out
    assert "\nnaive | " in out and "flat gradient bucket vs plain" in out
    assert "| batches loader/staged |" in out     # CPU: nothing pinned, every batch through a slot
    src = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["runs"][0]["torch"]["compute"]["h2d_sources"]
    assert src["pinned"] == 0 and src["staged"] > 0
    res = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    run = res["runs"][0]
    assert run["torch"]["compute"]["overlap"] == "on" and run["torch_off"]["compute"]["overlap"] == "off"
    assert run["sleep"]["compute"]["mode"] == "sleep"
    assert not (tmp_path / "data").exists()     # the generated data set is removed


def test_gpu_check_refuses_without_cuda(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    assert _load("gpu_check").main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_gpu_check_sh_runs_the_check_from_a_source_tree(tmp_path):
    """benchmarks/gpu_check.sh (the one command a GPU session runs): on a machine without CUDA it reaches
    gpu_check.py and stops with its one line, exit 2 (a broken wrapper exits otherwise)."""
    import os
    import subprocess
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--out", str(tmp_path)], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no CUDA device" in r.stdout


def test_torch_step_overhead_smoke(capsys):
    rc = _load("torch_step_overhead").main(["--steps", "1", "--rounds", "1", "--book-steps", "50", "--batch", "1"])
    out = capsys.readouterr().out
    assert rc == 0 and "bookkeeping per step" in out and "ratio on/off" in out
