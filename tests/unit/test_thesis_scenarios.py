"""The HDMLP thesis' Scenarios 1, 3 and 4 (its Tables 5.1, 5.3, 5.4; configs/studies/hdmlp-thesis-s{1,3,4}.yaml;
Scenario 2 is in test_simulate_rules.py) and the model option ``peer_reads_from_shared``.

CI runs the reduced scenarios (F / K, tier capacities and cache options / K) and the orderings the published
tables imply; the full-size published values are ``slow`` (about 1 s, 30 s and 40 s here)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dlbench.plan import PEER, SHARED
from dlbench.simulate import SimWorkload, load_profile, simulate
from dlbench.simulate.core import build_plan, peers_as_shared
from dlbench.study.schema import load_study
from dlbench.study.simulate import workload_of

LBANN_ROWS = ("LBANN dynamic", "LBANN preloading")


def _study(n: int, factor: int = 1, seed: int | None = None):
    st = load_study(f"configs/studies/hdmlp-thesis-s{n}.yaml")
    prof = load_profile(st.system)
    wl = workload_of(st)
    wl = dataclasses.replace(wl, samples=wl.samples // factor)
    prof = dataclasses.replace(prof, tiers=tuple(dataclasses.replace(t, capacity_bytes=t.capacity_bytes / factor)
                                                 for t in prof.tiers))
    rows = []
    for label, strat, opts, model in st.entries():
        opts = {k: (float(v) / factor if k in ("cache_capacity", "local_cache_capacity") else v)
                for k, v in opts.items()}
        rows.append((label, strat, opts, model))
    r = simulate(rows, wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                 seed=st.seed if seed is None else seed, rules=st.rules, na_rows=True)
    return st, r, wl


def _times(r):
    return {k: v["total_time_s"] for k, v in r.items() if "not_applicable" not in v}


@pytest.mark.parametrize("n,factor", [(1, 1), (3, 100), (4, 100)])
def test_scenario_costs_every_row(n, factor):
    """Every row costs; only LBANN's are N/A, in Scenarios 3 and 4 (as in the thesis: the dataset exceeds the
    nodes' aggregate RAM); nothing beats the lower bound; every published row is a row of the study."""
    st, r, wl = _study(n, factor)
    na = {k for k, v in r.items() if "not_applicable" in v}
    assert na == (set(LBANN_ROWS) if n in (3, 4) else set())
    for k in na:
        assert "cache" in r[k]["not_applicable"]
    t = _times(r)
    assert all(np.isfinite(v) and v > 0 for v in t.values()), t
    lb = t["Lower Bound"]
    assert all(v >= lb * (1 - 1e-9) for v in t.values()), t
    assert set(st.published_runtime_s) <= set(t)
    # each row but the lower bound reads the dataset x epochs (the thesis' staging redraws: same count)
    total = st.epochs * wl.samples * wl.mean_bytes
    for k, v in r.items():
        if k not in na and k != "Lower Bound" and "opportunistic" not in k:
            assert sum(v["bytes_by_tier"].values()) == pytest.approx(total, rel=0.02), k


def test_scenario1_order():
    """Table 5.1: the data fits a node's memory; naive is 3.6 x the best, the staging pool and parallel
    staging trail the caches, HDMLP and LBANN dynamic are within a few % of the lower bound."""
    _, r, _ = _study(1)
    t = _times(r)
    lb = t["Lower Bound"]
    assert t["HDMLP"] < 1.07 * lb and t["LBANN dynamic"] < 1.07 * lb
    assert max(t["HDMLP"], t["LBANN dynamic"]) < min(t["DeepIO ordered"], t["LBANN preloading"],
                                                     t["Locality-aware"], t["DeepIO opportunistic"])
    assert max(t["DeepIO ordered"], t["Locality-aware"]) < min(t["Parallel Data Staging"], t["StagingPool"])
    assert t["Naive"] / min(t.values()) > 3.0


@pytest.mark.parametrize("seed", [0, 1])
def test_scenario3_order_reduced(seed):
    """Table 5.3's order at F / 100: HDMLP at the lower bound < DeepIO opportunistic < parallel staging and
    locality < staging pool < DeepIO ordered (misses read in the trainer) < naive."""
    _, r, _ = _study(3, 100, seed)
    t = _times(r)
    assert t["HDMLP"] < 1.02 * t["Lower Bound"]
    assert t["HDMLP"] < t["DeepIO opportunistic"] < min(t["Parallel Data Staging"], t["Locality-aware"])
    assert max(t["Parallel Data Staging"], t["Locality-aware"]) < t["StagingPool"] < t["DeepIO ordered"] < t["Naive"]
    # the reference's ordered DeepIO: 2/3 of the accesses miss the nodes' memory and are read in the trainer
    assert t["DeepIO ordered"] > 2.5 * t["DeepIO ordered (dlbench, loader threads)"]


@pytest.mark.parametrize("seed", [0, 1])
def test_scenario4_order_reduced(seed):
    """Table 5.4 at F / 100: the dataset exceeds the aggregate storage; DeepIO opportunistic (memory only)
    beats HDMLP and parallel staging, which beat the staging pool; DeepIO ordered and naive last."""
    _, r, _ = _study(4, 100, seed)
    t = _times(r)
    assert t["DeepIO opportunistic"] < min(t["HDMLP"], t["Parallel Data Staging"])
    assert max(t["HDMLP"], t["Parallel Data Staging"]) < t["StagingPool"] < t["DeepIO ordered"] < t["Naive"]
    # without peer reads (the reference's HDMLP) the PFS serves more: slower than dlbench's clairvoyant
    assert t["HDMLP"] > t["HDMLP (dlbench clairvoyant, peer reads)"]
    assert r["HDMLP"]["bytes_by_tier"]["peer"] == 0 < r["HDMLP (dlbench clairvoyant, peer reads)"]["bytes_by_tier"]["peer"]


def test_peers_as_shared_moves_only_peer_accesses():
    prof = load_profile("hdmlp-thesis")
    wl = SimWorkload("f", 2000, 20, "fixed", 1e6)
    plan = build_plan("deepio", wl=wl, nodes=4, ranks_per_node=1, epochs=2, seed=0, profile=prof,
                      sizes=wl.sizes(0), options={"mode": "ordered", "loader_threads": 2, "cache_capacity": 3e8})
    moved = peers_as_shared(plan)
    for e in range(2):
        a, b = plan.epoch(e), moved.epoch(e)
        assert (a.source == PEER).any()
        assert not (b.source == PEER).any() and (b.peer[a.source == PEER] == -1).all()
        assert (b.source[a.source == PEER] == SHARED).all()
        same = a.source != PEER
        assert (b.source[same] == a.source[same]).all() and (b.sample_ids == a.sample_ids).all()
    assert moved.pipeline == plan.pipeline


# published (Tables 5.1, 5.3, 5.4) vs dlbench, seed 0: every row within 3 %; the rows the model options
# shared_reads_in_trainer (DeepIO ordered: +5.3 % / +2.3 % with loader_threads 0) and cache_on_local_tier
# (Locality-aware: -11.8 % on the memory tier) brought in: within 1 %
BOUND = {(3, "DeepIO ordered"): 0.01, (4, "DeepIO ordered"): 0.01, (3, "Locality-aware"): 0.01,
         (4, "Locality-aware"): 0.01}


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3, 4])
def test_scenario_published_values(n):
    st, r, _ = _study(n)
    t = _times(r)
    gaps = {k: t[k] / v - 1 for k, v in st.published_runtime_s.items()}
    bad = {k: g for k, g in gaps.items() if abs(g) > BOUND.get((n, k), 0.03)}
    assert not bad, gaps
