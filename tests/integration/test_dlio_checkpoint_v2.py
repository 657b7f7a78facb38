"""DLIO 2.0.0's megatron_deepspeed.yaml (its shape written here, not DLIO's file) runs with its checkpoint
section, shrunk by overrides: the files and bytes each checkpoint writes are DLIO 2.0.0's
(BaseCheckpointing: model, optimizer, one file per layer)."""

import json

import numpy as np

from dlbench.timeline import PHASE_ID

MEGATRON_2_0_0 = """\
model: megatron_deepspeed
framework: pytorch
workflow:
  generate_data: False
  train: True
  checkpoint: True
dataset:
  data_folder: dataset/megatron-deepspeed/
  format: mmap_indexed_binary
  num_files_train: 1
  num_samples_per_file: 277203535
  record_length: 2048
reader:
  data_loader: pytorch
  batch_size: 1024
  read_threads: 1
  file_shuffle: seed
  sample_shuffle: seed
train:
  epochs: 311541
  computation_time: 0.03
checkpoint:
  checkpoint_folder: checkpoints/megatron-deepspeed
  steps_between_checkpoints: 1000
  model_size: 30102
  type: all_ranks
  optimization_groups: [1009254400, 865075200, 793600]
  num_layers: 44
  layer_parameters: [129761280, 20971520]
"""
# 64 samples, batch 8: 8 steps on one rank, a checkpoint every 4 steps: 2 checkpoints
SHRINK = ["++workload.dataset.num_samples_per_file=64", "++workload.train.epochs=1",
          "++workload.train.computation_time=0.001", "++workload.reader.batch_size=8",
          "++workload.checkpoint.steps_between_checkpoints=4",
          "++workload.checkpoint.optimization_groups=[4096,2048]", "++workload.checkpoint.layer_parameters=[1024,512]",
          "++workload.checkpoint.num_layers=4"]


def dlio_bytes(model_size, groups, layers, layer_parameters):
    """One writing rank's bytes per checkpoint as DLIO 2.0.0 sizes them (int8 tensors)."""
    return model_size + 3 * sum(groups) + layers * sum(layer_parameters)


def test_megatron_2_0_0_checkpoint_writes_dlio_files(tmp_path, cli, monkeypatch):
    cfg = tmp_path / "megatron_deepspeed.yaml"
    cfg.write_text(MEGATRON_2_0_0)
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", cfg, *SHRINK, "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    rd = next((tmp_path / "res").rglob("run.json")).parent
    ck_io = json.loads((rd / "run.json").read_text())["summary"]["io_counters"]["by_class"]["checkpoint"]
    per_ckpt = dlio_bytes(30102, [4096, 2048], 4, [1024, 512])
    assert ck_io["POSIX_OPENS"] == 2 * (1 + 1 + 4)          # model, optimizer, 4 layer files, twice
    assert ck_io["POSIX_BYTES_WRITTEN"] == 2 * per_ckpt
    z = np.load(rd / "intervals.npz")
    ck = z["r0_phase"] == PHASE_ID["checkpoint"]
    assert ck.sum() == 2 and (z["r0_nbytes"][ck] == per_ckpt).all()
    assert not list(rd.rglob("ckpt_*")) and not list(rd.rglob("*.incomplete"))
    # DLIO 2.0.0's own check: the layers split over the pipeline stages
    r = cli(["run", "--dlio-config", cfg, *SHRINK, "++workload.checkpoint.pipeline_parallelism=3",
             "-o", tmp_path / "res2", "--no-progress"])
    assert r.exit_code == 2 and "checkpoint.pipeline_parallelism=3: must divide the number of layers (4)" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "res2").exists()


def test_megatron_2_0_0_dry_run_as_in_the_issue(tmp_path, cli, monkeypatch):
    """The issue's command: DLIO's full checkpoint shape is accepted (a dry run writes nothing)."""
    cfg = tmp_path / "megatron_deepspeed.yaml"
    cfg.write_text(MEGATRON_2_0_0)
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", cfg, "++workload.dataset.num_samples_per_file=512", "++workload.train.epochs=1",
             "++workload.reader.batch_size=8", "++workload.checkpoint.steps_between_checkpoints=16", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "does not emulate" not in r.output
