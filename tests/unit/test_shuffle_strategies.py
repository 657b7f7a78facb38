"""staging, local, pls: plan invariants (pure) and executors on the in-memory format with a Serial comm."""

import numpy as np
import pytest

from dlbench import strategies
from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.errors import CapacityError, ConfigError
from dlbench.plan import LOCAL
from dlbench.plan.quality import order_quality
from dlbench.plan.shuffles import local_plan, pls_plan, staging_plan, staging_subset_plan, storage_bytes_per_rank
from dlbench.run.loop import Loop
from dlbench.run.setup import RunConfig
from dlbench.strategies.localcopy import check_delivery_order
from dlbench.system import builtin_names, load
from dlbench.timeline import PHASE_ID, Timeline

KW = dict(n_samples=103, world_size=4, node_map=np.arange(4) // 2, epochs=4, local_batch=5, seed=5)


def _ctx(**over):
    d = dict(workload=None, n_samples=103, sample_nbytes=np.full(103, 100, np.int64), world_size=4, rank=0,
             node_map=np.arange(4) // 2, seed=5, epochs=4, local_batch=5, system=load("local"),
             memory_budget_bytes=1e9)
    d.update(over)
    return strategies.RunContext(**d)


def test_every_system_profile_loads():
    names = builtin_names()
    assert {"local", "laptop-pfs", "hdmlp-thesis"} <= set(names)
    for n in names:
        load(n)
    assert load("local").pfs_model() is None
    m = load("laptop-pfs").pfs_model()
    assert m.latency_s == 0.0005 and m.rate_Bps(1) == pytest.approx(200e6)


def test_profile_unknown_key_and_bad_curve(tmp_path):
    import yaml

    base = yaml.safe_load(open(load.__globals__["resource_dir"]("configs") / "systems" / "laptop-pfs.yaml"))
    bad = dict(base, pfs=dict(base["pfs"], latncy_s=1))
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="did you mean 'latency_s'"):
        load(str(p))
    bad = dict(base, pfs=dict(base["pfs"], aggregate=[{"clients": 2, "mb_per_s": 1}, {"clients": 1, "mb_per_s": 2}]))
    p.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError, match="increase"):
        load(str(p))


@pytest.mark.parametrize("name", ["staging", "local", "pls"])
def test_plan_invariants(name):
    """Samples per epoch, every sample present (pad duplicates only), same plan when rebuilt."""
    st = strategies.get(name)
    opts = strategies.parse_options(st, {"exchange_fraction": 0.3} if name == "pls" else {})
    a, b = st.plan(_ctx(), opts), st.plan(_ctx(rank=3), opts)
    n = a.epoch(0).sample_ids.shape[1]
    for e in (2, 0, 3, 1):
        ea, eb = a.epoch(e), b.epoch(e)
        assert np.array_equal(ea.sample_ids, eb.sample_ids)   # same plan in every process
        assert ea.sample_ids.shape == (4, n) and (ea.counts() == n).all()
        assert set(np.unique(ea.sample_ids)) == set(range(103))
        assert ea.sample_ids.size - 103 == 4 * n - 103        # only the padding repeats
    assert len(np.unique(a.prologue.sample)) == 103           # staged once from the shared tier


@pytest.mark.parametrize("q", [0.0, 0.1, 0.3, 1.0])
def test_pls_conservation_capacity_and_send_after_training(q):
    plan = pls_plan(q=q, **KW)
    check_delivery_order(plan)
    held = [np.sort(plan.epoch(0).sample_ids[r]) for r in range(4)]
    for e in range(4):
        ep = plan.epoch(e)
        for r in range(4):   # what a rank trains on in epoch e is what it holds
            assert np.array_equal(np.sort(ep.sample_ids[r]), held[r])
        t = ep.transfers
        if t is not None:  # simulate the exchange: conservation of the multiset
            assert t.move
            new = []
            for r in range(4):
                keep = list(ep.sample_ids[r])
                for s in t.sample[t.src == r]:
                    keep.remove(s)
                keep += list(t.sample[t.dst == r])
                new.append(np.sort(keep))
            assert np.array_equal(np.sort(np.concatenate(new)), np.sort(np.concatenate(held)))
            held = new
    n = plan.epoch(0).sample_ids.shape[1]
    assert (storage_bytes_per_rank(plan, 10) <= 10 * (1 + q) * n).all()


def test_order_quality_orders_strategies():
    kw = dict(KW, epochs=6)
    g = order_quality(staging_plan(sample_nbytes=10, tiers=[(LOCAL, 1e9)], **kw))
    loc = order_quality(local_plan(**kw))
    p1, p3 = order_quality(pls_plan(q=0.1, **kw)), order_quality(pls_plan(q=0.5, **kw))
    last = [x["fraction_of_dataset_seen_per_rank_after_epoch"][-1] for x in (loc, p1, p3, g)]
    assert last == sorted(last) and last[0] < 0.27 and last[-1] > 0.7


def test_capacity_errors_say_how_much():
    st = strategies.get("local")
    with pytest.raises(CapacityError, match=r"--local-capacity: too small: .* needs 5,200 bytes .* per node, 1,000 bytes"):
        st.plan(_ctx(), strategies.parse_options(st, {"local_capacity": 1000}))
    with pytest.raises(ConfigError, match="exchange_fraction"):
        strategies.parse_options(strategies.get("pls"), {"exchange_fraction": 1.5})
    stg = strategies.get("staging")
    with pytest.raises(CapacityError, match="whole dataset"):
        stg.plan(_ctx(), strategies.parse_options(stg, {"local_capacity": 5000, "if_too_big": "error"}))
    plan = stg.plan(_ctx(), strategies.parse_options(stg, {"local_capacity": 6000}))
    assert "NOT a global shuffle" in plan.order and plan.semantics.as_dict()["global_batch_is_global_shuffles"] == "no"
    sub = staging_subset_plan(groups=np.arange(4) // 2, **{k: v for k, v in KW.items() if k != "node_map"})
    for ep in sub:  # ranks of a node share the node's subset
        assert set(ep.sample_ids[0]) | set(ep.sample_ids[1]) == set(np.unique(sub.epoch(0).sample_ids[:2]))


@pytest.mark.parametrize("strategy,opts", [("staging", {}), ("staging", {"tier": "memory"}), ("local", {}),
                                           ("pls", {"exchange_fraction": 0.5}), ("local", {"tier": "memory"})])
def test_executor_serial_verify(tmp_path, strategy, opts):
    wl = wl_mod.load("hep_cnn", scale="tiny")
    mem = MemoryReader(wl, seed=3)
    cfg = RunConfig(workload="hep_cnn", strategy=strategy, options=opts, epochs=2, batch_size=5, seed=3,
                    compute_time_s=0.0, verify=True, local_dir=str(tmp_path / "loc"))
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: MemoryReader(wl, seed=3))
    out = loop.run(Timeline(1024, 0))
    a = out["arrays"]
    assert out["verified"] == 2 * 64
    pro = a["epoch"] < 0
    assert (a["phase"][pro] == PHASE_ID["stage"]).sum() == 1
    rd = a["phase"] == PHASE_ID["read"]
    assert (a["tier"][rd & pro] == 0).all() and rd[pro].sum() == 64          # prologue: the shared tier
    assert (a["tier"][rd & ~pro] == (2 if opts.get("tier") == "memory" else 1)).all()
    assert -1 in list(a["epochs"])
    assert not any((tmp_path / "loc").rglob("*.row"))                        # cleaned up


def _partial(beyond, cap=2000):
    sizes = np.arange(103) % 7 * 10 + 50
    kw = {k: v for k, v in KW.items() if k != "node_map"}
    return sizes, staging_subset_plan(groups=np.arange(4) // 2, sample_nbytes=sizes, capacity=cap, beyond=beyond,
                                      **kw)


def test_staging_partial_subset_beyond_capacity_reads_the_rest_from_shared():
    from dlbench.plan import SHARED
    from dlbench.plan.invariants import check_possession

    sizes, plan = _partial("shared")
    check_possession(plan)
    pro = plan.prologue
    node = pro.groups[pro.rank]
    full = staging_subset_plan(groups=np.arange(4) // 2, **{k: v for k, v in KW.items() if k != "node_map"})
    for g in (0, 1):
        staged = np.sort(pro.sample[node == g])
        subset = np.unique(full.epoch(0).sample_ids[2 * g:2 * g + 2])
        assert sizes[staged].sum() <= 2000 < sizes[subset].sum()
        k = len(staged)
        assert np.array_equal(staged, subset[:k]) and sizes[subset[:k + 1]].sum() > 2000   # the prefix that fits
    for ep, ref in zip(plan, full):
        assert np.array_equal(ep.sample_ids, ref.sample_ids)        # every sample once per epoch, same order
        held = np.isin(ep.sample_ids, pro.sample)
        assert np.array_equal(ep.source == SHARED, ~held) and (ep.source[held] == LOCAL).all()
    frac = plan.staged_fraction
    assert 0 < frac < 1 and f"{frac:.1%} of it is staged" in plan.warning


def test_staging_redraw_draws_only_from_the_staged_prefix():
    sizes, plan = _partial("redraw")
    pro = plan.prologue
    for ep in plan:
        assert (ep.source == LOCAL).all()
        for r in range(4):
            mates = pro.sample[pro.groups[pro.rank] == r // 2]
            assert np.isin(ep.sample_ids[r], mates).all()
    assert plan.epoch(0).sample_ids.shape == _partial("shared")[1].epoch(0).sample_ids.shape
    assert not np.array_equal(plan.epoch(0).sample_ids, plan.epoch(1).sample_ids)


def test_staging_strategy_subset_beyond_capacity_is_said():
    stg = strategies.get("staging")
    plan = stg.plan(_ctx(), strategies.parse_options(stg, {"local_capacity": 2000}))
    assert plan.staged_fraction == pytest.approx(2000 * 2 / (2 * 52 * 100))   # subsets of 52 (padded)
    assert "read from the shared tier every epoch" in plan.warning
    with pytest.raises(CapacityError, match="holds none"):
        stg.plan(_ctx(), strategies.parse_options(stg, {"local_capacity": 50}))


@pytest.mark.parametrize("mode", ["subset", "redraw"])
def test_executor_serial_partial_staging_bytes_by_tier(tmp_path, mode):
    wl = wl_mod.load("hep_cnn", scale="tiny")
    mem = MemoryReader(wl, seed=3)
    cap = 20 * wl.sample_nbytes
    cfg = RunConfig(workload="hep_cnn", strategy="staging", options={"local_capacity": cap, "if_too_big": mode},
                    epochs=2, batch_size=5, seed=3, compute_time_s=0.0, verify=True, local_dir=str(tmp_path / "loc"))
    loop = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: MemoryReader(wl, seed=3))
    out = loop.run(Timeline(1024, 0))
    a = out["arrays"]
    assert out["verified"] == 2 * 64
    rd = (a["phase"] == PHASE_ID["read"]) & (a["epoch"] >= 0)
    if mode == "subset":
        assert (a["tier"][rd] == 0).sum() == 2 * 44 and (a["tier"][rd] == 1).sum() == 2 * 20
    else:   # 64 draws per epoch from the 20 staged samples, all from the local copies
        assert (a["tier"][rd] == 1).sum() == 2 * 64
