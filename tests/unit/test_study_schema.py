"""The one study schema (dlbench/study/schema.py) and its simulating driver: `dlbench study FILE --simulate`
and `dlbench simulate --study FILE` are one driver with one parsed Study, so the same file gives the same
table and the same results folders; the schema rejects an unknown key, or a key of the other kind of study,
in one line naming it."""

import json

import pytest

from dlbench.errors import ConfigError
from dlbench.study.schema import load_study

MODEL = """
name: small
system: hdmlp-thesis
workload: {name: w, samples: 800, global_batch: 40, size: {kind: normal, mean_bytes: 1.0e6, std_bytes: 1.0e5}}
nodes: 4
epochs: 2
strategies: [lowerbound, naive]
runs: [{label: P, strategy: prefetch, options: {num_workers: 2}}]
published_runtime_s: {lowerbound: 50}
"""

SCALING = """
name: tiny-scaling
workload: hep_cnn
scale: tiny
system: laptop-pfs
epochs: 1
batch_size: 4
compute_time_s: 0.001
samples: 64
runs:
  - {strategy: naive}
  - {strategy: pls, options: {exchange_fraction: 0.5}}
sweep: {ranks: [1, 2]}
simulate: {nodes: [1, 2]}
"""

_VOLATILE = {"created", "started", "finished", "host", "provenance", "run_dir", "dlbench_version", "git",
             "wall_s", "timestamp", "python", "utc"}


def _strip(o):
    """o without the keys that name a time, a folder or a machine."""
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if k not in _VOLATILE}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def _folders(root):
    """Every run.json under root, stripped, in a stable order."""
    return sorted(json.dumps(_strip(json.loads(p.read_text())), sort_keys=True) for p in root.rglob("run.json"))


def _printed(output):
    """(the lines before the JSON table, the table's rows stripped)."""
    i = output.index("[")
    return output[:i], _strip(json.loads(output[i:]))


@pytest.mark.parametrize("text", [MODEL, SCALING], ids=["model", "scaling"])
def test_both_entry_points_give_the_same_simulated_result(cli, tmp_path, text):
    study = tmp_path / "s.yaml"
    study.write_text(text)
    a = cli(["simulate", "--study", study, "--out", tmp_path / "a", "--format", "json"])
    b = cli(["study", study, "--simulate", "--out", tmp_path / "b", "--format", "json"])
    assert a.exit_code == 0, a.output
    assert b.exit_code == 0, b.output
    (head, rows), other = _printed(a.output), _printed(b.output)
    assert (head, rows) == other
    assert len(rows) == (3 if text is MODEL else 4)   # model: 3 rows; scaling: 2 strategies x 2 node counts
    fa, fb = _folders(tmp_path / "a"), _folders(tmp_path / "b")
    assert fa == fb and len(fa) == len(rows)


def test_study_without_simulate_flags_costs_with_the_studys_out(cli, tmp_path, monkeypatch):
    """simulate --study without --out writes where study --simulate does: the study's results root."""
    monkeypatch.chdir(tmp_path)
    study = tmp_path / "s.yaml"
    study.write_text(SCALING + "out: mine\n")
    r = cli(["simulate", "--study", study])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "mine").rglob("run.json"))) == 4 and not (tmp_path / "results").exists()


@pytest.mark.parametrize("text,key", [(SCALING + "epoks: 3\n", "epoks"),
                                      (MODEL + "epoks: 3\n", "epoks"),
                                      (SCALING + "strategies: [naive]\n", "strategies"),
                                      (MODEL + "batch_size: 4\n", "batch_size"),
                                      (SCALING.replace("{strategy: naive}", "{strategy: naive, label: N}"),
                                       "runs[0].label")])
def test_schema_rejects_an_unknown_or_other_kinds_key_in_one_line(cli, tmp_path, text, key):
    study = tmp_path / "s.yaml"
    study.write_text(text)
    with pytest.raises(ConfigError, match=key.replace("[", r"\[")):
        load_study(study)
    for args in (["study", study], ["study", study, "--simulate"], ["simulate", "--study", study]):
        r = cli([*args, "--out", tmp_path / "out"])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and key in lines[0], (args, r.output)
    assert not (tmp_path / "out").exists()


def test_a_model_study_is_not_measured(cli, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(MODEL)
    r = cli(["study", study, "--out", tmp_path / "out"])
    assert r.exit_code == 2 and "a model study (nodes: 4) is costed, not measured" in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_model_rows_need_labels(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text(MODEL.replace("{label: P, strategy: prefetch", "{strategy: prefetch"))
    with pytest.raises(ConfigError, match=r"runs\[0\].label .*missing"):
        load_study(study)


def test_a_model_study_is_not_scheduled(cli, tmp_path):
    """jobscript loads the one schema too: a model study is refused before any script is written."""
    study = tmp_path / "s.yaml"
    study.write_text(MODEL)
    r = cli(["jobscript", study, "--scheduler", "slurm", "--nodes-list", "1,2", "-o", tmp_path / "jobs"])
    assert r.exit_code == 2 and "a model study (nodes: 4) is costed, not run" in r.output, r.output
    assert not (tmp_path / "jobs").exists()
