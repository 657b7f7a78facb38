"""How far a plan's order is from a global shuffle: figures computed from the plan alone (pure).

``order_quality(plan)``: the fraction of the dataset each rank has trained on after 1..E epochs. Under a
global shuffle (naive, prefetch, staging) a rank sees a fresh random F/W each epoch, so the expected
fraction after E epochs is 1 − (1 − 1/W)^E; local shuffling stays at 1/W forever; PLS climbs between the
two, faster with larger Q. That is what PLS trades for its lower PFS traffic.
"""

from __future__ import annotations

import numpy as np

from .plan import Plan


def order_quality(plan: Plan, *, max_cells: int = 50_000_000) -> dict:
    """``{"fraction_of_dataset_seen_per_rank_after_epoch": [mean over ranks, per epoch], "min_after_E",
    "max_after_E", "global_shuffle_expected_after_epoch": [...], "ranks_measured"}``. Work is bounded by
    ``max_cells`` (ranks × samples); past it only the first ranks are measured."""
    W, F, E = plan.world_size, plan.n_samples, plan.epochs
    R = max(1, min(W, max_cells // max(F, 1)))
    seen = np.zeros((R, F), dtype=bool)
    means, last = [], np.zeros(R)
    for ep in plan:
        for r in range(R):
            seen[r, ep.rank_samples(r)] = True
        last = seen.sum(axis=1) / max(F, 1)
        means.append(round(float(last.mean()), 6))
    exp = [round(float(1 - (1 - 1 / W) ** (e + 1)), 6) if W > 1 else 1.0 for e in range(E)]
    return {"fraction_of_dataset_seen_per_rank_after_epoch": means,
            "min_after_E": round(float(last.min()), 6), "max_after_E": round(float(last.max()), 6),
            "global_shuffle_expected_after_epoch": exp, "ranks_measured": int(R),
            "definition": "per rank: |distinct samples it trained on in epochs 0..e| / F, mean over ranks"}
