"""`dlbench run`, `report`, `compare` end to end on tiny data (serial)."""

import csv
import json

import pytest
from runs_helper import run_dir_of


@pytest.mark.parametrize("strategy,extra", [("naive", []), ("prefetch", ["--num-workers", "1"])])
def test_run_writes_results_folder(tiny, tmp_path, cli, strategy, extra):
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--strategy", strategy, *extra, "--data-dir", tiny, "--epochs", 2,
             "--compute-time", "0.002", "--out", out, "--verify", "--ceiling-steps", 0])
    assert r.exit_code == 0, r.output
    rd = run_dir_of(r.output)
    assert rd.parent.parent.parent == out and rd.parent.name == strategy
    run = json.loads((rd / "run.json").read_text())
    assert run["schema"] == "dlbench.run/2" and run["error"] is None
    s = run["summary"]
    for k in ("workload", "strategy", "ranks", "nodes", "epochs", "total_time_s", "epoch_time_s", "exposed_io_share",
              "read_share", "au", "samples_per_s", "read_bytes", "read_bandwidth_bytes_per_s", "bytes_by_tier",
              "phase_time_s", "per_rank"):
        assert k in s, k
    assert len(s["epoch_time_s"]) == 2
    assert s["read_bytes"] == 2 * 32 * 262160
    assert s["bytes_by_tier"]["shared"] == s["read_bytes"]
    assert s["verified_samples"] == 64
    assert s["semantics"]["order_changes"] == "no"
    assert 0 < s["au"] < 1
    with open(rd / "timelogger.csv") as f:
        header = next(csv.reader(f))
    assert [h.strip() for h in header] == ["Epoch", "Rank", "Action Name", "Action Description", "Start Time",
                                          "End Time", "Time Taken", "Process ID", "Current Thread"]
    trace = json.loads((rd / "trace.json").read_text())
    assert any(ev.get("name") == "read" for ev in trace["traceEvents"])
    assert (rd / "intervals.npz").exists()
    # report re-renders from disk; compare puts runs side by side
    r2 = cli(["report", rd])
    assert r2.exit_code == 0 and "exposed I/O share" in r2.output
    r3 = cli(["compare", rd, rd, "--format", "json"])
    rows = json.loads(r3.output)
    assert len(rows) == 2 and rows[0]["strategy"] == strategy


def test_dry_run_touches_nothing(tmp_path, cli):
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tmp_path / "none", "--dry-run", "--out", out])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["plan"]["steps_per_epoch"] == 8
    assert not out.exists() and not (tmp_path / "none").exists()


@pytest.mark.parametrize("args,needle", [
    (["--strategy", "prefech"], "did you mean 'prefetch'"),
    (["--accelerator", "tpu"], "unknown accelerator 'tpu'"),
    (["--batch-size", "64"], "larger than the per-rank share"),
    (["--num-workers", "2"], "is an option of prefetch, not of strategy naive"),
    (["--epochs", "0"], "--epochs=0"),
])
def test_bad_input_one_line(tiny, tmp_path, cli, args, needle):
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--out", tmp_path / "r", *args])
    assert r.exit_code != 0
    assert needle in r.output, r.output
    assert "Traceback" not in r.output


def test_dataset_of_another_workload(tiny, tmp_path, cli):
    r = cli(["run", "--workload", "deepcam", "--data-dir", tiny, "--compute-time", "0", "--out", tmp_path / "r"])
    assert r.exit_code == 3 and "holds a dataset of workload 'cosmoflow'" in r.output


def test_missing_dataset_says_how_to_generate(tmp_path, cli):
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tmp_path / "nope", "--out", tmp_path / "r"])
    assert r.exit_code == 3 and "dlbench generate" in r.output


def test_failure_recorded_in_results(tiny, tmp_path, cli):
    """A file that breaks mid-run: exit != 0 and run.json carries the error."""
    victim = sorted(p for p in tiny.rglob("*.h5"))[5]
    victim.write_bytes(victim.read_bytes()[:100])
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--compute-time", "0", "--out", out])
    assert r.exit_code != 0
    runs = list(out.rglob("run.json"))
    assert len(runs) == 1
    run = json.loads(runs[0].read_text())
    assert run["error"] and "rank 0" in run["error"]


def test_default_data_dir_generated_on_first_use(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "cosmoflow", "--epochs", 1, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "data" / "cosmoflow-tiny-seed0").is_dir()


def test_sleep_and_torch_runs_side_by_side(tmp_path, cli):
    d = tmp_path / "hep"
    assert cli(["generate", "--workload", "hep_cnn", "--data-dir", d, "--no-progress"]).exit_code == 0
    dirs = []
    for extra in (["--compute-time", "0.001"], ["--compute", "torch", "--device", "cpu"]):
        r = cli(["run", "--workload", "hep_cnn", "--data-dir", d, "--epochs", 1, "--out", tmp_path / "res", *extra])
        assert r.exit_code == 0, r.output
        dirs.append(run_dir_of(r.output))
    torch_run = json.loads((dirs[1] / "run.json").read_text())["summary"]["compute"]
    assert torch_run["mode"] == "torch" and len(torch_run["step_times_s"]) == 8
    rows = json.loads(cli(["compare", *dirs, "--format", "json"]).output)
    assert [r["compute"] for r in rows] == ["sleep 0.001s", "torch cpu"]


def test_checkpoint_is_its_own_phase(tiny, tmp_path, cli):
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
             "--checkpoint-every", 4, "--out", out])
    assert r.exit_code == 0, r.output
    rd = run_dir_of(r.output)
    s = json.loads((rd / "run.json").read_text())["summary"]
    assert s["phase_time_s"]["checkpoint"] > 0
    ck_io = s["io_counters"]["by_class"]["checkpoint"]
    assert ck_io["POSIX_OPENS"] == 2 and ck_io["POSIX_BYTES_WRITTEN"] == 2 * 12 * 5_597_604
    assert ck_io["POSIX_WRITES"] == 2 * 2  # 67 MB in chunks of 64 MiB
    import numpy as np

    z = np.load(rd / "intervals.npz")
    from dlbench.timeline import PHASE_ID

    ck = z["r0_phase"] == PHASE_ID["checkpoint"]
    assert ck.sum() == 2  # 8 steps, every 4th
    assert (z["r0_nbytes"][ck] == 12 * 5_597_604).all()  # weights + Adam moments of the CosmoFlow model
    assert not [p for p in rd.rglob("*") if "ckpt" in p.name or "checkpoint" in p.name]


def test_checkpoint_needs_a_model_size(tmp_path, cli):
    """A workload without model.parameters cannot size a checkpoint: say so (no silent default size)."""
    from pathlib import Path

    yaml_path = Path(__file__).resolve().parents[2] / "configs" / "examples" / "onemib-hdf5.yaml"
    d = tmp_path / "one"
    assert cli(["generate", "--workload", yaml_path, "--scale", "tiny", "--data-dir", d, "--no-progress"]).exit_code == 0
    r = cli(["run", "--workload", yaml_path, "--data-dir", d, "--compute-time", "0", "--checkpoint-every", 2,
             "--out", tmp_path / "res"])
    assert r.exit_code == 2 and "checkpoint size is unknown" in r.output
