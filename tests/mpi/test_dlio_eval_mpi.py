"""DLIO's evaluation under MPI (dlbench/run/evaluate.py): the evaluation files generated once by both ranks,
each rank reads its strided share in floor(samples / ranks / batch_size_eval) steps, the summary sums them."""
import json

import pytest

pytestmark = pytest.mark.mpi

CFG = """model: {name: evmpi}
framework: pytorch
workflow: {train: True, evaluation: True}
dataset: {format: npy, num_files_train: 16, num_files_eval: 10, num_samples_per_file: 1, record_length_bytes: 2048}
reader: {data_loader: pytorch, batch_size: 2, batch_size_eval: 2, sample_shuffle: seed, read_threads: 1}
train: {epochs: 2, computation_time: 1e-3}
evaluation: {eval_time: 1e-3}
"""


def test_two_ranks_evaluate_their_share(tmp_path, run_mpi, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    cfg = tmp_path / "ev.yaml"
    cfg.write_text(CFG)
    out = tmp_path / "res"
    r = run_mpi(["run", "--dlio-config", cfg, "--no-progress", "--ceiling-steps", 0, "--out", out], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    ev = s["eval"]["per_epoch"]
    # 10 eval samples, 2 ranks, batches of 2: 2 steps a rank (DLIO's floor), 8 samples read, after both epochs
    assert [(p["after_epoch"], p["steps"], p["samples"]) for p in ev] == [(0, 2, 8), (1, 2, 8)]
    assert s["eval"]["bytes"] == 2 * 8 * 2048
