"""`run --checkpoint-every` on the checkpoint engine, and DLIO 2.0.0's unet3d_h100.yaml checkpoint schedule
(first at the end of epoch 5, then every 2 epochs) run shrunk by overrides."""

import json
from pathlib import Path

import numpy as np

from dlbench.checkpoint.schedule import due
from dlbench.timeline import PHASE_ID

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
SHRINK = ["~workload.model.model_size", "++workload.model.model_size_bytes=1200000",
          "++workload.dataset.num_files_train=8", "++workload.dataset.record_length_bytes=4096",
          "++workload.dataset.record_length_bytes_stdev=0", "++workload.dataset.format=hdf5",
          "++workload.train.epochs=7", "++workload.train.computation_time=0.001", "++workload.reader.batch_size=2",
          "++workload.reader.read_threads=1"]


def test_schedule():
    assert [s for s in range(1, 40) if due(s, 8, 20)] == [20, 28, 36]
    assert [s for s in range(1, 10) if due(s, 4)] == [4, 8]
    assert not any(due(s, 0) for s in range(1, 10))


def test_unet3d_h100_checkpoint_schedule_runs(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", FIX / "unet3d_h100.yaml", *SHRINK, "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    run = json.loads((rd / "run.json").read_text())
    ck_io = run["summary"]["io_counters"]["by_class"]["checkpoint"]
    assert ck_io["POSIX_OPENS"] == 2 and ck_io["POSIX_BYTES_WRITTEN"] == 2 * 1_200_000
    z = np.load(rd / "intervals.npz")
    ck = z["r0_phase"] == PHASE_ID["checkpoint"]
    # 4 steps per epoch: the end of epoch 5 (index 4) and of epoch 7 (index 6)
    assert sorted(z["r0_epoch"][ck].tolist()) == [4, 6]
    assert not list(rd.rglob("ckpt_*")) and not list(rd.rglob("*.incomplete"))


LLM = ["++workload.model.num_layers=2", "++workload.model.transformer.hidden_size=64",
       "++workload.model.transformer.ffn_hidden_size=128", "++workload.model.transformer.vocab_size=500",
       "++workload.model.transformer.num_attention_heads=4", "++workload.model.transformer.num_kv_heads=2",
       "++workload.model.parallelism.pipeline=1", "++workload.model.parallelism.zero_stage=1"]


def test_dlio_llm_checkpoint_writes_deepspeed_shards(tmp_path, cli, monkeypatch):
    """DLIO's model.num_layers / model.transformer.* / model.parallelism.*: every rank writes its shards as
    DLIO sizes them (here 1 rank: its model_00_model_states.pt and zero_pp_rank_0_mp_rank_00_optim_states.pt)."""
    from dlbench.checkpoint.models import get_model, rank_bytes

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", FIX / "unet3d_h100.yaml", *SHRINK, *LLM, "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    rd = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    ck_io = json.loads((rd / "run.json").read_text())["summary"]["io_counters"]["by_class"]["checkpoint"]
    m = get_model(None, layers=2, hidden=64, ffn=128, vocab=500, heads=4, kv_heads=2, tp=1, pp=1, dp=1, zero=1)
    assert ck_io["POSIX_OPENS"] == 2 * 2 and ck_io["POSIX_BYTES_WRITTEN"] == 2 * rank_bytes(m, 0)
    r = cli(["run", "--dlio-config", FIX / "unet3d_h100.yaml", *SHRINK, *LLM[:1], "-o", tmp_path / "res2"])
    assert r.exit_code == 2 and "model.transformer.hidden_size" in r.output
