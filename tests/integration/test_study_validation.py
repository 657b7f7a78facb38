"""Issue 15: a study checks every entry before running any (it used to run the earlier entries in full and
stop at the first bad one with no table); a simulated study prints rows that cannot be costed as N/A."""



def test_bad_entry_is_refused_before_anything_runs(tmp_path, cli):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nworkload: cosmoflow\nscale: tiny\nepochs: 1\nbatch_size: 4\ncompute_time_s: 0.0\n"
                     "runs:\n  - {strategy: naive}\n  - {strategy: lbann, options: {cache_capacity: 1000}}\n"
                     "  - {strategy: prefetch, options: {num_workers: 0}}\n"
                     "  - {strategy: deepio, options: {cache_capacity: 10}}\n")
    r = cli(["study", str(study), "--data-dir", str(tmp_path / "data"), "--out", str(tmp_path / "res")])
    assert r.exit_code != 0, r.output
    assert "2 of 4 entries cannot run, nothing was run" in r.output
    assert "runs[1] lbann" in r.output and "runs[3] deepio" in r.output
    assert not list((tmp_path / "res").rglob("run.json"))       # naive (entry 0) did not run first


def test_simulated_row_that_cannot_be_costed_is_na_and_the_others_complete(tmp_path, cli):
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "2",
             "--strategies", "naive,lbann,prefetch", "--option", "lbann.cache_capacity=1000", "--out",
             str(tmp_path / "s")])
    assert r.exit_code == 4, r.output
    assert "lbann: N/A (--cache-capacity: too small" in r.output and "1 of 3 rows could not be costed" in r.output
    written = sorted(p.parent.parent.name for p in (tmp_path / "s").rglob("run.json"))
    assert written == ["naive", "prefetch"]


def test_calibrate_batch_that_cannot_fit_in_memory_is_one_line(cli, tmp_path):
    """Second pass: calibrate --batch-size 1099511627776 was a NumPy _ArrayMemoryError traceback."""
    import pytest

    from dlbench.host import meminfo

    if not meminfo("MemAvailable"):
        pytest.skip("no /proc/meminfo")
    # 16,000,000 x 256 KiB = 4.2 TB: under the batch ceiling (dlbench.config.MAX_BATCH), over any memory
    r = cli(["calibrate", "-w", "cosmoflow", "--scale", "tiny", "--device", "cpu", "--batch-size", "16000000",
             "-o", tmp_path / "c.yaml"])
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1, r.output
    assert "--batch-size=16000000: one batch of cosmoflow at scale tiny is" in lines[0]
    assert not (tmp_path / "c.yaml").exists()
