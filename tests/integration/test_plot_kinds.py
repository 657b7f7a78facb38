"""`dlbench plot` draws every kind on what users plot: a measured 1-rank run of every strategy, a simulated
study, imported Darshan and TimeLogger folders, and all of them at once; bar labels never overlap however
many runs a figure holds (regressions, issue 15: `--kind timeline|all` KeyError 'plan' on every measured
run, `--kind scaling` ValueError on imported runs, overlapping bar labels)."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from dlbench.cli import main
from dlbench.strategies import names as strategy_names
from tests.unit.test_results_report import _shared_dir

pytest.importorskip("matplotlib")

STRATEGIES = sorted(strategy_names())
KINDS = ("bars", "timeline", "sizes", "scaling", "all")


def _cli(args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One tiny 1-rank run of every strategy under one results root: {strategy: run folder}."""
    base = tmp_path_factory.mktemp("measured")
    r = _cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", base / "cf",
              "--no-progress"])
    assert r.exit_code == 0, r.output
    out = {}
    for s in STRATEGIES:
        r = _cli(["run", "--workload", "cosmoflow", "--scale", "tiny", "--strategy", s,
                  "--data-dir", base / "cf", "--epochs", 2, "--compute-time", "0.001", "--out", base / "res",
                  "--ceiling-steps", 0])
        assert r.exit_code == 0, (s, r.output)
        out[s] = Path([ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1].split(": ", 1)[1])
    return out


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    st = d / "study.yaml"
    st.write_text("name: simplot\nworkload: cosmoflow\nscale: tiny\nsystem: laptop-pfs\nepochs: 2\n"
                  "compute_time_s: 0.01\nout: res\nruns:\n  - {strategy: naive}\n  - {strategy: staging}\n"
                  "  - {strategy: pls, options: {exchange_fraction: 0.3}}\n"
                  "simulate:\n  nodes: [1, 2, 4]\n  ranks_per_node: 1\n")
    r = _cli(["study", st, "--simulate", "--out", d / "res"])
    assert r.exit_code == 0, r.output
    return d / "res"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """{"darshan": folder, "timelogger": folder} (each skipped when its input is not installed)."""
    d = tmp_path_factory.mktemp("imp")
    out = {}
    try:
        from darshan.log_utils import get_log_path

        log = get_log_path("ior_hdf5_example.darshan")
    except Exception:  # noqa: BLE001 - PyDarshan missing or without its example logs
        log = None
    if log:
        r = _cli(["import", "darshan", log, "--out", d / "darshan"])
        assert r.exit_code == 0, r.output
        out["darshan"] = d / "darshan"
    sh = _shared_dir()
    if sh is not None:
        src = sh / "fixtures" / "timelogger" / "timelogger_hep_cnn_64nodes.csv.gz"
        r = _cli(["import", "timelogger", src, "--name", "hep_cnn", "--out", d / "tl"])
        assert r.exit_code == 0, r.output
        out["timelogger"] = d / "tl"
    return out


def _figs(d: Path, prefix: str) -> list[Path]:
    return sorted(p for p in d.glob(f"{prefix}*.png"))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_kind_on_a_measured_run_of_every_strategy(measured, tmp_path, strategy):
    """--kind all draws bars, timeline and sizes (and notes that one run has no scaling); --kind scaling
    asked for alone draws its one point."""
    rd = measured[strategy]
    for kind in ("all", "scaling"):
        r = _cli(["plot", rd, "--kind", kind, "-o", tmp_path / kind])
        assert r.exit_code == 0, (kind, r.output)
    for prefix in ("timeline-", "bars", "sizes-"):
        assert _figs(tmp_path / "all", prefix), prefix
    assert _figs(tmp_path / "scaling", "scaling-")


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_on_a_simulated_study(simulated, tmp_path, kind):
    r = _cli(["plot", simulated, "--kind", kind, "-o", tmp_path])
    assert r.exit_code == 0, r.output
    if kind in ("scaling", "all"):
        assert _figs(tmp_path, "scaling-")
    if kind == "timeline":
        assert "no intervals.npz" in r.output and not _figs(tmp_path, "timeline-")


@pytest.mark.parametrize("source", ["darshan", "timelogger", "both"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_on_imported_folders(imported, tmp_path, source, kind):
    dirs = list(imported.values()) if source == "both" else [imported.get(source)]
    if None in dirs or not dirs or (source == "both" and len(dirs) < 2):
        pytest.skip(f"{source}: input not installed")
    r = _cli(["plot", *dirs, "--kind", kind, "-o", tmp_path])
    if kind == "scaling" and source == "darshan":
        # a Darshan log has no epochs, no share, no rate: one line, not a matplotlib traceback
        assert r.exit_code == 3 and "no scaling plot" in r.output and "Traceback" not in r.output
        return
    assert r.exit_code == 0, r.output
    if kind == "scaling":
        assert _figs(tmp_path, "scaling-")
        if source == "both":
            assert "left out of the scaling figure" in r.output
    if kind in ("bars", "all"):
        assert _figs(tmp_path, "bars")


def _label_boxes(fig):
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    return [t.get_window_extent(r) for t in ax.get_xticklabels() if t.get_text()]


def _overlap(a, b) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def _fake_run(i: int, strategy: str, sim: bool) -> dict:
    return {"run_dir": f"/x/{i}", "simulated": sim, "config": {"options": {"num_workers": i % 5,
                                                                          "exchange_fraction": i / 10}},
            "summary": {"strategy": strategy, "workload": f"workload-number-{i % 3}", "ranks": 2 ** (i % 6),
                        "epoch_time_s": [1.0 + i], "total_time_s": 1.0 + i, "exposed_io_share": 0.1,
                        "phase_time_s": {"compute": 0.5 + i, "stall": 0.2, "read": 0.3}}}


@pytest.mark.parametrize("n", [3, 8, 12, 24])
def test_bar_labels_never_overlap(n):
    import matplotlib.pyplot as plt

    from dlbench.plots import bars_figure, labels

    runs = [_fake_run(i, STRATEGIES[i % len(STRATEGIES)], i % 2 == 1) for i in range(n)]
    assert max(len(x) for x in labels(runs)) > 25  # long labels: what used to collide at 20°
    fig = bars_figure(runs)
    try:
        boxes = _label_boxes(fig)
        assert len(boxes) == n
        bad = [(i, j) for i in range(n) for j in range(i + 1, n) if _overlap(boxes[i], boxes[j])]
        assert not bad, bad
    finally:
        plt.close(fig)


def test_bar_labels_of_real_runs_do_not_overlap(measured, simulated):
    import matplotlib.pyplot as plt

    from dlbench.plots import bars_figure, load_runs, order_runs

    runs, _ = load_runs([*measured.values(), simulated])
    runs = order_runs(runs)
    fig = bars_figure(runs)
    try:
        boxes = _label_boxes(fig)
        assert len(boxes) == len(runs)
        assert not any(_overlap(boxes[i], boxes[j]) for i in range(len(boxes)) for j in range(i + 1, len(boxes)))
    finally:
        plt.close(fig)
