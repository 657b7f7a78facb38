"""Every measured run reports its own ceiling (issue 26): the plan's first steps replayed from memory after the
epochs (dlbench/run/ceiling.py), samples/s and headroom in run.json's summary and in the printed summary."""
import json

import numpy as np
import pytest
from runs_helper import run_dir_of

from dlbench.run import ceiling


@pytest.mark.parametrize("strategy,extra", [("naive", []), ("prefetch", ["--num-workers", "1"]),
                                            ("staging", [])])
def test_run_reports_its_ceiling(hep, tmp_path, cli, strategy, extra):
    r = cli(["run", "--workload", "hep_cnn", "--strategy", strategy, *extra, "--data-dir", hep, "--epochs", 1,
             "--batch-size", 4, "--compute-time", "0.001", "--ceiling-steps", 3, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]
    c = s["ceiling"]
    assert c["steps"] == 3 and c["samples"] == 3 * 4 and c["seconds"] > 0
    assert c["bytes_in_memory"] > 0 and len(c["backend"]) == 1
    shm = ceiling.memory_dir(c["bytes_in_memory"])
    assert (c["backend"][0].startswith(f"files copied to {shm} ") if shm is not None
            else c["backend"][0].startswith("storage.backend.MemoryBackend"))
    assert s["ceiling_samples_per_s"] == pytest.approx(c["samples"] / c["seconds"])
    assert s["headroom"] == pytest.approx(s["ceiling_samples_per_s"] / s["samples_per_s"])
    assert "ceiling" in s["definitions"] and "headroom" in s["definitions"]
    assert "ceiling samples/s (replay from memory)" in r.output and "headroom (ceiling / measured)" in r.output


def test_ceiling_without_a_memory_file_system_reads_the_memory_backend(hep, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(ceiling, "MEMORY_DIRS", ())
    r = cli(["run", "--workload", "hep_cnn", "--data-dir", hep, "--epochs", 1, "--batch-size", 4,
             "--compute-time", "0.001", "--ceiling-steps", 2, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    c = json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]["ceiling"]
    assert c["samples"] == 2 * 4 and c["backend"] == [
        "storage.backend.MemoryBackend (no writable memory file system with room)"]


def test_ceiling_off(hep, tmp_path, cli):
    r = cli(["run", "--workload", "hep_cnn", "--data-dir", hep, "--epochs", 1, "--compute-time", "0.001",
             "--ceiling-steps", 0, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]
    assert s["ceiling_samples_per_s"] is None and s["headroom"] is None
    assert s["ceiling"]["skipped"] == "--ceiling-steps 0"
    assert "not measured: --ceiling-steps 0" in r.output


def test_ceiling_over_the_memory_bound_is_skipped_with_the_reason(hep, tmp_path, cli, monkeypatch):
    monkeypatch.setattr(ceiling, "MAX_BYTES", 1000)
    r = cli(["run", "--workload", "hep_cnn", "--data-dir", hep, "--epochs", 1, "--compute-time", "0.001",
             "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]
    assert s["headroom"] is None and "in-memory copy may take" in s["ceiling"]["skipped"]


def test_headroom_under_1_25_says_dlbench_may_be_the_limit():
    recs = [{"samples": 100, "seconds": 1.0, "steps": 10, "bytes_in_memory": 5},
            {"samples": 100, "seconds": 2.0, "steps": 10, "bytes_in_memory": 5}]
    out = ceiling.summarize(recs, measured_samples_per_s=90.0)
    assert out["ceiling_samples_per_s"] == pytest.approx(100.0)      # 200 samples / the slowest rank's 2 s
    assert out["headroom"] == pytest.approx(100 / 90)
    assert "dlbench itself may be the limit" in out["ceiling"]["warning"]
    assert ceiling.summarize(recs, measured_samples_per_s=50.0)["ceiling"]["warning"] is None   # headroom 2


def test_truncated_plan_is_the_first_steps():
    from dlbench import strategies
    from dlbench.strategies.base import PlanContext

    strat = strategies.get("pls")
    opts = strategies.parse_options(strat, {}, where="t")
    ctx = PlanContext(workload=None, n_samples=64, sample_nbytes=np.full(64, 100, np.int64), world_size=2, rank=0,
                      node_map=np.arange(2), seed=0, epochs=2, local_batch=4)
    plan = strat.plan(ctx, opts)
    full, short = plan.epoch(0), ceiling.short_plan(plan, 3).epoch(0)
    assert short.steps == 3 and ceiling.short_plan(plan, 3).epochs == 1
    for r in range(2):
        assert np.array_equal(short.rank_samples(r), full.sample_ids[r, :full.bounds[r, 3]])
    if full.transfers is not None:
        assert (short.transfers.step < 3).all()
        assert len(short.transfers) == int((full.transfers.step < 3).sum())
