"""The simulator at scale (issue 31): the fast paths give exactly the plans of the direct computations."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.plan import SYNC, Pipeline
from dlbench.plan.caches import access_table, global_rows
from dlbench.plan.clairvoyant import clairvoyant_plan


def _access_table_by_rank(rows, bounds):
    """The former loop over ranks (one mask over every access per rank): the reference."""
    W, n = rows.shape
    col = np.arange(n)
    r_idx, c_idx = np.nonzero((col[None, :] < bounds[:, -1:]) & (rows >= 0))
    step = np.empty(len(r_idx), np.int64)
    for r in range(W):
        m = r_idx == r
        step[m] = np.searchsorted(bounds[r], c_idx[m], side="right") - 1
    order = np.lexsort((c_idx, r_idx, step))
    return r_idx[order], c_idx[order], rows[r_idx[order], c_idx[order]], step[order]


@pytest.mark.parametrize("W,F,b", [(1, 10, 3), (4, 37, 4), (7, 50, 2), (3, 9, 5)])
def test_access_table_equals_the_per_rank_loop(W, F, b):
    rng = np.random.default_rng(W * 100 + F)
    rows, bounds = global_rows(3, 1, F, W, b, False, False)
    rows = rows.copy()
    rows[rng.random(rows.shape) < 0.1] = -1          # holes
    bounds = bounds.copy()
    for r in range(W):                                # uneven rows: each rank its own bounds
        bounds[r] = np.sort(rng.integers(0, rows.shape[1] + 1, bounds.shape[1]))
    a = access_table(rows, bounds)
    ref = _access_table_by_rank(rows, bounds)
    for got, want in zip((a.rank, a.col, a.sample, a.step), ref):
        assert np.array_equal(got, want)


def _same_plans(p, q):
    assert p.meta == q.meta and p.facts() == q.facts()
    assert p.epochs == q.epochs
    for e in range(p.epochs):
        a, b = p.epoch(e), q.epoch(e)
        for name in ("sample_ids", "source", "bounds", "peer", "keep"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (e, name)


@pytest.mark.parametrize("W,F,E,b,dl,dlb", [
    (4, 37, 5, 3, False, False),     # padding: 3 samples read twice per epoch
    (6, 40, 7, 2, False, False),
    (5, 40, 4, 3, False, False),     # W divides F: no padding
    (7, 45, 6, 4, True, False),      # drop_last
    (6, 47, 5, 3, False, True),      # drop_last_batch: the last partial step is not read
    (16, 50, 9, 1, False, False),    # many ranks, long padding, batch 1
    (1, 12, 4, 5, False, False),
])
def test_clairvoyant_per_sample_plan_equals_the_tables(W, F, E, b, dl, dlb):
    sizes = np.random.default_rng(F).integers(100, 200, F)
    kw = dict(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=11,
              sample_nbytes=sizes, memory_bytes=float(sizes.sum()), drop_last=dl, drop_last_batch=dlb,
              pipeline=Pipeline("prefetch", 2, 2))
    fast = clairvoyant_plan(**kw)
    assert fast._build.__qualname__.startswith("_all_cached_plan")   # the per-sample path was taken
    _same_plans(fast, clairvoyant_plan(**kw, method="dense"))


def test_clairvoyant_falls_back_to_the_tables_where_memory_is_short():
    F, W = 40, 4
    sizes = np.full(F, 100)
    kw = dict(n_samples=F, world_size=W, node_map=np.arange(W), epochs=6, local_batch=2, seed=5,
              sample_nbytes=sizes, memory_bytes=1000.0, local_bytes=500.0, pipeline=Pipeline("prefetch", 2, 2))
    p = clairvoyant_plan(**kw)
    assert not p._build.__qualname__.startswith("_all_cached_plan")
    _same_plans(p, clairvoyant_plan(**kw, method="dense"))


def _rebalance_by_argmax(samples, owner, W, b):
    """The former rebalance_batch (a loop over ranks, argmax over every rank per move): the reference."""
    from dlbench.plan import MEMORY, PEER, SHARED

    n = len(samples)
    hold = owner[samples]
    dest = np.full(n, -1, np.int64)
    src = np.full(n, SHARED, np.uint8)
    peer = np.full(n, -1, np.int32)
    idx = np.argsort(hold, kind="stable")
    hs = hold[idx]
    starts = np.searchsorted(hs, np.arange(-1, W + 1))
    surplus, deficit = [], np.zeros(W, np.int64)
    for r in range(W):
        mine = idx[starts[r + 1]:starts[r + 2]]
        dest[mine[:b]], src[mine[:b]] = r, MEMORY
        surplus.append(mine[b:])
        deficit[r] = b - len(mine[:b])
    sur = np.array([len(s) for s in surplus], np.int64)
    taken = np.zeros(W, np.int64)
    moved = 0
    while sur.max(initial=0) > 0:
        s, d = int(np.argmax(sur)), int(np.argmax(deficit))
        m = int(min(sur[s], deficit[d]))
        go = surplus[s][taken[s]:taken[s] + m]
        dest[go], src[go], peer[go] = d, PEER, s
        taken[s] += m
        sur[s] -= m
        deficit[d] -= m
        moved += m
    free = idx[:starts[1]]
    dest[free] = np.repeat(np.arange(W), deficit)
    order = np.lexsort((np.arange(n), dest))
    return (samples[order].reshape(W, b), src[order].reshape(W, b), peer[order].reshape(W, b),
            np.array([moved, len(free)]))


@pytest.mark.parametrize("W,b,held_share", [(1, 4, 1.0), (5, 3, 1.0), (8, 4, 0.6), (33, 2, 0.9), (64, 7, 0.3),
                                             (16, 1, 0.0)])
def test_rebalance_batch_equals_the_argmax_loop(W, b, held_share):
    from dlbench.plan.locality import rebalance_batch

    rng = np.random.default_rng(W * b)
    F = W * b * 3
    for _ in range(5):
        owner = np.where(rng.random(F) < held_share, rng.integers(0, W, F), -1)
        if rng.random() < 0.5:      # skewed holders: long surpluses on a few ranks
            owner = np.where(owner >= 0, owner % max(1, W // 4), -1)
        samples = rng.permutation(F)[: W * b]
        for got, want in zip(rebalance_batch(samples, owner, W, b), _rebalance_by_argmax(samples, owner, W, b)):
            assert np.array_equal(got, want)


def test_staging_prologue_bound_knows_the_subset_plan():
    """with the profile, staging's bound is an all-gather (a row per sample and node) only where the dataset fits a
    node; beyond it each sample is staged at most once (the subset plans), so 4,096 nodes are not refused"""
    from dlbench.simulate import SimWorkload
    from dlbench.simulate.core import build_plan, prologue_rows
    from dlbench.system import load

    prof = load("hdmlp-thesis")                   # 100 GB node-local tier
    small = SimWorkload("s", 6_000, 8, "fixed", 1e5)      # 0.6 GB: fits a node
    big = SimWorkload("b", 6_000, 8, "fixed", 2e7)        # 120 GB: does not
    assert prologue_rows(["staging"], small, 64, 1, profile=prof) == (6_000 * 64, "staging")
    assert prologue_rows(["staging"], big, 64, 1) == (6_000 * 64, "staging")          # without sizes: the bound
    assert prologue_rows(["staging"], big, 64, 1, profile=prof) == (6_000 + 64, "staging")
    plan = build_plan("staging", wl=big, nodes=64, ranks_per_node=1, epochs=1, seed=0, profile=prof,
                      sizes=big.sizes(0))
    assert 6_000 <= len(plan.prologue.sample) <= 6_000 + 64


def test_size_refusal_says_what_would_fit():
    from dlbench.errors import ConfigError
    from dlbench.simulate import SimWorkload
    from dlbench.simulate.core import check_size, prologue_rows

    wl = SimWorkload("w", 60_000, 8, "fixed", 1e5)
    with pytest.raises(ConfigError) as e:
        check_size(wl, 2048, 1, available=8 * 2**30, prologue=prologue_rows(["staging"], wl, 2048, 1))
    msg = str(e.value)
    # 0.8 x 8 GiB less one epoch's 60,000 accesses (200 B each), at 80 B per row and 60,000 rows per node
    fit = int((0.8 * 8 * 2**30 - 200 * 60_000 - 64 * 8 * 2048) // (80 * 60_000))
    assert "\n" not in msg and f"enough for staging at up to {fit:,} nodes" in msg
    check_size(wl, fit - 1, 1, available=8 * 2**30, prologue=prologue_rows(["staging"], wl, fit - 1, 1))
    with pytest.raises(ConfigError) as e:
        check_size(SimWorkload("w", 10**9, 8), 1, 1, available=8 * 2**30)
    assert f"enough for up to {int((0.8 * 8 * 2**30 - 64 * 8) // 200):,} samples" in str(e.value)


def test_staging_subset_need_per_node_equals_the_per_group_sums():
    from dlbench.simulate import SimWorkload
    from dlbench.simulate.core import build_plan
    from dlbench.strategies.localcopy import capacity_sizes
    from dlbench.system import load

    wl = SimWorkload("b", 999, 8, "lognormal", 2e8, 5e7)       # ~200 GB: a subset per node
    sizes = wl.sizes(2)
    plan = build_plan("staging", wl=wl, nodes=6, ranks_per_node=2, epochs=1, seed=2, profile=load("hdmlp-thesis"),
                      sizes=sizes)
    pro, node = plan.prologue, plan.node_map
    assert "staging-subset" in plan.order
    stored = capacity_sizes(type("C", (), {"sample_nbytes": np.round(sizes).astype(np.int64), "n_samples": 999})(),
                            "local")
    want = [float(stored[np.unique(pro.sample[np.isin(pro.rank, np.nonzero(node == g)[0])])].sum())
            for g in range(6)]
    assert plan.capacity.needed_per_node_bytes == max(want)


def test_sim_scale_benchmark_smoke():
    """benchmarks/sim_scale.py at tiny sizes: one line per (strategy, nodes) with CPU seconds and peak memory"""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "sim_scale.py"), "--smoke", "--strategies",
                        "naive,clairvoyant,staging,locality", "--nodes", "2,4"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(s, n) for s in ("naive", "clairvoyant", "staging", "locality")
                                           for n in ("2", "4")]
    for r in rows:
        cpu, wall, gb = float(r[2]), float(r[3]), float(r[4])
        assert cpu > 0 and wall > 0 and 0.01 < gb < 4


@pytest.mark.parametrize("mode,dl", [("dynamic", False), ("dynamic", True), ("preload", False)])
def test_lbann_epochs_in_any_order_equal_the_sequence(mode, dl):
    """lbann's owners stop being replayed once no epoch can change them (preload; dynamic once all are held)"""
    from dlbench.plan.caches import lbann_plan

    kw = dict(n_samples=45, world_size=4, node_map=np.arange(4), epochs=5, local_batch=3, seed=9, mode=mode,
              drop_last=dl, pipeline=SYNC)
    seq = lbann_plan(**kw)
    ref = [seq.epoch(e) for e in range(5)]
    shuffled = lbann_plan(**kw)
    for e in (3, 0, 4, 2, 1, 4):
        got = shuffled.epoch(e)
        for name in ("sample_ids", "source", "peer", "keep"):
            assert np.array_equal(getattr(got, name), getattr(ref[e], name)), (e, name)


def test_pls_delivery_order_check_vectorised_still_catches_an_early_send():
    import dataclasses

    from dlbench.errors import RunError
    from dlbench.plan.shuffles import pls_plan
    from dlbench.strategies.localcopy import check_delivery_order

    plan = pls_plan(n_samples=103, world_size=4, node_map=np.arange(4) // 2, epochs=3, local_batch=5, seed=5, q=0.5)
    check_delivery_order(plan)

    def early(ep):   # every transfer posted at step 0, before most of the sent samples are trained on
        t = ep.transfers
        return dataclasses.replace(ep, transfers=dataclasses.replace(t, step=np.zeros_like(t.step)))

    with pytest.raises(RunError, match="sends a sample before training on it"):
        check_delivery_order(plan.map_epochs(early))
