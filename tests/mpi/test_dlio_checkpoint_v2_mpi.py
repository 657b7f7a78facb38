"""DLIO 2.0.0's megatron_deepspeed checkpoint (type all_ranks) on 2 ranks: both ranks write their model and
optimizer files; with pipeline parallelism 2 only rank 0 (rank % PP == 0) writes the layer files, num_layers +
TP of them (TP 2)."""

import importlib.util
import json
from pathlib import Path

import numpy as np

from dlbench.timeline import PHASE_ID

# the 2.0.0-shaped config, its overrides and DLIO's byte formula: one copy, in the single-process test
_spec = importlib.util.spec_from_file_location(
    "_dlio_ckpt_v2", Path(__file__).resolve().parents[1] / "integration" / "test_dlio_checkpoint_v2.py")
_v2 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_v2)
MEGATRON_2_0_0, SHRINK, dlio_bytes = _v2.MEGATRON_2_0_0, _v2.SHRINK, _v2.dlio_bytes


def test_megatron_2_0_0_all_ranks_two_ranks(run_mpi, tmp_path):
    cfg = tmp_path / "megatron_deepspeed.yaml"
    cfg.write_text(MEGATRON_2_0_0)
    # 128 samples over 2 ranks, batch 8: 8 steps each, a checkpoint every 4: 2 checkpoints
    r = run_mpi(["run", "--ceiling-steps", 0, "--dlio-config", cfg, *SHRINK,
                 "++workload.dataset.num_samples_per_file=128",
                 "++workload.checkpoint.pipeline_parallelism=2", "++workload.checkpoint.tensor_parallelism=2",
                 "-o", tmp_path / "res", "--no-progress"], env={"DLBENCH_DATA_DIR": str(tmp_path / "data")})
    assert r.returncode == 0, r.stderr
    rd = next((tmp_path / "res").rglob("run.json")).parent
    z = np.load(rd / "intervals.npz")
    want = {0: dlio_bytes(30102, [4096, 2048], 4 + 2, [1024, 512]), 1: dlio_bytes(30102, [4096, 2048], 0, [])}
    for rank in (0, 1):
        ck = z[f"r{rank}_phase"] == PHASE_ID["checkpoint"]
        assert ck.sum() == 2 and (z[f"r{rank}_nbytes"][ck] == want[rank]).all()
    ck_io = json.loads((rd / "run.json").read_text())["summary"]["io_counters"]["by_class"]["checkpoint"]
    # run.json's checkpoint counters sum both ranks: 2 checkpoints of rank 0's 8 files and rank 1's 2
    assert ck_io["POSIX_OPENS"] == 2 * ((2 + 6) + 2) and ck_io["POSIX_BYTES_WRITTEN"] == 2 * (want[0] + want[1])
    assert not list(Path(rd).rglob("ckpt_*"))
