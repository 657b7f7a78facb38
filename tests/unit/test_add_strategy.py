"""Adding a strategy is its planner + its strategy module + one registration (issue 16): ``seqstrategy`` (next to
this file) defines "sequential" without touching any other file; ``dlbench run --verify`` carries it out on the
planned executor and ``dlbench simulate`` costs the same plan, with the same bytes and requests."""

import importlib
import json

import numpy as np
import pytest

import dlbench.cli  # noqa: F401  (imported before the strategy is registered: run's flags follow the registry)


@pytest.fixture(autouse=True, scope="module")
def sequential():
    """The registration: the strategy module's ``@register``, run on import (after dlbench.cli's import);
    taken out of the registry after this module's tests, so the suite's other tests see the built-ins only."""
    from dlbench import strategies

    yield importlib.import_module("seqstrategy.strategy").Sequential
    strategies._REGISTRY.pop("sequential")


def _run(cli, hep, out, *extra):
    r = cli(["run", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", hep, "-s", "sequential", "-e", "2", "--compute-time", "0.001", "--system",
             "laptop-pfs", "--verify", "--no-progress", "-o", out, *extra])
    assert r.exit_code == 0, r.output
    rep = cli(["report", next(out.rglob("run.json")).parent])   # report and compare read its folder
    assert rep.exit_code == 0 and "sequential" in rep.output, rep.output
    return json.loads(next(out.rglob("run.json")).read_text())


def test_the_new_strategy_is_listed_with_its_options(cli):
    from dlbench import strategies
    from dlbench.simulate import display_name, strategy_names

    assert "sequential" in strategies.names() and "sequential" in strategy_names()
    assert display_name("sequential") == "Sequential"
    r = cli(["list", "strategies"])
    assert r.exit_code == 0 and "sequential" in r.output


@pytest.mark.parametrize("reverse", [False, True])
def test_run_verify_and_simulate_count_the_same(cli, hep, tmp_path, monkeypatch, reverse):
    from dlbench.simulate import SimWorkload, load_profile, simulate

    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    run = _run(cli, hep, tmp_path / "res", *(["--reverse-odd-epochs"] if reverse else []))
    cfg, ms = run["config"], run["summary"]
    assert cfg["strategy"] == "sequential" and cfg["options"] == {"reverse_odd_epochs": reverse}
    assert ms["verified_samples"] == 2 * int(cfg["workload_spec"]["samples"])   # every batch: the plan's, its bytes
    nbytes = sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in cfg["workload_spec"]["arrays"])
    wl = SimWorkload("hep_cnn", int(cfg["workload_spec"]["samples"]), int(cfg["local_batch"]), "fixed",
                     float(nbytes), step_time_s=float(cfg["compute_step_time_s"]), layout=cfg["workload_spec"]["layout"])
    ss = simulate([("x", "sequential", dict(cfg["options"]))], wl=wl, profile=load_profile("laptop-pfs"), nodes=1,
                  ranks_per_node=1, epochs=int(cfg["epochs"]), seed=int(cfg["seed"]))["x"]
    assert ms["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert ms["read_bytes"] == ss["read_bytes"] == 2 * wl.samples * nbytes
    assert ms["shared_read_requests"] == ss["shared_read_requests"] == 2 * wl.samples
    assert ms["samples"] == ss["samples"]
    # --verify checked every delivered batch against this plan: its option reached the planner
    from dlbench.simulate import build_plan

    plan = build_plan("sequential", wl=wl, nodes=1, ranks_per_node=1, epochs=2, seed=0,
                      profile=load_profile("laptop-pfs"), sizes=np.full(wl.samples, nbytes), options=cfg["options"])
    ids = np.arange(wl.samples)
    assert (plan.epoch(0).rank_samples(0) == ids).all()
    assert (plan.epoch(1).rank_samples(0) == (ids[::-1] if reverse else ids)).all()


def test_simulate_cli_costs_the_new_strategy(cli, tmp_path):
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "hep_cnn", "--scale", "tiny", "--nodes", "2",
             "--strategies", "naive,sequential", "--out", tmp_path / "sim", "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert any(ln.split(",")[1] == "sequential" for ln in r.output.splitlines()[1:] if ln.count(",") > 2)
