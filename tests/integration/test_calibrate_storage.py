"""dlbench calibrate-storage (issue 19): a system profile measured here, loadable by run and simulate."""

import statistics
import time

import pytest


@pytest.fixture(scope="module")
def cf(tmp_path_factory):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    d = tmp_path_factory.mktemp("cal") / "cf"
    generate(load("cosmoflow", scale="tiny"), d, seed=0, progress=False)
    return d


def test_calibrated_profile_loads_and_simulates(cf, tmp_path, cli):
    from dlbench.system import load

    out = tmp_path / "me.yaml"
    r = cli(["calibrate-storage", "--data-dir", str(cf), "--local-dir", str(tmp_path / "loc"), "-o", str(out),
             "--budget-s", "2", "--max-threads", "2", "--repeat", "2"])
    assert r.exit_code == 0, r.output
    p = load(out)
    cal = p.calibration
    assert [c.clients for c in p.pfs.aggregate] == [1, 2] and all(c.mb_per_s > 0 for c in p.pfs.aggregate)
    assert len(cal["shared_mb_per_s"]["1"]) == 2            # every repeat on record (the spread)
    assert p.pfs.latency_s == pytest.approx(cal["latency_s"]["median"], rel=1e-3, abs=1e-6)
    assert {t.kind for t in p.tiers} == {"memory", "local"}
    disk = p.tier("local")                                  # the measured w(p) is the local tier's write curve
    assert [q.threads for q in disk.write_bandwidth] == [1, 2]
    assert [q.mb_per_s for q in disk.write_bandwidth] == [
        pytest.approx(statistics.median(cal["local_write_mb_per_s"][k]), rel=1e-3, abs=1e-3) for k in ("1", "2")]
    assert not list((tmp_path / "loc").rglob("calib-*"))    # its test files are removed
    assert not list((tmp_path / "loc").rglob("*.row"))      # and the local tier's (file writes)
    # the mechanisms (issue 19): page-cache curve, file writes, format reader, worker start, page cache size
    assert [q.threads for q in disk.cached_bandwidth] == [1, 2] and all(q.mb_per_s > 0 for q in disk.cached_bandwidth)
    assert cal["local_file_write_s"]["per_file_s"][1] > 0
    assert cal["format_reader"]["layout"] == "hdf5_per_sample" and cal["format_reader"]["reads"] >= 20
    assert p.pfs.cached_mb_per_s and p.pfs.cached_mb_per_s > 0
    assert p.worker_start_s and p.worker_start_s > 0 and len(cal["worker_start_s"]) == 2
    assert p.page_cache_bytes and p.page_cache_bytes > 0
    # the DataLoader hand-off, per batch, measured through the prefetch dataset: on record per repeat
    ho = cal["loader_handoff"]
    assert len(ho["trainer_s"]) == 2 and len(ho["worker_s"]) == 2 and ho["batch"] == 8
    assert p.loader_batch_s == pytest.approx(statistics.median(ho["trainer_s"]), rel=1e-3, abs=1e-7)
    assert p.loader_batch_s > 0 and p.loader_worker_batch_s is not None and p.loader_worker_batch_s >= 0
    r = cli(["simulate", "--system", str(out), "--workload", "cosmoflow", "--nodes", "4", "--strategies", "naive",
             "--accelerator", "a100", "--out", str(tmp_path / "sim")])
    assert r.exit_code == 0, r.output


def test_unwritable_output_is_refused_before_measuring(cf, tmp_path, cli):
    t0 = time.perf_counter()
    r = cli(["calibrate-storage", "--data-dir", str(cf), "-o", str(tmp_path / "no" / "such" / "p.yaml"),
             "--budget-s", "30"])
    assert r.exit_code != 0 and "--out" in r.output and "checked before measuring" in r.output
    assert time.perf_counter() - t0 < 20


@pytest.mark.mpi
def test_two_ranks_measure_the_network(cf, tmp_path, run_mpi):
    import yaml

    out = tmp_path / "mpi.yaml"
    loc = tmp_path / "loc"
    loc.mkdir()
    r = run_mpi(["calibrate-storage", "--data-dir", cf, "--local-dir", loc, "-o", out, "--budget-s", "2",
                 "--max-threads", "1", "--repeat", "1"])
    assert r.returncode == 0, r.stderr
    d = yaml.safe_load(out.read_text())
    assert d["calibration"]["ranks"] == 2 and d["calibration"]["network_mb_per_s"] > 0
    assert d["network_mb_per_s"] == pytest.approx(d["calibration"]["network_mb_per_s"], rel=1e-3)
    assert [a["clients"] for a in d["pfs"]["aggregate"]] == [2]
    x = d["calibration"]["exchange"]                        # pls's exchange pattern, measured between the ranks
    assert x["exchanges"] >= 5 and d["exchange_mb_per_s"] == pytest.approx(x["mb_per_s"], rel=1e-3)
    # the same exchange through the Exchange stage with the local file tier: per sample beyond the bytes
    xs = d["calibration"]["exchange_stage"]
    assert xs["steps"] == 30 and xs["parts"] == 8 and xs["samples_per_step"] == 16 and xs["mean_s"] > 0
    beyond = max(xs["mean_s"] - xs["parts"] * xs["sample_bytes"] / (x["mb_per_s"] * 1e6), 0.0) / 16
    assert d["exchange_sample_s"] == pytest.approx(beyond, rel=1e-3, abs=1e-7)
    assert not any(loc.rglob("*"))                           # the stage's files and folders removed


def test_write_side_feeds_checkpoint_simulation(cf, tmp_path, cli):
    """calibrate-storage's write side (issue 28): checkpoint-like files with fsync by writers, a publish's
    metadata operations, all on record; `dlbench checkpoint --simulate --system` takes its link and file cost."""
    from dlbench.system import load

    out = tmp_path / "me.yaml"
    r = cli(["calibrate-storage", "--data-dir", str(cf), "-o", str(out), "--budget-s", "1", "--max-threads", "2",
             "--repeat", "1"])
    assert r.exit_code == 0, r.output
    sw = load(out).calibration["shared_write"]
    assert sorted(sw["mb_per_s"]) == ["1", "2"] and all(v[0] > 0 for v in sw["mb_per_s"].values())
    assert sw["fsync_s"]["count"] >= 3 and sw["small_file_s"] > 0 and sw["dir_fsync_s"] > 0
    assert not list(cf.rglob("calib-*")) and not list(cf.glob(".dlbench-calibrate-write-*"))
    r = cli(["checkpoint", "--model", "llama3-70b", "--simulate", "--write-curve", "1:10,8:1000", "--system", str(out)])
    assert r.exit_code == 0, r.output
    link = max(v[0] for v in sw["mb_per_s"].values()) / 1e3
    assert f"node link {link:.3f} GB/s" in r.output and "llama3-70b" in r.output
