"""staging when even a node's subset exceeds its local capacity (issue 19), costed by ``simulate``: under the
thesis rules as the HDMLP thesis' reference Parallel Data Staging (stage the own partition file by file until
the tier is full, then every epoch draw the accesses from the staged part only), under the default rules the
physical reading (the staged prefix from the local tier, the rest of the subset from the shared tier)."""

import pytest

from dlbench.simulate import SimWorkload, build_plan, load_profile, simulate

PROF = load_profile("hdmlp-thesis")
MB = 1e6
WL = SimWorkload("t", 40, 5, mean_bytes=MB)          # 2 nodes: a subset of 20 x 1 MB per node
OPTS = {"staging": {"local_capacity": 7.5 * MB}}     # 7 of them fit


def test_thesis_rules_stage_what_fits_then_draw_from_it():
    s = simulate(["staging"], wl=WL, profile=PROF, nodes=2, epochs=2, seed=1, options=OPTS, rules="thesis")["staging"]
    assert s["options"]["if_too_big"] == "redraw" and "staging-redraw" in s["plan_order"]
    assert "35.0% of each node's subset is staged" in s["plan_warning"]
    # the reference's _init_from_pfs: the 7 files of a node round robin over the SSD's 2 threads, each
    # s / min(b_fs, t(N)/N) + max(s/beta, s/(r_0(p_0)/p_0)); t(2) = 86 MB/s, beta = 200 MB/s, r_0(2) = 21,164 MB/s
    per_file = MB / min(2000 * MB, 86 * MB / 2) + max(MB / (200 * MB), MB / (21164 * MB / 2))
    assert s["prologue_time_s"] == pytest.approx(4 * per_file, rel=1e-12)
    # the reference's _init_from_remote then copies nothing: the node's capacity (7.5 MB here, not the
    # profile's 100 GB SSD) is full
    f = simulate([("x", "staging", None, {"prologue_fill_to_capacity": True})], wl=WL, profile=PROF, nodes=2,
                 epochs=2, seed=1, options=OPTS, rules="thesis")["x"]
    assert f["prologue_time_s"] == pytest.approx(4 * per_file, rel=1e-12)
    assert s["prologue_bytes_by_tier"]["shared"] == 2 * 7 * MB
    # then no PFS read at all: 2 epochs x 2 nodes x 20 accesses from the SSD
    assert s["bytes_by_tier"] == {"shared": 0, "local": 2 * 2 * 20 * MB, "memory": 0, "peer": 0}
    plan = build_plan("staging", wl=WL, nodes=2, ranks_per_node=1, epochs=2, seed=1, profile=PROF,
                      sizes=WL.sizes(1), options={**OPTS["staging"], "if_too_big": "redraw"})
    pro = plan.prologue
    for ep in plan:
        for r in range(2):
            assert set(ep.sample_ids[r].tolist()) <= set(pro.sample[pro.rank == r].tolist())


def test_default_rules_read_the_rest_of_the_subset_from_the_shared_tier():
    s = simulate(["staging"], wl=WL, profile=PROF, nodes=2, epochs=2, seed=1, options=OPTS)["staging"]
    assert "if_too_big" not in s["options"] and "staging-partial" in s["plan_order"]
    assert s["staged_fraction"] == pytest.approx(7 / 20)
    assert s["bytes_by_tier"] == {"shared": 2 * 2 * 13 * MB, "local": 2 * 2 * 7 * MB, "memory": 0, "peer": 0}
    assert s["prologue_bytes_by_tier"]["shared"] == 2 * 7 * MB
    # an explicit choice wins over the thesis rules' default
    t = simulate([("x", "staging", {"if_too_big": "subset"})], wl=WL, profile=PROF, nodes=2, epochs=2, seed=1,
                 options=OPTS, rules="thesis")["x"]
    assert t["bytes_by_tier"]["shared"] == 2 * 2 * 13 * MB


def test_thesis_rules_draw_from_the_subset_also_when_it_fits():
    s = simulate(["staging"], wl=WL, profile=PROF, nodes=2, epochs=2, seed=1,
                 options={"staging": {"local_capacity": 25 * MB}}, rules="thesis")["staging"]
    assert "staging-redraw" in s["plan_order"] and "100.0% of each node's subset" in s["plan_warning"]
    assert s["bytes_by_tier"] == {"shared": 0, "local": 2 * 2 * 20 * MB, "memory": 0, "peer": 0}
    assert s["prologue_bytes_by_tier"]["shared"] == 40 * MB
    d = simulate(["staging"], wl=WL, profile=PROF, nodes=2, epochs=2, seed=1,
                 options={"staging": {"local_capacity": 25 * MB}})["staging"]
    assert "staging-subset" in d["plan_order"] and "staged" not in d["plan_warning"]


def test_simulate_prints_the_staged_fraction(cli, tmp_path):
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "hep_cnn", "--nodes", 2, "--strategies", "staging",
             "--option", "staging.local_capacity=1e10", "--out", tmp_path / "o"])
    assert r.exit_code == 0, r.output
    assert "dlbench: warning: staging: staging: even a per-node subset does not fit" in r.output
    assert "% of it is staged, the other" in r.output
