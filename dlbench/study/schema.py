"""The one study schema (``configs/studies/*.yaml``), loaded strictly: unknown keys, types, bounds and the
keys of the other kind of study are one-line errors naming the key. A study is one of two kinds:

A **measured** study (no ``nodes:``): several runs (strategies with options) on the same data and system,
measured by ``dlbench study FILE`` (``study.measure``)::

    name: shuffle-comparison
    workload: cosmoflow          # name or YAML path
    scale: tiny                  # sample shapes of that preset
    samples: 400                 # dataset size (generated once, reused by every run)
    system: laptop-pfs           # --system of every run [default: local]
    epochs: 3                    # [default: 3]
    batch_size: 8
    compute_time_s: 0.01
    seed: 0
    runs:
      - {strategy: naive}
      - {strategy: pls, options: {exchange_fraction: 0.3}}

A scaling study adds a ``sweep`` (and optionally a ``simulate`` part, costed by ``--simulate``)::

    sweep:
      ranks: [1, 2, 4, 8]            # world sizes; or nodes: [1, 2, 4] with ranks_per_node: 4
      workloads: [cosmoflow]         # default: the study's workload
      scaling: weak                  # weak: F = samples_per_rank x ranks; strong: F = samples (fixed)
      samples_per_rank: 200
    simulate:
      nodes: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
      system: laptop-pfs             # default: the study's system

A **model** study (``nodes: N``): one world costed by the performance model only (``study.simulate``): a system,
an inline workload (or a built-in one), the strategies or labelled rows to compare, and published runtimes to
compare against (``configs/studies/hdmlp-thesis-s2.yaml``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import (
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
from ..errors import ConfigError, did_you_mean, unknown_choice
from ..workload import MAX_SAMPLES, SizeDistribution

# keys only one kind of study has (a key of the other kind is an error, not ignored)
MODEL_KEYS = ("nodes", "ranks_per_node", "strategies", "options", "pls_q", "rules", "published_runtime_s")
MEASURED_KEYS = ("scale", "samples", "batch_size", "compute_time_s", "out", "sweep", "simulate")
_ROW_KEYS = ("label", "model", "note")   # a model study's rows only
_DEFAULTS: dict[str, dict[str, Any]] = {"measured": {"system": "local", "epochs": 3}, "model": {"epochs": 1}}


@dataclass(frozen=True, kw_only=True)
class StudyRun:
    """One row: a measured run entry ({strategy, options}) or a model study's labelled row."""

    strategy: str = opt(help="strategy name (a model study: also lowerbound)")
    options: dict = opt(factory=dict, help="the strategy's options (as its --flags, with underscores)")
    label: str | None = opt(None, help="model study: the row's name (e.g. 'LBANN dynamic'); key of "
                                       "published_runtime_s")
    model: dict = opt(factory=dict, help="model study: the row's model options (dlbench.simulate.core.MODEL_OPTIONS)")
    note: str = opt("", help="model study: why the row is mapped the way it is (for the reader)")


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


@dataclass(frozen=True, kw_only=True)
class InlineWorkload:
    name: str = opt(help="workload name in results")
    samples: int = opt(help="F: number of samples", min=1, max=MAX_SAMPLES)
    global_batch: int | None = opt(None, help="B: global batch (split evenly over ranks)", min=1, max=MAX_SAMPLES)
    local_batch: int | None = opt(None, help="b: local batch per rank", min=1, max=MAX_BATCH)
    size: SizeDistribution = opt(help="sample size distribution (seeded)")


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: a workload at a world size, with its dataset size."""

    workload: str
    ranks: int
    nodes: int | None      # None: a ranks sweep (nodes as the launcher places them)
    samples: int | None    # None: the workload preset's


@dataclass(frozen=True, kw_only=True)
class Study:
    name: str = opt(help="study name")
    description: str = opt("", help="one line")
    system: str = opt(help="system profile: a name in configs/systems or a path [measured: default local]")
    workload: str | dict = opt(help="measured: a workload name or YAML path; model: an inline workload {name, "
                                    "samples, global_batch|local_batch, size} or {builtin: NAME, scale: full, "
                                    "accelerator: a100}")
    epochs: int = opt(help="E: epochs per run [default: 3 measured, 1 model]", min=1, max=MAX_EPOCHS)
    seed: int = opt(0, help="dataset, shuffle and sample-size seed", min=0, max=MAX_SEED)
    runs: tuple[StudyRun, ...] = opt((), help="measured: the runs, in order; model: labelled rows")
    # measured studies
    scale: str | None = opt("tiny", help="preset whose sample shapes are used")
    samples: int | None = opt(None, help="number of samples (default: the preset's)", min=1)
    batch_size: int | None = opt(None, help="local batch per rank", min=1, max=MAX_BATCH)
    compute_time_s: float | None = opt(None, help="sleep per step", unit="s", min=0, max=MAX_STEP_TIME_S)
    out: str = opt("results", help="results root")
    sweep: Sweep | None = opt(None, help="scaling sweep: ranks or nodes, workloads, weak or strong")
    simulate: SimulatePart | None = opt(None, help="the modelled part of a scaling study (--simulate)")
    # model studies
    nodes: int | None = opt(None, help="N: the modelled world's nodes (makes this a model study)", min=1,
                            max=MAX_NODES)
    ranks_per_node: int = opt(1, help="ranks per node", min=1, max=MAX_RANKS_PER_NODE)
    strategies: tuple[str, ...] = opt((), help="strategies to cost (each with its default options)")
    options: dict = opt(factory=dict, help="{strategy: {option: value}} for the strategies list")
    pls_q: float = opt(0.1, help="exchange fraction of pls", min=0, max=1)
    rules: str | dict | None = opt(None, help="the model's rule set: a preset (default, thesis) or a mapping "
                                               "{preset, gamma, write, tier_read, prologue}; default: the "
                                               "system profile's rules")
    published_runtime_s: dict[str, float] = opt(factory=dict, help="published runtimes to compare with, by "
                                                                    "strategy or row label")

    @property
    def is_model(self) -> bool:
        """A model study (``nodes:``): one world, costed only."""
        return self.nodes is not None

    def entries(self) -> list[tuple[str, str, dict, dict]]:
        """(label, strategy, options, model options) of a model study's rows: the strategies list, then the
        labelled runs."""
        from ..simulate.core import shorthand_options

        short = shorthand_options({"pls_q": self.pls_q}, self.strategies)
        out: list[tuple[str, str, dict, dict]] = []
        for name in self.strategies:
            o = dict(self.options.get(name, {}))
            for k, v in short.get(name, {}).items():
                o.setdefault(k, v)
            out.append((name, name, o, {}))
        out += [(str(r.label), r.strategy, dict(r.options), dict(r.model)) for r in self.runs]
        return out

    def as_config(self) -> dict:
        """The study's own keys (those of its kind) as a JSON-ready echo, for a results folder's config."""
        from ..config import to_dict

        other = MEASURED_KEYS if self.is_model else MODEL_KEYS
        return {k: v for k, v in to_dict(self).items() if k not in other}


def study_path(path_or_name: str | Path) -> Path:
    """A study file: the path itself, else ``configs/studies/<name>[.yaml]``."""
    p = Path(path_or_name)
    if p.is_file():
        return p
    s = str(path_or_name)
    cand = resource_dir("configs") / "studies" / (s if s.endswith(".yaml") else f"{s}.yaml")
    if not cand.is_file():
        raise ConfigError(f"study {s}: no such file (nor configs/studies/{Path(cand).name})")
    return cand


def load_study(path_or_name: str | Path) -> Study:
    """Load and check a study of either kind (every error one line naming the key)."""
    p = study_path(path_or_name)
    data = load_yaml(p, "study")
    if not isinstance(data, dict):
        raise ConfigError(f"study {p}: expected a mapping of study keys, got {type(data).__name__}")
    kind = "model" if "nodes" in data else "measured"
    other = MEASURED_KEYS if kind == "model" else MODEL_KEYS
    for k in data:
        if k not in _keys_of(kind) and k not in other:   # unknown: the allowed keys are this kind's
            raise ConfigError(f"unknown key '{k}' (in {p}); allowed: {', '.join(_keys_of(kind))}"
                              f"{did_you_mean(str(k), _keys_of(kind))}")
        if k in other:
            what = (f"this is a model study (nodes: {data['nodes']})" if kind == "model"
                    else "this is a measured study (no nodes:)")
            raise ConfigError(f"{k} (in {p}): a key of a {'measured' if kind == 'model' else 'model'} study; "
                              f"{what}: its keys are {', '.join(_keys_of(kind))}")
    st = from_mapping(Study, {**_DEFAULTS[kind], **data}, where=str(p))
    (_check_model if st.is_model else _check_measured)(st, p)
    return st


def _keys_of(kind: str) -> list[str]:
    other = MEASURED_KEYS if kind == "model" else MODEL_KEYS
    return sorted(f.name for f in dataclasses.fields(Study) if f.name not in other)


def _check_rows(st: Study, p: Path, model: bool) -> None:
    for i, r in enumerate(st.runs):
        if model and r.label is None:
            raise ConfigError(f"runs[{i}].label (in {p}): missing: every row of a model study is labelled")
        if not model:
            for k in _ROW_KEYS:
                if getattr(r, k) != getattr(StudyRun(strategy=r.strategy), k):
                    raise ConfigError(f"runs[{i}].{k} (in {p}): a key of a model study's rows (nodes: N); a "
                                      f"measured run has strategy and options")


def _check_measured(st: Study, p: Path) -> None:
    if not isinstance(st.workload, str):
        raise ConfigError(f"workload (in {p}): a measured study names a workload (a name or a YAML path); an "
                          f"inline workload mapping is for a model study (nodes: N)")
    if not st.runs:
        raise ConfigError(f"runs in {p}: needs at least one run")
    _check_rows(st, p, model=False)
    from .. import strategies

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
        from ..simulate import strategy_names

        known = strategy_names()
        for s in simulate_strategies(st):
            if s not in known:
                raise unknown_choice("strategy for simulate", s, known, where=f"{p} simulate.strategies")


def _check_model(st: Study, p: Path) -> None:
    if not isinstance(st.workload, dict):
        raise ConfigError(f"workload={st.workload!r} (in {p}): a model study (nodes: N) gives an inline workload "
                          f"{{name, samples, global_batch|local_batch, size}} or {{builtin: NAME}}")
    _check_rows(st, p, model=True)
    from ..simulate.core import MODEL_OPTIONS, strategy_names

    known = strategy_names()
    for name in [*st.strategies, *(r.strategy for r in st.runs), *st.options]:
        if name not in known:
            raise unknown_choice(f"strategy (in {p})", name, known)
    labels = [e[0] for e in st.entries()]
    if not labels:
        raise ConfigError(f"study {p}: give strategies: [...] or runs: [{{label, strategy, options}}]")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"study {p}: row labels repeat: {labels}")
    for r in st.runs:
        for k in r.model:
            if k not in MODEL_OPTIONS:
                raise unknown_choice(f"model option of row {r.label!r} (in {p})", k, sorted(MODEL_OPTIONS))
    if st.rules is not None:
        from ..system import rules_from

        rules_from(st.rules, f"rules (in {p})")
    for k in st.published_runtime_s:
        if k not in labels:
            raise ConfigError(f"published_runtime_s.{k} (in {p}): not a row of the study; rows: {', '.join(labels)}")


def points(st: Study, *, nodes_list=None) -> list[SweepPoint]:
    """Every (workload, world size) of the sweep with its dataset size F ([] without a sweep).
    ``nodes_list`` replaces the sweep's node counts (jobscript)."""
    sw = st.sweep
    if sw is None:
        return []
    wls = list(sw.workloads) or [str(st.workload)]
    if nodes_list:
        sizes = [(n * sw.ranks_per_node, n) for n in nodes_list]
    elif sw.nodes:
        sizes = [(n * sw.ranks_per_node, n) for n in sw.nodes]
    else:
        sizes = [(r, None) for r in sw.ranks]
    return [SweepPoint(wl, w, n, samples_for(st, w)) for wl in wls for w, n in sizes]


def samples_for(st: Study, ranks: int) -> int | None:
    """F at a world size: samples_per_rank x ranks (weak scaling), else the study's samples."""
    sw = st.sweep
    if sw is not None and sw.scaling == "weak":
        return int(sw.samples_per_rank or 0) * int(ranks)
    return st.samples


def sweep_sizes(st: Study) -> list[int]:
    return sorted({p.ranks for p in points(st)})


def simulate_strategies(st: Study) -> list[str]:
    """The strategies a measured study's simulate part costs: its own list, else the runs' strategies."""
    sp = st.simulate
    if sp is not None and sp.strategies:
        return list(sp.strategies)
    return list(dict.fromkeys(r.strategy for r in st.runs))
