"""Model options of the HDMLP thesis' reference policies, costed by the thesis-window engines:
``shared_reads_in_trainer`` (its DeepIO: the staging-buffer prefetcher has ``pfs_prefetch`` off, so a sample
no node's memory holds is read by the trainer when it gets there, in series with compute) and
``cache_on_local_tier`` (its Locality-aware policy caches on the SSD): both engines agree, hand computations,
refusal outside the thesis-window rule."""

import pytest
import thesis_oracle
from simcheck import assert_same_costing

from dlbench.errors import ConfigError
from dlbench.plan import LOCAL, MEMORY, PEER
from dlbench.simulate import Model, SimWorkload, fastevents, load_profile, simulate
from dlbench.simulate.core import build_plan, policy_of

PROF = load_profile("hdmlp-thesis")
DRAWN = SimWorkload("drawn", 2400, 5, "normal", 1e6, 1e5)
FIXED = SimWorkload("fixed", 1600, 4, "fixed", 1e6)


def _both(wl, nodes, rpn, epochs, cache, rules="thesis", threads=2):
    sizes = wl.sizes(0)
    m = Model(PROF, rules=rules)
    plan = build_plan("deepio", wl=wl, nodes=nodes, ranks_per_node=rpn, epochs=epochs, seed=0, profile=PROF,
                      sizes=sizes, options={"mode": "ordered", "loader_threads": threads, "cache_capacity": cache})
    plan = plan.replace(shared_reads_in_trainer=True)   # what the model option sets (the engines also take gamma: nodes)
    pol = policy_of("deepio", plan)
    assert pol == "prefetch"
    ref = thesis_oracle.cost_events(m, plan, sizes, pol, float(threads), 0.7)
    new = fastevents.cost_events(m, plan, sizes, pol, float(threads), 0.7)
    return ref, new


@pytest.mark.parametrize("wl,nodes,rpn,epochs,cache,rules", [
    (DRAWN, 4, 1, 2, 2e8, "thesis"),
    (DRAWN, 3, 2, 2, 1e8, "thesis"),
    (FIXED, 5, 1, 3, 1.2e8, "thesis"),
    (DRAWN, 4, 1, 2, 2e8, {"preset": "thesis", "gamma": "nodes"}),
])
def test_engines_agree(wl, nodes, rpn, epochs, cache, rules):
    ref, new = _both(wl, nodes, rpn, epochs, cache, rules)
    assert_same_costing(ref, new)
    assert ref[5]["shared"].sum() > 0 and ref[5]["memory"].sum() > 0      # misses and hits both


def test_hand_computation():
    """1 node, 1 rank, batch 1, 4 samples of 1 MB, memory holds sample 0: the three misses cost
    s/t(1) + s/beta + s/c each, in series; the hit was prefetched at t0 (waited on only if it comes first)."""
    wl = SimWorkload("h", 4, 1, "fixed", 1e6)
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = build_plan("deepio", wl=wl, nodes=1, ranks_per_node=1, epochs=1, seed=0, profile=PROF, sizes=sizes,
                      options={"mode": "ordered", "loader_threads": 2, "cache_capacity": 1e6})
    order = plan.epoch(0).sample_ids[0].tolist()
    plan = fastevents.trainer_reads_shared(plan, m)
    s = 1e6
    miss = s / PROF.pfs_per_client(1) + s / 200e6 + s / 100e6
    hit_wait = s / float(PROF.staging.bandwidth[1].mb_per_s * 1e6) + s / 200e6 if order[0] == 0 else 0.0
    want = 3 * miss + s / 100e6 + hit_wait
    for engine in (thesis_oracle, fastevents):
        ep = engine.cost_events(m, plan, sizes, "prefetch", 2.0, 0.0)[0]
        assert ep[0] == pytest.approx(want, rel=1e-12)
    # without the option the misses are read ahead by the two loader threads: much shorter
    plain = build_plan("deepio", wl=wl, nodes=1, ranks_per_node=1, epochs=1, seed=0, profile=PROF, sizes=sizes,
                       options={"mode": "ordered", "loader_threads": 2, "cache_capacity": 1e6})
    assert fastevents.cost_events(m, plain, sizes, "prefetch", 2.0, 0.0)[0][0] < 0.8 * want


def test_option_in_simulate_and_refused_outside_thesis_rules():
    wl = SimWorkload("f", 800, 4, "fixed", 1e6)
    row = ("d", "deepio", {"mode": "ordered", "loader_threads": 2, "cache_capacity": 5e7},
           {"shared_reads_in_trainer": True})
    plain = ("p", "deepio", {"mode": "ordered", "loader_threads": 2, "cache_capacity": 5e7})
    r = simulate([row, plain], wl=wl, profile=PROF, nodes=4, epochs=1, rules="thesis")
    assert r["d"]["total_time_s"] > r["p"]["total_time_s"]
    assert r["d"]["bytes_by_tier"] == pytest.approx(r["p"]["bytes_by_tier"])
    with pytest.raises(ConfigError, match="shared_reads_in_trainer: needs rules.gamma=thesis-window"):
        simulate([row], wl=wl, profile=PROF, nodes=4, epochs=1)


def _deepio(wl, nodes, cache, threads=2, epochs=2):
    return build_plan("deepio", wl=wl, nodes=nodes, ranks_per_node=1, epochs=epochs, seed=0, profile=PROF,
                      sizes=wl.sizes(0), options={"mode": "ordered", "loader_threads": threads, "cache_capacity": cache})


def test_cache_on_local_tier_moves_holdings_and_engines_agree():
    m = Model(PROF, rules="thesis")
    plan = _deepio(DRAWN, 4, 2e8)
    loc = fastevents.cache_on_local_tier(plan, m)
    for e in range(2):
        a, b = plan.epoch(e), loc.epoch(e)
        assert (a.source == MEMORY).any() and not (b.source == MEMORY).any()
        assert (b.source[a.source == MEMORY] == LOCAL).all() and (b.sample_ids == a.sample_ids).all()
        assert ((b.source == PEER) == (a.source == PEER)).all()
    assert (loc.prologue.dst == LOCAL).all() and (plan.prologue.dst == MEMORY).all()
    assert plan.peer_tier == MEMORY and loc.peer_tier == LOCAL     # a copy: the plan itself unchanged
    sizes = DRAWN.sizes(0)
    ref = thesis_oracle.cost_events(m, loc, sizes, "prefetch", 2.0, 0.3)
    new = fastevents.cost_events(m, loc, sizes, "prefetch", 2.0, 0.3)
    assert_same_costing(ref, new)
    assert ref[5]["local"].sum() > 0 and ref[5]["memory"].sum() == 0
    # the SSD (86 MB/s at 2 threads) is slower than RAM: the loader's fetch seconds grow
    mem = fastevents.cost_events(m, plan, sizes, "prefetch", 2.0, 0.3)
    assert ref[4]["peer"].sum() > 10 * mem[4]["peer"].sum()


def test_cache_on_local_tier_hand_computation():
    """2 nodes, batch 2 per rank, 8 samples of 1 MB, each rank holds the first two samples of its partition on
    the SSD (the other four come from the PFS): a read of a held sample costs s / 86 MB/s (own SSD at 2 threads)
    or s / min(b_c, 86 MB/s) (a peer's SSD) of loader fetch time."""
    wl = SimWorkload("h", 8, 4, "fixed", 1e6)
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = fastevents.cache_on_local_tier(_deepio(wl, 2, 2e6, threads=1, epochs=1), m)
    fetch = fastevents.cost_events(m, plan, sizes, "prefetch", 1.0, 0.0)[4]
    ep = plan.epoch(0)
    n_local, n_peer = int((ep.source == LOCAL).sum()), int((ep.source == PEER).sum())
    assert n_local == 2 and n_peer == 2
    r_local = PROF.tier_aggregate(next(t for t in PROF.tiers if t.kind == "local"))
    assert fetch["local"].sum() == pytest.approx(n_local * 1e6 / r_local, rel=1e-12)
    assert fetch["peer"].sum() == pytest.approx(n_peer * 1e6 / min(PROF.network_bytes_per_s, r_local), rel=1e-12)


def test_cache_on_local_tier_refused_outside_thesis_rules():
    wl = SimWorkload("f", 800, 4, "fixed", 1e6)
    row = ("d", "deepio", {"mode": "ordered", "loader_threads": 2, "cache_capacity": 5e7}, {"cache_on_local_tier": True})
    r = simulate([row], wl=wl, profile=PROF, nodes=4, epochs=1, rules="thesis")
    assert r["d"]["bytes_by_tier"]["local"] > 0
    with pytest.raises(ConfigError, match="cache_on_local_tier: needs rules.gamma=thesis-window"):
        simulate([row], wl=wl, profile=PROF, nodes=4, epochs=1)


def test_cache_on_local_tier_refuses_more_than_the_local_tier():
    import dataclasses

    small = dataclasses.replace(PROF, tiers=tuple(dataclasses.replace(t, capacity_bytes=1e8) if t.kind == "local"
                                                  else t for t in PROF.tiers))
    m = Model(small, rules="thesis")
    with pytest.raises(ConfigError, match="caches 200,000,000 bytes on a node; its local tier ssd holds 100,000,000"):
        fastevents.cache_on_local_tier(_deepio(FIXED, 4, 2e8), m)
