"""The plan carries typed data only (issue 27): what readers decide on are typed ``Plan`` fields, ``meta`` keeps
notes nothing in dlbench decides on, the loader is a required ``Pipeline``, a strategy that accepts
``--loader-threads`` but ignores it fails at ``register``, ``Semantics`` is typed, and ``Tier`` is the one tier
enumeration."""

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from dlbench import strategies
from dlbench.plan import LOCAL, MEMORY, PEER, SHARED, SYNC, Capacity, EpochPlan, Pipeline, Plan
from dlbench.plan.semantics import Answer, Clause, Semantics, no, yes
from dlbench.storage.tiers import TIER_NAMES, Tier

ROOT = Path(__file__).resolve().parents[2]


def _epoch(e: int) -> EpochPlan:
    ids = np.arange(4).reshape(2, 2)
    return EpochPlan(e, ids, np.full(ids.shape, SHARED, np.uint8), np.array([[0, 2], [0, 2]]))


def _plan(**kw) -> Plan:
    return Plan(strategy="t", n_samples=4, world_size=2, node_map=[0, 1], epochs=1, local_batch=2, seed=0,
                build_epoch=_epoch, **kw)


META_READ = re.compile(r"\.meta\[[^\]]*\](?!\s*=[^=])|\.meta\.get\(|\bin\s+[\w.]+\.meta\b|\.meta\.pop\(")


def test_the_scan_sees_the_reads_it_replaced():
    """The source scan below matches every form of meta read the tree had before the typed fields (lines taken
    from db2e6a0), and not a note written, so an empty scan means no read, not a blind pattern."""
    reads = ['rows = int(plan.meta.get("max_step_samples", plan.local_batch))',
             'self.capacity[MEMORY] = float(self.plan.meta["arena_bytes_per_rank"][self.ctx.rank])',
             'if "cache_peak_bytes" in plan.meta:',
             'plan.meta["semantics"] = Semantics(*plan.meta.pop("semantics_row")).as_dict()',
             'if loop.plan.meta.get("warning"):']
    assert all(META_READ.search(line) for line in reads)
    assert not META_READ.search('plan.meta["buffer_source"] = src      # a note, on this strategy\'s own copy')


def test_no_reader_decides_on_a_meta_key():
    """Nothing in dlbench reads a key of a plan's ``meta`` (``Plan.notes`` is the one read, for reports):
    a decision on an untyped note would hide a misspelled or missing key again."""
    bad = []
    for p in (ROOT / "dlbench").rglob("*.py"):
        if p == ROOT / "dlbench" / "plan" / "plan.py":
            continue
        for k, line in enumerate(p.read_text().splitlines(), 1):
            if META_READ.search(line):
                bad.append(f"{p.relative_to(ROOT)}:{k}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_pipeline_is_a_required_typed_value():
    with pytest.raises(TypeError, match="pipeline"):
        _plan()                                                    # type: ignore[call-arg]
    with pytest.raises(TypeError, match="a Pipeline"):
        _plan(pipeline="prefetch")                                 # the old string
    with pytest.raises(ValueError, match="pipeline 'ahead': one of"):
        Pipeline("ahead")
    assert Pipeline("prefetch", 3, 2).reader_threads() == 3 and Pipeline("prefetch").reader_threads() == 1
    assert SYNC.reader_threads() == 0 and _plan(pipeline=SYNC).pipeline is SYNC


def test_replace_is_a_pure_copy_of_the_typed_fields():
    p = _plan(pipeline=SYNC, order="o", capacity=Capacity(cache_peak_samples=[1, 2]), meta={"note": 1})
    q = p.replace(shared_reads_in_trainer=True, peer_tier=LOCAL, warning="w")
    assert (p.shared_reads_in_trainer, p.peer_tier, p.warning) == (False, MEMORY, None)
    assert (q.shared_reads_in_trainer, q.peer_tier, q.warning, q.order) == (True, LOCAL, "w", "o")
    r = q.with_capacity(cache_bytes_per_rank=5.0)
    assert r.capacity == Capacity(cache_peak_samples=[1, 2], cache_bytes_per_rank=5.0) and q.capacity.cache_bytes_per_rank is None
    q.meta["other"] = 2
    assert p.meta == {"note": 1} and np.array_equal(q.epoch(0).sample_ids, p.epoch(0).sample_ids)
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['cache_peak'\]"):
        p.replace(cache_peak=[1])
    with pytest.raises(TypeError, match="a Pipeline"):
        p.replace(pipeline="sync")


def test_capacity_summary_keeps_the_dry_runs_keys_and_order():
    c = Capacity(local_cache_peak_bytes=[3], cache_peak_samples=[1], capacity_source="s", arena_bytes_per_rank=[9])
    assert list(c.summary()) == ["capacity_source", "cache_peak_samples", "local_cache_peak_bytes"]
    assert Capacity().summary() == {}
    assert c.of_rank("arena_bytes_per_rank", 0) == 9
    with pytest.raises(ValueError, match="no per-rank 'storage_bytes_per_rank' stated"):
        c.of_rank("storage_bytes_per_rank", 0)
    with pytest.raises(ValueError, match="no per-rank 'capacity_source'"):
        c.of_rank("capacity_source", 0)


def test_notes_put_typed_figures_in_the_keys_order():
    p = _plan(pipeline=SYNC, meta={"a": 1, "c": 3})
    assert p.notes(("c", "b", "a"), b=2) == {"c": 3, "b": 2, "a": 1}
    assert p.notes(("a", "b"), b=None) == {"a": 1}


def _ignoring_strategy(name: str, passes: bool):
    from dlbench.strategies.cache import CacheOptions, pipeline_of

    class Ignores(strategies.Strategy):
        summary = "test: a strategy whose plan ignores --loader-threads"
        semantics = Semantics(yes(), yes(), no())
        Options = CacheOptions

        def plan(self, ctx, options):
            return Plan(strategy=self.name, n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                        epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, build_epoch=_epoch,
                        pipeline=pipeline_of(options) if passes else SYNC)

    Ignores.name = name
    return Ignores


def test_a_strategy_that_ignores_loader_threads_fails_at_register():
    from dlbench.strategies import _REGISTRY

    with pytest.raises(TypeError) as err:
        strategies.register(_ignoring_strategy("ignores-threads", passes=False))
    msg = str(err.value)
    assert "\n" not in msg and "strategy ignores-threads" in msg and "loader_threads=1" in msg
    assert "ignores-threads" not in _REGISTRY
    ok = _ignoring_strategy("passes-threads", passes=True)
    try:
        assert strategies.register(ok) is ok
    finally:
        _REGISTRY.pop("passes-threads", None)


def test_register_rejects_untyped_semantics():
    from dlbench.strategies import _REGISTRY

    cls = _ignoring_strategy("string-semantics", passes=True)
    cls.semantics = ("yes", "yes", "no")            # type: ignore[assignment]
    with pytest.raises(TypeError, match="strategy string-semantics: semantics .* is not a"):
        strategies.register(cls)
    assert "string-semantics" not in _REGISTRY


def test_semantics_are_typed_with_the_same_wording():
    assert Semantics(yes(), yes(), no()).as_dict() == {"each_epoch_a_full_permutation": "yes",
                                                       "global_batch_is_global_shuffles": "yes", "order_changes": "no"}
    assert str(no("per-node subsets")) == "no (per-node subsets)" and not no("x").holds and yes().holds
    with pytest.raises(TypeError, match="is not a Clause"):
        Semantics("yes", yes(), no())                              # type: ignore[arg-type]
    with pytest.raises(ValueError, match="says no, its answer is yes"):
        Clause(Answer.YES, "no (a contradiction)")
    with pytest.raises(ValueError, match="DEPENDS: needs a wording"):
        Clause(Answer.DEPENDS)
    for name in strategies.names():
        sem = strategies.get(name).semantics
        for f in dataclasses.fields(sem):
            assert isinstance(getattr(sem, f.name), Clause), (name, f.name)


def test_one_tier_enum_whose_values_are_the_plan_codes():
    assert [int(t) for t in Tier] == [SHARED, LOCAL, MEMORY, PEER] == [0, 1, 2, 3]
    assert TIER_NAMES == tuple(t.label for t in Tier) == ("shared", "local", "memory", "peer")
    assert all(type(c) is int for c in (SHARED, LOCAL, MEMORY, PEER))   # plain ints: what the hot paths compare
    hits = [p for p in (ROOT / "dlbench").rglob("*.py") if re.search(r"^TIER_NAMES\s*=", p.read_text(), re.M)]
    assert hits == [ROOT / "dlbench" / "storage" / "tiers.py"]
