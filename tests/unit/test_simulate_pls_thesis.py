"""pls's background exchange under the thesis rules (the reference simulator has none; the event costing takes
the default model's rule: a rank's step ends no earlier than its start + the bytes it sends then / b_c, and the
trainer pays the exchange's local-tier files after the step's samples)."""

import numpy as np
import pytest
import thesis_oracle
from simcheck import assert_same_costing

from dlbench.plan import LOCAL
from dlbench.simulate import Model, SimWorkload, fastevents, load_profile, simulate
from dlbench.simulate.core import build_plan, policy_of
from dlbench.simulate.events_reads import exchange_per_step

PROF = load_profile("hdmlp-thesis")
DRAWN = SimWorkload("drawn", 1200, 5, "normal", 1e6, 1e5)


@pytest.mark.parametrize("opts,nodes,rpn", [({}, 4, 1), ({"loader_threads": 2}, 4, 1), ({}, 3, 2),
                                            ({"loader_threads": 2}, 5, 1)])
def test_engines_agree(opts, nodes, rpn):
    sizes = DRAWN.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = build_plan("pls", wl=DRAWN, nodes=nodes, ranks_per_node=rpn, epochs=3, seed=0, profile=PROF, sizes=sizes,
                      options={"exchange_fraction": 0.5, **opts})
    assert len(plan.epoch(1).transfers)
    pol = policy_of("pls", plan)
    thr = float(plan.pipeline.threads or 1) if pol == "prefetch" else None
    ref = thesis_oracle.cost_events(m, plan, sizes, pol, thr, 0.5)
    new = fastevents.cost_events(m, plan, sizes, pol, thr, 0.5)
    assert_same_costing(ref, new)


def test_sync_steps_by_hand():
    """Fixed 1 MB samples, one rank per node, sync: a step lasts the slowest rank's reads of its local files
    (s/r + s/beta + s/c each) plus the exchange's files it moves (the default model's per-step figure); the
    network part (1 MB / 10 GB/s) is below that."""
    wl = SimWorkload("f", 800, 5, "fixed", 1e6)
    sizes = wl.sizes(0)
    m = Model(PROF, rules="thesis")
    plan = build_plan("pls", wl=wl, nodes=4, ranks_per_node=1, epochs=2, seed=0, profile=PROF, sizes=sizes,
                      options={"exchange_fraction": 0.3})
    ep_times = fastevents.cost_events(m, plan, sizes, "ondemand", None, 0.0)[0]
    spb = m.fetch_s_per_byte(plan.nodes, PROF.staging.threads)
    per = 1e6 * (spb[LOCAL] + PROF.staging_write_s_per_byte() + m.compute_s_per_byte)
    for e in range(2):
        ep = plan.epoch(e)
        xs, tio = exchange_per_step(m, ep, sizes, plan.world_size)
        counts = np.diff(ep.bounds, axis=1)                      # (W, steps) samples per rank and step
        step = np.maximum(counts * per + tio, xs)
        assert tio.sum() > 0 and (xs < counts * per + tio).all()
        assert ep_times[e] == pytest.approx(step.max(axis=0).sum(), rel=1e-9)


def test_simulate_costs_pls_under_thesis_rules():
    r = simulate([("q", "pls", {"exchange_fraction": 0.5}), ("l", "pls", {"exchange_fraction": 0.0})], wl=DRAWN,
                 profile=PROF, nodes=4, epochs=2, rules="thesis")
    assert r["q"]["total_time_s"] > r["l"]["total_time_s"] > 0
