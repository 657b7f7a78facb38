"""Run folder writing/reading, reports, and the TimeLogger / Darshan imports."""

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dlbench.importers import import_timelogger
from dlbench.metrics import per_epoch_table, summarize
from dlbench.report import compare, render_summary
from dlbench.results import TIMELOGGER_COLUMNS, new_run_dir, read_intervals, read_run, write_run
from dlbench.timeline import PHASE_ID, Timeline


def _timelines(ranks=2):
    out = []
    for r in range(ranks):
        tl = Timeline(rank=r)
        t = 1_000_000 * r
        for e in range(2):
            es = t
            for s in range(3):
                tl.add(PHASE_ID["stall"], t, t + 100, e, s)
                tl.add(PHASE_ID["read"], t, t + 100, e, s, 4096, 0)
                tl.add(PHASE_ID["compute"], t + 100, t + 1100, e, s)
                t += 1100
            tl.mark_epoch(e, es, t, samples=6)
        out.append(tl.arrays())
    return out


def _write(tmp_path, strategy="naive", error=None, intervals="default", simulated=False):
    ivs = _timelines() if intervals == "default" else intervals
    s = summarize([a for a in (ivs or []) if a is not None], workload="tiny", strategy=strategy, nodes=1,
                  epochs=2, simulated=simulated)
    d = new_run_dir(tmp_path, "tiny", strategy)
    write_run(d, config={"workload": "tiny", "strategy": strategy, "path": tmp_path, "x": np.int64(3)},
              summary=s, per_epoch=per_epoch_table(ivs or [], 2), intervals=ivs, error=error,
              simulated=simulated)
    return d


def test_write_and_read_run(tmp_path):
    d = _write(tmp_path)
    assert d.parent == tmp_path / "tiny" / "naive"
    run = read_run(d)
    assert run["schema"] == "dlbench.run/2" and run["status"] == "ok" and run["error"] is None
    assert run["config"]["x"] == 3
    env = run["environment"]
    assert env["python"] and "numpy" in env["packages"] and "commit" in env["git"] and "dirty" in env["git"]
    assert sorted(run["files"]) == ["intervals.npz", "summary.json", "timelogger.csv", "trace.json"]
    assert run["summary"]["read_bytes"] == 2 * 2 * 3 * 4096
    assert len(run["per_epoch"]) == 4
    # the summary can be recomputed from the raw intervals
    again = summarize(read_intervals(d / "intervals.npz"), workload="tiny", strategy="naive", epochs=2)
    assert again["epoch_time_s"] == run["summary"]["epoch_time_s"]
    assert again["exposed_io_share"] == pytest.approx(run["summary"]["exposed_io_share"])


def test_new_run_dir_unique(tmp_path):
    a, b = new_run_dir(tmp_path, "w", "s"), new_run_dir(tmp_path, "w", "s")
    assert a != b and a.is_dir() and b.is_dir()


def test_trace_json_chrome_format(tmp_path):
    d = _write(tmp_path)
    tr = json.loads((d / "trace.json").read_text())
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X" and e.get("cat") == "dlbench"]
    assert len(xs) == 2 * 2 * 3 * 3
    assert {e["pid"] for e in xs} == {0, 1}
    reads = [e for e in xs if e["name"] == "read"]
    assert all(e["args"]["bytes"] == 4096 and e["dur"] == pytest.approx(0.1) for e in reads)
    assert min(e["ts"] for e in tr["traceEvents"] if "ts" in e) == 0
    names = {e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"rank 0", "rank 1"}


def test_timelogger_csv_columns_and_roundtrip(tmp_path):
    d = _write(tmp_path)
    with open(d / "timelogger.csv") as f:
        header = f.readline().rstrip("\n")
    assert header == "Epoch, Rank, Action Name, Action Description, Start Time, End Time, Time Taken, " \
                     "Process ID, Current Thread"
    assert [h.strip() for h in header.split(",")] == list(TIMELOGGER_COLUMNS)
    rows = list(csv.reader(open(d / "timelogger.csv")))[1:]
    assert len(rows) == 2 * 2 * 3 * 3 + 4 and int(rows[0][7]) == os.getpid()
    t = import_timelogger(d / "timelogger.csv")
    assert t["descriptions"]["Compute Step"]["count"] == 12
    assert t["descriptions"]["Compute Step"]["sum_s"] == pytest.approx(12 * 1e-6)
    assert t["nodes"] == 2


def test_write_run_never_raises_on_partial_intervals(tmp_path):
    bad = [None, {"start_ns": np.array([1, 2]), "end_ns": None, "phase": [0, 1]}, {"rank": 5}]
    d = new_run_dir(tmp_path, "w", "s")
    write_run(d, config={}, summary=None, intervals=bad, error=RuntimeError("boom"))
    run = read_run(d)
    assert run["status"] == "failed" and run["error"] == {"type": "RuntimeError", "message": "boom"}
    d2 = new_run_dir(tmp_path, "w", "s")
    write_run(d2, config={}, summary=None, intervals=None, error="no data")
    assert read_run(d2)["error"] == "no data" and read_run(d2)["files"] == []
    d3 = new_run_dir(tmp_path, "w", "s")
    write_run(d3, config={}, summary={}, intervals=[{"start_ns": 5}])  # a scalar where an array belongs
    assert read_run(d3)["schema"] == "dlbench.run/2"


def test_render_summary_and_compare(tmp_path):
    d1 = _write(tmp_path, "naive")
    d2 = _write(tmp_path, "prefetch", simulated=True)
    d3 = _write(tmp_path, "pls", error=RuntimeError("disk full"))
    txt = render_summary(read_run(d1))
    assert "exposed I/O share" in txt and "tiny / naive" in txt and "compute" in txt
    assert "SIMULATED" in render_summary(read_run(d2))
    assert "FAILED: disk full" in render_summary(read_run(d3))
    tab = compare([d1, d2, d3])
    assert "naive" in tab and "prefetch" in tab and "failed" in tab
    rows = list(csv.DictReader(compare([d1, d2], "csv").splitlines()))
    assert [r["strategy"] for r in rows] == ["naive", "prefetch"] and rows[1]["simulated"] == "True"
    js = json.loads(compare([d1], "json"))
    s = read_run(d1)["summary"]
    assert js[0]["exposed_io_share"] == s["exposed_io_share"] and js[0]["ranks"] == 2
    from dlbench.errors import ConfigError
    with pytest.raises(ConfigError, match="tabel"):
        compare([d1], "tabel")


def _shared_dir() -> Path | None:
    env = os.environ.get("DLBENCH_SHARED")
    cands = [Path(env)] if env else []
    root = Path(__file__).resolve().parents[2]  # the repo root; shared/ sits beside it (or higher up)
    # the repository's own copy (tests/fixtures/timelogger, BSD-3 with its licence) first, so CI runs these tests
    cands += [root / "tests", root / "shared"] + [p / "shared" for p in root.parents]
    for c in cands:
        if (c / "fixtures" / "timelogger").is_dir():
            return c
    return None


def test_import_timelogger_reproduces_nersc_figures():
    sh = _shared_dir()
    if sh is None:
        pytest.skip("shared fixtures not found (set DLBENCH_SHARED)")
    t = import_timelogger(sh / "fixtures" / "timelogger" / "timelogger_hep_cnn_64nodes.csv.gz")
    d = t["descriptions"]
    assert t["nodes"] == 64 and t["rows"] == 88192
    assert d["HDF5 File Read"]["per_node_s"] == pytest.approx(91.2054123170665, rel=1e-6)
    assert d["Load File"]["per_node_s"] == pytest.approx(168.88279626146576, rel=1e-6)
    assert d["Call to Next Batch"]["per_node_s"] == pytest.approx(193.37166598067233, rel=1e-6)
    assert d["Training Iteration"]["per_node_s"] == pytest.approx(2534.057503949848, rel=1e-6)
    assert d["HDF5 File Read"]["count"] == 9280
    pe = d["HDF5 File Read"]["per_epoch_s"]
    for e, v in {0: 51.8776, 1: 9.3216, 2: 9.7593, 3: 9.5785, 4: 10.6684}.items():
        assert pe[e] == pytest.approx(v, abs=6e-5)


def test_import_darshan_ior_example():
    log_utils = pytest.importorskip("darshan.log_utils")
    try:
        path = log_utils.get_log_path("ior_hdf5_example.darshan")
    except Exception as exc:  # noqa: BLE001 - log not shipped with this PyDarshan
        pytest.skip(f"example log unavailable: {exc}")
    from dlbench.importers import import_darshan
    d = import_darshan(path)
    assert "POSIX" in d["modules"] and d["job"]["nprocs"] == 4
    p = d["posix"]
    assert p["POSIX_OPENS"] == 22 and p["POSIX_READS"] == 36 and p["POSIX_BYTES_READ"] == 4202504
    assert sum(p["read_size_histogram"].values()) == p["POSIX_READS"]
    assert p["read_size_histogram"]["100K_1M"] == 16


def test_run_json_stays_whole_when_two_processes_write_it(tmp_path):
    """Regression: two failing ranks wrote run.json through one shared temporary name and left it corrupt."""
    import json
    import multiprocessing as mp

    from dlbench.results import read_run

    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_write_many, args=(tmp_path, k)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    run = read_run(tmp_path)
    assert run["error"] in ("rank 0", "rank 1")
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    del json


def _write_many(d, k):
    from dlbench.results import write_run

    for _ in range(100):
        write_run(d, config={"pad": "x" * (4000 * (k + 1))}, summary={}, error=f"rank {k}")


def test_timelogger_csv_capped_like_npz(tmp_path, monkeypatch):
    """Regression: timelogger.csv had no size cap (one row per record of every rank) while intervals.npz was
    left out above NPZ_MAX_RECORDS; the csv is now left out above the same cap, with a note in run.json."""
    import dlbench.results as results

    monkeypatch.setattr(results, "NPZ_MAX_RECORDS", 2 * 2 * 3 * 3 - 1)   # one record fewer than _timelines'
    d = _write(tmp_path)
    run = read_run(d)
    assert "timelogger.csv" not in run["files"] and not (d / "timelogger.csv").exists()
    assert "over the 35 cap" in run["skipped_files"]["timelogger.csv"] and "36 interval records" in \
        run["skipped_files"]["timelogger.csv"]
    assert {"intervals.npz", "trace.json"} <= set(run["files"])   # in-memory intervals: the npz is their copy
    monkeypatch.setattr(results, "NPZ_MAX_RECORDS", 36)
    run = read_run(_write(tmp_path))
    assert "timelogger.csv" in run["files"] and "skipped_files" not in run


def test_previous_schema_version_is_upgraded_and_unknown_refused(tmp_path):
    """Results schema (issue 16): a /1 simulated run (bytes per rank, shares over epochs + prologue) reads
    with /2's meanings; a newer, unknown version is one line."""
    import json

    import pytest

    from dlbench.errors import DataError
    from dlbench.results import SCHEMA, read_run

    d = tmp_path / "old"
    d.mkdir()
    s = {"workload": "w", "strategy": "pls", "ranks": 4, "nodes": 4, "epochs": 2, "simulated": True,
         "total_time_s": 10.0, "epoch_time_s": [2.0, 2.0], "exposed_io_share": 0.7, "au": 0.1, "read_share": 0.0,
         "read_bytes": 100.0, "bytes_by_tier": {"shared": 0.0, "local": 100.0, "memory": 0.0, "peer": 0.0},
         "phase_time_s": {"stage": 6.0, "stall": 1.0, "compute": 3.0, "read": 0.5}}
    (d / "run.json").write_text(json.dumps({"schema": "dlbench.run/1", "config": {}, "summary": s}))
    run = read_run(d)
    t = run["summary"]
    assert run["schema"] == SCHEMA and t["upgraded_from"] == "dlbench.run/1"
    assert t["read_bytes"] == 400.0 and t["bytes_by_tier"]["local"] == 400.0
    assert t["exposed_io_share"] == pytest.approx(1.0 / 4.0) and t["au"] == pytest.approx(3.0 / 4.0)
    assert t["e2e_exposed_io_share"] == pytest.approx(7.0 / 10.0)
    (d / "run.json").write_text(json.dumps({"schema": "dlbench.run/99", "summary": {}}))
    with pytest.raises(DataError, match=r"dlbench.run/99.*upgrade"):
        read_run(d)


def test_report_explain_prints_the_glossary(cli):
    from dlbench.metrics import GLOSSARY

    r = cli(["report", "--explain"])
    assert r.exit_code == 0
    for k in ("exposed_io_share", "e2e_exposed_io_share", "bytes_by_tier", "shared_read_requests", "au"):
        assert k in r.output and GLOSSARY[k][:30] in r.output
