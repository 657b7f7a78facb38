import json
from pathlib import Path


def _runs(root: Path):
    return sorted(root.glob("*/*/*/run.json"))


def test_simulate_flags_write_runs(cli, tmp_path):
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "2",
             "--strategies", "lowerbound,naive,prefetch", "--epochs", "2", "--out", tmp_path, "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [x["strategy"] for x in rows] == ["lowerbound", "naive", "prefetch"]
    runs = _runs(tmp_path)
    assert len(runs) == 3
    run = json.loads(runs[0].read_text())
    assert run["schema"] == "dlbench.run/2" and run["summary"]["simulated"] is True
    assert {"pfs_s", "peer_s", "local_s", "compute_s", "stall_s"} <= set(run["summary"]["modelled_breakdown"])


def test_simulate_study(cli, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("""
name: small
system: hdmlp-thesis
workload: {name: w, samples: 2000, global_batch: 40, size: {kind: normal, mean_bytes: 1.0e6, std_bytes: 1.0e5}}
nodes: 4
epochs: 2
strategies: [lowerbound, naive]
published_runtime_s: {lowerbound: 50}
""")
    r = cli(["simulate", "--study", study, "--out", tmp_path / "out"])
    assert r.exit_code == 0, r.output
    assert "published_s" in r.output and "Naive" in r.output


def test_simulate_errors(cli, tmp_path):
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "cosmoflow", "--nodes", "2",
             "--strategies", "naiv", "--out", tmp_path])
    assert r.exit_code == 2 and "did you mean 'naive'" in r.output
    r = cli(["simulate", "--workload", "cosmoflow", "--nodes", "2", "--out", tmp_path])
    assert r.exit_code == 2 and "--system" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsystem: hdmlp-thesis\nworkload: {}\nnodes: 1\nstrategies: [naive]\nepoks: 3\n")
    r = cli(["simulate", "--study", bad, "--out", tmp_path])
    assert r.exit_code == 2 and "epochs" in r.output


def test_simulate_rules_and_seed_flags(cli, tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("""
name: small
system: hdmlp-thesis
rules: thesis
workload: {name: w, samples: 800, global_batch: 40, size: {kind: normal, mean_bytes: 1.0e6, std_bytes: 1.0e5}}
nodes: 4
epochs: 2
runs: [{label: N, strategy: naive}, {label: P, strategy: prefetch, options: {num_workers: 2}}]
""")
    out = {}
    for args in ([], ["--rules", "default"], ["--seed", "3"]):
        r = cli(["simulate", "--study", study, "--out", tmp_path / "out", "--format", "json", *args])
        assert r.exit_code == 0, r.output
        out[tuple(args)] = {x["name"]: x["total_time_s"] for x in json.loads(r.output)}
    assert out[()] != out[("--rules", "default")] and out[()] != out[("--seed", "3")]
    r = cli(["simulate", "--study", study, "--out", tmp_path / "out", "--rules", "thesys"])
    assert r.exit_code == 2 and "thesys" in r.output and "default, thesis" in r.output
    assert "Traceback" not in r.output


def test_thesis_rules_cost_pls_exchange(cli, tmp_path):
    """pls's exchange is costed under the thesis rules too (it was refused; tests/unit/test_simulate_pls_thesis.py
    checks the figures): the CLI runs it and a larger Q costs more."""
    import json

    epoch = {}
    for q in ("0", "1"):
        r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "2",
                 "--strategies", "pls", "--pls-q", q, "--rules", "thesis", "--out", tmp_path / q])
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
        (run,) = (tmp_path / q).rglob("run.json")
        s = json.loads(run.read_text())["summary"]
        assert s["options"]["exchange_fraction"] == float(q)
        epoch[q] = sum(s["epoch_time_s"])
        assert s["bytes_by_tier"].get("peer", 0) > 0 if q == "1" else not s["bytes_by_tier"].get("peer", 0)
    assert epoch["1"] > epoch["0"]


def test_simulate_accelerator_uses_measured_step_time_like_run(cli, tmp_path):
    """Regression: from_workload used Workload.step_time (published figures only) while run uses
    choose_step_time (published, else measured): `simulate --accelerator h100 --workload deepcam` failed where
    `run` works. The modelled step time is the measured h100 figure scaled to the local batch."""
    from dlbench.simulate import from_workload
    from dlbench.workload import load

    wl = load("deepcam", scale="tiny")
    ch = wl.choose_step_time("h100")
    assert ch.kind == "measured"
    assert from_workload(wl, accelerator="h100", local_batch=4).step_time_s == ch.scaled(4)
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "deepcam", "--scale", "tiny", "--nodes", "2",
             "--accelerator", "h100", "--strategies", "naive", "--out", tmp_path, "--format", "json"])
    assert r.exit_code == 0, r.output
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "deepcam", "--scale", "tiny", "--nodes", "2",
             "--accelerator", "v100", "--out", tmp_path])
    assert r.exit_code == 2 and "--accelerator=v100" in r.output and "Traceback" not in r.output


STUDY_RULES_THESIS = """
name: small
system: hdmlp-thesis
rules: thesis
workload: {name: w, samples: 800, global_batch: 40, size: {kind: normal, mean_bytes: 1.0e6, std_bytes: 1.0e5}}
nodes: 4
epochs: 2
strategies: [lowerbound, naive]
"""


def test_simulate_study_conflicting_flags_are_an_error(cli, tmp_path):
    """Regression: with --study, --nodes/--epochs/--system/... were silently replaced by the study's values."""
    study = tmp_path / "s.yaml"
    study.write_text(STUDY_RULES_THESIS)
    r = cli(["simulate", "--study", study, "--nodes", "64", "--epochs", "3", "--out", tmp_path / "out"])
    assert r.exit_code == 2 and "--nodes, --epochs cannot be combined with --study" in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()
    for flag, val in (("--system", "laptop-pfs"), ("--workload", "cosmoflow"), ("--strategies", "naive"),
                      ("--ranks-per-node", "2"), ("--accelerator", "h100"), ("--compute-time", "0.1"),
                      ("--batch-size", "4"), ("-b", "4"), ("--local-batch", "4"), ("--pls-q", "0.3")):
        r = cli(["simulate", "--study", study, flag, val, "--out", tmp_path / "out"])
        named = "--batch-size" if flag == "-b" else flag
        assert r.exit_code == 2 and f"{named} cannot be combined with --study" in r.output, (flag, r.output)
    # flags that work with a study stay allowed
    r = cli(["simulate", "--study", study, "--seed", "3", "--rules", "default", "--option", "naive.drop_last=true",
             "--format", "json", "--out", tmp_path / "out"])
    assert r.exit_code == 0, r.output


def test_simulate_compute_time_nan_inf_is_one_line(cli, tmp_path):
    """Regression: --compute-time nan / inf passed the `< 0` check; now checked as `dlbench run` does."""
    for bad in ("nan", "inf", "-1"):
        r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "cosmoflow", "--scale", "tiny", "--nodes",
                 "2", "--compute-time", bad, "--out", tmp_path / "out"])
        assert r.exit_code == 2 and f"--compute-time={bad}" in r.output and "finite" in r.output, r.output
        assert "Traceback" not in r.output and not (tmp_path / "out").exists()


def test_simulate_config_records_model_rules_not_write_overlap_true(cli, tmp_path):
    """Regression: run.json's config recorded write_overlap True under rules thesis (write: series)."""
    study = tmp_path / "s.yaml"
    study.write_text(STUDY_RULES_THESIS)
    r = cli(["simulate", "--study", study, "--out", tmp_path / "thesis"])
    assert r.exit_code == 0, r.output
    for f in _runs(tmp_path / "thesis"):
        cfg = json.loads(f.read_text())["config"]
        assert cfg["write_overlap"] is False and cfg["rules"]["write"] == "series"
    r = cli(["simulate", "--study", study, "--rules", "default", "--out", tmp_path / "default"])
    assert r.exit_code == 0, r.output
    cfg = json.loads(_runs(tmp_path / "default")[0].read_text())["config"]
    assert cfg["write_overlap"] is True and cfg["rules"]["write"] == "overlap"


def test_simulate_batch_size_is_run_s_flag_and_local_batch_a_deprecated_alias(tmp_path):
    """One batch option: simulate takes --batch-size/-b as run and calibrate do; the old --local-batch gives
    the same rows with a one-line note on stderr, is not in --help, and with a different --batch-size is an
    error."""
    from click.testing import CliRunner

    from dlbench.cli import main

    def sim(*flags, out):
        return CliRunner().invoke(main, ["simulate", "--system", "hdmlp-thesis", "--workload", "cosmoflow", "--scale",
                                         "tiny", "--nodes", "2", "--strategies", "naive", "--format", "json",
                                         "--out", str(tmp_path / out), *flags], catch_exceptions=False)

    new, short, old = sim("--batch-size", "2", out="a"), sim("-b", "2", out="b"), sim("--local-batch", "2", out="c")
    assert new.exit_code == short.exit_code == old.exit_code == 0, (new.output, old.output)
    assert "deprecated" not in new.stderr
    assert old.stderr.strip() == "dlbench: note: --local-batch is deprecated; use --batch-size"
    rows = [{k: v for k, v in json.loads(r.stdout)[0].items() if k != "run_dir"} for r in (new, short, old)]
    default = {k: v for k, v in json.loads(sim(out="d").stdout)[0].items() if k != "run_dir"}
    assert rows[0] == rows[1] == rows[2] and rows[0]["epoch_time_s"] != default["epoch_time_s"]
    bad = sim("--local-batch", "2", "--batch-size", "3", out="e")
    assert bad.exit_code == 2 and "--local-batch=2 and --batch-size=3: the same option; give --batch-size" in bad.output
    helptext = CliRunner().invoke(main, ["simulate", "--help"]).output
    assert "--batch-size" in helptext and "--local-batch" not in helptext
