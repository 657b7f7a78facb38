"""Issue 26, headlines that do not mislead: the I/O-bound share, plotted figures = the summary's, the modelled
shared tier named, measured-vs-simulated caveats, bad run.json skipped, the loop-overhead row."""

import json
import shutil
from pathlib import Path

import pytest
from runs_helper import run_dir_of

from dlbench import metrics, plots, report
from dlbench.report import compare_rows, render_summary
from dlbench.results import read_run

ALL = ("naive", "prefetch", "staging", "local", "pls", "lbann", "clairvoyant", "locality", "deepio",
       "surrogatetrain")


def _run(cli, data, out, strategy="naive", *extra):
    r = cli(["run", "--workload", "cosmoflow", "--strategy", strategy, "--data-dir", data, "--epochs", 1,
             "--compute-time", "0.001", "--out", out, "--no-progress", *extra])
    assert r.exit_code == 0, r.output
    return run_dir_of(r.output)


def _dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def test_io_bound_share_is_the_headline_at_2048_nodes(tmp_path, cli):
    """Regression: at 2,048 nodes prefetch printed exposed I/O 15.3 % at AU 0.1 % (84.6 % of the epoch at the
    barrier, waiting for data-starved peers). The I/O-bound share counts that wait: 1 - AU - non-I/O overhead."""
    out = tmp_path / "sim"
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "imagenet", "--nodes", 2048, "--strategies",
             "naive,prefetch", "--out", out])
    assert r.exit_code == 0, r.output
    head = [ln for ln in r.output.splitlines() if ln.startswith("workload")][0]
    assert head.index("I/O-bound") < head.index("own stall") < head.index("AU")
    for d in _dirs(out):
        run = read_run(d)
        s = run["summary"]
        ps = s["phase_share"]
        assert s["io_bound_share"] == pytest.approx(ps["stall"] + ps["barrier"] + ps["exchange"])
        assert s["io_bound_share"] == pytest.approx(1 - s["au"], abs=1e-9)   # the model has no other phase
        assert s["au"] < 0.01 and s["io_bound_share"] > 0.99
        if s["strategy"] == "prefetch":
            assert s["exposed_io_share"] < 0.2    # the own stall alone: the figure that misled
            line = [ln for ln in r.output.splitlines() if ln.startswith("imagenet  prefetch")][0]
            assert "99.9%" in line.split()[5]     # the I/O-bound column, beside ranks and epoch time
        text = render_summary(run)
        rows = [ln for ln in text.splitlines() if "share" in ln]
        assert rows[0].startswith("I/O-bound share (1 - AU - non-I/O overhead)") and "99.9%" in rows[0]
    assert "io_bound_share" in metrics.GLOSSARY


def test_io_bound_share_measured_is_the_same_sum(tiny, tmp_path, cli):
    s = read_run(_run(cli, tiny, tmp_path / "res"))["summary"]
    ps = s["phase_share"]
    assert s["io_bound_share"] == pytest.approx(ps["stall"] + ps["barrier"] + ps["exchange"])
    assert s["io_bound_share"] + s["au"] <= 1 + 1e-9
    assert s["definitions"]["io_bound_share"] == metrics.GLOSSARY["io_bound_share"]


def test_plotted_figures_equal_the_summary_for_every_strategy(tiny, tmp_path, cli):
    """Regression: `plot --kind scaling` re-applied a staging correction to simulated summaries (pls at 1,024
    ranks drawn at 102,233,646 samples/s, 557,022 in compare). Every point is the summary's own figures."""
    root = tmp_path / "res"
    for s in ALL:
        _run(cli, tiny, root, s)
    for nodes in (2, 4):
        r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes",
                 nodes, "--strategies", ",".join(ALL), "--out", root])
        assert r.exit_code == 0, r.output
    runs, notes = plots.load_runs([root])
    assert not notes and len(runs) == 3 * len(ALL)
    pts = plots.scaling_points(runs)
    labs = [lab.removesuffix(" [sim]") for lab in plots.labels(runs, ranks=False)]
    staged = 0
    for r, lab in zip(runs, labs):
        s = r["summary"]
        p = pts[(lab, report.is_simulated(r))][s["ranks"]]
        assert p["n"] == 1, lab
        assert p["samples_per_s"] == pytest.approx(s["samples_per_s"], rel=1e-12), (lab, s["ranks"])
        assert p["exposed_io_share"] == pytest.approx(s["exposed_io_share"], rel=1e-12, abs=1e-15), lab
        assert p["epoch_time_s"] == pytest.approx(sum(s["epoch_time_s"]) / len(s["epoch_time_s"]))
        staged += bool(report.is_simulated(r) and s["prologue_time_s"] > 0)
    assert staged >= 4   # simulated strategies with staging before epoch 0: where the old correction struck
    files = plots.make_plots([root], tmp_path / "fig", kinds=["scaling"])
    assert [f.name for f in files] == ["scaling-ranks.png", "scaling-ranks.svg"]


def test_modelled_shared_tier_is_named(tiny, tmp_path, cli):
    """Regression: a run throttled by a system profile and one on the real storage looked identical."""
    thr = _run(cli, tiny, tmp_path / "a", "naive", "--system", "laptop-pfs")
    real = _run(cli, tiny, tmp_path / "b", "naive")
    assert "modelled shared tier: laptop-pfs" in render_summary(read_run(thr)).splitlines()[0]
    assert "modelled shared tier" not in render_summary(read_run(real))
    r = cli(["compare", thr, real])
    assert r.exit_code == 0, r.output
    head, _, a, b = r.output.splitlines()[:4]
    assert head.rstrip().endswith("shared tier")
    assert a.rstrip().endswith("modelled shared tier: laptop-pfs") and b.rstrip().endswith("real storage")
    # the S3 column (GETs/sample, P50/P99 ms) just before it: "-" where the shared tier is not S3
    import re
    assert re.split(r"\s{2,}", head.strip())[-2] == "S3 GETs/sample P50/P99 ms"
    assert [re.split(r"\s{2,}", x.strip())[-2] for x in (a, b)] == ["-", "-"]
    rows = compare_rows([thr, real])
    assert [x["shared_tier"] for x in rows] == ["modelled shared tier: laptop-pfs", "real storage"]


def test_measured_and_simulated_point_has_a_caveat_and_no_provenance_noise(tiny, tmp_path, cli):
    root = tmp_path / "res"
    _run(cli, tiny, root, "naive")
    _run(cli, tiny, root, "naive")
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", 1,
             "--strategies", "naive", "--out", root])
    assert r.exit_code == 0, r.output
    r = cli(["compare", root])
    assert r.exit_code == 0, r.output
    assert "cosmoflow / naive at 1 ranks has measured and simulated rows" in r.output
    assert "vs None" not in r.output and "differ in provenance workload_sha256" not in r.output


def _bad_runs(root: Path, good: Path) -> dict:
    bad = {}
    for name, text in (("corrupt", "{\"schema\": \"dlbench.run/2\", \"summ"),
                       ("foreign", json.dumps({"schema": "someone.else/1", "x": 1})),
                       ("newer", None),
                       ("deep", "[" * 100_000 + "]" * 100_000)):
        d = root / "cosmoflow" / "naive" / name
        shutil.copytree(good, d)
        if text is None:
            doc = json.loads((good / "run.json").read_text())
            doc["schema"] = "dlbench.run/99"
            text = json.dumps(doc)
        (d / "run.json").write_text(text)
        bad[name] = d
    return bad


def test_one_bad_run_json_does_not_stop_compare_or_plot(tiny, tmp_path, cli):
    """Regression: one damaged, foreign or newer-schema run.json stopped compare/plot of a whole root."""
    root = tmp_path / "res"
    good = _run(cli, tiny, root, "naive")
    bad = _bad_runs(root, good)
    r = cli(["compare", root])
    assert r.exit_code == 0, r.output
    table = [ln for ln in r.output.splitlines() if ln.startswith("cosmoflow")]
    assert len(table) == 1
    warn = [ln for ln in r.output.splitlines() if ln.startswith("warning: ")]
    for name, d in bad.items():
        assert sum(str(d) in ln for ln in warn) == 1, (name, r.output)
    assert "nested too deep" in r.output and "dlbench.run/99" in r.output
    r = cli(["plot", root, "--kind", "bars", "-o", tmp_path / "fig"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "fig" / "bars.png").is_file()
    assert all(str(d) in r.output for d in bad.values())


@pytest.mark.parametrize("command", ["report", "compare", "plot"])
def test_deeply_nested_run_json_is_one_line(tmp_path, cli, command):
    """Regression: a run.json nested 100,000 deep was a RecursionError traceback."""
    d = tmp_path / "run"
    d.mkdir()
    (d / "run.json").write_text("{\"a\": " * 100_000 + "1" + "}" * 100_000)
    r = cli([command, d] + (["-o", tmp_path / "fig"] if command == "plot" else []))
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "nested too deep" in lines[0] and "Traceback" not in r.output, r.output
    assert not (tmp_path / "fig").exists()


def test_phase_table_has_the_loop_overhead_row(tiny, tmp_path, cli):
    """Regression: the bar chart showed 'other (loop overhead)', the text phase table did not."""
    run = read_run(_run(cli, tiny, tmp_path / "res"))
    seg = report.bar_segments(run)
    row = [ln for ln in render_summary(run).splitlines() if ln.startswith("other (loop overhead)")]
    assert len(row) == 1
    assert float(row[0].split()[3]) == pytest.approx(seg["other"], abs=5e-4)


def test_study_table_has_the_io_bound_column(tmp_path, cli):
    """The study table (labelled rows: simulate --study) shows the same I/O-bound share as the summary."""
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nsystem: hdmlp-thesis\nworkload: {builtin: imagenet, scale: full}\nnodes: 256\n"
                     "epochs: 1\nruns:\n  - {label: naive, strategy: naive}\n"
                     "  - {label: prefetch 2 threads, strategy: prefetch, options: {num_workers: 2}}\n")
    r = cli(["simulate", "--study", study, "--out", tmp_path / "out"])
    assert r.exit_code == 0, r.output
    head = [ln for ln in r.output.splitlines() if ln.startswith("name")][0].split()
    assert head[2:4] == ["io_bound_share", "exposed_io_share"]
    lines = r.output.splitlines()
    rows = lines[[i for i, ln in enumerate(lines) if ln.startswith("name")][0] + 2:][:2]   # the study's order
    by_label = {read_run(d)["summary"]["label"]: read_run(d)["summary"] for d in _dirs(tmp_path / "out")}
    for label, line in zip(("naive", "prefetch 2 threads"), rows):
        cells = line.split()[-12:]    # the 12 figure columns after the (possibly multi-word) name
        assert float(cells[1]) == pytest.approx(by_label[label]["io_bound_share"], abs=5e-4), (label, line)
        assert float(cells[1]) >= float(cells[2])
