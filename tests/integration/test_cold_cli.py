"""`dlbench run --cache drop|direct` end to end on tiny data, one rank (issue 17)."""

import json

import numpy as np
from runs_helper import run_dir_of


def _run(cli, tmp_path, data, *args):
    r = cli(["run", "--data-dir", data, "-e", "2", "--compute-time", "0", "--verify", "-o", tmp_path / "res", *args])
    assert r.exit_code == 0, r.output
    d = run_dir_of(r.output)
    return r, d, json.loads((d / "run.json").read_text())["summary"]


def _check_bytes(c, epochs=2):
    ep = {d["epoch"]: d for d in c["per_epoch"]}
    assert set(ep) == {-1, *range(epochs)}
    assert all(ep[e]["requested_bytes"] > 0 for e in range(epochs))
    if c["device_bytes"]["available"]:
        assert c["verdict"] == "cold", c["verdict_line"]
        assert all(ep[e]["device_read_bytes"] >= 0.9 * ep[e]["requested_bytes"] for e in range(epochs))
    else:
        assert c["verdict"] == "unknown" and "unavailable" in c["verdict_line"]


def test_run_cache_drop_evicts_before_every_epoch_outside_epoch_time(tmp_path, cli, tiny):
    r, d, s = _run(cli, tmp_path, tiny, "--cache", "drop")
    c = s["cache"]
    assert c["mode"] == "drop" and not c["direct_reads"] and c["warning"] is None
    assert [x["before_epoch"] for x in c["evictions"]] == [-1, 0, 1]
    assert all(x["files"] == 32 for x in c["evictions"])          # the tiny dataset's files
    _check_bytes(c)
    assert c["mlperf"]["ok"] and c["mlperf"]["moot"]
    # the evict phase: recorded, outside the epoch clock (no share of epoch time)
    assert s["phase_time_s"]["evict"] > 0 and "evict" not in s["phase_share"]
    from dlbench.timeline import PHASE_ID

    iv = np.load(d / "intervals.npz")
    ph, ep = iv["r0_phase"], iv["r0_epoch"]
    assert (ph == PHASE_ID["evict"]).sum() == 3 and set(ep[ph == PHASE_ID["evict"]].tolist()) == {0, 1}
    # outside the epoch: every evict interval ends before its epoch's first read starts
    st, en = iv["r0_start_ns"], iv["r0_end_ns"]
    starts = dict(zip(iv["r0_epochs"].tolist(), iv["r0_epoch_start_ns"].tolist()))
    for e in (0, 1):
        first_read = st[(ph == PHASE_ID["read"]) & (ep == e)].min()
        assert en[(ph == PHASE_ID["evict"]) & (ep == e)].max() <= min(first_read, starts[e])
    assert "page cache: --cache drop" in r.output and "read latency" in r.output
    lat = s["read_latency"]["all"]["shared"]
    assert lat["count"] == 2 * 32 and 0 < lat["p50_s"] <= lat["p95_s"] <= lat["p99_s"] <= lat["max_s"]


def test_run_cache_direct_reads_with_o_direct(tmp_path, cli):
    data = tmp_path / "hep"
    r = cli(["generate", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", data, "--no-progress"])
    assert r.exit_code == 0, r.output
    r, d, s = _run(cli, tmp_path, data, "--workload", "hep_cnn", "--cache", "direct")
    c = s["cache"]
    assert c["mode"] == "direct" and c["direct_reads"] and c["warning"] is None and not c["evictions"]
    _check_bytes(c)
    assert s["verified_samples"] == 2 * 64


def test_run_cache_direct_on_hdf5_per_sample_warns_once_and_records(tmp_path, cli, tiny):
    r, d, s = _run(cli, tmp_path, tiny, "--cache", "direct")
    c = s["cache"]
    assert not c["direct_reads"] and "hdf5_per_sample" in c["warning"]
    assert r.output.count("--cache direct: layout hdf5_per_sample") == 1
    assert [x["before_epoch"] for x in c["evictions"]] == [-1, 0, 1]   # the fallback evicts instead
    _check_bytes(c)


def test_run_cache_keep_reports_device_bytes_and_compare_shows_them(tmp_path, cli, tiny):
    _r, d, s = _run(cli, tmp_path, tiny)
    c = s["cache"]
    assert c["mode"] == "keep" and not c["evictions"] and c["verdict"] in ("cold", "warm", "mixed", "unknown")
    assert not c["mlperf"]["ok"]                 # a tiny dataset in keep mode: the check is not met
    r = cli(["compare", d])
    assert r.exit_code == 0 and "keep" in r.output and "shared" in r.output
    # the table's latency column: P50/P95/P99/max of the main tier (P95 was only in csv/json)
    lat = s["read_latency"]["all"]["shared"]
    cell = "shared " + "/".join(f"{lat[k] * 1e3:.3g}" for k in ("p50_s", "p95_s", "p99_s", "max_s"))
    assert "read P50/P95/P99/max ms" in r.output and cell in r.output


def test_run_cache_bad_value_is_one_line(tmp_path, cli, tiny):
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--cache", "cold", "-o", tmp_path / "res"])
    assert r.exit_code != 0 and "cold" in r.output and "Traceback" not in r.output


def test_prefetch_workers_device_bytes_counted_once(tmp_path, cli, tiny):
    """Regression (issue 17): DataLoader workers' /proc/<pid>/io is added to the trainer's when it reaps them,
    so adding the workers' own figures as well showed a cold epoch as 2x the dataset from the device. Both
    paths: workers reaped at every epoch's end, and persistent workers (still alive: read from their /proc)."""
    for extra in ([], ["--persistent-workers"]):
        _r, _d, s = _run(cli, tmp_path, tiny, "-s", "prefetch", "--num-workers", "2", "--cache", "drop", *extra)
        c = s["cache"]
        if not c["device_bytes"]["available"]:
            import pytest

            pytest.skip(f"device bytes unavailable here: {c['device_bytes']['reason']}")
        for d in c["per_epoch"]:
            if d["epoch"] >= 0:
                assert 0.9 * d["requested_bytes"] <= d["device_read_bytes"] <= 1.5 * d["requested_bytes"], d
        assert s["page_cache"]["device_read_bytes"] <= 1.5 * s["read_bytes"]
