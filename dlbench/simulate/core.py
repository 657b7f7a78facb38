"""Costing strategies end to end: workload sample sizes → the strategy's Plan (the same planners the
executors use) → the model → a summary in run.json's schema (docs/architecture.md contract 4), marked simulated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CapacityError, ConfigError, unknown_choice
from ..plan import PEER, SHARED, EpochPlan, Plan
from ..storage.tiers import TIER_NAMES
from ..system import SystemProfile
from ..timeline import PHASES
from . import fastevents
from .model import Costing, Model

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..strategies.base import PlanContext

MODEL_OPTIONS = {
    "prologue_fill_to_capacity": "the prologue also copies other nodes' pieces from peers until the node's "
                                 "destination tier is full (the HDMLP thesis' Parallel Data Staging; the plan "
                                 "trains on the own piece only, so the copies are pure cost)",
    "fill_by_tier_threads": "the plan's cache fills are read ahead from the shared FS by each node's tier "
                            "threads (profile tiers[].threads) in the plan's order from the epoch-0 start, not by "
                            "the loader at delivery, every cached sample, also one the plan first reads from a "
                            "peer (HDMLP's tier prefetchers; thesis-window rule only)",
    "peer_reads_from_shared": "every access the plan serves from a peer's tier reads the shared FS instead (the "
                              "HDMLP thesis' FrequencyPrefetcher fills the staging buffer from the own tiers or "
                              "the PFS only: its remote_prefetch is off)",
    "shared_reads_in_trainer": "the loader threads read ahead only what the plan serves from a tier or a peer; the "
                               "trainer reads each shared-FS access itself, in series with compute (the HDMLP "
                               "thesis' DeepIO: pfs_prefetch off; thesis-window rule only)",
    "cache_on_local_tier": "the plan's memory-tier holdings are on the node-local tier instead, and a peer serves "
                           "them at min(b_c, the local tier's rate) (the HDMLP thesis' Locality-aware caches on "
                           "its SSD; thesis-window rule only)",
}
LOWERBOUND = "lowerbound"   # not a strategy: everything in memory at t = 0 (costed on naive's plan)
# the study table's name of a row labelled with a strategy's name: ``Strategy.display``; the lower bound's here.
# prefetch's "StagingPool (prefetch)" waits for its ``display`` line in strategies/prefetch.py (another helper's file)
DISPLAY = {LOWERBOUND: "Lower Bound"}   # the lower bound is no strategy (naive's plan at zero I/O cost)


def display_name(label: str) -> str:
    """The study table's name of a row: a strategy's ``display`` where the row is labelled with a strategy's
    name, the lower bound's, else the label itself."""
    from .. import strategies

    if label in DISPLAY:
        return DISPLAY[label]
    return strategies.get(label).display_name() if label in strategies.names() else label


def shorthand_options(values: dict, names) -> dict:
    """``{strategy: {option: value}}`` for the shorthands ``values`` (``{"pls_q": 0.1}``, None: not given)
    of the strategies ``names`` that declare them (``Strategy.shorthands``)."""
    from .. import strategies

    out: dict = {}
    for n in dict.fromkeys(names):
        if n == LOWERBOUND:
            continue
        for sh, field in strategies.get(n).shorthands.items():
            if values.get(sh) is not None:
                out.setdefault(n, {})[field] = values[sh]
    return out


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
    layout: str | None = None            # the data layout, where a plan depends on it (None: any)

    def sizes(self, seed: int) -> np.ndarray:
        return sample_sizes(self.size_kind, self.samples, self.mean_bytes, self.std_bytes, seed,
                            self.min_bytes, self.max_bytes)


def sample_sizes(kind: str, n: int, mean: float, std: float, seed: int, lo: float = 1.0,
                 hi: float = float("inf")) -> np.ndarray:
    """Seeded per-sample sizes in whole bytes (float64 holding integers), clipped to [lo, hi] (rounded in)."""
    if kind == "fixed" or std == 0:
        return np.full(n, float(max(1, round(mean))))
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), 0x5153])))
    if kind == "normal":
        x = rng.normal(mean, std, n)
    elif kind == "lognormal":
        sig2 = np.log1p((std / mean) ** 2)
        x = rng.lognormal(np.log(mean) - sig2 / 2, np.sqrt(sig2), n)
    else:
        raise unknown_choice("size distribution", kind, ("fixed", "normal", "lognormal"))
    return np.clip(np.rint(x), max(1.0, np.ceil(lo)), np.floor(hi))


def from_workload(wl, *, accelerator: str | None = None, local_batch: int | None = None,
                  step_time_s: float | None = None, default_step: bool = False) -> SimWorkload:
    """A ``SimWorkload`` from a resolved ``dlbench.workload.Workload``; the step time is ``step_time_s``
    if given, else the workload's for ``accelerator`` (published, else measured: ``Workload.choose_step_time``,
    as ``dlbench run``), scaled linearly to the local batch; with neither, the workload's default step time
    (``dlbench run``'s: a100 where published) when ``default_step``, else the profile's compute throughput c."""
    b = wl.local_batch(local_batch)
    st: float | None
    if step_time_s is not None:
        st = step_time_s
    else:
        st = wl.choose_step_time(accelerator).scaled(b) if (accelerator or default_step) else None
    dist = wl.format.driver().size_distribution(wl)   # a format whose files' sizes are drawn (default None)
    if dist is not None:
        kind, mean, std, lo, hi = dist
        return SimWorkload(wl.name, wl.samples, b, kind, mean, std, lo, hi, st, layout=wl.layout)
    rs = getattr(wl, "record_size", None)
    if rs is not None:   # npy/npz with record sizes: the data array's distribution plus the fixed (label) arrays
        extra = wl.sample_nbytes - int(rs.mean_bytes)
        return SimWorkload(wl.name, wl.samples, b, rs.kind, rs.mean_bytes + extra, rs.std_bytes, rs.min_bytes + extra,
                           rs.max_bytes + extra, st, layout=wl.layout)
    return SimWorkload(wl.name, wl.samples, b, "fixed", float(wl.sample_nbytes), 0.0, step_time_s=st,
                       layout=wl.layout)


BYTES_PER_ACCESS = 200   # the model's working set per access of one epoch (ids, tiers, sizes, times: ~25 arrays)


BYTES_PER_PROLOGUE_ROW = 80   # measured: 71-81 B per prologue row (staging, 60,000 samples x 16-256 nodes)


def prologue_rows(rows, wl: SimWorkload, nodes: int, ranks_per_node: int,
                  options: dict | None = None, *, profile: SystemProfile | None = None,
                  seed: int = 0) -> tuple[int, str]:
    """(rows, strategy) of the largest prologue among ``simulate``'s ``rows`` (names or (label, strategy,
    options[, model options]) tuples; ``options``: {strategy: {option: value}}), from ``Strategy.prologue_rows``
    before any plan is built; unknown strategies and bad options are left to the planning. With ``profile``
    (and ``seed``: the sizes' draw) the strategies see the planner's view of the world (``sim_context``: sizes
    and capacities), so a bound can say what the plan will be (staging: an all-gather only where the dataset
    fits a node)."""
    from .. import strategies
    from ..errors import DlbenchError
    from ..strategies.base import Strategy

    ctx: PlanContext | None = None
    best = (0, "")
    for x in rows:
        name, o = (x, {}) if isinstance(x, str) else (x[1], dict(x[2] or {}))
        if name == LOWERBOUND or name not in strategies.names():
            continue
        st = strategies.get(name)
        try:
            opts = strategies.parse_options(st, {**(options or {}).get(name, {}), **o})
        except DlbenchError:
            continue
        if ctx is None and profile is not None and nodes * ranks_per_node <= wl.samples and \
                type(st).prologue_rows is not Strategy.prologue_rows:   # the sizes drawn only for a strategy that asks
            ctx = sim_context(wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=1, seed=seed,
                              profile=profile, sizes=wl.sizes(seed))
        n = st.prologue_rows(wl.samples, nodes, ranks_per_node, opts, ctx) if ctx is not None else \
            st.prologue_rows(wl.samples, nodes, ranks_per_node, opts)
        best = max(best, (n, name))
    return best


def check_size(wl: SimWorkload, nodes: int, ranks_per_node: int, *, available: int | None = None,
               prologue: tuple[int, str] = (0, "")) -> int:
    """Refuse worlds the model cannot cost here: more ranks than samples, or an estimated working set (one
    epoch's plan and costing arrays, about ``BYTES_PER_ACCESS`` per access, plus per-rank vectors, plus the
    largest prologue, ``BYTES_PER_PROLOGUE_ROW`` per row: ``prologue_rows``) beyond this machine's available
    memory. Returns the estimate in bytes."""
    W = int(nodes) * int(ranks_per_node)
    if W > wl.samples:
        raise ConfigError(f"--nodes {nodes} x --ranks-per-node {ranks_per_node} = {W:,} ranks: more than the "
                          f"{wl.samples:,} samples of workload {wl.name}; use fewer nodes or more samples")
    n = -(-wl.samples // W)
    epoch_est = BYTES_PER_ACCESS * W * n + 64 * 8 * W
    pro_rows, pro_name = prologue
    pro_est = BYTES_PER_PROLOGUE_ROW * int(pro_rows)
    est = epoch_est + pro_est
    if available is None:
        from ..host import meminfo

        available = meminfo("MemAvailable")
    if available and est > 0.8 * available:
        room = 0.8 * available
        if pro_est > epoch_est:
            # the prologue grows with the nodes (a row per sample and storage group), the epochs do not
            fit = int(max(0.0, room - epoch_est) // max(1.0, pro_est / nodes))
            raise ConfigError(f"--nodes {nodes} with {wl.samples:,} samples (--samples or the workload's): "
                              f"{pro_name}'s prologue of {pro_rows:,} moves (a row per sample and storage group) "
                              f"needs about {est / 2**30:.1f} GiB to cost; {available / 2**30:.1f} GiB available "
                              f"here, enough for {pro_name} at up to {fit:,} nodes; simulate fewer nodes or "
                              f"samples, or leave {pro_name} out")
        fit_samples = int(max(0.0, room - pro_est - 64 * 8 * W) // BYTES_PER_ACCESS)
        raise ConfigError(f"--nodes {nodes} with {wl.samples:,} samples (--samples or the workload's): costing "
                          f"{W:,} ranks x {n:,} samples per epoch needs about "
                          f"{est / 2**30:.1f} GiB; {available / 2**30:.1f} GiB available here, enough for up to "
                          f"{fit_samples:,} samples; simulate fewer nodes or samples")
    return est


def sim_context(*, wl: SimWorkload, nodes: int, ranks_per_node: int, epochs: int, seed: int,
                profile: SystemProfile, sizes: np.ndarray) -> PlanContext:
    """The planner's view of a simulated run: the ``PlanContext`` a run's ranks give ``Strategy.plan``
    (``RunContext.plan_context``), with the system profile's memory tier as the memory budget."""
    from ..strategies.base import PlanContext, PlanWorkload

    W = nodes * ranks_per_node
    return PlanContext(workload=PlanWorkload(name=wl.name, layout=wl.layout), n_samples=wl.samples,
                       sample_nbytes=np.round(sizes).astype(np.int64), world_size=W, rank=0,
                       node_map=np.repeat(np.arange(nodes), ranks_per_node), seed=seed,
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


def _loader_workers(strategy: str, options: dict | None) -> tuple[bool, bool]:
    """(hands batches from worker processes, starts new workers every epoch) of the strategy's loader: a
    DataLoader (options with ``persistent_workers``) with ``num_workers`` > 0; new workers every epoch without
    ``persistent_workers``."""
    from .. import strategies

    o = strategies.parse_options(strategies.get(strategy), dict(options or {}), where=f"options of {strategy}")
    workers = hasattr(o, "persistent_workers") and int(getattr(o, "num_workers", 0)) > 0
    return workers, workers and not o.persistent_workers


def peers_as_shared(plan: Plan) -> Plan:
    """``plan`` with every PEER access read from the shared FS instead (model option
    ``peer_reads_from_shared``); tiers, keeps, fills and the prologue unchanged."""

    def shared(ep: EpochPlan) -> EpochPlan:
        if ep.peer is None:
            return ep
        on_peer = ep.source == PEER
        return dataclasses.replace(ep, source=np.where(on_peer, np.uint8(SHARED), ep.source),
                                   peer=np.where(on_peer, np.int32(-1), ep.peer))

    return plan.map_epochs(shared)


def policy_of(strategy: str, plan: Plan) -> str:
    """The model policy of a plan: the lower bound, one request at a time (``sync``), or loader threads
    reading ahead (``prefetch``)."""
    if strategy == LOWERBOUND:
        return "lowerbound"
    return "ondemand" if plan.pipeline.kind == "sync" else "prefetch"


def _prologue_bytes(plan: Plan | None, sizes: np.ndarray | None) -> np.ndarray:
    """Bytes moved before epoch 0 by source tier, summed over ranks: one row of the prologue per sample moved,
    reads of the shared tier (SHARED) and samples received from another rank (PEER: staging's distribution)."""
    out = np.zeros(len(TIER_NAMES))
    if plan is None or sizes is None:
        return out
    pro = plan.prologue
    if not len(pro.sample):
        return out
    s = np.asarray(sizes, dtype=np.float64)[pro.sample]
    out += np.bincount(pro.src.astype(np.int64), weights=s, minlength=len(TIER_NAMES))[:len(TIER_NAMES)]
    return out


def _transfer_bytes(plan: Plan | None, sizes: np.ndarray | None,
                    known: dict[int, float] | None = None) -> np.ndarray:
    """Bytes background transfers move between ranks over the epochs (pls's exchange), as the PEER tier's
    entry of a by-tier vector (what a run's ``exchange`` intervals count under ``bytes_by_tier``). ``known``:
    epoch -> its transfer bytes, as noted while the costing built the epoch (``_noting_transfers``); only
    the epochs missing there are built again."""
    out = np.zeros(len(TIER_NAMES))
    if plan is not None and sizes is not None:
        known = known or {}
        out[TIER_NAMES.index("peer")] = sum(known[e] if e in known else plan.epoch(e).transfer_bytes(sizes)
                                            for e in range(plan.epochs))
    return out


def _noting_transfers(plan: Plan, sizes: np.ndarray) -> tuple[Plan, dict[int, float]]:
    """``plan`` with each epoch's transfer bytes noted (epoch -> bytes) as the epoch is built, so that the
    summary need not build every epoch a second time after the costing (``summarize``'s ``transfer_bytes``)."""
    noted: dict[int, float] = {}

    def note(ep: EpochPlan) -> EpochPlan:
        noted[int(ep.epoch)] = ep.transfer_bytes(sizes)
        return ep

    return plan.map_epochs(note), noted


def summarize(c: Costing, *, workload: str, profile: SystemProfile, extra: dict | None = None,
              plan: Plan | None = None, sizes: np.ndarray | None = None,
              transfer_bytes: dict[int, float] | None = None, checkpoint: dict | None = None) -> dict:
    """run.json's summary for a modelled run (``simulated: true``): the same function and the same
    definitions as a measured run's (``metrics.summary_from_arrays``, ``metrics.GLOSSARY``), fed with the
    model's per-rank phase times, plus the modelled breakdown (PFS, peer, local, compute, stall).
    ``transfer_bytes``: epoch -> background-transfer bytes already noted while costing (``simulate``).
    ``checkpoint``: the run's checkpoint schedule costed (``simulate.checkpoint.run_schedule``): its time is
    every rank's ``checkpoint`` phase and is added to the epochs it falls in (``checkpoint_schedule``)."""
    from ..metrics import summary_from_arrays

    W = c.ranks
    read_s = sum(c.fetch_s_by_tier[n] for n in TIER_NAMES)
    read_b = sum(c.bytes_by_tier[n] for n in TIER_NAMES)
    z = np.zeros(W)
    phases = {"read": read_s, "compute": c.compute_s, "stall": c.stall_s, "barrier": c.barrier_s,
              "exchange": c.exchange_s}
    P = {p: np.asarray(phases.get(p, z), dtype=np.float64) for p in PHASES}
    # every rank's epoch ends at the step barrier in the model: T[r, e] = the epoch's time
    T = np.broadcast_to(np.asarray(c.epoch_time_s, dtype=np.float64), (W, c.epochs))
    if checkpoint is not None:     # a sync save: every rank waits until the checkpoint is durable
        T = T + np.asarray(checkpoint["per_epoch_s"], dtype=np.float64)[None, :]
        P["checkpoint"] = np.full(W, float(checkpoint["time_s"]))
    pro_phase = {p: np.full(W, float(c.prologue_s) if p == "stage" else 0.0) for p in PHASES}
    requests = None
    if c.shared_requests is not None:   # counted by the costing (the thesis-rule engine), no second pass
        requests = np.asarray(c.shared_requests, dtype=np.float64)
    elif plan is not None:
        requests = np.zeros(W)
        if c.strategy != LOWERBOUND:
            for ep in plan:   # the accesses inside the step bounds, as the costing counts them
                col = np.arange(ep.sample_ids.shape[1])
                mask = (ep.sample_ids >= 0) & (ep.source == SHARED) & (col[None, :] < ep.bounds[:, -1:])
                if ep.chunk is not None:
                    mask &= ep.chunk != 0
                requests += mask.sum(axis=1)
    out = summary_from_arrays(
        T, P, read_b, c.samples, np.full(W, float(c.prologue_s)), workload=workload, strategy=c.strategy,
        eps=list(range(c.epochs)), ranks=W, nodes=c.nodes, tier_names=TIER_NAMES,
        bytes_by_tier=np.array([float(c.bytes_by_tier[n].sum()) for n in TIER_NAMES]) + _transfer_bytes(plan, sizes, transfer_bytes),
        prologue_bytes_by_tier=_prologue_bytes(plan, sizes), prologue_phase_time_s=pro_phase,
        read_requests=requests, simulated=True)
    out["modelled_breakdown"] = {
        "pfs_s": float(c.fetch_s_by_tier["shared"].mean()),
        "peer_s": float(c.fetch_s_by_tier["peer"].mean()),
        "local_s": float((c.fetch_s_by_tier["local"] + c.fetch_s_by_tier["memory"]).mean()),
        "compute_s": float(c.compute_s.mean()),
        "stall_s": float(c.stall_s.mean()),
        "barrier_s": float(c.barrier_s.mean()),
        "exchange_s": float(c.exchange_s.mean()),
        "prologue_s": float(c.prologue_s),
        "note": "fetch times are thread-busy seconds per rank (divided by the rank's loader threads); with "
                "prefetching they overlap compute, so stall_s is what is exposed; exchange_s is the exposed "
                "exchange (a step waiting for its exchange), its own phase as in a measured run",
    }
    out["system"] = profile.name
    out["model_notes"] = list(c.notes)
    if checkpoint is not None:
        out["checkpoint_schedule"] = checkpoint
    if profile.pfs is not None and profile.pfs.kind == "object_store":   # S3: the requests and their cost
        from .objectstore import modelled_block

        out["s3"] = modelled_block(out, plan, sizes, profile)
    if extra:
        out.update(extra)
    return out


def simulate(strategies, *, wl: SimWorkload, profile: SystemProfile, nodes: int, ranks_per_node: int = 1,
             epochs: int = 1, seed: int = 0, pls_q: float | None = None, write_overlap: bool | None = None,
             options: dict | None = None, loader_threads: int | None = None,
             rules=None, na_rows: bool = False, sizes: np.ndarray | None = None,
             checkpoint: Callable[[list[int]], dict] | None = None) -> dict[str, dict]:
    """Cost each strategy's plan (``Strategy.plan``); returns {strategy: summary}. ``strategies``: names,
    or (label, strategy, options[, model]) rows (the result is keyed by label; ``model``: per-row model
    options, ``MODEL_OPTIONS``). ``options``: {strategy: {option: value}} as ``dlbench run`` takes them;
    ``pls_q`` is pls's exchange_fraction. ``loader_threads`` (``--loader-threads``): the loader threads of
    every prefetching plan, to match a run. ``rules``: the model's rule set (a preset name, a mapping or
    ``ModelRules``; default: the profile's ``rules``). ``na_rows``: a row whose plan a capacity rule refuses
    is ``{"not_applicable": reason, ...}`` and the other rows are costed (published tables have N/A rows);
    otherwise its CapacityError propagates. ``sizes``: the bytes of every sample (a dataset's manifest) instead
    of draws from ``wl``'s size distribution. ``checkpoint``: steps per epoch -> the run's checkpoint schedule
    costed (``simulate.checkpoint.run_schedule``; ``dlbench simulate --checkpoint-every``)."""
    if nodes < 1 or ranks_per_node < 1 or epochs < 1:
        raise ConfigError(f"nodes={nodes}, ranks_per_node={ranks_per_node}, epochs={epochs}: each must be >= 1")
    if sizes is None:
        sizes = wl.sizes(seed)
    else:
        sizes = np.asarray(sizes, dtype=np.float64)
        if sizes.shape != (wl.samples,):
            raise ConfigError(f"sizes: {sizes.shape[0] if sizes.ndim == 1 else sizes.shape} values for the "
                              f"{wl.samples:,} samples of workload {wl.name}: give one size per sample")
    if wl.step_time_s is not None:
        model = Model(profile, step_time_s=wl.step_time_s, write_overlap=write_overlap, rules=rules)
    else:
        model = Model(profile, write_overlap=write_overlap, rules=rules)
    opts = {k: dict(v) for k, v in (options or {}).items()}
    for n, so in shorthand_options({"pls_q": pls_q}, strategy_names()).items():
        for k, v in so.items():
            opts.setdefault(n, {}).setdefault(k, v)
    from ..strategies import get as get_strategy

    out = {}
    rows = [(x, x, opts.get(x), {}) if isinstance(x, str) else
            (x[0], x[1], {**opts.get(x[1], {}), **(x[2] or {})}, dict(x[3]) if len(x) > 3 and x[3] else {})
            for x in strategies]
    for label, name, o, mo in rows:
        bad = set(mo) - set(MODEL_OPTIONS)
        if bad:
            raise unknown_choice(f"model option of row {label!r}", sorted(bad)[0], sorted(MODEL_OPTIONS))
        if name != LOWERBOUND and name in strategy_names():
            o = {**get_strategy(name).sim_defaults(model.rules), **(o or {})} or o
        try:
            plan = build_plan(name, wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs, seed=seed,
                              profile=profile, sizes=sizes, options=o)
        except CapacityError as e:
            if not na_rows:
                raise
            out[label] = {"not_applicable": str(e), "strategy": name, "label": label, "options": o or {}}
            continue
        if mo.get("peer_reads_from_shared"):
            plan = peers_as_shared(plan)
        if mo.get("shared_reads_in_trainer"):
            plan = fastevents.trainer_reads_shared(plan, model)
        if mo.get("cache_on_local_tier"):
            plan = fastevents.cache_on_local_tier(plan, model)
        plan, noted = _noting_transfers(plan, sizes)
        policy = policy_of(name, plan)
        threads = None
        handoff = restarts = False
        if policy == "prefetch":
            threads = float(loader_threads) / ranks_per_node if loader_threads else float(plan.pipeline.reader_threads())
            handoff, restarts = _loader_workers(name, o)
        c = model.cost(plan, sizes, policy, threads_per_rank=threads,
                       fill_to_capacity=bool(mo.get("prologue_fill_to_capacity", False)),
                       tier_fill=bool(mo.get("fill_by_tier_threads", False)),
                       worker_restart=restarts, loader_handoff=handoff)
        c.strategy = name
        ck = checkpoint([plan.epoch(e).steps for e in range(plan.epochs)]) if checkpoint is not None else None
        out[label] = summarize(c, workload=wl.name, profile=profile, plan=plan, sizes=sizes, transfer_bytes=noted,
                               checkpoint=ck,
                               extra={"label": label, "plan_order": plan.order or "",
                                      "plan_pipeline": plan.pipeline.kind, "plan_loader_threads_per_rank": threads,
                                      "options": o or {}, "model_options": mo,
                                      **({"cache_peak_bytes": plan.capacity.cache_peak_bytes}
                                         if plan.capacity.cache_peak_bytes is not None else {}),
                                      "model_rules": dataclasses.asdict(model.rules),
                                      **({"plan_warning": plan.warning} if plan.warning else {}),
                                      **({"staged_fraction": plan.staged_fraction}
                                         if plan.staged_fraction is not None else {})})
    return out
