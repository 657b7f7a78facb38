"""Costing strategies end to end: workload sample sizes → the strategy's Plan (the same planners the
executors use) → the model → a summary in run.json's schema (contract 4), marked simulated."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CapacityError, ConfigError, unknown_choice
from ..plan import LOCAL, MEMORY, TIER_NAMES, Plan, global_shuffle_plan
from ..plan.shuffles import local_plan, pls_plan, staging_plan
from .model import Costing, Model
from ..system import SystemProfile

# strategy name -> model policy; the planner is chosen in build_plan
STRATEGIES = {"lowerbound": "lowerbound", "naive": "ondemand", "prefetch": "prefetch",
              "staging": "prefetch", "local": "prefetch", "pls": "prefetch"}
DISPLAY = {"lowerbound": "Lower Bound", "naive": "Naive", "prefetch": "StagingPool (prefetch)",
           "staging": "Parallel Data Staging", "local": "Local shuffling", "pls": "Partial local shuffling"}


@dataclass(frozen=True)
class SimWorkload:
    """What the model needs of a workload: a name, the sample count, the local batch and the size
    distribution (fixed, normal or lognormal; seeded)."""

    name: str
    samples: int
    local_batch: int
    size_kind: str = "fixed"
    mean_bytes: float = 1e6
    std_bytes: float = 0.0
    min_bytes: float = 1.0
    max_bytes: float = float("inf")
    step_time_s: float | None = None     # per local batch, when the accelerator is given

    def sizes(self, seed: int) -> np.ndarray:
        return sample_sizes(self.size_kind, self.samples, self.mean_bytes, self.std_bytes, seed,
                            self.min_bytes, self.max_bytes)


def sample_sizes(kind: str, n: int, mean: float, std: float, seed: int, lo: float = 1.0,
                 hi: float = float("inf")) -> np.ndarray:
    """Seeded per-sample sizes in bytes (float64), clipped to [lo, hi]."""
    if kind == "fixed" or std == 0:
        return np.full(n, float(mean))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0x5153])))
    if kind == "normal":
        x = rng.normal(mean, std, n)
    elif kind == "lognormal":
        sig2 = np.log1p((std / mean) ** 2)
        x = rng.lognormal(np.log(mean) - sig2 / 2, np.sqrt(sig2), n)
    else:
        raise unknown_choice("size distribution", kind, ("fixed", "normal", "lognormal"))
    return np.clip(x, lo, hi)


def from_workload(wl, *, accelerator: str | None = None, local_batch: int | None = None,
                  step_time_s: float | None = None) -> SimWorkload:
    """A ``SimWorkload`` from a resolved ``dlbench.workload.Workload``; the step time is ``step_time_s``
    if given, else the workload's for ``accelerator``, else the profile's compute throughput c."""
    b = int(local_batch or wl.batch_size)
    st = step_time_s if step_time_s is not None else (wl.step_time(accelerator, b) if accelerator else None)
    if wl.layout == "jpeg_folders":
        d = wl.jpeg.size
        return SimWorkload(wl.name, wl.samples, b, d.kind, d.mean_bytes, d.std_bytes, d.min_bytes, d.max_bytes, st)
    return SimWorkload(wl.name, wl.samples, b, "fixed", float(wl.sample_nbytes), 0.0, step_time_s=st)


def build_plan(strategy: str, *, wl: SimWorkload, nodes: int, ranks_per_node: int, epochs: int, seed: int,
               profile: SystemProfile, sizes: np.ndarray, pls_q: float = 0.1) -> Plan:
    """The strategy's plan from the pure planners (dlbench.plan)."""
    if strategy not in STRATEGIES:
        raise unknown_choice("strategy for simulate", strategy, STRATEGIES)
    W = nodes * ranks_per_node
    node_map = np.repeat(np.arange(nodes), ranks_per_node)
    common = dict(n_samples=wl.samples, world_size=W, node_map=node_map, epochs=epochs,
                  local_batch=wl.local_batch, seed=seed)
    if strategy in ("lowerbound", "naive", "prefetch"):
        return global_shuffle_plan(strategy=strategy, **common)
    kinds = {"memory": MEMORY, "local": LOCAL}
    tiers = [(kinds[t.kind], float(t.capacity_bytes)) for t in profile.tiers]
    if not tiers:
        raise CapacityError(f"strategy {strategy}: system profile {profile.name} has no node-local tiers")
    if strategy == "staging":
        try:
            return staging_plan(sample_nbytes=sizes, tiers=tiers, **common)
        except CapacityError as e:
            raise CapacityError(f"staging on {profile.name}: {e}; the per-node-subset variant is 'local'") from None
    # local / pls: a rank's shard (plus the pls exchange) on the fastest tier that holds a node's shards
    q = pls_q if strategy == "pls" else 0.0
    need = (1 + q) * float(sizes.mean()) * np.ceil(wl.samples / W) * ranks_per_node
    for code, cap in tiers:
        if need <= cap:
            tier = code
            break
    else:
        raise CapacityError(f"strategy {strategy}: a node needs {need:.4g} B for its shards "
                            f"((1+Q)·F/W per rank) but its largest tier holds {max(c for _, c in tiers):.4g} B")
    if strategy == "local":
        return local_plan(tier=tier, **common)
    return pls_plan(q=q, tier=tier, **common)


def summarize(c: Costing, *, workload: str, profile: SystemProfile, extra: dict | None = None) -> dict:
    """run.json's summary (contract 4 keys) for a modelled run, ``simulated: true``, with the modelled
    breakdown (PFS, peer, local, compute, stall)."""
    total = c.total_time_s
    W = c.ranks

    def stats(x):
        x = np.asarray(x, dtype=np.float64)
        mean = float(x.mean()) if len(x) else 0.0
        return {"min": float(x.min()), "mean": mean, "max": float(x.max()),
                "imbalance": float(x.max() / mean - 1) if mean else 0.0}

    read_s = sum(c.fetch_s_by_tier[n] for n in TIER_NAMES)
    read_b = sum(c.bytes_by_tier[n] for n in TIER_NAMES)
    stall = c.stall_s
    phase = {"read": float(read_s.mean()), "stage": float(c.prologue_s), "compute": float(c.compute_s.mean()),
             "stall": float(stall.mean()), "barrier": float(c.barrier_s.mean()), "exchange": float(c.exchange_s.mean()),
             "decode": 0.0, "transfer": 0.0, "checkpoint": 0.0}
    breakdown = {
        "pfs_s": float(c.fetch_s_by_tier["shared"].mean()),
        "peer_s": float(c.fetch_s_by_tier["peer"].mean()),
        "local_s": float((c.fetch_s_by_tier["local"] + c.fetch_s_by_tier["memory"]).mean()),
        "compute_s": float(c.compute_s.mean()),
        "stall_s": float(stall.mean()),
        "barrier_s": float(c.barrier_s.mean()),
        "exchange_s": float(c.exchange_s.mean()),
        "prologue_s": float(c.prologue_s),
        "note": "fetch times are thread-busy seconds per rank (divided by the rank's loader threads); with "
                "prefetching they overlap compute, so stall_s is what is exposed",
    }
    samples = float(c.samples.sum())
    out = {
        "workload": workload, "strategy": c.strategy, "ranks": W, "nodes": c.nodes, "epochs": c.epochs,
        "total_time_s": total, "epoch_time_s": [float(x) for x in c.epoch_time_s],
        "exposed_io_share": float(stall.mean() + c.exchange_s.mean()) / total if total else 0.0,
        "read_share": float(read_s.mean()) / total if total else 0.0,
        "au": float(c.compute_s.mean()) / total if total else 0.0,
        "samples_per_s": samples / total if total else 0.0,
        "read_bytes": float(read_b.mean()),
        "read_bandwidth_bytes_per_s": float(read_b.mean() / read_s.mean()) if read_s.mean() > 0 else 0.0,
        "bytes_by_tier": {n: float(c.bytes_by_tier[n].mean()) for n in TIER_NAMES},
        "phase_time_s": phase,
        "per_rank": {"compute_s": stats(c.compute_s), "stall_s": stats(stall), "barrier_s": stats(c.barrier_s),
                     "read_s": stats(read_s), "read_bytes": stats(read_b)},
        "simulated": True,
        "system": profile.name,
        "modelled_breakdown": breakdown,
        "model_notes": list(c.notes),
    }
    if extra:
        out.update(extra)
    return out


def simulate(strategies, *, wl: SimWorkload, profile: SystemProfile, nodes: int, ranks_per_node: int = 1,
             epochs: int = 1, seed: int = 0, pls_q: float = 0.1, write_overlap: bool = True) -> dict[str, dict]:
    """Cost each strategy; returns {strategy: summary}."""
    if nodes < 1 or ranks_per_node < 1 or epochs < 1:
        raise ConfigError(f"nodes={nodes}, ranks_per_node={ranks_per_node}, epochs={epochs}: each must be >= 1")
    sizes = wl.sizes(seed)
    if wl.step_time_s is not None:
        model = Model(profile, step_time_s=wl.step_time_s, write_overlap=write_overlap)
    else:
        model = Model(profile, write_overlap=write_overlap)
    out = {}
    for name in strategies:
        plan = build_plan(name, wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs, seed=seed,
                          profile=profile, sizes=sizes, pls_q=pls_q)
        c = model.cost(plan, sizes, STRATEGIES[name])
        out[name] = summarize(c, workload=wl.name, profile=profile,
                              extra={"plan_order": plan.meta.get("order", "")})
    return out
