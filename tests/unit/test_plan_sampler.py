import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlbench.plan import batch_bounds, distributed_indices, epoch_permutation, global_shuffle_plan


@given(n=st.integers(1, 500), w=st.integers(1, 9), dl=st.booleans())
@settings(max_examples=80, deadline=None)
def test_rank_rows_match_torch_distributed_sampler(n, w, dl):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DistributedSampler

    perm = epoch_permutation(3, 1, n)
    rows = distributed_indices(perm, w, dl)
    for r in range(w):
        s = DistributedSampler(list(range(n)), num_replicas=w, rank=r, shuffle=False, drop_last=dl)
        assert [int(perm[i]) for i in s] == rows[r].tolist()
    del torch


@given(n=st.integers(1, 2000), w=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_epoch_is_permutation_ranks_disjoint_and_covering(n, w, seed):
    plan = global_shuffle_plan(strategy="naive", n_samples=n, world_size=w, node_map=np.zeros(w, int),
                               epochs=2, local_batch=3, seed=seed, drop_last=True)
    e0, e1 = plan.epoch(0), plan.epoch(1)
    for ep in (e0, e1):
        got = np.concatenate([ep.rank_samples(r) for r in range(w)])
        assert len(np.unique(got)) == len(got)  # disjoint
        assert len(got) == (n // w) * w  # covering all but the dropped tail
    perm0, perm1 = epoch_permutation(seed, 0, n), epoch_permutation(seed, 1, n)
    assert sorted(perm0.tolist()) == list(range(n))
    if n > 5:
        assert not np.array_equal(perm0, perm1)


def test_padding_covers_every_sample():
    plan = global_shuffle_plan(strategy="naive", n_samples=10, world_size=3, node_map=[0, 0, 0],
                               epochs=1, local_batch=2, seed=1)
    got = np.concatenate([plan.epoch(0).rank_samples(r) for r in range(3)])
    assert len(got) == 12 and set(got.tolist()) == set(range(10))


def test_same_plan_from_same_inputs():
    kw = dict(strategy="naive", n_samples=1000, world_size=4, node_map=[0, 0, 1, 1], epochs=3,
              local_batch=7, seed=42)
    a, b = global_shuffle_plan(**kw), global_shuffle_plan(**kw)
    for e in range(3):
        assert np.array_equal(a.epoch(e).sample_ids, b.epoch(e).sample_ids)


def test_batch_bounds_partial_and_drop():
    assert batch_bounds(10, 4).tolist() == [0, 4, 8, 10]
    assert batch_bounds(10, 4, drop_last_batch=True).tolist() == [0, 4, 8]
