import numpy as np
import pytest

from dlbench.errors import CapacityError, ConfigError
from dlbench.plan import LOCAL, MEMORY, PEER, SHARED
from dlbench.plan.shuffles import local_plan, pls_plan, staging_plan, tier_of_sample

KW = dict(n_samples=103, world_size=4, node_map=np.arange(4), epochs=5, local_batch=5, seed=11)


@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 1.0])
def test_pls_conservation_and_storage(q):
    plan = pls_plan(q=q, **KW)
    n = plan.epoch(0).sample_ids.shape[1]
    for ep in plan:
        ids = ep.sample_ids
        assert ids.shape == (4, n)                       # shard sizes stay balanced
        assert set(np.unique(ids)) == set(range(103))    # every sample somewhere (one pad duplicate)
        assert ids.size - len(np.unique(ids)) == 1
    assert plan.meta["storage_samples_per_rank"] <= (1 + q) * n
    if q:
        ep = plan.epoch(1)
        t = ep.transfers
        assert (t.src != t.dst).all()                    # never to itself
        for s in np.unique(t.step):                      # each step: every rank sends and receives as much
            m = t.step == s
            assert (np.bincount(t.src[m], minlength=4) == np.bincount(t.dst[m], minlength=4)).all()


def test_pls_same_inputs_same_plan_and_mixes():
    a, b = pls_plan(q=0.3, **KW), pls_plan(q=0.3, **KW)
    for e in (3, 1, 4):
        assert np.array_equal(a.epoch(e).sample_ids, b.epoch(e).sample_ids)
    loc = local_plan(**KW)
    s0 = set(loc.epoch(0).sample_ids[0])
    assert set(loc.epoch(4).sample_ids[0]) == s0          # local: same subset every epoch
    assert set(a.epoch(4).sample_ids[0]) != set(a.epoch(0).sample_ids[0])  # pls: subsets mix


def test_pls_bad_q():
    with pytest.raises(ConfigError, match="q="):
        pls_plan(q=1.5, **KW)


def test_staging_prologue_rows_route_pieces_between_nodes():
    """2 nodes x 2 ranks, one store per node: each sample read by rank i % 4 is sent once to the other node,
    to its rank at the sender's position in its node; the plan's possession check passes."""
    from dlbench.plan.invariants import check_possession

    sizes = np.full(40, 10.0)
    plan = staging_plan(n_samples=40, world_size=4, node_map=np.array([0, 0, 1, 1]), epochs=1, local_batch=5,
                        seed=0, sample_nbytes=sizes, tiers=[(LOCAL, 1e6)])
    pro = plan.prologue
    mv = pro.src == PEER
    assert mv.sum() == 40 and sorted(pro.sample[mv].tolist()) == list(range(40))
    assert pro.rank[mv].tolist() == [(p + 2) % 4 for p in pro.peer[mv].tolist()]
    assert (pro.peer[mv] == pro.sample[mv] % 4).all()
    check_possession(plan)
    assert plan.summary()["prologue_moves"] == 80


def test_staging_placement_and_capacity():
    sizes = np.full(103, 10.0)
    plan = staging_plan(sample_nbytes=sizes, tiers=[(MEMORY, 500.0), (LOCAL, 1e6)], **KW)
    src = plan.epoch(0).source
    assert (src == MEMORY).sum() + (src == LOCAL).sum() == src.size
    pro = plan.prologue
    reads = pro.src == SHARED
    assert reads.sum() == 103 and set(pro.rank[reads]) == {0, 1, 2, 3}
    # every other storage group receives every piece once, from the rank that read it: sender -> receiver rows
    assert (pro.src[~reads] == PEER).all() and (~reads).sum() == 3 * 103
    assert (pro.peer[~reads] == pro.sample[~reads] % 4).all() and (pro.peer[~reads] != pro.rank[~reads]).all()
    tier_of = np.zeros(103, np.uint8)
    tier_of[plan.epoch(0).sample_ids.reshape(-1)] = src.reshape(-1)
    assert (pro.dst == tier_of[pro.sample]).all()        # every copy goes to the sample's tier
    with pytest.raises(CapacityError):
        tier_of_sample(sizes, [(MEMORY, 100.0)])


def test_model_costs_the_prologue_peer_rows():
    """The model costs who sends what to whom: on a slow network a staging prologue takes at least each node's
    received bytes / b_c (its peer rows from other nodes), the same plan without its peer rows does not, and
    the prologue's bytes by tier count the rows under peer."""
    import dataclasses

    from dlbench.plan import Plan
    from dlbench.plan.plan import Prologue
    from dlbench.simulate import Model, load_profile
    from dlbench.simulate.core import _prologue_bytes

    prof = dataclasses.replace(load_profile("laptop-pfs"), network_mb_per_s=1.0)   # 1 MB/s: network-bound
    sizes = np.full(40, 1e5)
    plan = staging_plan(n_samples=40, world_size=2, node_map=np.arange(2), epochs=1, local_batch=5, seed=0,
                        sample_nbytes=sizes, tiers=[(LOCAL, 1e9)])
    pro = plan.prologue
    rd = pro.src == SHARED
    reads_only = Plan(strategy="staging", n_samples=40, world_size=2, node_map=np.arange(2), epochs=1,
                      local_batch=5, seed=0, build_epoch=plan._build, pipeline=plan.pipeline,
                      prologue=Prologue(pro.rank[rd], pro.sample[rd], pro.src[rd], pro.dst[rd], pro.peer[rd]))
    m = Model(prof, step_time_s=0.01)
    full, part = m.prologue_s(plan, sizes), m.prologue_s(reads_only, sizes)
    assert full == pytest.approx(20 * 1e5 / prof.network_bytes_per_s)    # each node receives the other's 20
    assert part < full / 10
    pb = _prologue_bytes(plan, sizes)
    assert pb[PEER] == 40 * 1e5 and pb[SHARED] == 40 * 1e5
    assert _prologue_bytes(reads_only, sizes)[PEER] == 0
