"""Costing strategies end to end: workload sample sizes → the strategy's Plan (the same planners the
executors use) → the model → a summary in run.json's schema (contract 4), marked simulated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, unknown_choice
from ..plan import TIER_NAMES, Plan
from ..system import SystemProfile
from .model import Costing, Model

MODEL_OPTIONS = {
    "prologue_fill_to_capacity": "the prologue also copies other nodes' pieces from peers until the node's "
                                 "destination tier is full (the HDMLP thesis' Parallel Data Staging; the plan "
                                 "trains on the own piece only, so the copies are pure cost)",
    "fill_by_tier_threads": "the plan's cache fills are read ahead by each node's tier threads (profile "
                            "tiers[].threads) in the plan's order from the epoch-0 start, not by the loader at "
                            "delivery (HDMLP's tier prefetchers; thesis-window rule only)",
}
LOWERBOUND = "lowerbound"   # not a strategy: everything in memory at t = 0 (costed on naive's plan)
DISPLAY = {"lowerbound": "Lower Bound", "naive": "Naive", "prefetch": "StagingPool (prefetch)",
           "staging": "Parallel Data Staging", "local": "Local shuffling", "pls": "Partial local shuffling",
           "clairvoyant": "HDMLP (clairvoyant)", "lbann": "LBANN", "deepio": "DeepIO", "locality": "Locality-aware",
           "surrogatetrain": "SurrogateTrain"}


def strategy_names() -> list[str]:
    """What ``simulate`` can cost: the lower bound and every registered strategy."""
    from .. import strategies

    return [LOWERBOUND, *strategies.names()]


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
    if given, else the workload's for ``accelerator`` (published, else measured: ``Workload.choose_step_time``,
    as ``dlbench run``), scaled linearly to the local batch, else the profile's compute throughput c."""
    b = int(local_batch or wl.batch_size)
    if step_time_s is not None:
        st = step_time_s
    else:
        st = wl.choose_step_time(accelerator).scaled(b) if accelerator else None
    if wl.layout == "jpeg_folders":
        d = wl.jpeg.size
        return SimWorkload(wl.name, wl.samples, b, d.kind, d.mean_bytes, d.std_bytes, d.min_bytes, d.max_bytes, st)
    return SimWorkload(wl.name, wl.samples, b, "fixed", float(wl.sample_nbytes), 0.0, step_time_s=st)


BYTES_PER_ACCESS = 200   # the model's working set per access of one epoch (ids, tiers, sizes, times: ~25 arrays)


def check_size(wl: SimWorkload, nodes: int, ranks_per_node: int, *, available: int | None = None) -> int:
    """Refuse worlds the model cannot cost here: more ranks than samples, or an estimated working set (one
    epoch's plan and costing arrays, about ``BYTES_PER_ACCESS`` per access, plus per-rank vectors) beyond
    this machine's available memory. Returns the estimate in bytes."""
    W = int(nodes) * int(ranks_per_node)
    if W > wl.samples:
        raise ConfigError(f"--nodes {nodes} x --ranks-per-node {ranks_per_node} = {W:,} ranks: more than the "
                          f"{wl.samples:,} samples of workload {wl.name}; use fewer nodes or more samples")
    n = -(-wl.samples // W)
    est = BYTES_PER_ACCESS * W * n + 64 * 8 * W
    if available is None:
        from ..host import meminfo

        available = meminfo("MemAvailable")
    if available and est > 0.8 * available:
        raise ConfigError(f"--nodes {nodes}: costing {W:,} ranks x {n:,} samples per epoch needs about "
                          f"{est / 2**30:.1f} GiB; {available / 2**30:.1f} GiB available here; simulate fewer "
                          f"nodes or samples")
    return est


def sim_context(*, wl: SimWorkload, nodes: int, ranks_per_node: int, epochs: int, seed: int,
                profile: SystemProfile, sizes: np.ndarray):
    """The planner's view of a simulated run (``RunContext``'s pure fields): the same inputs a run's ranks
    give ``Strategy.plan``, with the system profile's memory tier as the memory budget."""
    from ..strategies import RunContext

    W = nodes * ranks_per_node
    return RunContext(workload=wl, n_samples=wl.samples, sample_nbytes=np.round(sizes).astype(np.int64),
                      world_size=W, rank=0, node_map=np.repeat(np.arange(nodes), ranks_per_node), seed=seed,
                      epochs=epochs, local_batch=wl.local_batch, system=profile,
                      memory_budget_bytes=profile.tier_capacity_bytes("memory"))


def build_plan(strategy: str, *, wl: SimWorkload, nodes: int, ranks_per_node: int, epochs: int, seed: int,
               profile: SystemProfile, sizes: np.ndarray, options: dict | None = None) -> Plan:
    """Exactly the plan ``dlbench run --strategy NAME`` builds (``Strategy.plan``) for this world; the lower
    bound costs naive's plan."""
    from .. import strategies

    name = "naive" if strategy == LOWERBOUND else strategy
    if strategy not in strategy_names():
        raise unknown_choice("strategy for simulate", strategy, strategy_names())
    st = strategies.get(name)
    opts = strategies.parse_options(st, dict(options or {}), where=f"options of {strategy}")
    ctx = sim_context(wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs, seed=seed, profile=profile,
                      sizes=sizes)
    return st.plan(ctx, opts)


def policy_of(strategy: str, plan: Plan) -> str:
    """The model policy of a plan: the lower bound, one request at a time (``sync``), or loader threads
    reading ahead (``prefetch``)."""
    if strategy == LOWERBOUND:
        return "lowerbound"
    return "ondemand" if plan.pipeline == "sync" else "prefetch"


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
             epochs: int = 1, seed: int = 0, pls_q: float | None = None, write_overlap: bool | None = None,
             options: dict | None = None, loader_threads: int | None = None,
             rules=None) -> dict[str, dict]:
    """Cost each strategy's plan (``Strategy.plan``); returns {strategy: summary}. ``strategies``: names,
    or (label, strategy, options[, model]) rows (the result is keyed by label; ``model``: per-row model
    options, ``MODEL_OPTIONS``). ``options``: {strategy: {option: value}} as ``dlbench run`` takes them;
    ``pls_q`` is pls's exchange_fraction. ``loader_threads`` (``--loader-threads``): the loader threads of
    every prefetching plan, to match a run. ``rules``: the model's rule set (a preset name, a mapping or
    ``ModelRules``; default: the profile's ``rules``)."""
    if nodes < 1 or ranks_per_node < 1 or epochs < 1:
        raise ConfigError(f"nodes={nodes}, ranks_per_node={ranks_per_node}, epochs={epochs}: each must be >= 1")
    sizes = wl.sizes(seed)
    if wl.step_time_s is not None:
        model = Model(profile, step_time_s=wl.step_time_s, write_overlap=write_overlap, rules=rules)
    else:
        model = Model(profile, write_overlap=write_overlap, rules=rules)
    opts = {k: dict(v) for k, v in (options or {}).items()}
    if pls_q is not None:
        opts.setdefault("pls", {}).setdefault("exchange_fraction", pls_q)
    out = {}
    rows = [(x, x, opts.get(x), {}) if isinstance(x, str) else
            (x[0], x[1], {**opts.get(x[1], {}), **(x[2] or {})}, dict(x[3]) if len(x) > 3 and x[3] else {})
            for x in strategies]
    for label, name, o, mo in rows:
        bad = set(mo) - set(MODEL_OPTIONS)
        if bad:
            raise unknown_choice(f"model option of row {label!r}", sorted(bad)[0], sorted(MODEL_OPTIONS))
        plan = build_plan(name, wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs, seed=seed,
                          profile=profile, sizes=sizes, options=o)
        policy = policy_of(name, plan)
        threads = None
        if policy == "prefetch":
            threads = float(loader_threads) / ranks_per_node if loader_threads else float(plan.loader_threads or 1)
        c = model.cost(plan, sizes, policy, threads_per_rank=threads,
                       fill_to_capacity=bool(mo.get("prologue_fill_to_capacity", False)),
                       tier_fill=bool(mo.get("fill_by_tier_threads", False)))
        c.strategy = name
        out[label] = summarize(c, workload=wl.name, profile=profile,
                               extra={"label": label, "plan_order": plan.meta.get("order", ""),
                                      "plan_pipeline": plan.pipeline, "plan_loader_threads_per_rank": threads,
                                      "options": o or {}, "model_options": mo,
                                      "model_rules": dataclasses.asdict(model.rules),
                                      **({"plan_warning": plan.meta["warning"]} if plan.meta.get("warning") else {})})
    return out
