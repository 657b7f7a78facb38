"""simulate() builds each epoch's plan once under the thesis-rule engine: the summary reuses what the costing
noted while building (background-transfer bytes, PFS requests) instead of building every epoch again."""

from collections import Counter

import numpy as np

from dlbench.simulate import SimWorkload, core, load_profile, simulate
from dlbench.storage.tiers import TIER_NAMES

PROF = load_profile("hdmlp-thesis")
WL = SimWorkload("drawn", 1200, 5, "normal", 1e6, 1e5)
EPOCHS = 5


def _counting(monkeypatch):
    built: dict[str, Counter] = {}
    real = core.build_plan

    def counted(strategy, **kw):
        plan = real(strategy, **kw)
        n = built.setdefault(strategy, Counter())

        def note(ep):
            n[int(ep.epoch)] += 1
            return ep

        return plan.map_epochs(note)

    monkeypatch.setattr(core, "build_plan", counted)
    return built


def test_thesis_engine_builds_every_epoch_once(monkeypatch):
    built = _counting(monkeypatch)
    r = simulate(["naive", "prefetch", ("q", "pls", {"exchange_fraction": 0.5})], wl=WL, profile=PROF,
                 nodes=4, epochs=EPOCHS, rules="thesis")
    for name in ("naive", "prefetch", "pls"):
        assert built[name] == Counter({e: 1 for e in range(EPOCHS)}), name
    # pls's exchange bytes in the summary: those of a fresh plan's epochs
    plan = core.build_plan("pls", wl=WL, nodes=4, ranks_per_node=1, epochs=EPOCHS, seed=0, profile=PROF,
                           sizes=WL.sizes(0), options={**r["q"]["options"]})
    moved = sum(plan.epoch(e).transfer_bytes(WL.sizes(0)) for e in range(EPOCHS))
    assert moved > 0
    peer = r["q"]["bytes_by_tier"]["peer"] if isinstance(r["q"]["bytes_by_tier"], dict) else \
        np.asarray(r["q"]["bytes_by_tier"])[TIER_NAMES.index("peer")]
    assert peer >= int(moved)
