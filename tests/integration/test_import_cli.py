"""`dlbench import timelogger|darshan`: a real application's log becomes a results folder that report and
compare read like a run. The NERSC TimeLogger fixture must reproduce its README's totals through the
command; PyDarshan's shipped example logs are inputs (never downloaded); bad inputs leave nothing."""

import json
import os
from pathlib import Path

import pytest

from tests.unit.test_results_report import _shared_dir

# /work/shared/fixtures/timelogger/README.md: Σ Time Taken / 64 nodes
README_TOTALS = {"HDF5 File Read": 91.2054123170665, "Load File": 168.88279626146576,
                 "Call to Next Batch": 193.37166598067233, "Training Iteration": 2534.057503949848}
README_HDF5_PER_EPOCH = [51.8776, 9.3216, 9.7593, 9.5785, 10.6684]


def _results_line(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])


def _report_table(output: str, first_col: str) -> dict:
    """Rows of the report's table whose header starts with ``first_col``: {first cell: [other cells]}."""
    lines = output.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith(first_col))
    rows = {}
    for ln in lines[i + 2:]:
        if not ln.strip():
            break
        cells = [c for c in ln.split("  ") if c.strip()]
        rows[cells[0].strip()] = [c.strip() for c in cells[1:]]
    return rows


def test_timelogger_fixture_totals_through_the_command(tmp_path, cli):
    sh = _shared_dir()
    if sh is None:
        pytest.skip("shared fixtures not found (set DLBENCH_SHARED)")
    src = sh / "fixtures" / "timelogger" / "timelogger_hep_cnn_64nodes.csv.gz"
    r = cli(["import", "timelogger", src, "--name", "hep_cnn", "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    rd = _results_line(r.output)
    assert rd.parent == tmp_path / "res" / "hep_cnn" / "imported-timelogger"
    rep = cli(["report", rd])
    assert rep.exit_code == 0 and "[IMPORTED from timelogger" in rep.output
    tab = _report_table(rep.output, "TimeLogger description")
    for desc, total in README_TOTALS.items():
        assert float(tab[desc][1]) == pytest.approx(total, rel=1e-9), desc
    assert tab["HDF5 File Read"][0] == "9280"
    per_epoch = [float(x) for x in tab["HDF5 File Read"][2].split(",")]
    assert per_epoch == pytest.approx(README_HDF5_PER_EPOCH, abs=6e-5)
    # the run-like figures: NERSC's breakdown in dlbench's phases
    ph = _report_table(rep.output, "phase")
    assert float(ph["read"][0]) == pytest.approx(91.205, abs=1e-3)
    assert float(ph["decode"][0]) == pytest.approx(168.88279626146576 - 91.2054123170665, abs=1e-3)
    assert float(ph["stall"][0]) == pytest.approx(193.372, abs=1e-3)
    s = json.loads((rd / "run.json").read_text())
    assert s["imported"]["kind"] == "timelogger" and s["imported"]["source"] == str(src.resolve())
    sm = s["summary"]
    assert sm["exposed_io_share"] == pytest.approx(193.37166598067233 / 2534.057503949848)
    assert sum(sm["epoch_time_s"]) == pytest.approx(2534.057503949848) and len(sm["epoch_time_s"]) == 5
    assert "io_counters" not in sm and "read_bytes" not in sm  # a TimeLogger CSV cannot give them
    rows = json.loads(cli(["compare", rd, "--format", "json"]).output)
    assert rows[0]["compute"] == "imported timelogger" and rows[0]["exposed_io_share"] == sm["exposed_io_share"]


def _shipped_log(name: str) -> str:
    log_utils = pytest.importorskip("darshan.log_utils")
    import darshan

    try:
        path = log_utils.get_log_path(name)
    except FileNotFoundError as exc:
        pytest.skip(f"{name} is not shipped with this PyDarshan: {exc}")
    pkg = Path(darshan.__file__).resolve().parent
    if pkg not in Path(path).resolve().parents:
        pytest.skip(f"{name} is not packaged with PyDarshan ({path}); tests never download logs")
    return path


def test_import_darshan_ior_example(tmp_path, cli):
    path = _shipped_log("ior_hdf5_example.darshan")
    r = cli(["import", "darshan", path, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    rd = _results_line(r.output)
    assert rd.parent == tmp_path / "res" / "ior" / "imported-darshan"
    doc = json.loads((rd / "run.json").read_text())
    assert doc["imported"]["kind"] == "darshan" and doc["imported"]["job"]["nprocs"] == 4
    s = doc["summary"]
    ioc = s["io_counters"]
    assert list(ioc["by_class"]) == ["/global/cscratch1"] and len(ioc["by_rank"]) == 4
    c = ioc["by_class"]["/global/cscratch1"]
    assert c["POSIX_OPENS"] == 22 and c["POSIX_READS"] == 36 and c["POSIX_BYTES_READ"] == 4202504
    assert c["POSIX_SIZE_READ_100K_1M"] == 16 and sum(c[b] for b in ioc["buckets"]) == 36
    assert c["H5D_READS"] == 12 and c["POSIX_F_READ_TIME"] == pytest.approx(0.078451, abs=1e-6)
    assert ioc["slowest_rank"]["rank"] == 1  # Darshan's POSIX_SLOWEST_RANK of the shared file
    assert s["read_bytes"] == 4202504 and s["total_time_s"] == 1.0 and "exposed_io_share" not in s
    rep = cli(["report", rd])
    assert rep.exit_code == 0 and "I/O counters" in rep.output and "100K_1M: 16" in rep.output
    assert "no epochs" in rep.output


@pytest.mark.parametrize("name", ["example.darshan", "dxt.darshan", "noposix.darshan", "sample-badost.darshan",
                                  "shane_macsio_id29959_5-22-32552-7035573431850780836_1590156158.darshan"])
def test_import_darshan_shipped_logs(tmp_path, cli, name):
    """Every example log PyDarshan ships imports, and the per-class counters add up to the log's totals."""
    from dlbench.importers import import_darshan

    path = _shipped_log(name)
    r = cli(["import", "darshan", path, "--out", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads((_results_line(r.output) / "run.json").read_text())["summary"]
    posix = import_darshan(path).get("posix") or {}
    by_class = s["io_counters"]["by_class"]
    for k in ("POSIX_READS", "POSIX_BYTES_READ", "POSIX_OPENS", "POSIX_WRITES"):
        assert sum(c[k] for c in by_class.values()) == posix.get(k, 0), k
    assert len(s["io_counters"]["by_rank"]) == s["ranks"]


@pytest.mark.parametrize("kind,content,msg", [
    ("darshan", b"\x00garbage" * 100, "not a Darshan log"),
    ("darshan", None, "no such file"),
    ("darshan", "truncated", "truncated Darshan log"),
    ("timelogger", b"a,b\n1,2\n", "not a TimeLogger CSV"),
    ("timelogger", b"Epoch, Rank, Action Name, Action Description, Start Time, End Time, Time Taken\n0,0,x,y,1,2,abc\n",
     "line 2"),
    ("timelogger", b"\x89\xff\xfe binary", "not a readable TimeLogger CSV"),
    ("timelogger", None, "no such file"),
])
def test_import_bad_input_one_line_nothing_left(tmp_path, run_cli_subprocess, kind, content, msg):
    p = tmp_path / f"input.{kind}"
    if content == "truncated":
        p.write_bytes(Path(_shipped_log("ior_hdf5_example.darshan")).read_bytes()[:100])
    elif content is not None:
        p.write_bytes(content)
    out = tmp_path / "res"
    r = run_cli_subprocess(["import", kind, p, "--out", out])
    assert r.returncode != 0
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlbench: error: ") and msg in err[0], r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert not out.exists()


@pytest.fixture
def run_cli_subprocess(tmp_path):
    """The real process (stderr as a user sees it, libdarshan-util's own prints included)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def _run(args):
        env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        return subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120)

    return _run


def test_timelogger_import_of_a_dlbench_run_gives_its_exposed_io_share(tmp_path, cli):
    """dlbench's own timelogger.csv imported: the same epoch times and exposed I/O share as the run."""
    from tests.integration.test_io_counters_cli import _run
    from tests.unit.test_io_counters import SEQ4K

    y = tmp_path / "seq4k.yaml"
    y.write_text(SEQ4K)
    assert cli(["generate", "--workload", y, "--data-dir", tmp_path / "data", "--no-progress"]).exit_code == 0
    rd, _ioc = _run(cli, (y, tmp_path / "data"), tmp_path, "--strategy", "naive", "--compute-time", "0.001")
    run = json.loads(Path(rd, "run.json").read_text())["summary"]
    r = cli(["import", "timelogger", Path(rd, "timelogger.csv"), "--out", tmp_path / "imp"])
    assert r.exit_code == 0, r.output
    imp = json.loads((_results_line(r.output) / "run.json").read_text())["summary"]
    assert imp["epoch_time_s"] == pytest.approx(run["epoch_time_s"], rel=1e-6)
    assert imp["exposed_io_share"] == pytest.approx(run["exposed_io_share"], rel=1e-3)
