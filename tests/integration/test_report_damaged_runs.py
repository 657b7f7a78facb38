"""report / compare / plot on runs that did not finish, and on hand-edited run.json (regressions, issue 15):
a failed or interrupted run shows its workload, strategy, ranks, nodes and epochs from its config (not
"? / ?: ? ranks" and None); a wrong-typed field is one line naming the field and the type expected, exit 3,
never a traceback."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dlbench.cli import main


def _cli(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _rd(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if "results: " in ln][-1].rsplit("results: ", 1)[1].rstrip(")"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"ok": a finished naive run, "failed": a run that failed reading a damaged file}."""
    base = tmp_path_factory.mktemp("runs")
    r = _cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", base / "cf", "--no-progress"])
    assert r.exit_code == 0, r.output
    r = _cli(["run", "--workload", "cosmoflow", "--strategy", "naive", "--data-dir", base / "cf", "--epochs", 2,
              "--compute-time", "0.001", "--out", base / "ok"])
    assert r.exit_code == 0, r.output
    ok = _rd(r.output)
    shutil.copytree(base / "cf", base / "bad")
    for f in sorted((base / "bad").glob("*.h5")):
        f.write_bytes(f.read_bytes()[:3000])
    r = _cli(["run", "--workload", "cosmoflow", "--strategy", "naive", "--data-dir", base / "bad", "--epochs", 2,
              "--compute-time", "0.001", "--out", base / "failed"])
    assert r.exit_code != 0
    failed = next((base / "failed").rglob("run.json")).parent
    assert json.loads((failed / "run.json").read_text())["status"] == "failed"
    return {"ok": ok, "failed": failed}


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_failed_or_interrupted_run_shows_its_config(runs, tmp_path, status):
    d = tmp_path / "run"
    shutil.copytree(runs["failed"], d)
    doc = json.loads((d / "run.json").read_text())
    doc["status"] = status
    (d / "run.json").write_text(json.dumps(doc))
    r = _cli(["report", d])
    assert r.exit_code == 0, r.output
    head = r.output.splitlines()[0]
    assert head.startswith("cosmoflow / naive: 1 ranks on 1 nodes, 2 epochs"), head
    r = _cli(["compare", d, "--format", "json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)[0]
    assert row["workload"] == "cosmoflow" and row["strategy"] == "naive" and row["ranks"] == 1
    r = _cli(["compare", d])
    assert "None" not in r.output and "cosmoflow" in r.output


BAD_FIELDS = [
    ("summary", "ranks", "four", "field summary.ranks='four' is a string, expected an integer"),
    ("summary", "ranks", 1.5, "expected an integer"),
    ("summary", "ranks", True, "is a boolean, expected an integer"),
    ("summary", "epoch_time_s", "slow", "field summary.epoch_time_s='slow' is a string, expected a list of numbers"),
    ("summary", "epoch_time_s", [1.0, "x"], "expected a list of numbers"),
    ("summary", "exposed_io_share", "10%", "expected a number"),
    ("summary", "phase_time_s", {"read": "fast"}, "expected a mapping of names to numbers"),
    ("summary", "bytes_by_tier", [1, 2], "field summary.bytes_by_tier=[1, 2] is a list, expected a mapping"),
    ("summary", "spread", {"read_s": 3}, "expected a mapping of mappings"),
    ("summary", "workload", ["cosmoflow"], "expected a string"),
    ("config", "options", [1], "field config.options=[1] is a list, expected a mapping"),
]


@pytest.mark.parametrize("command", ["report", "compare", "plot"])
@pytest.mark.parametrize("part,key,value,msg", BAD_FIELDS)
def test_wrong_typed_field_is_one_line(runs, tmp_path, command, part, key, value, msg):
    d = tmp_path / "run"
    shutil.copytree(runs["ok"], d)
    doc = json.loads((d / "run.json").read_text())
    doc[part][key] = value
    (d / "run.json").write_text(json.dumps(doc))
    args = [command, d] + (["-o", tmp_path / "figs", "--kind", "bars"] if command == "plot" else [])
    r = _cli(args)
    assert r.exit_code == 3, (command, r.output)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: ") and msg in lines[0], r.output
    assert "run.json: field" in lines[0]
    assert not (tmp_path / "figs").exists()


def test_null_figures_are_dashes_not_tracebacks(runs, tmp_path):
    """null where a number is expected (a strict-JSON writer's NaN): '-' in report and compare, plots drawn."""
    d = tmp_path / "run"
    shutil.copytree(runs["ok"], d)
    doc = json.loads((d / "run.json").read_text())
    doc["summary"]["epoch_time_s"] = [None, doc["summary"]["epoch_time_s"][1]]
    doc["summary"]["exposed_io_share"] = None
    (d / "run.json").write_text(json.dumps(doc))
    for args in (["report", d], ["compare", d], ["plot", d, "--kind", "bars", "--kind", "scaling", "-o", tmp_path / "f"]):
        r = _cli(args)
        assert r.exit_code == 0, (args, r.output)
