"""dlbench plot: figures from result folders (bars, timeline, sizes, scaling) and the numbers behind them."""

import importlib.util
import json
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from dlbench import plots, report
from dlbench.errors import ConfigError, DataError
from dlbench.metrics import summarize
from dlbench.results import find_run_dirs, new_run_dir, read_run, write_run
from dlbench.timeline import PHASE_ID, Timeline

needs_mpl = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                               reason="matplotlib not installed (pip install 'dlbench[plot]')")


def _timelines(ranks=2, epochs=2, prefetch_thread=False):
    """Per rank: each step a stall (containing a read on the trainer, or a read on thread 1), then compute."""
    out = []
    for r in range(ranks):
        tl = Timeline(rank=r)
        th = Timeline(rank=r, thread=1) if prefetch_thread else None
        t = 1_000_000 * r
        for e in range(epochs):
            es = t
            for s in range(3):
                tl.add(PHASE_ID["stall"], t, t + 100_000, e, s)
                (th if th is not None else tl).add(PHASE_ID["read"], t + 10_000, t + 90_000, e, s, 4096, 0)
                tl.add(PHASE_ID["compute"], t + 100_000, t + 1_100_000, e, s)
                t += 1_100_000
            tl.mark_epoch(e, es, t, samples=6)
        out.append(Timeline.merge([tl, th]) if th is not None else tl.arrays())
    return out


def _run(root, strategy="naive", ranks=2, epochs=2, options=None, io_counters=None, prefetch_thread=False):
    ivs = _timelines(ranks, epochs, prefetch_thread)
    s = summarize(ivs, workload="tiny", strategy=strategy, ranks=ranks, nodes=ranks, epochs=epochs)
    if io_counters is not None:
        s["io_counters"] = io_counters
    d = new_run_dir(root, "tiny", strategy)
    write_run(d, config={"workload": "tiny", "strategy": strategy, "options": options or {}}, summary=s,
              intervals=ivs)
    return d


def _sim(root, strategy, nodes, epoch_time_s, share, sps, options=None):
    s = {"workload": "tiny", "strategy": strategy, "ranks": nodes, "nodes": nodes, "epochs": 1, "simulated": True,
         "total_time_s": epoch_time_s + 0.5, "epoch_time_s": [epoch_time_s], "exposed_io_share": share,
         "samples_per_s": sps, "system": "laptop-pfs", "modelled_breakdown": {"prologue_s": 0.5},
         "phase_time_s": {"compute": epoch_time_s * (1 - share), "stall": epoch_time_s * share, "read": 0.2,
                          "stage": 0.5}}
    d = new_run_dir(root, "tiny", strategy)
    cfg = {"command": "simulate", "strategy": strategy, "nodes": nodes}
    # options=None: a folder in the old layout (pls's Q in config["pls_q"]); else today's config["options"]
    cfg.update({"pls_q": 0.1} if options is None else {"options": options, "label": strategy})
    write_run(d, config=cfg, summary=s, simulated=True)
    return d


def _png(p):
    return p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_mpl
def test_bars_timeline_png_and_svg(tmp_path):
    _run(tmp_path / "res", "naive")
    _run(tmp_path / "res", "prefetch", prefetch_thread=True)
    notes = []
    files = plots.make_plots([tmp_path / "res"], tmp_path / "fig", echo=notes.append)
    names = sorted(f.name for f in files)
    assert "bars.png" in names and "bars.svg" in names
    assert "timeline-naive-epoch1.png" in names and "timeline-prefetch-epoch1.svg" in names
    for f in files:
        assert f.stat().st_size > 0
        if f.suffix == ".png":
            assert _png(f)
        else:
            ET.parse(f)  # well-formed SVG
    # no io_counters, one ranks value: said in one line each, no sizes or scaling figure
    assert any("no io_counters" in n for n in notes) and any("same ranks" in n for n in notes)
    assert not list((tmp_path / "fig").glob(".*tmp*"))


def test_bar_segments_add_up_to_the_run_time(tmp_path):
    r = read_run(_run(tmp_path, "naive"))
    sg = report.bar_segments(r)
    s = r["summary"]
    assert sg["trainer"]["stall"] == pytest.approx(s["phase_time_s"]["stall"])
    assert sg["prologue"] + sum(sg["trainer"].values()) + sg["other"] == pytest.approx(sg["total"])
    assert sg["total"] == pytest.approx(s["total_time_s"])
    # the loader bar holds the read work; it is not stacked on the trainer's time
    assert sg["loader"]["read"] == pytest.approx(s["phase_time_s"]["read"]) and sg["loader"]["read"] > 0
    assert sg["exposed_io_share"] == pytest.approx(0.1 / 1.1, rel=1e-3)


def test_bar_segments_simulated_prologue_not_counted_twice(tmp_path):
    r = read_run(_sim(tmp_path, "staging", 2, 2.0, 0.25, 100.0))
    sg = report.bar_segments(r)
    assert sg["prologue"] == 0.5 and sg["loader"]["stage"] == 0.0
    assert sg["total"] == pytest.approx(2.5)


def test_timeline_lanes_one_per_rank_and_thread(tmp_path):
    ivs = _timelines(ranks=2, epochs=2, prefetch_thread=True)
    tl = plots.timeline_lanes(ivs, 1)
    assert tl["lanes"] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # rank 0's epoch 1 starts at 3.3 ms; rank 1's starts 1 ms later (wall offsets equal here)
    x0, x1 = tl["epoch_spans"][0]
    assert x0 == pytest.approx(0.0) and x1 == pytest.approx(3.3e-3)
    assert tl["epoch_spans"][1][0] == pytest.approx(1e-3, abs=1e-5)
    reads = tl["bars"][(1, "read")]
    assert len(reads) == 3 and reads[0][0] == pytest.approx(1e-5) and reads[0][1] == pytest.approx(8e-5)
    assert (0, "read") not in tl["bars"]
    with pytest.raises(DataError, match="--epoch 5"):
        plots.timeline_lanes(ivs, 5)


def test_timeline_many_ranks_keeps_rank0_and_the_slowest():
    ivs = _timelines(ranks=40, epochs=1)
    slow = ivs[23]
    slow["epoch_end_ns"] = slow["epoch_end_ns"] + 50_000_000
    tl = plots.timeline_lanes(ivs, 0, max_ranks=8)
    ranks = [r for r, _ in tl["lanes"]]
    assert tl["ranks_total"] == 40 and tl["ranks_shown"] == len(ranks) <= 9
    assert 0 in ranks and 23 in ranks and 39 in ranks and ranks == sorted(ranks)


@needs_mpl
def test_timeline_bad_epoch_is_one_line(tmp_path, cli):
    d = _run(tmp_path / "res", "naive")
    res = cli(["plot", d, "-o", tmp_path / "fig", "--kind", "timeline", "--epoch", "4"])
    assert res.exit_code == 2
    assert "--epoch=4" in res.output and "epochs 0..1" in res.output and "Traceback" not in res.output


SIZES = {f"POSIX_SIZE_READ_{b}": 0 for b in plots.SIZE_BUCKETS}


@needs_mpl
def test_sizes_histogram_from_io_counters(tmp_path):
    ioc = {"by_class": {"dataset": {**SIZES, "POSIX_SIZE_READ_100K_1M": 48, "POSIX_SIZE_READ_1K_10K": 2,
                                    "POSIX_READS": 50},
                        "manifest": {**SIZES, "POSIX_SIZE_READ_1K_10K": 1}}}
    d = _run(tmp_path / "res", "naive", io_counters=ioc)
    r = read_run(d)
    h = plots.size_histogram(r)
    assert h["dataset"][plots.SIZE_BUCKETS.index("100K_1M")] == 48
    assert h["dataset"][2] == 2 and h["manifest"][2] == 1 and sum(h["manifest"]) == 1
    files = plots.make_plots([d], tmp_path / "fig", kinds=["sizes"])
    assert [f.name for f in files] == ["sizes-naive.png", "sizes-naive.svg"]
    svg = (tmp_path / "fig" / "sizes-naive.svg").read_text()
    assert "100K–1M" in svg and "dataset (50 reads)" in svg


@needs_mpl
def test_sizes_without_counters_is_one_note(tmp_path, cli):
    d = _run(tmp_path / "res", "naive")
    assert plots.size_histogram(read_run(d)) is None
    res = cli(["plot", d, "-o", tmp_path / "fig", "--kind", "sizes"])
    assert res.exit_code == 0
    assert res.output.count("no io_counters") == 1
    assert not (tmp_path / "fig").exists() or not list((tmp_path / "fig").iterdir())


@needs_mpl
def test_scaling_points_measured_and_simulated(tmp_path):
    root = tmp_path / "res"
    _run(root, "naive", ranks=1)
    _run(root, "naive", ranks=2)
    for n, t in ((1, 4.0), (2, 2.0), (1024, 0.01)):
        _sim(root, "naive", n, t, 0.5, 100.0 * n)
    runs, _ = plots.load_runs([root])
    pts = plots.scaling_points(runs, x="ranks")
    assert set(pts) == {("naive", False), ("naive", True)}
    assert sorted(pts[("naive", True)]) == [1, 2, 1024]
    # the plotted figures are the summary's (whose rates leave the 0.5 s staging out, measured and simulated)
    assert pts[("naive", True)][1024]["samples_per_s"] == pytest.approx(102400.0)
    assert pts[("naive", True)][1024]["exposed_io_share"] == pytest.approx(0.5)
    assert pts[("naive", False)][2]["epoch_time_s"] == pytest.approx(3.3e-3)
    assert pts[("naive", False)][1]["exposed_io_share"] == pytest.approx(0.1 / 1.1, rel=1e-3)
    files = plots.make_plots([root], tmp_path / "fig", kinds=["scaling"], x="nodes")
    assert [f.name for f in files] == ["scaling-nodes.png", "scaling-nodes.svg"]
    svg = (tmp_path / "fig" / "scaling-nodes.svg").read_text()
    assert "simulated (hollow, dashed)" in svg and "measured (filled, solid)" in svg and "1,024" in svg


def test_scaling_averages_repeats(tmp_path):
    _sim(tmp_path, "naive", 4, 1.0, 0.2, 10.0)
    _sim(tmp_path, "naive", 4, 3.0, 0.4, 30.0)
    runs, _ = plots.load_runs([tmp_path])
    p = plots.scaling_points(runs)[("naive", True)][4]
    assert p["n"] == 2 and p["epoch_time_s"] == pytest.approx(2.0) and p["exposed_io_share"] == pytest.approx(0.3)
    assert p["samples_per_s"] == pytest.approx((10.0 + 30.0) / 2)


def test_simulated_figures_are_the_summarys(tmp_path):
    """Regression (issue 26): the scaling figure re-applied a staging correction to simulated summaries that
    already leave staging out (pls at 1,024 ranks drawn 183x too fast); a /2 summary is plotted as it is."""
    r = read_run(_sim(tmp_path, "pls", 8, 2.0, 0.25, 100.0))  # total 2.5 s = 0.5 s staging + 2 s epoch
    t, share, sps = plots.epoch_figures(r)
    assert t == 2.0 and share == pytest.approx(0.25) and sps == pytest.approx(100.0)
    m = read_run(_run(tmp_path, "naive"))
    assert plots.epoch_figures(m)[1:] == (m["summary"]["exposed_io_share"], m["summary"]["samples_per_s"])


def test_labels_distinguish_options_and_mark_simulated(tmp_path):
    _run(tmp_path, "pls", ranks=1, options={"exchange_fraction": 0.1, "drop_last": False})
    _run(tmp_path, "pls", ranks=1, options={"exchange_fraction": 0.3, "drop_last": False})
    _sim(tmp_path, "pls", 1, 1.0, 0.1, 10.0)
    runs = plots.order_runs(plots.load_runs([tmp_path])[0])
    assert plots.labels(runs) == ["pls Q=0.1", "pls Q=0.3", "pls Q=0.1 [sim]"]


def test_simulated_pls_q_series_not_merged(tmp_path):
    """Regression: _options read config["pls_q"], which simulated runs no longer store (they store "options"),
    so simulated pls Q=0.1 and Q=0.3 were both 'pls [sim]' and scaling_points averaged them into one curve."""
    for q, t in ((0.1, 1.0), (0.3, 3.0)):
        _sim(tmp_path, "pls", 4, t, 0.2, 10.0, options={"exchange_fraction": q})
    runs = plots.order_runs(plots.load_runs([tmp_path])[0])
    assert sorted(plots.labels(runs)) == ["pls Q=0.1 [sim]", "pls Q=0.3 [sim]"]
    pts = plots.scaling_points(runs)
    assert set(pts) == {("pls Q=0.1", True), ("pls Q=0.3", True)}
    assert pts[("pls Q=0.1", True)][4]["epoch_time_s"] == pytest.approx(1.0)
    assert pts[("pls Q=0.3", True)][4]["n"] == 1


def test_load_runs_skips_bad_run_json(tmp_path):
    """Regression: load_runs caught OSError/JSONDecodeError but read_run raises DataError, so one corrupt
    run.json under a results root aborted `dlbench plot` instead of being skipped with a note."""
    ok = _run(tmp_path, "naive")
    bad = new_run_dir(tmp_path, "tiny", "prefetch")
    (bad / "run.json").write_text('{"schema": "dlbench.run/1", "summ')
    runs, notes = plots.load_runs([tmp_path])
    assert [r["run_dir"] for r in runs] == [str(ok)]
    assert len(notes) == 1 and str(bad) in notes[0] and "skipped" in notes[0] and "not valid JSON" in notes[0]


def test_find_run_dirs_root_and_errors(tmp_path):
    a = _run(tmp_path / "res", "naive")
    b = _run(tmp_path / "res", "prefetch")
    assert find_run_dirs([tmp_path / "res", a]) == sorted([a, b])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no run.json"):
        find_run_dirs([tmp_path / "empty"])


@needs_mpl
def test_failed_runs_are_skipped_with_a_note(tmp_path):
    d = new_run_dir(tmp_path, "tiny", "naive")
    write_run(d, config={}, summary={}, error="incomplete: the run did not finish")
    with pytest.raises(DataError, match="no completed run"):
        plots.make_plots([d], tmp_path / "fig")
    ok = _run(tmp_path, "naive")
    notes = []
    plots.make_plots([tmp_path], tmp_path / "fig", kinds=["bars"], echo=notes.append)
    assert any("failed or incomplete" in n for n in notes) and (tmp_path / "fig" / "bars.png").is_file()
    assert ok.exists()


def test_without_matplotlib_one_line(tmp_path, cli, monkeypatch):
    d = _run(tmp_path / "res", "naive")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"pip install 'dlbench\[plot\]'"):
        plots.make_plots([d], tmp_path / "fig")
    res = cli(["plot", d, "-o", tmp_path / "fig2"])
    assert res.exit_code == 2 and res.output.strip().count("\n") == 0
    assert "matplotlib" in res.output and not (tmp_path / "fig2").exists()


@needs_mpl
def test_cli_plot_writes_and_lists_files(tmp_path, cli):
    _run(tmp_path / "res", "naive", ranks=1)
    _run(tmp_path / "res", "naive", ranks=2)
    res = cli(["plot", tmp_path / "res", "-o", tmp_path / "fig"])
    assert res.exit_code == 0, res.output
    listed = [line for line in res.output.splitlines() if line.endswith((".png", ".svg"))]
    assert {p.rsplit("/", 1)[1] for p in listed} >= {"bars.png", "scaling-ranks.png", "timeline-naive-1-rank-epoch1.png",
                                                     "timeline-naive-2-ranks-epoch1.svg"}
    json.dumps(listed)
    assert np.all([(tmp_path / "fig" / p.rsplit("/", 1)[1]).is_file() for p in listed])
