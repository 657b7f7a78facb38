"""The thesis-window costing at scale (``simulate/fastevents.py``) against the reference event loop
(``tests/unit/thesis_oracle.py``): every number of the result within 1e-9 relative, on small worlds (several
strategies and policies, node counts that are not powers of two, several ranks per node, fixed and drawn
sizes, the staging buffer binding across epochs, tier fills); and worlds past the reference's limit."""

import numpy as np
import pytest
import thesis_oracle
from simcheck import assert_same_costing

from dlbench.errors import ConfigError
from dlbench.plan import MEMORY, NO_TIER, PEER
from dlbench.simulate import Model, SimWorkload, events_generic, events_plain, fastevents, load_profile, simulate
from dlbench.simulate.core import build_plan, policy_of

PROF = load_profile("hdmlp-thesis")
DRAWN = SimWorkload("drawn", 3000, 5, "normal", 1e6, 1e5)
FIXED = SimWorkload("fixed", 2000, 5, "fixed", 1e6)


def _both(strategy, opts, wl, nodes, rpn, epochs, rules="thesis", tier_fill=False, seed=0, step_time_s=None):
    sizes = wl.sizes(seed)
    m = Model(PROF, rules=rules, step_time_s=step_time_s)
    plan = build_plan(strategy, wl=wl, nodes=nodes, ranks_per_node=rpn, epochs=epochs, seed=seed, profile=PROF,
                      sizes=sizes, options=opts)
    pol = policy_of(strategy, plan)
    thr = float(plan.pipeline.threads or 1) if pol == "prefetch" else None
    ref = thesis_oracle.cost_events(m, plan, sizes, pol, thr, 1.5, tier_fill=tier_fill)
    new = fastevents.cost_events(m, plan, sizes, pol, thr, 1.5, tier_fill=tier_fill)
    return ref, new


def _assert_same(ref, new):
    assert_same_costing(ref, new)
    assert ref[0].sum() > 0


CASES = [
    ("naive", {}, DRAWN, 4, 1, 2, "thesis", False),
    ("naive", {}, DRAWN, 3, 2, 2, "thesis", False),
    ("naive", {}, FIXED, 6, 1, 2, "thesis", False),
    ("naive", {}, DRAWN, 5, 1, 2, {"preset": "thesis", "gamma": "nodes"}, False),
    ("prefetch", {"num_workers": 2}, DRAWN, 4, 1, 3, "thesis", False),
    ("prefetch", {"num_workers": 3}, DRAWN, 5, 2, 3, "thesis", False),
    ("prefetch", {"num_workers": 2}, FIXED, 6, 1, 2, "thesis", False),
    ("prefetch", {"num_workers": 2}, DRAWN, 4, 1, 2, {"preset": "thesis", "gamma": "nodes", "write": "overlap"}, False),
    ("clairvoyant", {"loader_threads": 2, "local_cache_capacity": 1e11}, DRAWN, 4, 1, 3, "thesis", True),
    ("clairvoyant", {"loader_threads": 2}, DRAWN, 3, 1, 3, "thesis", False),
    ("staging", {"loader_threads": 2, "tier": "local"}, DRAWN, 7, 1, 2, "thesis", False),
    ("deepio", {"mode": "opportunistic", "loader_threads": 2, "cache_capacity": 6e10}, DRAWN, 4, 1, 2, "thesis", False),
    ("lbann", {"mode": "dynamic", "loader_threads": 2, "cache_capacity": 6e10}, DRAWN, 4, 1, 2, "thesis", False),
    ("locality", {"loader_threads": 2, "cache_capacity": 6e10}, DRAWN, 7, 1, 2, "thesis", False),
]


@pytest.mark.parametrize("vec_min_ranks", [1, 10**9], ids=["vector-consumption", "loop-consumption"])
@pytest.mark.parametrize("strategy,opts,wl,nodes,rpn,epochs,rules,tier_fill", CASES,
                         ids=[f"{c[0]}-{c[2].name}-{c[3]}x{c[4]}-{i}" for i, c in enumerate(CASES)])
def test_fast_event_costing_equals_reference(strategy, opts, wl, nodes, rpn, epochs, rules, tier_fill,
                                             vec_min_ranks, monkeypatch):
    """Both consumption paths (vectorised across ranks, per-rank loop) on every case."""
    monkeypatch.setattr(events_plain, "VEC_MIN_RANKS", vec_min_ranks)
    ref, new = _both(strategy, opts, wl, nodes, rpn, epochs, rules, tier_fill)
    _assert_same(ref, new)


@pytest.mark.parametrize("strategy,opts", [("naive", {}), ("prefetch", {"num_workers": 2}),
                                           ("staging", {"loader_threads": 3, "tier": "local"})])
def test_many_ranks_uneven_steps(strategy, opts):
    """33 nodes x 2 ranks (the consumption vectorised across ranks), 3,001 samples: ranks hold different counts
    and the last step of each epoch is ragged (consumed by the per-rank loop)."""
    wl = SimWorkload("uneven", 3001, 4, "lognormal", 1e6, 5e5, 1e4, 4e6)
    ref, new = _both(strategy, opts, wl, 33, 2, 3)
    _assert_same(ref, new)


@pytest.mark.parametrize("strategy,opts", [("naive", {}), ("prefetch", {"num_workers": 2}),
                                           ("prefetch", {"num_workers": 1})])
def test_step_time_compute(strategy, opts):
    """Compute from a step time (per local batch) instead of bytes: the fast loops' constant-compute branch."""
    ref, new = _both(strategy, opts, DRAWN, 5, 1, 3, step_time_s=0.4)
    _assert_same(ref, new)


def test_generic_loop_equals_reference():
    """The loop kept for tier fills (``events_generic.cost_prefetch_generic``) on a plain case too."""
    wl = DRAWN
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = build_plan("prefetch", wl=wl, nodes=5, ranks_per_node=1, epochs=3, seed=0, profile=PROF, sizes=sizes,
                      options={"num_workers": 2})
    _assert_same(thesis_oracle.cost_events(m, plan, sizes, "prefetch", 2.0, 0.5),
                 events_generic.cost_prefetch_generic(m, plan, sizes, 2.0, 0.5))


def test_buffer_reads_ahead_across_epochs_and_window_is_trimmed():
    """A staging buffer of 1 GB holds more than an epoch of a node's 1 MB samples here (150 per node per
    epoch): loader threads read ahead several epochs, the window loads them and drops consumed ones."""
    wl = SimWorkload("small", 600, 5, "normal", 1e6, 1e5)
    ref, new = _both("prefetch", {"num_workers": 2}, wl, 4, 1, 5)
    _assert_same(ref, new)


@pytest.mark.parametrize("vec_min_ranks", [1, 10**9], ids=["vector-consumption", "loop-consumption"])
def test_buffer_binds_with_widely_spread_sizes(vec_min_ranks, monkeypatch):
    """Samples of 1-400 MB (lognormal, mean 100 MB) against the 1 GB staging buffer, local batch 8: a step
    sometimes exceeds the buffer (its accesses are scheduled regardless) and the count a rank schedules per step
    swings widely (the buffer search, ``_PlainWindow.admit``, lands before, inside and past the step)."""
    monkeypatch.setattr(events_plain, "VEC_MIN_RANKS", vec_min_ranks)
    wl = SimWorkload("spread", 480, 8, "lognormal", 1e8, 8e7, 1e6, 4e8)
    ref, new = _both("prefetch", {"num_workers": 2}, wl, 4, 1, 3)
    _assert_same(ref, new)


def test_plain_loop_schedules_whole_bytes_generic_loop_fractional(monkeypatch):
    """Drawn sizes are whole bytes: the plain loop costs prefetch (the generic loop is not called); sizes with
    fractions of a byte (the buffer's float sums are then not exact as integers) go to the generic loop, with the
    reference's answers either way."""
    wl = SimWorkload("spread", 600, 5, "lognormal", 2e8, 1e8, 1e6, 6e8)
    sizes = wl.sizes(0)
    assert np.array_equal(sizes, np.rint(sizes))
    m = Model(PROF, rules="thesis")
    calls = []
    real = events_generic.cost_prefetch_generic
    monkeypatch.setattr(events_generic, "cost_prefetch_generic", lambda *a, **k: calls.append(1) or real(*a, **k))
    for sz, generic in ((sizes, False), (sizes + 0.25, True)):
        plan = build_plan("prefetch", wl=wl, nodes=4, ranks_per_node=1, epochs=3, seed=0, profile=PROF, sizes=sz,
                          options={"num_workers": 2})
        calls.clear()
        _assert_same(thesis_oracle.cost_events(m, plan, sz, "prefetch", 2.0, 0.5),
                     fastevents.cost_events(m, plan, sz, "prefetch", 2.0, 0.5))
        assert bool(calls) == generic


def test_worlds_past_the_reference_limit_are_costed():
    """The reference refuses more than thesis_oracle.MAX_RANKS ranks; the model (fast path) costs them."""
    wl = SimWorkload("f", 1200, 1, "fixed", 1e6)
    n = thesis_oracle.MAX_RANKS + 44
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = build_plan("naive", wl=wl, nodes=n, ranks_per_node=1, epochs=1, seed=0, profile=PROF, sizes=sizes)
    with pytest.raises(ConfigError, match="at most 256"):
        thesis_oracle.cost_events(m, plan, sizes, "ondemand", None, 0.0)
    r = simulate(["naive", ("p", "prefetch", {"num_workers": 2})], wl=wl, profile=PROF, nodes=n, epochs=1,
                 rules="thesis")
    assert r["naive"]["samples"] == 1200 and r["p"]["samples"] == 1200
    # each step: node 0 alone (γ = 1), the last node sees every earlier node's read (γ = n): the step lasts
    # the last node's read at t(n)/n plus write and compute
    per = 1 / (PROF.pfs_per_client(n) / 1e6) + 1 / 200 + 1 / 100
    assert r["naive"]["total_time_s"] == pytest.approx(np.ceil(1200 / n) * per, rel=1e-9)


@pytest.mark.parametrize("strategy,opts", [("naive", {}), ("prefetch", {"num_workers": 2}),
                                           ("surrogatetrain", {})])
def test_request_counts_from_the_costing_equal_the_plan_pass(strategy, opts):
    """The engine counts the PFS requests while loading epochs (a chunk's covered columns excluded); the
    summary then skips its own pass over the plan: both give the same summary."""
    import dataclasses

    from dlbench.simulate.core import summarize

    wl = SimWorkload("w", 2400, 6, "normal", 1e6, 1e5, layout="hdf5_shared")
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    try:
        plan = build_plan(strategy, wl=wl, nodes=4, ranks_per_node=1, epochs=2, seed=0, profile=PROF, sizes=sizes,
                          options=opts)
    except ConfigError as e:
        pytest.skip(str(e))
    pol = policy_of(strategy, plan)
    c = m.cost(plan, sizes, pol, threads_per_rank=2.0 if pol == "prefetch" else None)
    assert c.shared_requests is not None
    a = summarize(c, workload="w", profile=PROF, plan=plan, sizes=sizes)
    b = summarize(dataclasses.replace(c, shared_requests=None), workload="w", profile=PROF, plan=plan, sizes=sizes)
    assert a == b


def test_tier_threads_fill_cached_samples_first_read_from_a_peer():
    """fill_by_tier_threads: HDMLP's tier threads fill every sample the node caches from the PFS (the
    reference's FrequencyPrefetcher.fill_buffers walks its whole frequency list), also one whose first access
    the plan serves from a peer. Regression: such a sample got no fill, so every later own-tier read of it
    was costed as a PFS read. Once every fill is done, every own-tier access reads the own tier."""
    wl = SimWorkload("small", 400, 5, "fixed", 1e6)
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    E = 12
    plan = build_plan("clairvoyant", wl=wl, nodes=4, ranks_per_node=1, epochs=E, seed=0, profile=PROF,
                      sizes=sizes, options={"loader_threads": 2})
    kept = [set() for _ in range(4)]
    peer_first = 0
    for e in range(E):
        ep = plan.epoch(e)
        r, c = np.nonzero(ep.keep != NO_TIER)
        peer_first += int((ep.source[r, c] == PEER).sum())
        for rr, k in zip(r.tolist(), ep.sample_ids[r, c].tolist()):
            kept[rr].add(k)
    assert peer_first > 0
    fill_spb = 1.0 / float(PROF.pfs_per_client(4))
    ready, _starts = events_generic.tier_fill_ready(m, plan, sizes, 1.5, fill_spb, PROF.staging_write_s_per_byte(),
                                                  PROF.pfs.latency_s, 1)
    assert [set(rd) for rd in ready] == kept
    done = max(max(rd.values()) for rd in ready)
    ref, new = _both("clairvoyant", {"loader_threads": 2}, wl, 4, 1, E, tier_fill=True)
    _assert_same(ref, new)
    # own-tier bytes of the epochs that start once every fill is done: all read from memory
    starts = 1.5 + np.concatenate([[0.0], np.cumsum(ref[0])[:-1]])
    late = [e for e in range(E) if starts[e] >= done]
    assert len(late) >= E // 2
    own_late = sum(float(sizes[plan.epoch(e).sample_ids[plan.epoch(e).source == MEMORY]].sum()) for e in late)
    assert ref[5]["memory"].sum() >= own_late > 0
