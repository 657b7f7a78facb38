"""DLIO's evaluation phase emulated (issue 26; dlbench/run/evaluate.py): a --dlio-config with workflow.evaluation
reads its own evaluation files after the epochs DLIO evaluates in (eval_after_epoch, epochs_between_evals; DLIO
counts epochs from 1), in batches of batch_size_eval with eval_time per step, as phase ``eval`` outside the epoch
clock: not in epoch time, AU or read_bytes."""
import json
from pathlib import Path

import pytest

from dlbench.results import read_intervals
from dlbench.run.evaluate import due
from dlbench.timeline import PHASE_ID

CFG = """model: {name: evtest}
framework: pytorch
workflow: {train: True, evaluation: True}
dataset: {format: npz, num_files_train: 16, num_files_eval: 8, num_samples_per_file: 1, record_length_bytes: 4096}
reader: {data_loader: pytorch, batch_size: 2, batch_size_eval: 2, sample_shuffle: seed, read_threads: 1}
train: {epochs: 3, computation_time: 1e-3}
evaluation: {eval_time: 2e-3, epochs_between_evals: 2, eval_after_epoch: 1}
"""


@pytest.fixture(autouse=True)
def _data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))


def test_due_counts_epochs_from_one_as_dlio():
    assert [e for e in range(5) if due(e, after=1, every=1)] == [0, 1, 2, 3, 4]
    assert [e for e in range(5) if due(e, after=1, every=2)] == [0, 2, 4]
    assert [e for e in range(5) if due(e, after=3, every=1)] == [2, 3, 4]
    assert [e for e in range(5) if due(e, after=0, every=2)] == [1, 3]


def test_dlio_evaluation_is_read_after_its_epochs_outside_the_epoch(tmp_path, cli):
    cfg = tmp_path / "ev.yaml"
    cfg.write_text(CFG)
    r = cli(["run", "--dlio-config", cfg, "--no-progress", "--ceiling-steps", 0, "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    run = json.loads((rd / "run.json").read_text())
    s = run["summary"]
    ev = s["eval"]
    assert [p["after_epoch"] for p in ev["per_epoch"]] == [0, 2]        # DLIO's epochs 1 and 3
    assert all(p["steps"] == 4 and p["samples"] == 8 for p in ev["per_epoch"])   # 8 files / batches of 2
    assert ev["bytes"] == 2 * 8 * (4096 + 8)                            # x and y of each eval sample, twice
    assert s["read_bytes"] == 3 * 16 * (4096 + 8)                       # the training reads only
    assert s["phase_time_s"]["eval"] > 0 and "eval" not in s["phase_share"]
    assert "eval" in s["definitions"]
    assert "DLIO evaluation (s), outside epoch time" in r.output
    # each eval interval starts after its epoch's clock stopped (not in epoch time or AU)
    (iv,) = read_intervals(rd)
    m = iv["phase"] == PHASE_ID["eval"]
    ends = dict(zip(iv["epochs"].tolist(), iv["epoch_end_ns"].tolist()))
    assert m.sum() == 2 and sorted(iv["epoch"][m].tolist()) == [0, 2]
    assert all(st >= ends[int(e)] for st, e in zip(iv["start_ns"][m], iv["epoch"][m]))
    data = tmp_path / "data"
    ev_dirs = [p for p in data.rglob("*-eval-8") if p.is_dir()]
    assert len(ev_dirs) == 1 and json.loads((rd / "summary.json").read_text())["num_files_eval"] == 8


def test_imported_workload_yaml_says_evaluation_needs_the_dlio_config(tmp_path, cli):
    cfg = tmp_path / "ev.yaml"
    cfg.write_text(CFG)
    r = cli(["import", "dlio-config", cfg, "-o", tmp_path / "w.yaml"])
    assert r.exit_code == 0, r.output
    assert "NOT EMULATED by `dlbench run --workload THIS.yaml`: DLIO's evaluation" in (tmp_path / "w.yaml").read_text()


def test_evaluation_reads_are_no_epochs_cache_bytes(tmp_path, cli):
    cfg = tmp_path / "ev.yaml"
    cfg.write_text(CFG)
    r = cli(["run", "--dlio-config", cfg, "--no-progress", "--ceiling-steps", 0, "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    s = json.loads((rd / "run.json").read_text())["summary"]
    rows = [d for d in s["cache"]["per_epoch"] if d["epoch"] >= 0]
    # every epoch reads its 16 samples (x + y members); the evaluation's 8 after epochs 0 and 2 are not added
    assert [d["requested_bytes"] for d in rows] == [16 * (4096 + 8)] * 3
    # epoch 1 follows an evaluation, epoch 2 none: the same bytes (the eval reads are >= 8 samples' more)
    assert abs(rows[1]["rchar_bytes"] - rows[2]["rchar_bytes"]) < 8 * (4096 + 8)
