"""The model's rule sets (default vs the HDMLP thesis' reference simulator) and the thesis' Scenario 2.

CI runs every test here: the reduced-F scenario (thesis structure, F = 15,000) in a few seconds, and the
full Scenario 2 (F = 150,000, eleven rows, seeds 0, 1, 2) behind the ``slow`` marker (40-100 s per seed
on a shared 2-core machine; CI runs it: .ci/run selects no markers)."""

import dataclasses

import numpy as np
import pytest

from dlbench.errors import ConfigError
from dlbench.simulate import Model, SimWorkload, load_profile, simulate
from dlbench.study.schema import load_study
from dlbench.study.simulate import workload_of
from dlbench.system import RULE_PRESETS, ModelRules, from_dict, rules_from

PROF = load_profile("hdmlp-thesis")
MB = 1e6


def test_rule_presets_and_errors():
    assert rules_from(None) == ModelRules()
    th = rules_from("thesis")
    assert (th.gamma, th.write, th.tier_read, th.prologue) == ("thesis-window", "series", "full", "series")
    assert rules_from({"preset": "thesis", "write": "overlap"}).write == "overlap"
    with pytest.raises(ConfigError, match="choose one of: default, thesis"):
        rules_from("thesys")
    with pytest.raises(ConfigError, match="did you mean 'gamma'"):
        rules_from({"gama": "nodes"})
    with pytest.raises(ConfigError, match="gamma"):
        rules_from({"gamma": "clients"})
    d = {"name": "x", "network_mb_per_s": 1e4, "rules": {"gamma": "nodes"},
         "pfs": {"client_link_mb_per_s": 2000, "aggregate": [{"clients": 1, "mb_per_s": 66}]},
         "staging": {"capacity_bytes": 1e9, "threads": 2, "write_mb_per_s": 200,
                     "bandwidth": [{"threads": 1, "mb_per_s": 1e4}]}}
    assert from_dict(d).rules.gamma == "nodes"
    with pytest.raises(ConfigError, match="rules.gama"):
        from_dict({**d, "rules": {"gama": "nodes"}})


def _naive_fixed(rules, nodes=4):
    wl = SimWorkload("f", 400, 5, "fixed", 1e6)
    return simulate(["naive"], wl=wl, profile=PROF, nodes=nodes, epochs=2, rules=rules)["naive"]["total_time_s"]


def test_gamma_rules_threads_and_nodes():
    """Naive, fixed 1 MB: per access fetch + w + s/c, fetch at t(γ)/γ. A synchronous rank has one request in
    flight, so the default rule (PFS clients = requests in flight) gives γ = 4 nodes x 1, as the nodes rule
    does; a prefetching plan with 2 loader threads per node gives γ = 8 under the default rule (t(8)/8 =
    40.75 MB/s per client) and γ = 4 under the nodes rule (36.5 MB/s): the default is faster there."""
    per4 = 1 / 36.5 + 1 / 200 + 1 / 100
    assert _naive_fixed("default") == pytest.approx(2 * 100 * per4)
    assert _naive_fixed({"gamma": "nodes"}) == pytest.approx(2 * 100 * per4)
    wl = SimWorkload("f", 400, 5, "fixed", 1e6)
    pf = {k: simulate(["prefetch"], wl=wl, profile=PROF, nodes=4, epochs=2, rules=r)["prefetch"]["total_time_s"]
          for k, r in (("default", "default"), ("nodes", {"gamma": "nodes"}))}
    assert pf["default"] < pf["nodes"]


def test_thesis_window_gamma_regression_order():
    """The reference's rule on a case small enough to do by hand: 2 nodes, one 1 MB sample each per step.
    Node 0 is served first and sees no read at or after its start (γ = 1: 66 MB/s); node 1 starts at the same
    barrier time and sees node 0's read (γ = 2: t(2)/2 = 43 MB/s). Each step lasts node 1's time."""
    wl = SimWorkload("f", 8, 1, "fixed", 1e6)
    t = simulate(["naive"], wl=wl, profile=PROF, nodes=2, epochs=1, rules="thesis")["naive"]["total_time_s"]
    assert t == pytest.approx(4 * (1 / 43 + 1 / 200 + 1 / 100))


def test_thesis_write_series_vs_overlap():
    """A prefetching plan that is PFS bound: series pays fetch + w per thread, overlap max(fetch, w)."""
    wl = SimWorkload("f", 2000, 25, "fixed", 1e6)
    ser = simulate([("p", "prefetch", {"num_workers": 2})], wl=wl, profile=PROF, nodes=4, epochs=1,
                   rules={"gamma": "nodes", "write": "series"})["p"]["total_time_s"]
    ovl = simulate([("p", "prefetch", {"num_workers": 2})], wl=wl, profile=PROF, nodes=4, epochs=1,
                   rules={"gamma": "nodes", "write": "overlap"})["p"]["total_time_s"]
    # 500 samples per node, 2 threads: 250 x (1/36.5 + 1/200) vs 250 x 1/36.5 (+ the last compute)
    assert ser == pytest.approx(250 * (1 / 36.5 + 1 / 200) + 0.01, rel=0.01)
    assert ovl == pytest.approx(250 / 36.5 + 0.01, rel=0.01)


def test_tier_read_full_vs_per_thread():
    m_full = Model(PROF, rules={"tier_read": "full"})
    m_pt = Model(PROF, rules="default")
    local = 1  # plan tier code LOCAL
    assert 1 / m_full.fetch_s_per_byte(4, 2)[local] == pytest.approx(86e6)
    assert 1 / m_pt.fetch_s_per_byte(4, 2)[local] == pytest.approx(43e6)


def test_fill_by_tier_threads_needs_thesis_window():
    wl = SimWorkload("f", 400, 5, "fixed", 1e6)
    with pytest.raises(ConfigError, match="thesis-window"):
        simulate([("h", "clairvoyant", {"loader_threads": 2}, {"fill_by_tier_threads": True})], wl=wl,
                 profile=PROF, nodes=4, epochs=2, rules="default")
    with pytest.raises(ConfigError, match="fill_by_tier_threadz"):
        simulate([("h", "clairvoyant", {}, {"fill_by_tier_threadz": True})], wl=wl, profile=PROF, nodes=4,
                 epochs=2, rules="thesis")


def test_thesis_window_costs_worlds_past_the_reference_limit():
    """The reference event loop (tests/unit/thesis_oracle.py) stops at 256 ranks; the model's thesis-window costing
    (fastevents.py, tests/unit/test_simulate_fastevents.py) does not."""
    wl = SimWorkload("f", 600, 1, "fixed", 1e6)
    r = simulate(["naive"], wl=wl, profile=PROF, nodes=300, epochs=1, rules="thesis")["naive"]
    assert r["samples"] == 600 and np.isfinite(r["total_time_s"])


def _scaled(study_path, factor: int, seed: int):
    """The study's structure at F / factor: samples and tier capacities scaled alike (the staging buffer is
    kept: it holds a few steps, not a share of the dataset)."""
    st = load_study(study_path)
    prof = load_profile(st.system)
    wl = workload_of(st, where=str(study_path))
    wl = dataclasses.replace(wl, samples=wl.samples // factor)
    tiers = tuple(dataclasses.replace(t, capacity_bytes=t.capacity_bytes / factor) for t in prof.tiers)
    prof = dataclasses.replace(prof, tiers=tiers)
    rows = []
    for label, strat, opts, model in st.entries():
        opts = dict(opts)
        for k in ("cache_capacity", "local_cache_capacity"):
            if k in opts:
                opts[k] = float(opts[k]) / factor
        rows.append((label, strat, opts, model))
    return simulate(rows, wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                    seed=seed, rules=st.rules), wl


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_s2_structure_reduced(seed):
    """Scenario 2 at F = 15,000 (capacities / 10): no published figures there, so the anchors are closed
    forms of the thesis' rules and the orderings the thesis reports."""
    r, wl = _scaled("configs/studies/hdmlp-thesis-s2.yaml", 10, seed)
    t = {k: v["total_time_s"] for k, v in r.items()}
    lb = t["Lower Bound"]
    # preloading: F/N samples per node over 2 threads, each s / (t(4)/4) + s / β, before epoch 0
    pre = (wl.samples / 4 / 2) * (1 / 36.5 + 1 / 200)
    for row in ("LBANN preloading", "DeepIO ordered", "Locality-aware"):
        assert t[row] == pytest.approx(lb + pre, rel=0.01)
    assert t["DeepIO opportunistic"] == pytest.approx(lb + pre, rel=0.01)
    # LBANN dynamic: epoch 0 at 2 threads x (s / (t(4)/4) + s / β) instead of compute
    assert t["LBANN dynamic"] == pytest.approx(lb + pre - lb / 10, rel=0.01)
    # naive: between γ = 1 and γ = 4 for every read, compute in series
    lo, hi = (wl.samples * 10 / 4 * (1 / f + 1 / 200 + 1 / 100) for f in (66, 36.5))
    assert lo < t["Naive"] < 1.03 * hi
    # the thesis' order of the rows. HDMLP: its RAM tier counts bytes (issue 19), 5,000 samples here; the tier
    # threads fill every cached sample (also one first read from a peer) and equally often read samples go to
    # the RAM tier by sample id (tie_break: sample-id, the reference's stable sort), so the RAM tier's two
    # threads are not handed most of epoch 0 (with tie_break first-access: about 1 % over the lower bound;
    # full scale +0.89 % of the published 3,836.12 s, now -0.26 %)
    assert lb <= t["HDMLP"] < 1.01 * lb
    assert t["HDMLP"] < t["LBANN dynamic"] < t["LBANN preloading"] < t["Parallel Data Staging"]
    assert t["StagingPool"] < t["Naive"]
    # StagingPool: PFS bound between all reads at γ = 1 and all at γ = 4 (2 threads per node)
    lo, hi = (wl.samples * 10 / 4 / 2 * (1 / f + 1 / 200) for f in (66, 36.5))
    assert max(lo, lb) < t["StagingPool"] < hi
    # the own-tier/peer bytes add up to the dataset x epochs for every row but the lower bound
    total = 10 * wl.samples * wl.mean_bytes
    for k, v in r.items():
        if k != "Lower Bound":
            assert sum(v["bytes_by_tier"].values()) == pytest.approx(total, rel=0.01), k


S2_PUBLISHED = {"Lower Bound": 3825.66, "HDMLP": 3836.12, "LBANN dynamic": 4051.12, "DeepIO opportunistic": 4432.90,
                "DeepIO ordered": 4433.27, "LBANN preloading": 4433.27, "Locality-aware": 4433.27,
                "Parallel Data Staging": 4972.65, "StagingPool": 4982.27, "Naive": 15130.54}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_s2_reproduces_all_ten_published_rows(seed):
    """``dlbench simulate --study configs/studies/hdmlp-thesis-s2.yaml``: every published row within 3 %."""
    st = load_study("configs/studies/hdmlp-thesis-s2.yaml")
    assert st.published_runtime_s == S2_PUBLISHED
    wl = workload_of(st)
    r = simulate(st.entries(), wl=wl, profile=load_profile(st.system), nodes=st.nodes, epochs=st.epochs, seed=seed,
                 rules=st.rules)
    gaps = {k: r[k]["total_time_s"] / v - 1 for k, v in S2_PUBLISHED.items()}
    assert all(abs(g) < 0.03 for g in gaps.values()), gaps
    assert np.isfinite(r["Locality-aware (dlbench locality)"]["total_time_s"])


def test_study_rules_and_model_keys_checked(tmp_path):
    bad = tmp_path / "s.yaml"
    base = ("name: x\nsystem: hdmlp-thesis\nnodes: 2\nepochs: 1\n"
            "workload: {name: w, samples: 100, global_batch: 10, size: {kind: fixed, mean_bytes: 1.0e6}}\n")
    bad.write_text(base + "rules: thesys\nstrategies: [naive]\n")
    with pytest.raises(ConfigError, match="thesys"):
        load_study(bad)
    bad.write_text(base + "runs: [{label: a, strategy: naive, model: {warp: true}}]\n")
    with pytest.raises(ConfigError, match="warp"):
        load_study(bad)
    assert set(RULE_PRESETS) == {"default", "thesis"}


@pytest.mark.parametrize("name,factor", [("nopfs-imagenet1k", 200), ("nopfs-cosmoflow128", 100),
                                         ("nopfs-cosmoflow512", 20), ("nopfs-mnist", 20)])
def test_other_thesis_scenarios_cost_and_order(name, factor):
    """The reference simulator's dataset sweep (configs/studies/nopfs-*.yaml) at F / factor with tiers scaled
    alike: every row costs, nothing beats the lower bound, HDMLP is at or near it, prefetching beats naive."""
    r, wl = _scaled(f"configs/studies/{name}.yaml", factor, seed=42)
    t = {k: v["total_time_s"] for k, v in r.items()}
    assert all(np.isfinite(v) and v > 0 for v in t.values()), t
    lb = t["Lower Bound"]
    assert all(v >= lb * (1 - 1e-9) for v in t.values()), t
    assert t["HDMLP"] <= 1.02 * lb
    assert t["HDMLP"] <= t["StagingPool"] * (1 + 1e-9) <= t["Naive"]
    assert t["Parallel Data Staging"] >= lb
    if "LBANN preloading" in t:
        assert t["LBANN dynamic"] <= t["LBANN preloading"] * (1 + 1e-9)


@pytest.mark.parametrize("name", ["nopfs-cosmoflow128", "nopfs-cosmoflow512"])
def test_lbann_refuses_beyond_aggregate_memory(name):
    """CosmoFlow's datasets exceed the nodes' RAM together: the reference skips LBANN there; dlbench's lbann
    says why (one line, CapacityError) instead of costing something else."""
    from dlbench.errors import CapacityError

    st = load_study(f"configs/studies/{name}.yaml")
    wl = workload_of(st)
    with pytest.raises(CapacityError, match="lbann preload"):
        simulate([("l", "lbann", {"mode": "preload"})], wl=wl, profile=load_profile(st.system), nodes=st.nodes,
                 epochs=1, rules=st.rules)


def test_event_costing_matches_vectorised_model_at_fixed_gamma():
    """Cross-check of the two costings: with γ fixed (gamma: nodes) the event loop and the vectorised
    max-plus recurrence must agree: exactly for one request at a time; within the buffer's effect for
    loader threads (the event loop enforces the staging buffer and reads ahead across epochs)."""
    from thesis_oracle import cost_events

    from dlbench.simulate.core import build_plan

    wl = SimWorkload("f", 3000, 25, "normal", 1e6, 1e5)
    sizes = wl.sizes(0)
    m = Model(PROF, rules={"gamma": "nodes", "write": "series"})
    plan = build_plan("naive", wl=wl, nodes=4, ranks_per_node=1, epochs=2, seed=0, profile=PROF, sizes=sizes)
    vec = m.cost(plan, sizes, "ondemand")
    ev = cost_events(m, plan, sizes, "ondemand", None, 0.0)
    assert ev[0].sum() == pytest.approx(vec.total_time_s, rel=1e-9)
    assert ev[2] == pytest.approx(vec.stall_s, rel=1e-9)
    plan = build_plan("prefetch", wl=wl, nodes=4, ranks_per_node=1, epochs=2, seed=0, profile=PROF, sizes=sizes,
                      options={"num_workers": 2})
    vec = m.cost(plan, sizes, "prefetch", threads_per_rank=2.0)
    ev = cost_events(m, plan, sizes, "prefetch", 2.0, 0.0)
    assert ev[0].sum() == pytest.approx(vec.total_time_s, rel=0.01)


def test_tier_fill_bytes_counted_where_fetch_is_charged():
    """Regression: with fill_by_tier_threads, an access whose tier fill had not finished was re-read from the
    PFS (its fetch charged to shared) while its bytes stayed on the own tier (the plan's static source). Now
    every tier's bytes are those its fetch time was charged for."""
    wl = SimWorkload("f", 2000, 5, "fixed", 1e6)
    row = ("h", "clairvoyant", {"loader_threads": 2, "local_cache_capacity": 1e11})
    plain = simulate([row], wl=wl, profile=PROF, nodes=4, epochs=3, rules="thesis")["h"]
    fill = simulate([(*row, {"fill_by_tier_threads": True})], wl=wl, profile=PROF, nodes=4, epochs=3,
                    rules="thesis")["h"]
    mem_spb = Model(PROF, rules="thesis").fetch_s_per_byte(4, PROF.staging.threads)[2]   # MEMORY: fixed rate
    for r in (plain, fill):
        b, br = r["bytes_by_tier"], r["modelled_breakdown"]
        assert b["local"] == 0 and b["memory"] > 0
        # own-tier fetch seconds (per loader thread: 2) = own-tier bytes x the tier's seconds per byte
        # (modelled_breakdown is per rank, bytes_by_tier summed over the 4 ranks)
        assert br["local_s"] * 2 * 4 == pytest.approx(b["memory"] * mem_spb, rel=1e-9)
    # the re-reads moved from memory to shared; nothing is lost or counted twice
    assert fill["bytes_by_tier"]["shared"] > plain["bytes_by_tier"]["shared"]
    assert fill["bytes_by_tier"]["memory"] < plain["bytes_by_tier"]["memory"]
    assert sum(fill["bytes_by_tier"].values()) == pytest.approx(sum(plain["bytes_by_tier"].values()))
