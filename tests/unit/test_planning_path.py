"""One planning path: simulate costs exactly Strategy.plan, every built-in plan keeps the possession rule,
and the typed plan parts behave (regression tests for the review of wave 1's simulate/run split)."""

import dataclasses

import numpy as np
import pytest

from dlbench import strategies
from dlbench.errors import ConfigError
from dlbench.plan import MEMORY, NO_TIER, PEER, SHARED, SYNC, EpochPlan, Evictions, Plan, Transfers
from dlbench.plan.invariants import PlanError, check_epoch_cover, check_possession
from dlbench.simulate import SimWorkload, build_plan, load_profile, sim_context, simulate
from dlbench.simulate.core import check_size

WL = SimWorkload("t", 203, 4, "normal", 2e5, 2e4)
PROF = load_profile("hdmlp-thesis")


def _plans_equal(a: Plan, b: Plan) -> None:
    assert a.pipeline == b.pipeline and a.capacity == b.capacity and a.order == b.order
    assert a.semantics == b.semantics and a.exchange == b.exchange and a.max_step_samples == b.max_step_samples
    for ea, eb in zip(a, b):
        for f in ("sample_ids", "source", "bounds", "peer", "keep"):
            x, y = getattr(ea, f), getattr(eb, f)
            assert (x is None and y is None) or np.array_equal(x, y), f
        assert (ea.transfers is None) == (eb.transfers is None)
        if ea.transfers is not None:
            assert np.array_equal(ea.transfers.sample, eb.transfers.sample)


@pytest.mark.parametrize("name", strategies.names())
def test_simulate_costs_exactly_strategy_plan(name):
    """regression: simulate re-planned with its own registry and capacity rules, so run and simulate disagreed"""
    sizes = WL.sizes(0)
    plan = build_plan(name, wl=WL, nodes=2, ranks_per_node=2, epochs=3, seed=5, profile=PROF, sizes=sizes)
    st = strategies.get(name)
    ctx = sim_context(wl=WL, nodes=2, ranks_per_node=2, epochs=3, seed=5, profile=PROF, sizes=sizes)
    direct = st.plan(ctx, strategies.parse_options(st, {}))
    _plans_equal(plan, direct)
    check_possession(plan)


@pytest.mark.parametrize("name", strategies.names())
def test_every_strategy_can_be_simulated(name):
    r = simulate([name], wl=WL, profile=PROF, nodes=2, ranks_per_node=1, epochs=2, seed=1)
    s = r[name]
    assert s["simulated"] is True and s["total_time_s"] > 0 and s["strategy"] == name
    assert s["plan_pipeline"] in ("sync", "prefetch")


def test_simulate_staging_too_big_takes_the_subset_plan_as_run_does():
    """regression: run fell back to a per-node subset for staging, simulate refused"""
    tiny_local = dataclasses.replace(PROF, tiers=tuple(t for t in PROF.tiers if t.kind == "local"))
    wl = SimWorkload("big", 400, 4, "fixed", 1e9)
    r = simulate(["staging"], wl=wl, profile=tiny_local, nodes=4, epochs=1)
    assert "no longer a global shuffle" in r["staging"]["plan_warning"]


def test_labelled_rows_and_options():
    r = simulate([("pls Q=0.5", "pls", {"exchange_fraction": 0.5}), ("pls", "pls", {})], wl=WL, profile=PROF,
                 nodes=2, epochs=2)
    assert r["pls Q=0.5"]["options"] == {"exchange_fraction": 0.5}
    a, b = r["pls Q=0.5"]["bytes_by_tier"], r["pls"]["bytes_by_tier"]
    assert {k: v for k, v in a.items() if k != "peer"} == {k: v for k, v in b.items() if k != "peer"}  # local reads
    assert a["peer"] > b["peer"] > 0          # what the exchange moves between ranks grows with Q
    with pytest.raises(ConfigError, match="exchange_fraction"):
        simulate([("x", "pls", {"exchange_fraction": 2})], wl=WL, profile=PROF, nodes=2, epochs=1)


def test_simulate_refuses_more_ranks_than_samples_and_huge_worlds():
    """regression: --nodes 100000000 let the OOM killer take the machine"""
    with pytest.raises(ConfigError, match="more than the 203 samples"):
        check_size(WL, 300, 1)
    big = SimWorkload("b", 10**9, 4)
    with pytest.raises(ConfigError, match="GiB available"):
        check_size(big, 1000, 1, available=8 << 30)
    assert check_size(WL, 2, 1, available=8 << 30) > 0


def _one_epoch_plan(ep: EpochPlan, prologue=None) -> Plan:
    return Plan(strategy="t", n_samples=8, world_size=2, node_map=[0, 1], epochs=1, local_batch=2, seed=0,
                build_epoch=lambda e: ep, prologue=prologue, pipeline=SYNC)


def test_possession_checker_catches_reads_of_samples_nobody_holds():
    ids = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    bounds = np.array([[0, 2, 4], [0, 2, 4]])
    src = np.full((2, 4), SHARED, np.uint8)
    keep = np.full((2, 4), NO_TIER, np.uint8)
    keep[0, 0] = MEMORY                                   # rank 0 keeps sample 0 after step 0
    peer = np.full((2, 4), -1, np.int32)
    ok_src = src.copy()
    ids_ok = ids.copy()
    ids_ok[1, 2] = 0                                      # rank 1 reads sample 0 from rank 0 at step 1: fine
    ok_src[1, 2] = PEER
    peer[1, 2] = 0
    check_possession(_one_epoch_plan(EpochPlan(0, ids_ok, ok_src, bounds, peer=peer, keep=keep)))
    bad = ids_ok.copy()
    bad[1, 0], bad[1, 2] = 0, 4                           # ... but not at step 0: not kept yet
    bad_src, bad_peer = src.copy(), np.full((2, 4), -1, np.int32)
    bad_src[1, 0], bad_peer[1, 0] = PEER, 0
    with pytest.raises(PlanError, match="rank 1 epoch 0 step 0 reads sample 0 from rank 0"):
        check_possession(_one_epoch_plan(EpochPlan(0, bad, bad_src, bounds, peer=bad_peer, keep=keep)))
    own = src.copy()
    own[0, 3] = MEMORY                                    # rank 0 reads 3 from its cache: never kept
    with pytest.raises(PlanError, match="does not hold it"):
        check_possession(_one_epoch_plan(EpochPlan(0, ids, own, bounds, keep=keep)))
    ev = Evictions.make([0], [0], [0])                    # evicted at step 0: gone at step 1
    with pytest.raises(PlanError, match="from rank 0"):
        check_possession(_one_epoch_plan(EpochPlan(0, ids_ok, ok_src, bounds, peer=peer, keep=keep, evictions=ev)))


def test_transfers_sorted_and_checked():
    t = Transfers.make([1, 0, 1], [1, 0, 0], [0, 1, 1], [5, 2, 3], move=True)
    assert t.step.tolist() == [0, 1, 1] and t.src.tolist() == [0, 0, 1] and t.sample.tolist() == [2, 3, 5]
    ids = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    ep = EpochPlan(0, ids, np.full((2, 4), SHARED, np.uint8), np.array([[0, 2, 4], [0, 2, 4]]), transfers=t)
    with pytest.raises(PlanError, match="sends sample 2 it does not hold"):
        check_possession(_one_epoch_plan(ep))


@pytest.mark.parametrize("name", strategies.names())
def test_every_strategy_keeps_its_typed_semantics(name):
    """Every strategy, by the typed answers (no string compares, no skip): the plan's own row (or its
    strategy's) answers YES or NO, never DEPENDS; a full permutation each epoch covers every sample, and every
    plan keeps the possession rule."""
    from dlbench.plan.semantics import Answer

    st = strategies.get(name)
    sizes = WL.sizes(0)
    plan = build_plan(name, wl=WL, nodes=2, ranks_per_node=1, epochs=2, seed=3, profile=PROF, sizes=sizes)
    sem = plan.semantics or st.semantics
    for clause in (sem.full_permutation_each_epoch, sem.global_batch_is_global_shuffle, sem.order_changes):
        assert clause.answer in (Answer.YES, Answer.NO), f"{name}: {clause} (a plan states what it does)"
    check_possession(plan)
    if sem.full_permutation_each_epoch.holds:
        check_epoch_cover(plan)
    else:     # the strategy says no: its plan must differ from a global shuffle somewhere it can be seen
        naive = build_plan("naive", wl=WL, nodes=2, ranks_per_node=1, epochs=2, seed=3, profile=PROF, sizes=sizes)
        assert any(not np.array_equal(a.sample_ids, b.sample_ids) for a, b in zip(plan, naive)), name


def test_simulate_charges_one_pfs_latency_per_chunked_request():
    """regression: simulate charged the PFS latency per sample although surrogatetrain reads a run of
    consecutive ids as one request"""
    from dlbench.simulate import Model
    from dlbench.system import from_dict

    d = {"name": "lat", "compute_mb_per_s": 1e6, "network_mb_per_s": 1e4,
         "pfs": {"latency_s": 0.5, "client_link_mb_per_s": 1e9, "aggregate": [{"clients": 1, "mb_per_s": 1e9}]},
         "staging": {"capacity_bytes": 1e9, "threads": 1, "write_mb_per_s": 1e9,
                     "bandwidth": [{"threads": 1, "mb_per_s": 1e9}]}}
    prof = from_dict(d)
    ids = np.arange(8).reshape(1, 8)
    bounds = np.array([[0, 4, 8]])

    def plan_with(chunk):
        ep = EpochPlan(0, ids, np.full((1, 8), SHARED, np.uint8), bounds, chunk=chunk)
        return Plan(strategy="t", n_samples=8, world_size=1, node_map=[0], epochs=1, local_batch=4, seed=0,
                    build_epoch=lambda e: ep, pipeline=SYNC)

    sizes = np.full(8, 1.0)
    per_sample = Model(prof).cost(plan_with(None), sizes, "ondemand").total_time_s
    runs = np.array([[4, 0, 0, 0, 2, 0, 1, 1]], dtype=np.int32)     # requests: 1 + 1 + 1 + 1 = 4, not 8
    chunked = Model(prof).cost(plan_with(runs), sizes, "ondemand").total_time_s
    assert per_sample == pytest.approx(8 * 0.5, rel=1e-3) and chunked == pytest.approx(4 * 0.5, rel=1e-3)
