"""Issue 12 (part B): measurement honesty end to end (page cache with DataLoader workers, fault injection,
bounded timelines)."""

import json

import pytest
from runs_helper import run_dir_of


def test_page_cache_check_counts_dataloader_workers_reads(tmp_path, cli, tiny):
    """Regression (issue 12): the page-cache warning counted the trainer's /proc/self/io only, so a
    prefetch run with workers looked like it read nothing."""
    r = cli(["run", "--data-dir", tiny, "-s", "prefetch", "--num-workers", "1", "-e", "2", "--compute-time", "0",
             "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]
    pc = s["page_cache"]
    assert pc["workers_rchar_bytes"] >= s["read_bytes"] > 0   # the workers' reads are in
    assert pc["rchar_bytes"] >= pc["workers_rchar_bytes"]
    assert s["strategy_stats"][0]["worker_io"]["processes"] >= 1


def test_page_cache_check_does_not_count_reaped_workers_twice():
    """Regression (issue 17): Linux adds a reaped child's /proc/<pid>/io to its parent's, and the executor's
    close() reaps the DataLoader workers before the trainer's last reading, so adding the workers' own figures
    counted their bytes twice (a cold prefetch run showed 2x the dataset from the device)."""
    import numpy as np

    from dlbench.run.summary import page_cache_check

    class M:
        def sample_nbytes(self):
            return np.full(10, 1000, dtype=np.int64)

    g = [{"io": {"rchar": 10_100, "read_bytes": 5_000},      # the trainer's, the reaped workers' included
          "strategy_stats": {"worker_io": {"rchar": 10_000, "read_bytes": 5_000}}}]
    pc = page_cache_check(M(), g)
    assert pc["rchar_bytes"] == 10_100 and pc["device_read_bytes"] == 5_000 and pc["workers_rchar_bytes"] == 10_000


def test_reaped_child_io_is_added_to_the_parent(tmp_path):
    """The kernel behaviour the page-cache check relies on: a child's reads appear in the parent's
    /proc/self/io once the parent has reaped it."""
    import multiprocessing as mp
    import os

    from dlbench.storage.pagecache import proc_io

    if not proc_io():
        pytest.skip("no /proc/self/io here")
    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(1 << 20))
    before = proc_io()["rchar"]
    child = mp.get_context("fork").Process(target=p.read_bytes)
    child.start()
    child.join()
    assert proc_io()["rchar"] - before >= 1 << 20


def _summary(r):
    return json.loads((run_dir_of(r.output) / "run.json").read_text())["summary"]


@pytest.mark.parametrize("strategy,extra", [("naive", []), ("prefetch", ["--num-workers", "1"])])
def test_inject_fail_read_retries_are_counted_and_seeded(tmp_path, cli, tiny, strategy, extra):
    runs = []
    for _ in range(2):
        r = cli(["run", "--data-dir", tiny, "-s", strategy, *extra, "-e", "2", "--compute-time", "0", "--verify",
                 "--inject", "fail-read=0.25", "-o", tmp_path / "res"])
        assert r.exit_code == 0, r.output
        assert "faults injected" in r.output
        runs.append(_summary(r))
    for s in runs:
        assert s["verified_samples"] == 64 and s["injected"]["fail_read_p"] == 0.25
        assert s["injected"]["read_retries"] > 0
    assert runs[0]["injected"]["read_retries"] == runs[1]["injected"]["read_retries"]  # seeded


def test_inject_fail_read_certain_failure_is_one_line(tmp_path, cli, tiny):
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-time", "0", "--inject", "fail-read=1",
             "-o", tmp_path / "res"])
    assert r.exit_code != 0
    err = [ln for ln in r.output.splitlines() if ln.startswith("dlbench: error:")]
    assert len(err) == 1 and "sample" in err[0] and "data-0000" in err[0] and "--inject fail-read=1" in err[0]
    assert "Traceback" not in r.output


@pytest.mark.parametrize("spec,needle", [("slow-rank=1:2", "rank 1 is not in this job"),
                                         ("slow-rank=0:0.5", "FACTOR"), ("slow-rank=x", "R:FACTOR"),
                                         ("fail-read=2", "from 0 to 1"), ("explode=1", "unknown kind"),
                                         ("fail-read", "KIND=VALUE")])
def test_inject_bad_values(tmp_path, cli, tiny, spec, needle):
    out = tmp_path / "res"
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-time", "0", "--inject", spec, "-o", out])
    assert r.exit_code != 0 and needle in r.output and "Traceback" not in r.output, r.output
    assert not out.exists()


def test_inject_slow_rank_serial_slows_reads_and_compute(tmp_path, cli, tiny):
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-time", "0.002", "--inject", "slow-rank=0:5",
             "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = _summary(r)
    assert s["compute"]["step_time_s"] == 0.002          # the configured figure is echoed unchanged...
    assert s["phase_time_s"]["compute"] > 8 * 0.002 * 4  # ...and rank 0's 8 steps took 5x (10 ms each)


@pytest.mark.parametrize("npz_limit", [None, 0])
def test_intervals_written_per_rank_and_summary_rebuilds_from_folder(tmp_path, cli, tiny, monkeypatch, npz_limit):
    """Each rank writes its own interval files while it runs; the summary (and `dlbench report`) can be
    rebuilt from the folder, with or without the combined intervals.npz (left out above NPZ_MAX_RECORDS)."""
    import dlbench.results as results
    from dlbench.metrics import summarize

    if npz_limit is not None:
        monkeypatch.setattr(results, "NPZ_MAX_RECORDS", npz_limit)
    r = cli(["run", "--data-dir", tiny, "-s", "prefetch", "--num-workers", "1", "-e", "2", "--compute-time", "0",
             "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    rd = run_dir_of(r.output)
    names = sorted(p.name for p in rd.iterdir())
    assert any(n.startswith("intervals-rank0-") and n.endswith("-t0.rec") for n in names)
    assert any(n.startswith("intervals-rank0-") and n.endswith("-t1.rec") for n in names)  # the worker's
    assert ("intervals.npz" in names) == (npz_limit is None)
    run = json.loads((rd / "run.json").read_text())
    assert ("timelogger.csv" in names) == (npz_limit is None)   # the csv is capped like the npz
    assert set(run.get("skipped_files") or {}) == (set() if npz_limit is None else {"intervals.npz", "timelogger.csv"})
    s = run["summary"]
    again = summarize(results.read_intervals(rd), workload="cosmoflow", strategy="prefetch", epochs=2)
    assert again["epoch_time_s"] == pytest.approx(s["epoch_time_s"])
    assert again["phase_time_s"] == pytest.approx(s["phase_time_s"])
    assert again["read_bytes"] == s["read_bytes"] == 2 * 32 * 262160
    r2 = cli(["report", rd])
    assert r2.exit_code == 0 and "exposed I/O share" in r2.output


def test_inject_fail_read_reaches_surrogatetrain_chunked_run_reads(tmp_path, cli):
    """FaultInjectingReader had no read_run_into: surrogatetrain's chunked run reads (forwarded to the inner
    reader) silently skipped --inject fail-read."""
    d = tmp_path / "pty"
    assert cli(["generate", "-w", "ptychonn", "--scale", "tiny", "--data-dir", d, "--no-progress"]).exit_code == 0
    base = ["run", "-w", "ptychonn", "-s", "surrogatetrain", "--data-dir", d, "-e", "1", "--batch-size", "16",
            "--compute-time", "0", "-o", tmp_path / "res"]
    r = cli([*base, "--inject", "fail-read=1"])
    err = [ln for ln in r.output.splitlines() if ln.startswith("dlbench: error:")]
    assert r.exit_code != 0 and len(err) == 1 and "train.h5" in err[0] and "--inject fail-read=1" in err[0]
    # the draws are seeded per (sample, read count, attempt): a run of samples read as one request must draw
    # the same faults as the same samples read one by one (--no-chunking); before the fix runs drew none
    runs = []
    for chunking in ([], ["--no-chunking"]):
        r = cli([*base, *chunking, "--inject", "fail-read=0.25", "--verify"])
        assert r.exit_code == 0, r.output
        runs.append(_summary(r))
        assert runs[-1]["verified_samples"] == 256
    assert "one request per run" in runs[0]["strategy_stats"][0]["chunking"]
    assert runs[0]["injected"]["read_retries"] == runs[1]["injected"]["read_retries"] > 0
