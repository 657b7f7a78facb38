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
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import from_mapping, load_yaml, opt, resource_dir
from .errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class StudyRun:
    strategy: str = opt(help="strategy name")
    options: dict = opt(factory=dict, help="the strategy's options (as its --flags, with underscores)")


@dataclass(frozen=True, kw_only=True)
class RunStudy:
    name: str = opt(help="study name")
    description: str = opt("", help="one line")
    workload: str = opt(help="workload name or YAML path")
    scale: str | None = opt("tiny", help="preset whose sample shapes are used")
    samples: int | None = opt(None, help="number of samples (default: the preset's)", min=1)
    system: str = opt("local", help="system profile of every run")
    epochs: int = opt(3, help="epochs per run", min=1)
    batch_size: int | None = opt(None, help="local batch per rank", min=1)
    compute_time_s: float | None = opt(None, help="sleep per step", unit="s", min=0)
    seed: int = opt(0, help="dataset and shuffle seed")
    out: str = opt("results", help="results root")
    runs: tuple[StudyRun, ...] = opt(help="the runs, in order")


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
    return st


def run_study(st: RunStudy, comm, *, data_dir=None, local_dir=None, out=None, epochs=None, echo=None) -> list[str]:
    """Generate the data if missing, then every run; returns the run folders (rank 0; [] elsewhere)."""
    from . import workload as wl_mod
    from .data.generate import generate
    from .data.manifest import Manifest
    from .runner import RunConfig, default_data_dir, run

    wl = wl_mod.load(st.workload, scale=st.scale, samples=st.samples)
    d = Path(data_dir) if data_dir else default_data_dir(wl.name, f"{st.scale or 'full'}-{wl.samples}", st.seed)
    if not Manifest.exists(d):
        if echo:
            echo(f"generating {wl.name} ({wl.samples} samples, {wl.dataset_nbytes / 1e6:.0f} MB) in {d}")
        if comm.rank == 0:
            d.parent.mkdir(parents=True, exist_ok=True)
        comm.barrier()
        generate(wl, d, seed=st.seed, comm=comm, progress=False)
    dirs = []
    for i, r in enumerate(st.runs):
        cfg = RunConfig(workload=st.workload, strategy=r.strategy, options=dict(r.options), data_dir=str(d),
                        epochs=epochs or st.epochs, batch_size=st.batch_size, seed=st.seed, out=out or st.out,
                        compute_time_s=st.compute_time_s, system=st.system, local_dir=local_dir,
                        ranks_per_node=None)
        if echo:
            opts = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in r.options.items())
            echo(f"[{i + 1}/{len(st.runs)}] {r.strategy} {opts}".rstrip())
        res = run(cfg, comm)
        if comm.rank == 0:
            dirs.append(res["run_dir"])
    return dirs


def _label(run: dict) -> str:
    cfg = run.get("config") or {}
    opts = cfg.get("options") or {}
    s = cfg.get("strategy", "?")
    if s == "pls":
        s += f" Q={opts.get('exchange_fraction')}"
    elif s == "surrogatetrain":   # the ablation's rows: buffer and the techniques switched off
        s += f" buf={opts.get('buffer_fraction')}" if opts.get("buffer_fraction") else ""
        s += "".join(f" no-{k}" for k in ("reorder", "remap", "balance", "chunking") if opts.get(k) is False)
        s += " fifo" if opts.get("eviction") == "fifo" else ""
        s += f" threads={opts['loader_threads']}" if opts.get("loader_threads") else ""
    return s


def traffic_table(run_dirs) -> str:
    """Per run: shared-tier MB (epochs + staging), local/memory MB read, peer MB received, staging and
    exchange time, and the fraction of the dataset a rank has trained on after E epochs."""
    from .results import read_run

    head = ["strategy", "shared MB", "(staging)", "local MB", "peer MB", "stage (s)", "exchange (s)",
            "seen after E", "global-shuffle E", "global batch = shuffle's"]
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
        rows.append([_label(r), f"{mb(ep, 'shared') + mb(pro, 'shared'):.1f}", f"{mb(pro, 'shared'):.1f}",
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
