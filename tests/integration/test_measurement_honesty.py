"""Issue 12 (part B): measurement honesty end to end (page cache with DataLoader workers, fault injection,
bounded timelines)."""

import json
from pathlib import Path

import pytest


@pytest.fixture
def tiny(tmp_path, cli):
    d = tmp_path / "cf"
    r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.exit_code == 0, r.output
    return d


def _run_dir(output):
    line = [ln for ln in output.splitlines() if ln.startswith("results: ")][-1]
    return Path(line.split("results: ", 1)[1])


def test_page_cache_check_counts_dataloader_workers_reads(tmp_path, cli, tiny):
    """Regression (issue 12): the page-cache warning counted the trainer's /proc/self/io only, so a
    prefetch run with workers looked like it read nothing."""
    r = cli(["run", "--data-dir", tiny, "-s", "prefetch", "--num-workers", "1", "-e", "2", "--compute-time", "0",
             "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((_run_dir(r.output) / "run.json").read_text())["summary"]
    pc = s["page_cache"]
    assert pc["workers_rchar_bytes"] >= s["read_bytes"] > 0   # the workers' reads are in
    assert pc["rchar_bytes"] >= pc["workers_rchar_bytes"]
    assert s["strategy_stats"][0]["worker_io"]["processes"] >= 1


def test_page_cache_check_sums_worker_io():
    import numpy as np

    from dlbench.runner import page_cache_check

    class M:
        def sample_nbytes(self):
            return np.full(10, 1000, dtype=np.int64)

    g = [{"io": {"rchar": 100, "read_bytes": 0},
          "strategy_stats": {"worker_io": {"rchar": 10_000, "read_bytes": 5_000}}}]
    pc = page_cache_check(M(), g)
    assert pc["rchar_bytes"] == 10_100 and pc["device_read_bytes"] == 5_000 and pc["workers_rchar_bytes"] == 10_000
