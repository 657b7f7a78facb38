"""Run studies: several measured runs (strategies with options) on the same data and system, and one
comparison. A study file (``configs/studies/shuffle-comparison.yaml``)::

    name: shuffle-comparison
    workload: cosmoflow          # name or YAML path
    scale: tiny                  # sample shapes of that preset
    samples: 400                 # dataset size (generated once, reused by every run)
    system: laptop-pfs           # --system of every run
    epochs: 3
    batch_size: 8
    compute_time_s: 0.01
    seed: 0
    runs:
      - {strategy: naive}
      - {strategy: pls, options: {exchange_fraction: 0.3}}

Run serially or under ``mpiexec`` (every rank runs every entry; rank 0 writes the results folders).

A scaling study adds a ``sweep`` (and optionally a ``simulate`` part)::

    sweep:
      ranks: [1, 2, 4, 8]            # world sizes; or nodes: [1, 2, 4] with ranks_per_node: 4
      workloads: [cosmoflow]         # default: the study's workload
      scaling: weak                  # weak: F = samples_per_rank x ranks; strong: F = samples (fixed)
      samples_per_rank: 200
    simulate:                        # `dlbench study FILE --simulate`: the model, to 1,024 nodes
      nodes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
      system: laptop-pfs             # default: the study's system

Each launch (``mpiexec -n W dlbench study FILE``) runs the sweep's points whose world size is W (every
workload and run entry), each on its own dataset (``<data root>/<workload>-<scale>-F<F>-seed<seed>``,
generated if missing), all into one results root; ``dlbench compare``/``plot`` then read the root.
``dlbench jobscript FILE --scheduler slurm|pbs|flux`` writes the batch scripts for a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_NODES,
    MAX_RANKS_PER_NODE,
    MAX_SEED,
    MAX_STEP_TIME_S,
    from_mapping,
    load_yaml,
    opt,
    resource_dir,
)
from .errors import CapacityError, ConfigError, DlbenchError
from .report import run_label


@dataclass(frozen=True, kw_only=True)
class StudyRun:
    strategy: str = opt(help="strategy name")
    options: dict = opt(factory=dict, help="the strategy's options (as its --flags, with underscores)")


@dataclass(frozen=True, kw_only=True)
class Sweep:
    ranks: tuple[int, ...] = opt((), help="world sizes (ranks) to run", min=1, max=MAX_NODES * MAX_RANKS_PER_NODE)
    nodes: tuple[int, ...] = opt((), help="node counts (world size = nodes x ranks_per_node)", min=1, max=MAX_NODES)
    ranks_per_node: int = opt(1, help="ranks per node with nodes:", min=1, max=MAX_RANKS_PER_NODE)
    workloads: tuple[str, ...] = opt((), help="workloads (names or YAML paths) [default: the study's]")
    scaling: str = opt("strong", help="weak: F = samples_per_rank x ranks; strong: F = samples",
                       choices=("weak", "strong"))
    samples_per_rank: int | None = opt(None, help="weak scaling: samples per rank", min=1)


@dataclass(frozen=True, kw_only=True)
class SimulatePart:
    nodes: tuple[int, ...] = opt(help="node counts to model", min=1, max=MAX_NODES)
    ranks_per_node: int | None = opt(None, help="[default: the sweep's, else 1]", min=1, max=MAX_RANKS_PER_NODE)
    system: str | None = opt(None, help="system profile [default: the study's]")
    strategies: tuple[str, ...] = opt((), help="[default: the study's runs' strategies]")
    pls_q: float | None = opt(None, help="Q of pls [default: the pls run's exchange_fraction, else 0.1]", min=0,
                              max=1)


@dataclass(frozen=True)
class Point:
    """One point of a sweep: a workload at a world size, with its dataset size."""

    workload: str
    ranks: int
    nodes: int | None      # None: a ranks sweep (nodes as the launcher places them)
    samples: int


@dataclass(frozen=True, kw_only=True)
class RunStudy:
    name: str = opt(help="study name")
    description: str = opt("", help="one line")
    workload: str = opt(help="workload name or YAML path")
    scale: str | None = opt("tiny", help="preset whose sample shapes are used")
    samples: int | None = opt(None, help="number of samples (default: the preset's)", min=1)
    system: str = opt("local", help="system profile of every run")
    epochs: int = opt(3, help="epochs per run", min=1, max=MAX_EPOCHS)
    batch_size: int | None = opt(None, help="local batch per rank", min=1, max=MAX_BATCH)
    compute_time_s: float | None = opt(None, help="sleep per step", unit="s", min=0, max=MAX_STEP_TIME_S)
    seed: int = opt(0, help="dataset and shuffle seed", min=0, max=MAX_SEED)
    out: str = opt("results", help="results root")
    runs: tuple[StudyRun, ...] = opt(help="the runs, in order")
    sweep: Sweep | None = opt(None, help="scaling sweep: ranks or nodes, workloads, weak or strong")
    simulate: SimulatePart | None = opt(None, help="the modelled part of a scaling study (--simulate)")


def load_study(path_or_name: str) -> RunStudy:
    p = Path(path_or_name)
    if not p.is_file():
        cand = resource_dir("configs") / "studies" / f"{path_or_name}.yaml"
        if not cand.is_file():
            raise ConfigError(f"study {path_or_name}: no such file (nor configs/studies/{path_or_name}.yaml)")
        p = cand
    data = load_yaml(p, "study")
    if isinstance(data, dict) and "runs" not in data and "strategies" in data:
        raise ConfigError(f"study {p}: a simulation study (strategies:, nodes:); run it with "
                          f"`dlbench simulate --study {p}`")
    st = from_mapping(RunStudy, data, where=str(p))
    if not st.runs:
        raise ConfigError(f"runs in {p}: needs at least one run")
    from . import strategies

    for i, r in enumerate(st.runs):
        strat = strategies.get(r.strategy)
        strategies.parse_options(strat, r.options, where=f"{p} runs[{i}].options")
    sw = st.sweep
    if sw is not None:
        if bool(sw.ranks) == bool(sw.nodes):
            raise ConfigError(f"sweep (in {p}): give exactly one of ranks: [...] or nodes: [...]")
        if sw.scaling == "weak" and sw.samples_per_rank is None:
            raise ConfigError(f"sweep.scaling=weak (in {p}): needs sweep.samples_per_rank (F = samples_per_rank x ranks)")
        if sw.scaling == "strong" and sw.samples_per_rank is not None:
            raise ConfigError(f"sweep.samples_per_rank (in {p}): only with scaling: weak (strong scaling keeps "
                              f"samples: fixed)")
    if st.simulate is not None:
        from .simulate import strategy_names

        known = strategy_names()
        for s in simulate_strategies(st):
            if s not in known:
                from .errors import unknown_choice

                raise unknown_choice("strategy for simulate", s, known, where=f"{p} simulate.strategies")
    return st


def points(st: RunStudy, *, nodes_list=None) -> list[Point]:
    """Every (workload, world size) of the sweep with its dataset size F (one point with the study's own
    settings when there is no sweep). ``nodes_list`` replaces the sweep's node counts (jobscript)."""
    sw = st.sweep
    if sw is None:
        return []
    wls = list(sw.workloads) or [st.workload]
    if nodes_list:
        sizes = [(n * sw.ranks_per_node, n) for n in nodes_list]
    elif sw.nodes:
        sizes = [(n * sw.ranks_per_node, n) for n in sw.nodes]
    else:
        sizes = [(r, None) for r in sw.ranks]
    out = []
    for wl in wls:
        for w, n in sizes:
            out.append(Point(wl, w, n, samples_for(st, w)))
    return out


def samples_for(st: RunStudy, ranks: int) -> int | None:
    """F at a world size: samples_per_rank x ranks (weak scaling), else the study's samples."""
    sw = st.sweep
    if sw is not None and sw.scaling == "weak":
        return int(sw.samples_per_rank) * int(ranks)
    return st.samples


def sweep_sizes(st: RunStudy) -> list[int]:
    return sorted({p.ranks for p in points(st)})


def _is_s3(d) -> bool:
    return isinstance(d, str) and d.startswith("s3://")


def point_data_dir(st: RunStudy, root: Path | str, p: Point, wl) -> Path | str:
    """``<root>/<workload>[-<tag>]-<scale>-F<F>-seed<seed>``: one dataset per workload and size (weak scaling
    needs one per world size; strong scaling shares one). ``wl``: the point's resolved workload; ``tag``
    (``run.setup.data_dir_tag``) tells a user's YAML apart from a built-in of the same name, as in run_study."""
    from .run.setup import data_dir_tag

    tag = data_dir_tag(wl.spec_path, wl)
    name = f"{Path(p.workload).stem}{'-' + tag if tag else ''}-{st.scale or 'full'}-F{p.samples or 'preset'}-seed{st.seed}"
    if isinstance(root, str) and _is_s3(root):   # a bucket prefix: the point's dataset under it
        return f"{root.rstrip('/')}/{name}"
    return Path(root) / name


def default_sweep_data_root() -> Path:
    """``<data root>/sweeps`` (``host.data_root``: $DLBENCH_DATA_DIR, default ~/.cache/dlbench/data)."""
    from .host import data_root

    return data_root() / "sweeps"


def _generate_if_missing(wl, d: Path | str, st: RunStudy, comm, echo) -> None:
    from .data.generate import generate
    from .data.manifest import Manifest

    if isinstance(d, str):   # s3://bucket/prefix: the manifest object says whether it is there
        from .data.bucket import generate_to
        from .data.manifest import MANIFEST_NAME
        from .storage.s3 import S3Backend

        if S3Backend(d).exists(MANIFEST_NAME):
            return
        if echo:
            echo(f"generating {wl.name} ({wl.samples} samples, {wl.dataset_nbytes / 1e6:.0f} MB) in {d}")
        generate_to(wl, d, seed=st.seed, comm=comm, progress=False)
        return
    if Manifest.exists(d):
        return
    if echo:
        echo(f"generating {wl.name} ({wl.samples} samples, {wl.dataset_nbytes / 1e6:.0f} MB) in {d}")
    if comm.rank == 0:
        d.parent.mkdir(parents=True, exist_ok=True)
    comm.barrier()
    generate(wl, d, seed=st.seed, comm=comm, progress=False)


def generate_sweep(st: RunStudy, comm, *, data_root=None, echo=None, nodes_list=None) -> list[Path | str]:
    """Generate every dataset of the sweep (``dlbench study FILE --generate-only``, a cluster's first job)."""
    from . import workload as wl_mod

    root = data_root if _is_s3(data_root) else Path(data_root) if data_root else default_sweep_data_root()
    out = []
    for key in dict.fromkeys((p.workload, p.samples) for p in points(st, nodes_list=nodes_list)):
        p = Point(key[0], 0, None, key[1])
        wl = wl_mod.load(p.workload, scale=st.scale, samples=p.samples)
        d = point_data_dir(st, root, p, wl)
        _generate_if_missing(wl, d, st, comm, echo)
        out.append(d)
    return out


def run_sweep(st: RunStudy, comm, *, data_root=None, local_dir=None, out=None, epochs=None, echo=None) -> list[str]:
    """Run the sweep's points whose world size is this launch's (``comm.size``): every workload and run
    entry; returns the run folders (rank 0). A world size the sweep does not have is an error naming the
    sizes it has."""
    from . import workload as wl_mod

    mine = [p for p in points(st) if p.ranks == comm.size]
    if not mine:
        sizes = ", ".join(map(str, sweep_sizes(st)))
        raise ConfigError(f"sweep of {st.name}: no point with {comm.size} rank(s) (this launch's world size); "
                          f"the sweep has {sizes}: launch with mpiexec -n <one of them>")
    root = data_root if _is_s3(data_root) else Path(data_root) if data_root else default_sweep_data_root()
    dirs = []
    k = 0
    total = len(mine) * len(st.runs)
    for p in mine:
        wl = wl_mod.load(p.workload, scale=st.scale, samples=p.samples)
        d = point_data_dir(st, root, p, wl)
        _generate_if_missing(wl, d, st, comm, echo)
        for r in st.runs:
            k += 1
            head = f"[{k}/{total}] {p.workload} F={wl.samples} on {comm.size} rank(s), {comm.nodes} node(s): "
            rd = _run_entry(st, r, p.workload, d, comm, out=out, epochs=epochs, local_dir=local_dir, echo=echo,
                            head=head)
            if comm.rank == 0:
                dirs.append(rd)
    return dirs


def simulate_strategies(st: RunStudy) -> list[str]:
    sp = st.simulate
    if sp is not None and sp.strategies:
        return list(sp.strategies)
    return list(dict.fromkeys(r.strategy for r in st.runs))


def simulate_rows(st: RunStudy, pls_q: float) -> list[tuple[str, str, dict]]:
    """(label, strategy, options) to cost: the simulate part's strategies with their defaults, else every
    measured run with its own options (the same plans the runs executed). Labels are ``report.run_label``'s,
    as the measured rows' (``pls Q=0.3``), so compare and plot pair a simulated row with its measured one."""
    sp = st.simulate
    if sp is not None and sp.strategies:
        from .simulate.core import shorthand_options

        short = shorthand_options({"pls_q": pls_q}, sp.strategies)
        entries = [(s, short.get(s, {})) for s in sp.strategies]
    else:
        entries = [(r.strategy, dict(r.options)) for r in st.runs]
    rows, seen = [], set()
    for strat, opts in entries:
        label = run_label({"config": {"strategy": strat, "options": opts}})
        if label not in seen:
            seen.add(label)
            rows.append((label, strat, opts))
    return rows


def run_simulate(st: RunStudy, *, out=None, epochs=None, echo=None, left_out: list | None = None) -> list[str]:
    """The study's ``simulate`` part: every node count x workload x strategy through the performance model
    (``dlbench.simulate.simulate``), one results folder each, marked simulated, in the study's results root.
    A point the model refuses (a strategy's data does not fit the node, F/W below the local batch) is
    named in one line and left out (and its line appended to ``left_out``)."""
    from .config import to_dict
    from .simulate import from_workload, load_profile, simulate
    from .simulate.output import write_simulated_run
    from .workload import load as load_workload

    sp = st.simulate
    if sp is None:
        raise ConfigError(f"study {st.name}: no simulate: part (add simulate: {{nodes: [1, 2, ..., 1024]}})")
    sw = st.sweep
    rpn = sp.ranks_per_node or (sw.ranks_per_node if sw is not None and sw.nodes else 1)
    profile = load_profile(sp.system or st.system)
    pls_q = sp.pls_q
    if pls_q is None:
        from . import strategies

        q = [r.options.get(strategies.get(r.strategy).shorthands["pls_q"]) for r in st.runs
             if r.strategy in strategies.names() and "pls_q" in strategies.get(r.strategy).shorthands]
        pls_q = float(q[0]) if q and q[0] is not None else 0.1
    wls = list(sw.workloads) if sw is not None and sw.workloads else [st.workload]
    E = epochs or st.epochs
    from .simulate.core import check_size, prologue_rows

    for wname in wls:   # every world the model can cost here (its prologue included), before any row is written
        for n in sp.nodes:
            base = load_workload(wname, scale=st.scale, samples=samples_for(st, n * rpn))
            b = st.batch_size or base.batch_size
            if base.samples >= n * rpn * b:
                swl = from_workload(base, local_batch=b, step_time_s=st.compute_time_s)
                check_size(swl, n, rpn, prologue=prologue_rows(simulate_rows(st, pls_q), swl, n, rpn))
    dirs = []
    for wname in wls:
        for n in sp.nodes:
            W = n * rpn
            F = samples_for(st, W)
            base = load_workload(wname, scale=st.scale, samples=F)
            b = st.batch_size or base.batch_size
            if base.samples < W * b:
                why = (f"simulate {wname} on {n} node(s): left out, F={base.samples} samples give fewer than "
                       f"one local batch of {b} per rank on {W} ranks")
                if echo:
                    echo(why)
                if left_out is not None:
                    left_out.append(why)
                continue
            swl = from_workload(base, local_batch=b, step_time_s=st.compute_time_s)
            for label, strat, opts in simulate_rows(st, pls_q):
                try:
                    res = simulate([(label, strat, opts)], wl=swl, profile=profile, nodes=n, ranks_per_node=rpn,
                                   epochs=E, seed=st.seed)
                except CapacityError as exc:
                    why = f"simulate {wname} {label} on {n} node(s): left out: {exc}"
                    if echo:
                        echo(why)
                    if left_out is not None:
                        left_out.append(why)
                    continue
                config = {"command": "simulate", "study": st.name, "system": to_dict(profile), "workload": to_dict(swl),
                          "strategy": strat, "label": label, "options": opts, "nodes": n, "ranks_per_node": rpn,
                          "epochs": E, "seed": st.seed, "rules": res[label]["model_rules"],
                          "write_overlap": res[label]["model_rules"]["write"] == "overlap",
                          "scaling": sw.scaling if sw is not None else None}
                dirs.append(str(write_simulated_run(out or st.out, config=config, summary=res[label])))
        if echo:
            echo(f"simulated {wname}: {len(sp.nodes)} node counts x {len(simulate_strategies(st))} strategies")
    return dirs


def run_study(st: RunStudy, comm, *, data_dir=None, local_dir=None, out=None, epochs=None, echo=None) -> list[str]:
    """Generate the data if missing, then every run; returns the run folders (rank 0; [] elsewhere)."""
    from . import workload as wl_mod
    from .run.setup import data_dir_tag, default_data_dir

    wl = wl_mod.load(st.workload, scale=st.scale, samples=st.samples)
    # an s3:// URL stays a string (Path would fold it into a local folder "s3:"): dlbench.storage.s3
    d = data_dir if _is_s3(data_dir) else \
        Path(data_dir) if data_dir else default_data_dir(wl.name, f"{st.scale or 'full'}-{wl.samples}", st.seed,
                                                         data_dir_tag(wl.spec_path, wl))
    check_entries(st, d, comm, epochs=epochs, local_dir=local_dir, out=out)
    _generate_if_missing(wl, d, st, comm, echo)
    dirs = []
    for i, r in enumerate(st.runs):
        rd = _run_entry(st, r, st.workload, d, comm, out=out, epochs=epochs, local_dir=local_dir, echo=echo,
                        head=f"[{i + 1}/{len(st.runs)}] ")
        if comm.rank == 0:
            dirs.append(rd)
    return dirs


def check_entries(st: RunStudy, data_dir: Path | str, comm, *, epochs=None, local_dir=None, out=None) -> None:
    """Every entry's plan-time checks (options, capacities, batch splits: a ``--dry-run`` of each, no I/O)
    before anything runs: a study used to run its entries in full up to the first bad one and end with no
    table. All bad entries are named in one error."""
    import dataclasses

    bad = []
    for i, r in enumerate(st.runs):
        cfg = dataclasses.replace(_entry_config(st, r, st.workload, data_dir, out=out, epochs=epochs,
                                                local_dir=local_dir), dry_run=True)
        from .run.driver import run

        try:
            run(cfg, comm)
        except DlbenchError as e:
            bad.append(f"runs[{i}] {r.strategy}: {e}")
    if bad:
        raise ConfigError(f"study {st.name}: {len(bad)} of {len(st.runs)} entries cannot run, nothing was run: "
                          + "; ".join(bad))


def _entry_config(st: RunStudy, r: StudyRun, workload: str, data_dir: Path | str, *, out, epochs, local_dir):
    from .run.setup import RunConfig

    return RunConfig(workload=workload, strategy=r.strategy, options=dict(r.options), data_dir=str(data_dir),
                     epochs=epochs or st.epochs, batch_size=st.batch_size, seed=st.seed, out=out or st.out,
                     compute_time_s=st.compute_time_s, system=st.system, local_dir=local_dir, ranks_per_node=None)


def _run_entry(st: RunStudy, r: StudyRun, workload: str, data_dir: Path | str, comm, *, out, epochs, local_dir, echo,
               head: str) -> str | None:
    """One run entry of a study (``run_study``) or a sweep point (``run_sweep``) on ``data_dir``: echoes
    ``head`` + the entry, runs it and returns its run folder (rank 0; None elsewhere). A run whose results
    could not be written (a full disk: ``write_error``) is an OutputError: the study cannot go on to its table."""
    from .errors import OutputError
    from .run.driver import run

    cfg = _entry_config(st, r, workload, data_dir, out=out, epochs=epochs, local_dir=local_dir)
    if echo:
        from .strategies import option_args

        opts = " ".join(option_args(r.strategy, r.options))
        echo(f"{head}{r.strategy} {opts}".rstrip())
    res = run(cfg, comm)
    if comm.rank != 0:
        return None
    if res.get("write_error") or not res.get("run_dir"):
        raise OutputError(res.get("write_error") or f"{r.strategy}: the run wrote no results folder")
    return res["run_dir"]


_MAX_INTERVAL_BYTES = 64 << 20   # larger runs: the steady-state exposed share is not computed ("-")


def steady_state(run: dict) -> dict:
    """Figures of epochs 1.. (epoch 0 fills caches and pipelines; a single-epoch run: epoch 0 itself):
    ``epoch_s`` (mean over epochs of the ranks' mean), ``epoch0_s``, ``exposed`` (stall / epoch time over
    those epochs, all ranks, from the run's intervals; None when they are missing or over 64 MiB) and
    ``x_compute`` (epoch_s / (steps per epoch x the sleep step time); None without a fixed step time)."""
    s = run.get("summary") or {}
    cfg = run.get("config") or {}
    ep = list(s.get("epoch_time_s") or [])
    out = {"epoch_s": None, "epoch0_s": ep[0] if ep else None, "exposed": None, "x_compute": None}
    if not ep:
        return out
    first = 1 if len(ep) > 1 else 0
    out["epoch_s"] = sum(ep[first:]) / len(ep[first:])
    step = cfg.get("compute_step_time_s")
    n, ranks, b = s.get("samples"), s.get("ranks"), cfg.get("local_batch")
    if step and n and ranks and b and s.get("epochs"):
        steps = -(-int(n) // (int(s["epochs"]) * int(ranks)) // int(b))
        out["x_compute"] = out["epoch_s"] / (steps * float(step))
    d = run.get("run_dir")
    if d and not run.get("simulated"):
        out["exposed"] = _exposed_from(Path(d), first)
    return out


def _exposed_from(d: Path, first: int) -> float | None:
    import numpy as np

    from .results import read_intervals
    from .timeline import PHASES

    files = [f for f in d.glob("intervals*") if f.is_file()]
    if not files or sum(f.stat().st_size for f in files) > _MAX_INTERVAL_BYTES:
        return None
    try:
        iv = read_intervals(d)
    except (DlbenchError, OSError, ValueError, KeyError):  # unreadable or partial: left out, not guessed
        return None
    stall = PHASES.index("stall")
    num = den = 0
    for a in iv:
        m = (np.asarray(a["phase"]) == stall) & (np.asarray(a["epoch"]) >= first)
        num += int((np.asarray(a["end_ns"])[m] - np.asarray(a["start_ns"])[m]).sum())
        e = np.asarray(a["epochs"]) >= first
        den += int((np.asarray(a["epoch_end_ns"])[e] - np.asarray(a["epoch_start_ns"])[e]).sum())
    return num / den if den > 0 else None


def traffic_table(run_dirs) -> str:
    """Per run: epoch time of epochs 1.. (epoch 0 apart), its exposed I/O share, that time over compute
    alone, shared-tier MB (epochs + staging), own-tier (local/memory) MB read, peer MB received, staging and
    exchange time, and the fraction of the dataset a rank has trained on after E epochs."""
    from .results import read_run

    head = ["strategy", "epoch 0 (s)", "epoch 1.. (s)", "exposed 1..", "x compute", "shared MB", "(staging)",
            "own MB", "peer MB", "stage (s)", "exchange (s)", "seen after E", "global-shuffle E",
            "global batch = shuffle's"]
    rows = []
    for d in run_dirs:
        r = read_run(d)
        s = r.get("summary") or {}
        io = s.get("tier_io") or {}
        ep, pro = io.get("epochs", {}), io.get("prologue", {})

        def mb(where, t):
            return (where.get(t) or {}).get("bytes", 0) / 1e6

        oq = s.get("order_quality") or {}
        seen = (oq.get("fraction_of_dataset_seen_per_rank_after_epoch") or [None])[-1]
        exp = (oq.get("global_shuffle_expected_after_epoch") or [None])[-1]
        sem = s.get("semantics") or {}
        st = steady_state(r)

        def f(v, fmt):
            return "-" if v is None else fmt.format(v)

        rows.append([run_label(r), f(st["epoch0_s"], "{:.3f}"), f(st["epoch_s"], "{:.3f}"), f(st["exposed"], "{:.1%}"),
                     f(st["x_compute"], "{:.2f}"),
                     f"{mb(ep, 'shared') + mb(pro, 'shared'):.1f}", f"{mb(pro, 'shared'):.1f}",
                     f"{mb(ep, 'local') + mb(ep, 'memory'):.1f}", f"{mb(ep, 'peer') + mb(pro, 'peer'):.1f}",
                     f"{s.get('prologue_time_s', 0.0):.3f}", f"{(s.get('phase_time_s') or {}).get('exchange', 0.0):.3f}",
                     "-" if seen is None else f"{seen:.1%}", "-" if exp is None else f"{exp:.1%}",
                     sem.get("global_batch_is_global_shuffles", "?")])
    w = [max(len(h), *(len(str(x[i])) for x in rows)) for i, h in enumerate(head)]
    line = "  ".join(h.ljust(w[i]) if i == 0 else h.rjust(w[i]) for i, h in enumerate(head))
    out = [line, "-" * len(line)]
    for x in rows:
        out.append("  ".join(str(v).ljust(w[i]) if i == 0 else str(v).rjust(w[i]) for i, v in enumerate(x)))
    return "\n".join(out)
