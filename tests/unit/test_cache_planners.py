"""Pure planners of clairvoyant, locality and deepio: possession, cover, what each caches, and their rules."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from dlbench import strategies
from dlbench.errors import CapacityError
from dlbench.plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED, SYNC, Pipeline
from dlbench.plan.caches import global_rows
from dlbench.plan.clairvoyant import access_frequencies, clairvoyant_plan
from dlbench.plan.invariants import check_epoch_cover, check_possession
from dlbench.strategies import RunContext


def _ctx(F=60, W=2, b=4, E=3, seed=0, sizes=1000, budget=None):
    from dlbench.simulate import SimWorkload

    return RunContext(workload=SimWorkload("t", F, W * b), n_samples=F,
                      sample_nbytes=np.broadcast_to(np.asarray(sizes, np.int64), (F,)).copy(), world_size=W,
                      rank=0, node_map=np.arange(W), seed=seed, epochs=E, local_batch=b,
                      memory_budget_bytes=budget)


def _plan(name, ctx, **opts):
    st = strategies.get(name)
    return st.plan(ctx, strategies.parse_options(st, opts))


def _cplan(F, W, b, E, seed, slots, local_bytes=0.0, sizes=100):
    return clairvoyant_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=seed,
                            sample_nbytes=sizes, memory_bytes=slots * 100, local_bytes=local_bytes,
                            pipeline=Pipeline("prefetch", 2, 2))


# ---- clairvoyant --------------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(F=hs.integers(5, 70), W=hs.integers(1, 4), b=hs.integers(1, 6), E=hs.integers(1, 4),
       seed=hs.integers(0, 99), slots=hs.integers(0, 30), local=hs.sampled_from([0.0, 350.0, 1e9]))
def test_clairvoyant_possession_and_cover(F, W, b, E, seed, slots, local):
    if W > F:
        return
    plan = _cplan(F, W, b, E, seed, slots, local)
    check_possession(plan)
    check_epoch_cover(plan)
    for e in range(E):        # exact global shuffle order
        rows, _ = global_rows(seed, e, F, W, b, False, False)
        assert np.array_equal(plan.epoch(e).sample_ids, rows)


def test_clairvoyant_caches_the_most_accessed_samples_memory_first():
    F, W, b, E, seed, slots = 40, 2, 3, 6, 4, 5
    plan = _cplan(F, W, b, E, seed, slots, local_bytes=7 * 100.0)
    counts, first, _ = access_frequencies(n_samples=F, world_size=W, epochs=E, local_batch=b, seed=seed)
    for r in range(W):
        kept = {}
        for ep in plan:
            k = ep.rank_keep(r)
            for sid, code in zip(ep.rank_samples(r)[k != NO_TIER].tolist(), k[k != NO_TIER].tolist()):
                assert sid not in kept, "a sample is stored twice"
                kept[sid] = code
        mem = [s for s, c in kept.items() if c == MEMORY]
        loc = [s for s, c in kept.items() if c == LOCAL]
        assert len(mem) == slots and len(loc) == 7
        c = counts[r]
        # nothing outside the cache is accessed more often than the least-accessed cached sample
        assert c[[s for s in range(F) if s not in kept]].max() <= c[list(kept)].min()
        assert c[mem].min() >= c[loc].max()            # fastest tier gets the most accessed
        # every access after the first of a cached sample reads the own tier
        for ep in plan:
            ids, src = ep.rank_samples(r), ep.rank_sources(r)
            keep = ep.rank_keep(r)
            for sid, s, k in zip(ids.tolist(), src.tolist(), keep.tolist()):
                if sid in kept and k == NO_TIER:
                    assert s == kept[sid]


def test_clairvoyant_reads_peers_only_after_they_stored_it_and_spreads_them():
    plan = _cplan(48, 3, 4, 4, 1, slots=48)       # everything cached: after epoch 0 nothing from the shared FS
    check_possession(plan)
    e1 = plan.epoch(1)
    assert (plan.epoch(0).source == SHARED).sum() == 48
    assert not (e1.source == SHARED).any()
    peers = e1.peer[e1.source == PEER]
    assert set(np.unique(peers).tolist()) == {0, 1, 2}
    total = plan.bytes_by_tier(100)
    assert total["shared"] == 48 * 100                # each sample read once from the shared FS in all


def test_clairvoyant_prefers_a_peers_memory_to_a_peers_disk():
    W = 4
    plan = _cplan(80, W, 4, 6, 2, slots=10, local_bytes=20 * 100.0)
    check_possession(plan)
    held = [dict() for _ in range(W)]           # rank -> {sample: tier}, as of the start of the step
    both = from_disk = 0
    for ep in plan:
        for s in range(ep.steps):
            for r in range(W):
                for c in range(ep.bounds[r, s], ep.bounds[r, s + 1]):
                    if ep.source[r, c] == PEER:
                        sid, p = int(ep.sample_ids[r, c]), int(ep.peer[r, c])
                        tiers = {held[q].get(sid) for q in range(W) if q != r}
                        assert held[p][sid] == MEMORY or MEMORY not in tiers
                        both += {MEMORY, LOCAL} <= tiers
                        from_disk += held[p][sid] == LOCAL
            for r in range(W):
                for c in range(ep.bounds[r, s], ep.bounds[r, s + 1]):
                    if ep.keep[r, c] != NO_TIER:
                        held[r][int(ep.sample_ids[r, c])] = int(ep.keep[r, c])
    assert both > 0 and from_disk > 0           # the cases are exercised


def test_clairvoyant_strategy_capacity_and_threads():
    ctx = _ctx(F=60, sizes=1000)
    plan = _plan("clairvoyant", ctx, cache_capacity=10 * 1000)
    assert plan.pipeline.kind == "prefetch" and plan.pipeline.threads == 2
    assert max(plan.capacity.cache_peak_samples) == 10
    assert _plan("clairvoyant", ctx, loader_threads=0).pipeline.kind == "sync"


# ---- locality -----------------------------------------------------------------------------------------------
def _lplan(F, W, b, E, seed, cap, drop_last=False):
    from dlbench.plan.locality import locality_plan

    return locality_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=seed,
                         capacity=cap * 100, sample_nbytes=100, drop_last=drop_last, pipeline=SYNC)


@settings(max_examples=25, deadline=None)
@given(F=hs.integers(4, 70), W=hs.integers(1, 4), b=hs.integers(1, 6), E=hs.integers(1, 4),
       seed=hs.integers(0, 99), cap=hs.integers(1, 30), drop_last=hs.booleans())
def test_locality_possession_cover_batches_and_b_per_rank(F, W, b, E, seed, cap, drop_last):
    if W > F:
        return
    plan = _lplan(F, W, b, E, seed, cap, drop_last)
    check_possession(plan)
    if not drop_last:
        check_epoch_cover(plan)
    for e in range(E):
        rows, bounds = global_rows(seed, e, F, W, b, drop_last, False)
        ep = plan.epoch(e)
        assert np.array_equal(ep.bounds, bounds)                         # every rank gets b per step
        for s in range(ep.steps):
            want = np.sort(rows[:, bounds[0, s]:bounds[0, s + 1]].reshape(-1))
            got = np.sort(np.concatenate([ep.step_samples(r, s) for r in range(W)]))
            assert np.array_equal(got, want)                              # global batch membership unchanged
        if e == 0:
            assert (ep.source == SHARED).all()
    kept = np.asarray(plan.capacity.cache_peak_samples)
    assert (kept <= cap).all()


def test_locality_holders_train_on_what_they_hold_and_first_reads_are_kept():
    F, W, b, cap = 48, 2, 4, 10
    plan = _lplan(F, W, b, 3, 7, cap)
    ep0 = plan.epoch(0)
    for r in range(W):   # each rank keeps its first `cap` reads
        assert ep0.rank_keep(r)[:cap].tolist() == [MEMORY] * cap and (ep0.rank_keep(r)[cap:] == NO_TIER).all()
    held = {r: set(ep0.rank_samples(r)[:cap].tolist()) for r in range(W)}
    ep1 = plan.epoch(1)
    for r in range(W):
        src, ids = ep1.rank_sources(r), ep1.rank_samples(r)
        assert {int(i) for i, s in zip(ids, src) if s == MEMORY} <= held[r]
        for i, s, p in zip(ids.tolist(), src.tolist(), ep1.rank_peers(r).tolist()):
            if s == PEER:
                assert i in held[p]
            if s == SHARED:
                assert not any(i in h for h in held.values())


def test_locality_greedy_pairs_largest_surplus_with_largest_deficit():
    from dlbench.plan.locality import rebalance_batch

    W, b = 4, 3
    owner = np.full(20, -1, np.int64)
    owner[[0, 1, 2, 3, 4, 5]] = 0          # rank 0 holds 6: surplus 3
    owner[[6, 7, 8, 9]] = 1                # rank 1 holds 4: surplus 1
    owner[[10]] = 2                        # rank 2 holds 1: deficit 2
    samples = np.array([0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11])   # 11 held by nobody; rank 3 deficit 3
    ids, src, peer, stats = rebalance_batch(samples, owner, W, b)
    assert ids.shape == (W, b) and sorted(ids.reshape(-1).tolist()) == sorted(samples.tolist())
    # round 1: rank 0 (surplus 3) -> rank 3 (deficit 3): samples 3, 4, 5; round 2: rank 1 (1) -> rank 2 (2): 9
    assert ids[3].tolist() == [3, 4, 5] and (src[3] == PEER).all() and (peer[3] == 0).all()
    assert ids[2].tolist() == [9, 10, 11] and src[2].tolist() == [PEER, MEMORY, SHARED] and peer[2, 0] == 1
    assert ids[0].tolist() == [0, 1, 2] and (src[0] == MEMORY).all()
    assert stats.tolist() == [4, 1]


def test_locality_cache_too_small_names_the_option():
    ctx = _ctx(sizes=1000)
    with pytest.raises(CapacityError, match="--cache-capacity"):
        _plan("locality", ctx, cache_capacity=100)
    assert _plan("locality", ctx, cache_capacity=1999).capacity.cache_peak_samples == [1, 1]


# ---- deepio -------------------------------------------------------------------------------------------------
def _dplan(F, W, b, E, seed, cap, mode):
    from dlbench.plan.deepio import deepio_plan

    return deepio_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=seed,
                       capacity=cap * 100, sample_nbytes=100, mode=mode, pipeline=SYNC)


@settings(max_examples=25, deadline=None)
@given(F=hs.integers(4, 70), W=hs.integers(1, 4), b=hs.integers(1, 6), E=hs.integers(1, 3),
       seed=hs.integers(0, 99), cap=hs.integers(1, 30), mode=hs.sampled_from(["ordered", "opportunistic"]))
def test_deepio_possession_counts_and_memory_only_draws(F, W, b, E, seed, cap, mode):
    if W > F:
        return
    plan = _dplan(F, W, b, E, seed, cap, mode)
    check_possession(plan)
    in_mem = set(plan.prologue.sample.tolist())
    ranges = np.bincount(np.arange(F) * W // F, minlength=W)
    assert len(in_mem) == np.minimum(ranges, cap).sum()
    for e in range(E):
        rows, bounds = global_rows(seed, e, F, W, b, False, False)
        ep = plan.epoch(e)
        assert np.array_equal(ep.bounds, bounds)                 # the global shuffle's count and steps
        if mode == "ordered":
            assert np.array_equal(ep.sample_ids, rows)
        else:
            assert set(ep.sample_ids.reshape(-1).tolist()) <= in_mem   # only what is in memory
            assert not (ep.source == SHARED).any()
    if mode == "ordered":
        check_epoch_cover(plan)


def test_deepio_opportunistic_prefers_holders_and_reports_its_order_quality():
    from dlbench.plan.quality import order_quality

    plan = _dplan(64, 2, 4, 4, 3, 32, "opportunistic")       # memory holds the dataset
    check_epoch_cover(plan)                                    # then each epoch is a full permutation
    ep = plan.epoch(1)
    own = (ep.source == MEMORY).mean()
    assert own > 0.75, own                                     # uniform dealing would give about 1/2
    small = _dplan(64, 2, 4, 4, 3, 8, "opportunistic")
    q = order_quality(small)
    assert q["max_after_E"] <= 16 / 64                        # never more than the 16 samples in memory
    assert not set(small.epoch(2).sample_ids.reshape(-1).tolist()) - set(range(8)) - set(range(32, 40))


def test_deepio_strategy_semantics_and_capacity():
    ctx = _ctx(F=60, sizes=1000)
    p = _plan("deepio", ctx, mode="opportunistic", cache_capacity=10 * 1000)
    assert p.semantics.as_dict()["each_epoch_a_full_permutation"].startswith("no")
    assert p.capacity.cache_peak_samples == [10, 10]
    assert _plan("deepio", ctx).semantics.as_dict()["order_changes"] == "no"
    with pytest.raises(CapacityError, match="--cache-capacity"):
        _plan("deepio", ctx, cache_capacity=10)


def test_clairvoyant_plan_is_the_same_for_any_chunking_of_the_frequency_pass():
    a = _cplan(50, 4, 3, 3, 9, slots=7, local_bytes=900.0)
    b = clairvoyant_plan(n_samples=50, world_size=4, node_map=np.arange(4), epochs=3, local_batch=3, seed=9,
                         sample_nbytes=100, memory_bytes=700.0, local_bytes=900.0, table_budget_bytes=13 * 50,
                         pipeline=Pipeline("prefetch", 2, 2))
    for ea, eb in zip(a, b):
        for f in ("sample_ids", "source", "peer", "keep"):
            assert np.array_equal(getattr(ea, f), getattr(eb, f)), f
    assert a.meta == b.meta and a.facts() == b.facts()


# ---- capacity in bytes, variable sample sizes (issue 19) ----------------------------------------------------
def _var_sizes(F, seed=5):
    return np.random.default_rng(seed).integers(200, 3000, F).astype(np.int64)   # the largest ~3 KB


def _held_bytes(plan, sizes):
    """(W,) bytes each rank stores in memory over the plan (prologue and keeps), each sample once."""
    held = [set() for _ in range(plan.world_size)]
    if plan.prologue is not None:
        for r, k, d in zip(plan.prologue.rank.tolist(), plan.prologue.sample.tolist(), plan.prologue.dst.tolist()):
            if d == MEMORY:
                held[r].add(k)
    for ep in plan:
        for r in range(plan.world_size):
            k = ep.rank_keep(r)
            held[r].update(ep.rank_samples(r)[k == MEMORY].tolist())
    return np.array([int(sizes[list(h)].sum()) if h else 0 for h in held]), [len(h) for h in held]


@pytest.mark.parametrize("name", ["clairvoyant", "locality", "deepio"])
def test_a_10kb_tier_holds_samples_summing_to_10kb_not_10kb_over_the_largest(name):
    F, W, cap = 60, 2, 10_000
    sizes = _var_sizes(F)
    sizes[7] = 9_000                                  # one large sample: slots of it would give 1 sample
    ctx = _ctx(F=F, W=W, sizes=sizes)
    plan = _plan(name, ctx, cache_capacity=cap, **({"mode": "ordered"} if name == "deepio" else {}))
    got, counts = _held_bytes(plan, sizes)
    assert (got <= cap).all(), got
    assert max(counts) > cap // int(sizes.max()), counts   # more than slots of the largest sample would hold
    assert plan.capacity.cache_peak_bytes == got.tolist()
    assert plan.capacity.cache_bytes_per_rank == max(got)
    # and it is the longest prefix that fits: the next candidate would overflow
    assert (got > cap - int(sizes.max())).all(), got


def test_deepio_partition_is_the_prefix_of_the_range_that_fits_in_bytes():
    from dlbench.plan.deepio import partitions

    sizes = np.array([4, 4, 4, 1, 1,   5, 1, 1, 1, 9], np.int64)
    own = partitions(10, 2, 9.0, sizes)
    assert own.tolist() == [0, 0, -1, -1, -1, 1, 1, 1, 1, -1]   # a prefix: 4+4 (the 1s after 4 do not count)


def test_clairvoyant_memory_tier_by_bytes_then_local():
    F, W, b, E, seed = 40, 2, 3, 6, 4
    sizes = _var_sizes(F)
    plan = clairvoyant_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=seed,
                            sample_nbytes=sizes, memory_bytes=5000.0, local_bytes=7000.0,
                            pipeline=Pipeline("prefetch", 2, 2))
    counts, first, _ = access_frequencies(n_samples=F, world_size=W, epochs=E, local_batch=b, seed=seed)
    for r in range(W):
        acc = np.nonzero(counts[r])[0]
        order = acc[np.lexsort((first[r, acc], -counts[r, acc].astype(np.int64)))]
        n_mem = int((np.cumsum(sizes[order]) <= 5000).sum())
        assert plan.capacity.cache_peak_samples[r] == n_mem
        assert plan.capacity.cache_peak_bytes[r] == int(sizes[order[:n_mem]].sum()) <= 5000
        assert plan.capacity.local_cache_peak_bytes[r] <= 7000


def test_lbann_capacity_check_counts_bytes():
    F, W = 60, 2
    sizes = _var_sizes(F)
    ctx = _ctx(F=F, W=W, sizes=sizes)
    own = (np.arange(F) * W) // F
    need = max(int(sizes[own == r].sum()) for r in range(W))
    plan = _plan("lbann", ctx, cache_capacity=need)                 # exactly the bytes of the larger range
    assert plan.capacity.cache_bytes_per_rank == need
    assert need < 30 * int(sizes.max())                               # slots of the largest would not fit
    with pytest.raises(CapacityError, match=f"needs {need:,} bytes"):
        _plan("lbann", ctx, cache_capacity=need - 1)


def test_clairvoyant_tie_break_orders_equally_accessed_samples():
    """tie_break: among samples a rank reads equally often, first-access caches the earlier-read ones first,
    sample-id the lower ids (the HDMLP thesis' reference simulator: a stable sort by count)."""
    from dlbench.plan.clairvoyant import assign_tiers

    counts = np.array([[2, 1, 1, 1, 1, 0]], np.int32)
    first = np.array([[3, 9, 0, 5, 2, 0]], np.int64)
    sizes = np.full(6, 100, np.int64)
    fa = assign_tiers(counts, first, sizes, 300, 100)
    si = assign_tiers(counts, first, sizes, 300, 100, tie_break="sample-id")
    assert np.flatnonzero(fa[0] == MEMORY).tolist() == [0, 2, 4] and np.flatnonzero(fa[0] == LOCAL).tolist() == [3]
    assert np.flatnonzero(si[0] == MEMORY).tolist() == [0, 1, 2] and np.flatnonzero(si[0] == LOCAL).tolist() == [3]
    ctx = _ctx(F=60, sizes=1000, E=4)
    a = _plan("clairvoyant", ctx, cache_capacity=10 * 1000)
    b = _plan("clairvoyant", ctx, cache_capacity=10 * 1000, tie_break="sample-id")
    assert a.meta["tie_break"] == "first-access" and b.meta["tie_break"] == "sample-id"
    check_possession(b)
    check_epoch_cover(b)
    assert b.capacity.cache_peak_bytes == a.capacity.cache_peak_bytes
