"""`dlbench simulate --checkpoint-every`: the run's checkpoint schedule costed against the profile's write side
(dlbench.simulate.checkpoint.run_schedule), agreeing with a measured run of the same configuration."""

import json
from pathlib import Path

import numpy as np
import yaml
from runs_helper import run_dir_of

from dlbench.timeline import PHASE_ID

ROOT = Path(__file__).resolve().parents[2]


def _profile(tmp_path: Path, calibrated: bool = True) -> Path:
    prof = yaml.safe_load((ROOT / "configs" / "systems" / "laptop-pfs.yaml").read_text())
    prof["name"] = "laptop-pfs-written"
    if calibrated:   # as calibrate-storage records the write side: MB/s by writers, a small file's cost
        prof["calibration"] = {"nodes": 1, "shared_write": {"file_bytes": 64 << 20, "small_file_s": 0.004,
                                                            "mb_per_s": {"1": [150.0, 160.0], "2": [190.0]}}}
    p = tmp_path / "prof.yaml"
    p.write_text(yaml.safe_dump(prof))
    return p


def _simulate(cli, prof, out, *extra):
    r = cli(["simulate", "--system", prof, "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "1",
             "--strategies", "naive", "--epochs", "1", "--compute-time", "0", "--out", out, *extra])
    assert r.exit_code == 0, r.output
    (f,) = Path(out).rglob("run.json")
    return json.loads(f.read_text())["summary"]


def test_run_and_simulate_agree_on_checkpoint_count_and_bytes(tiny, tmp_path, cli):
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
             "--strategy", "naive", "--checkpoint-every", 3, "--out", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    rd = run_dir_of(r.output)
    run = json.loads((rd / "run.json").read_text())["summary"]
    z = np.load(rd / "intervals.npz")
    measured_count = int((z["r0_phase"] == PHASE_ID["checkpoint"]).sum())
    measured_bytes = run["io_counters"]["by_class"]["checkpoint"]["POSIX_BYTES_WRITTEN"]

    prof = _profile(tmp_path)
    sim = _simulate(cli, prof, tmp_path / "sim", "--checkpoint-every", "3")
    ck = sim["checkpoint_schedule"]
    assert ck["count"] == measured_count == 2          # 8 steps: after steps 3 and 6
    assert ck["steps"] == [3, 6]
    assert ck["bytes"] == measured_bytes == 2 * 12 * 5_597_604
    # costed against the calibration: the best median (2 writers: 190 MB/s) on 1 node, + a small file's cost
    one = 12 * 5_597_604 / 190e6 + 0.004
    assert abs(ck["durable_s"] - one) < 1e-9 and abs(ck["time_s"] - 2 * one) < 1e-9
    assert abs(sim["phase_time_s"]["checkpoint"] - 2 * one) < 1e-9
    base = _simulate(cli, prof, tmp_path / "sim0")
    assert "checkpoint_schedule" not in base and base["phase_time_s"]["checkpoint"] == 0
    assert abs(sim["total_time_s"] - base["total_time_s"] - 2 * one) < 1e-6     # in the epoch's time
    # DLIO's checkpoint_after_epoch: the first checkpoint at a later step, then every N
    late = _simulate(cli, prof, tmp_path / "sim4", "--checkpoint-every", "2", "--checkpoint-first", "5")
    assert late["checkpoint_schedule"]["steps"] == [5, 7]
    # a file system's curve instead: 2 GB/s aggregate, the node's 0.19 GB/s link still binds; 0.1 GB/s binds
    sim3 = _simulate(cli, prof, tmp_path / "sim3", "--checkpoint-every", "3", "--write-curve", "1:0.1")
    assert abs(sim3["checkpoint_schedule"]["durable_s"] - (12 * 5_597_604 / 0.1e9 + 0.004)) < 1e-9
    sim2 = _simulate(cli, prof, tmp_path / "sim2", "--checkpoint-every", "3", "--write-curve", "1:2")
    assert abs(sim2["checkpoint_schedule"]["durable_s"] - one) < 1e-9


def test_simulated_checkpoints_need_the_write_side(tmp_path, cli):
    r = cli(["simulate", "--system", _profile(tmp_path, calibrated=False), "--workload", "cosmoflow", "--scale",
             "tiny", "--nodes", "1", "--strategies", "naive", "--checkpoint-every", "3", "--out", tmp_path / "o"])
    assert r.exit_code == 2 and "calibration.shared_write" in r.output and "Traceback" not in r.output
    assert not list((tmp_path / "o").rglob("run.json"))
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "1",
             "--write-curve", "1:2", "--out", tmp_path / "o"])
    assert r.exit_code == 2 and "--write-curve" in r.output
