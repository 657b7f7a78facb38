"""pls's ondemand costing under the thesis rules (``events_generic.cost_ondemand_exchange``: the steps without a
PFS read vectorised across ranks) gives the per-rank loop's floats bit for bit (every step by that loop:
``EXCHANGE_VEC_MIN_RANKS`` past the world size), also with PFS reads and peer reads mixed into a step (those
steps run the per-rank loop), ranks of unequal length and several ranks per node."""

import dataclasses

import numpy as np
import pytest

from dlbench.plan import PEER, SHARED
from dlbench.simulate import Model, SimWorkload, events_generic, fastevents, load_profile
from dlbench.simulate.core import build_plan, policy_of

PROF = load_profile("hdmlp-thesis")
DRAWN = SimWorkload("drawn", 1203, 5, "normal", 1e6, 1e5)


def _mixed(ep):
    """Rank 0 reads three samples of the first step from the PFS, rank 1 four from a peer (the same step)."""
    src = ep.source.copy()
    src[0, :3] = SHARED
    src[-1, 1:5] = PEER
    return dataclasses.replace(ep, source=src)


def _assert_identical(a, b):
    for x, y in zip(a, b, strict=True):
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                assert np.array_equal(x[k], y[k]), k
        else:
            assert np.array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("nodes,rpn,mixed,gamma", [(4, 1, False, "thesis"), (3, 2, False, "thesis"),
                                                   (5, 1, True, "thesis"), (3, 2, True, "thesis"),
                                                   (4, 1, True, "nodes")])
def test_same_floats_as_generic_loop(nodes, rpn, mixed, gamma, monkeypatch):
    sizes = DRAWN.sizes(0)
    m = Model(PROF, rules="thesis")
    if gamma == "nodes":
        m = Model(PROF, rules=dataclasses.replace(m.rules, gamma="nodes"))
    plan = build_plan("pls", wl=DRAWN, nodes=nodes, ranks_per_node=rpn, epochs=3, seed=0, profile=PROF, sizes=sizes,
                      options={"exchange_fraction": 0.5})
    assert policy_of("pls", plan) == "ondemand" and len(plan.epoch(1).transfers)
    if mixed:
        plan = plan.map_epochs(_mixed)
        assert (plan.epoch(0).source == SHARED).any() and (plan.epoch(0).source == PEER).any()
    monkeypatch.setattr(events_generic, "EXCHANGE_VEC_MIN_RANKS", 10**9)     # every step by the per-rank loop
    ref = events_generic.cost_ondemand_exchange(m, plan, sizes, 0.5)
    monkeypatch.setattr(events_generic, "EXCHANGE_VEC_MIN_RANKS", 1)
    new = events_generic.cost_ondemand_exchange(m, plan, sizes, 0.5)
    _assert_identical(ref, new)
    assert np.array_equal(fastevents.cost_events(m, plan, sizes, "ondemand", None, 0.5)[0], ref[0])
