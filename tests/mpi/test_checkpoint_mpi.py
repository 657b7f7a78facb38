"""`dlbench checkpoint` on 2 ranks: llama3-8b scaled down (TP 1 x PP 1 x DP 2, ZeRO-3), every layout."""

import json

import pytest


@pytest.mark.parametrize("layout, mode", [("stream", "sync"), ("shards", "async"), ("dcp", "async")])
def test_checkpoint_two_ranks(run_mpi, tmp_path, layout, mode):
    # dcp: llama3-8b's shape with 2 layers (torch's save and load cost per tensor: 200 tensors take 10 s here)
    shape = ["--layers", "2"] if layout == "dcp" else []
    r = run_mpi(["checkpoint", "--model", "llama3-8b", *shape, "--scale", "2e-5", "--dp", "2", "--layout", layout,
                 "--mode", mode, "--checkpoints", "2", "--steps", "2", "--compute-time", "0.02",
                 "--ranks-per-node", "1", "--out", tmp_path / "o"])
    assert r.returncode == 0, r.stderr
    (f,) = (tmp_path / "o").glob("checkpoint/*/checkpoint.json")
    res = json.loads(f.read_text())
    s = res["summary"]
    assert res["config"]["ranks"] == 2 and s["checkpoints"] == 2
    assert s["files_per_checkpoint"] == {"stream": 2, "shards": 4, "dcp": 3}[layout]
    for c in res["per_checkpoint"]:
        assert c["bandwidth_bytes_per_s"] == pytest.approx(c["bytes"] / c["durable_s"])
    assert s["mlperf_mean_of_rates_bytes_per_s"] > 0 and s["bandwidth_bytes_per_s"] > 0
    own, cross = res["restore"]["own"], res["restore"]["cross"]
    assert [p["as_rank"] for p in own["per_rank"]] == [0, 1]
    assert [p["as_rank"] for p in cross["per_rank"]] == [1, 0]      # each rank reads the other node's files
    assert own["bytes"] == cross["bytes"] == s["bytes_per_checkpoint"]
    re = res["restore"]["reshard"]
    assert re["per_rank"][0]["to"] == {"tp": 2, "pp": 1, "dp": 1}
    assert re["missing_bytes"] < 1e-3 * re["needed_bytes"]     # --scale's rounding only
    assert re["bytes"] >= re["needed_bytes"] - re["missing_bytes"] > 0
    if layout != "dcp":
        assert own["resident_before_bytes"] == 0
    if mode == "async":
        assert s["step_inflation"] is not None


def test_dlio_llm_checkpoint_two_ranks_tensor_parallel(run_mpi, tmp_path):
    """A DLIO config's LLM checkpoint with tensor parallelism 2 on 2 ranks: each rank writes its TP shard."""
    from pathlib import Path

    import numpy as np

    from dlbench.checkpoint.models import get_model, rank_bytes
    from dlbench.timeline import PHASE_ID

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "dlio" / "unet3d_h100.yaml"
    llm = ["++workload.model.num_layers=2", "++workload.model.transformer.hidden_size=64",
           "++workload.model.transformer.ffn_hidden_size=128", "++workload.model.transformer.vocab_size=500",
           "++workload.model.transformer.num_attention_heads=4", "++workload.model.parallelism.tensor=2",
           "++workload.model.parallelism.pipeline=1", "++workload.model.parallelism.zero_stage=1"]
    shrink = ["~workload.model.model_size", "++workload.model.model_size_bytes=1200000",
              "++workload.dataset.num_files_train=8", "++workload.dataset.record_length_bytes=4096",
              "++workload.dataset.record_length_bytes_stdev=0", "++workload.dataset.format=hdf5",
              "++workload.train.epochs=2", "++workload.train.computation_time=0.001",
              "++workload.checkpoint.checkpoint_after_epoch=1", "++workload.checkpoint.epochs_between_checkpoints=1",
              "++workload.reader.batch_size=2", "++workload.reader.read_threads=1"]
    r = run_mpi(["run", "--ceiling-steps", 0, "--dlio-config", fix, *shrink, *llm, "-o", tmp_path / "res",
                "--no-progress"], env={"DLBENCH_DATA_DIR": str(tmp_path / "data")})
    assert r.returncode == 0, r.stderr
    rd = Path([ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])
    if not rd.is_absolute():
        rd = tmp_path / rd
    z = np.load(rd / "intervals.npz")
    m = get_model(None, layers=2, hidden=64, ffn=128, vocab=500, heads=4, tp=2, pp=1, dp=1, zero=1)
    for rank in (0, 1):
        ck = z[f"r{rank}_phase"] == PHASE_ID["checkpoint"]
        assert ck.sum() == 2 and (z[f"r{rank}_nbytes"][ck] == rank_bytes(m, rank)).all()
