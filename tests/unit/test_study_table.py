"""The run study's traffic/order table: labels that tell study entries apart, epochs 1.. apart from epoch 0,
the steady-state exposed share from the intervals, epoch time over compute alone; the cache study loads."""

from __future__ import annotations

import json

import numpy as np

from dlbench.report import run_label as _label
from dlbench.results import SCHEMA
from dlbench.study.schema import load_study
from dlbench.study.table import steady_state, traffic_table
from dlbench.timeline import PHASES

MS = 1_000_000


def _run(tmp_path, name, strategy, options, *, epoch_s=(0.5, 0.3, 0.3), stalls=None, samples=96, ranks=2,
         local_batch=4, step=0.01):
    d = tmp_path / name
    d.mkdir()
    summary = {"strategy": strategy, "ranks": ranks, "epochs": len(epoch_s), "samples": samples,
               "epoch_time_s": list(epoch_s), "tier_io": {"epochs": {"shared": {"bytes": 2e6}, "memory": {"bytes": 1e6},
                                                                  "peer": {"bytes": 5e5}}},
               "order_quality": {"fraction_of_dataset_seen_per_rank_after_epoch": [0.5, 0.75, 0.875]}}
    cfg = {"strategy": strategy, "options": options, "compute_step_time_s": step, "local_batch": local_batch}
    (d / "run.json").write_text(json.dumps({"schema": SCHEMA, "status": "ok", "config": cfg, "summary": summary}))
    if stalls is not None:
        # per rank: epochs back to back (epoch e lasts epoch_s[e]), one stall interval per epoch of stalls[e] s
        arrs = {"ranks": np.arange(ranks)}
        for r in range(ranks):
            starts = np.cumsum([0, *epoch_s[:-1]]) * 1e9
            ends = starts + np.asarray(epoch_s) * 1e9
            arrs[f"r{r}_epochs"] = np.arange(len(epoch_s), dtype=np.int32)
            arrs[f"r{r}_epoch_start_ns"] = starts.astype(np.int64)
            arrs[f"r{r}_epoch_end_ns"] = ends.astype(np.int64)
            arrs[f"r{r}_start_ns"] = starts.astype(np.int64)
            arrs[f"r{r}_end_ns"] = (starts + np.asarray(stalls) * 1e9).astype(np.int64)
            arrs[f"r{r}_phase"] = np.full(len(epoch_s), PHASES.index("stall"), dtype=np.uint8)
            arrs[f"r{r}_epoch"] = np.arange(len(epoch_s), dtype=np.int32)
            arrs[f"r{r}_rank"] = np.int64(r)
        np.savez(d / "intervals.npz", **arrs)
    return d


def test_labels_tell_cache_study_entries_apart():
    def lab(strategy, options):
        return _label({"config": {"strategy": strategy, "options": options}})

    # resolved options as run.json stores them: defaults left out, the mode always shown
    a = lab("deepio", {"mode": "ordered", "cache_capacity": 13312000.0, "loader_threads": 0, "window": 2,
                       "drop_last": False})
    b = lab("deepio", {"mode": "ordered", "cache_capacity": 13312000.0, "loader_threads": 2, "window": 2,
                       "drop_last": False})
    c = lab("deepio", {"mode": "opportunistic", "cache_capacity": 13312000.0, "loader_threads": 0, "window": 2,
                       "drop_last": False})
    assert len({a, b, c}) == 3
    assert a == "deepio ordered cache 13.312MB" and "t2" in b and "opportunistic" in c
    assert lab("clairvoyant", {"cache_capacity": 0.0, "loader_threads": 2}) == "clairvoyant"
    assert lab("pls", {"exchange_fraction": 0.3}) == "pls Q=0.3"
    assert lab("staging", {"tier": "memory"}) == "staging tier=memory"
    # surrogatetrain's ablation rows keep their own names
    assert lab("surrogatetrain", {"buffer_fraction": 0.75, "reorder": False}) == "surrogatetrain buf=0.75 no-reorder"
    # a strategy this install does not know: its options all shown, no error
    assert lab("nosuch", {"k": 1}) == "nosuch k=1"


def test_steady_state_skips_epoch_zero(tmp_path):
    from dlbench.results import read_run

    d = _run(tmp_path, "a", "naive", {}, epoch_s=(0.9, 0.3, 0.5), stalls=(0.6, 0.1, 0.1))
    st = steady_state(read_run(d))
    assert st["epoch0_s"] == 0.9
    assert abs(st["epoch_s"] - 0.4) < 1e-12
    # stall of epochs 1..2 over their time, both ranks: (0.1 + 0.1) / (0.3 + 0.5)
    assert abs(st["exposed"] - 0.25) < 1e-6
    # 96 samples / 3 epochs / 2 ranks = 16 per rank, batch 4: 4 steps of 0.01 s = 0.04 s of compute
    assert abs(st["x_compute"] - 10.0) < 1e-9


def test_steady_state_without_intervals_or_step_time(tmp_path):
    from dlbench.results import read_run

    d = _run(tmp_path, "b", "naive", {}, epoch_s=(0.7,), step=None)
    st = steady_state(read_run(d))
    assert st["epoch_s"] == 0.7 and st["exposed"] is None and st["x_compute"] is None


def test_traffic_table_has_the_study_columns(tmp_path):
    d1 = _run(tmp_path, "c", "lbann", {"mode": "dynamic", "cache_capacity": 53248000.0}, stalls=(0.2, 0.03, 0.03))
    d2 = _run(tmp_path, "d", "naive", {"drop_last": False})
    out = traffic_table([d1, d2]).splitlines()
    head = out[0]
    for col in ("epoch 0 (s)", "epoch 1.. (s)", "exposed 1..", "x compute", "shared MB", "own MB", "peer MB",
                "seen after E"):
        assert col in head
    assert out[2].startswith("lbann dynamic cache 53.248MB") and "10.0%" in out[2] and " 7.50" in out[2]
    assert out[3].startswith("naive ") and " - " in out[3]   # no intervals: no steady-state exposed share


def test_cache_comparison_study_loads():
    st = load_study("cache-comparison")   # the packaged study (configs/studies/)
    names = [r.strategy for r in st.runs]
    for s in ("naive", "prefetch", "staging", "local", "pls", "lbann", "clairvoyant", "locality", "deepio"):
        assert s in names
    modes = {(r.strategy, r.options.get("mode")) for r in st.runs}
    assert {("lbann", "preload"), ("lbann", "dynamic"), ("deepio", "ordered"), ("deepio", "opportunistic")} <= modes


def test_cache_comparison_study_plans_on_two_nodes():
    """Every entry plans on 2 ranks as 2 nodes (the study's setup) within its capacity; lbann at the cache
    strategies' 1/4 share stops with the capacity error (why the study gives it the whole dataset)."""
    import pytest

    from dlbench import workload as wl_mod
    from dlbench.errors import CapacityError
    from dlbench.simulate import build_plan, from_workload, load_profile

    st = load_study("cache-comparison")
    wl = from_workload(wl_mod.load(st.workload, scale=st.scale, samples=st.samples), local_batch=st.batch_size,
                       step_time_s=st.compute_time_s)
    prof = load_profile(st.system)
    sizes = wl.sizes(st.seed)
    kw = dict(wl=wl, nodes=2, ranks_per_node=1, epochs=st.epochs, seed=st.seed, profile=prof, sizes=sizes)
    quarter = min(r.options["cache_capacity"] for r in st.runs if "cache_capacity" in r.options)
    slot = -(-int(sizes.max()) // 4096) * 4096
    assert 4 * 2 * (quarter // slot) <= wl.samples      # the dataset is >= 4x the aggregate memory cache
    for r in st.runs:
        plan = build_plan(r.strategy, options=dict(r.options), **kw)
        assert plan.epochs == st.epochs
    with pytest.raises(CapacityError, match="cache-capacity"):
        build_plan("lbann", options={"mode": "dynamic", "cache_capacity": quarter}, **kw)
