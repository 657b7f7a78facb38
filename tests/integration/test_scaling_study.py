"""Scaling studies: a sweep's points (weak and strong), a launch runs its own world size, the simulate part
to 1,024 nodes, and compare / plot over the one results root."""

import json
from pathlib import Path

import pytest

from dlbench.data.manifest import Manifest
from dlbench.errors import ConfigError
from dlbench.study.schema import load_study, points
from dlbench.study.simulate import run_simulate

STUDY = """
name: tiny-scaling
workload: hep_cnn
scale: tiny
system: laptop-pfs
epochs: 1
batch_size: 4
compute_time_s: 0.001
seed: 0
runs:
  - {{strategy: naive}}
  - {{strategy: pls, options: {{exchange_fraction: 0.5}}}}
sweep:
  ranks: [1, 2]
  {sweep}
simulate:
  nodes: [1, 2, 1024]
"""
WEAK = "scaling: weak\n  samples_per_rank: 32"
STRONG = "scaling: strong"


def _study(tmp_path, sweep=WEAK, extra="", name="s.yaml"):
    p = tmp_path / name
    p.write_text(STUDY.format(sweep=sweep) + extra)
    return p


def test_weak_and_strong_points(tmp_path):
    weak = load_study(_study(tmp_path))
    assert [(p.workload, p.ranks, p.samples) for p in points(weak)] == [("hep_cnn", 1, 32), ("hep_cnn", 2, 64)]
    strong = load_study(_study(tmp_path, STRONG + "\nsamples: 64", name="t.yaml"))
    assert [p.samples for p in points(strong)] == [64, 64]


@pytest.mark.parametrize("sweep,msg", [
    ("scaling: weak", "needs sweep.samples_per_rank"),
    ("scaling: strong\n  samples_per_rank: 3", "only with scaling: weak"),
    ("scaling: sideways", "choose one of weak, strong"),
    ("nodes: [1]\n  scaling: strong", "exactly one of ranks"),
    ("scaling: strong\n  rank: [1]", "unknown key 'sweep.rank'"),
])
def test_bad_sweeps_are_one_line(tmp_path, sweep, msg):
    with pytest.raises(ConfigError, match=msg):
        load_study(_study(tmp_path, sweep))


def test_launch_with_a_world_size_the_sweep_lacks(tmp_path, cli, monkeypatch):
    p = _study(tmp_path).read_text().replace("ranks: [1, 2]", "ranks: [2, 4]")
    (tmp_path / "s2.yaml").write_text(p)
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    res = cli(["study", tmp_path / "s2.yaml", "--out", tmp_path / "res"])
    assert res.exit_code == 2 and "no point with 1 rank(s)" in res.output and "has 2, 4" in res.output
    assert not (tmp_path / "res").exists() and not (tmp_path / "data").exists()


def test_serial_sweep_simulate_compare_plot(tmp_path, cli):
    st = _study(tmp_path)
    res_root, data = tmp_path / "res", tmp_path / "data"
    r = cli(["study", st, "--out", res_root, "--data-dir", data, "--local-dir", tmp_path / "loc"])
    assert r.exit_code == 0, r.output
    assert Manifest.exists(data / "hep_cnn-tiny-F32-seed0")
    assert not (data / "hep_cnn-tiny-F64-seed0").exists()  # the 2-rank point is another launch's
    r = cli(["study", st, "--simulate", "--out", res_root])
    assert r.exit_code == 0, r.output
    runs = [json.loads(p.read_text()) for p in res_root.rglob("run.json")]
    meas = sorted((x["summary"]["strategy"], x["summary"]["ranks"]) for x in runs if not x["simulated"])
    sim = sorted((x["summary"]["strategy"], x["summary"]["nodes"]) for x in runs if x["simulated"])
    assert meas == [("naive", 1), ("pls", 1)]
    assert sim == [("naive", 1), ("naive", 2), ("naive", 1024), ("pls", 1), ("pls", 2), ("pls", 1024)]
    big = next(x for x in runs if x["simulated"] and x["summary"]["nodes"] == 1024)
    assert big["config"]["workload"]["samples"] == 32 * 1024  # weak scaling: F grows with the ranks
    table = cli(["compare", res_root]).output
    assert table.count("\n") >= 9 and "1024" in table
    pytest.importorskip("matplotlib")
    r = cli(["plot", res_root, "--kind", "scaling", "-o", tmp_path / "fig"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fig" / "scaling-ranks.png").is_file()


def test_simulate_leaves_out_points_it_cannot_cost(tmp_path):
    st = load_study(_study(tmp_path, STRONG + "\nsamples: 64"))
    notes = []
    dirs = run_simulate(st, out=tmp_path / "res", echo=notes.append)
    nodes = sorted(json.loads((Path(d) / "run.json").read_text())["summary"]["nodes"] for d in dirs)
    assert nodes == [1, 1, 2, 2]  # 64 samples cannot give 1,024 ranks a local batch of 4
    assert any("1024 node(s): left out" in n and "fewer than one local batch" in n for n in notes)


def test_simulate_needs_a_simulate_part(tmp_path, cli):
    p = Path(__file__).resolve().parents[2] / "configs" / "studies" / "shuffle-comparison.yaml"
    r = cli(["study", p, "--simulate"])
    assert r.exit_code == 2 and "no sweep: or simulate: part" in r.output


@pytest.mark.parametrize("sweep", [True, False])
def test_sweep_full_disk_write_error_is_one_line(tmp_path, cli, monkeypatch, sweep):
    """Regression: run_sweep appended res["run_dir"] even when it was None (a full disk: write_error), so the
    study went on to compare and failed in read_run(None) with a TypeError traceback, losing the real message.
    run_sweep and run_study share _run_entry, which raises the OutputError."""
    from dlbench.run import driver

    calls = []

    def full_disk(cfg, comm):
        if cfg.dry_run:              # the study's checks of every entry before it runs any
            return {"dry_run": {}}
        calls.append(cfg.strategy)
        return {"run_dir": None, "run": {}, "write_error": f"--out {cfg.out}: the results could not be written "
                                                           f"(No space left on device)"}

    monkeypatch.setattr(driver, "run", full_disk)
    st = _study(tmp_path)
    if not sweep:  # a plain study (no sweep): run_study
        st.write_text(st.read_text().split("sweep:")[0] + "samples: 32\n")
    r = cli(["study", st, "--out", tmp_path / "res", "--data-dir", tmp_path / "data"])
    assert r.exit_code == 6, r.output
    assert "No space left on device" in r.output and "Traceback" not in r.output and "TypeError" not in r.output
    assert calls == ["naive"]   # the study stops at the first run it could not keep


def test_simulate_rows_labelled_like_measured_runs(tmp_path):
    """Regression: simulate_rows hand-built labels ("pls exchange_fraction=0.5") while measured rows are
    report.run_label's ("pls Q=0.5"), so a study's simulated and measured rows did not pair up."""
    from dlbench.report import run_label
    from dlbench.study.simulate import simulate_rows

    st = load_study(_study(tmp_path))
    rows = simulate_rows(st, 0.1)
    assert [lab for lab, _, _ in rows] == ["naive", "pls Q=0.5"]
    measured = [run_label({"config": {"strategy": r.strategy, "options": dict(r.options)}}) for r in st.runs]
    assert [lab for lab, _, _ in rows] == measured
    dirs = run_simulate(st, out=tmp_path / "res")
    labels = {json.loads((Path(d) / "run.json").read_text())["config"]["label"] for d in dirs}
    assert labels == {"naive", "pls Q=0.5"}


def test_point_data_dir_user_yaml_named_like_builtin_has_own_dataset(tmp_path):
    """Regression: point_data_dir left out data_dir_tag, so a sweep over a user YAML named like a built-in
    (here a copy of hep_cnn.yaml with other shapes) shared the built-in's sweep dataset."""
    from dlbench import workload as wl_mod
    from dlbench.config import resource_dir
    from dlbench.study.measure import point_data_dir

    user = tmp_path / "mine" / "hep_cnn.yaml"
    user.parent.mkdir()
    user.write_text((resource_dir("workloads") / "hep_cnn.yaml").read_text().replace("[3, 32, 32]", "[3, 16, 16]"))
    builtin = load_study(_study(tmp_path))
    u = _study(tmp_path, name="u.yaml")
    u.write_text(u.read_text().replace("workload: hep_cnn", f"workload: {user}"))
    mine = load_study(u)
    pb, pu = points(builtin)[0], points(mine)[0]
    db = point_data_dir(builtin, tmp_path, pb, wl_mod.load(pb.workload, scale=builtin.scale, samples=pb.samples))
    du = point_data_dir(mine, tmp_path, pu, wl_mod.load(pu.workload, scale=mine.scale, samples=pu.samples))
    assert db.name == "hep_cnn-tiny-F32-seed0"
    assert du != db and du.name.startswith("hep_cnn-user-") and du.name.endswith("-tiny-F32-seed0")
