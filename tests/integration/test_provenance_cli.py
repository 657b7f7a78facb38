"""run.json's provenance from a real (serial) run, `dlbench report`'s block and `dlbench compare`'s warning."""

import json

from dlbench import provenance


def test_run_records_provenance_report_shows_compare_warns(cli, tmp_path):
    out = tmp_path / "res"
    r = cli(["generate", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", tmp_path / "d", "--no-progress"])
    assert r.exit_code == 0, r.output
    r = cli(["run", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", tmp_path / "d", "--epochs", 1,
             "--compute-time", "0", "--out", out])
    assert r.exit_code == 0, r.output
    run = next(out.rglob("run.json")).parent
    p = json.loads((run / "run.json").read_text())["provenance"]
    assert p["schema"] == "dlbench.provenance/1" and p["launcher"] == "none"
    assert p["workload_sha256"] and len(p["workload_sha256"]) == 64
    assert p["filesystems"]["data"]["fstype"] and p["filesystems"]["results"]["statfs"]["size_bytes"] > 0
    assert p["libraries"]["mpi_library"] is None  # serial: MPI not initialised just to ask its version
    r = cli(["report", run])
    assert r.exit_code == 0 and "provenance:" in r.output and "workload sha256" in r.output
    # a second run whose numpy differs (edited record): compare says so, once, on stderr
    twin = tmp_path / "twin"
    twin.mkdir()
    doc = json.loads((run / "run.json").read_text())
    doc["provenance"]["libraries"]["numpy"] = "0.0-other"
    doc["provenance"]["scheduler"]["job_id"] = "other-job"  # per run: not warned
    (twin / "run.json").write_text(json.dumps(doc))
    from click.testing import CliRunner

    from dlbench.cli import main

    res = CliRunner().invoke(main, ["compare", str(run), str(twin)])
    assert res.exit_code == 0, res.output
    warns = [ln for ln in res.stderr.splitlines() if ln.startswith("warning: runs differ in provenance")]
    assert len(warns) == 1 and "libraries.numpy" in warns[0] and "0.0-other" in warns[0]
    assert provenance.differences([json.loads((run / "run.json").read_text()) | {"run_dir": "a"}] * 2) == []
