"""The simulator at scale (issue 31): the fast paths give exactly the plans of the direct computations."""

from __future__ import annotations

import numpy as np
import pytest

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
    assert p.meta == q.meta
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
              sample_nbytes=sizes, memory_bytes=float(sizes.sum()), drop_last=dl, drop_last_batch=dlb)
    fast = clairvoyant_plan(**kw)
    assert fast._build.__qualname__.startswith("_all_cached_plan")   # the per-sample path was taken
    _same_plans(fast, clairvoyant_plan(**kw, method="dense"))


def test_clairvoyant_falls_back_to_the_tables_where_memory_is_short():
    F, W = 40, 4
    sizes = np.full(F, 100)
    kw = dict(n_samples=F, world_size=W, node_map=np.arange(W), epochs=6, local_batch=2, seed=5,
              sample_nbytes=sizes, memory_bytes=1000.0, local_bytes=500.0)
    p = clairvoyant_plan(**kw)
    assert not p._build.__qualname__.startswith("_all_cached_plan")
    _same_plans(p, clairvoyant_plan(**kw, method="dense"))
