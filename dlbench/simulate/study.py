"""Simulation studies (``configs/studies/*.yaml``): a system, a workload (built-in name or an inline
synthetic one), a world size, epochs and the strategies to compare, with published runtimes to compare
against. Loaded strictly (unknown keys are errors)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..config import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_NODES,
    MAX_RANKS_PER_NODE,
    MAX_SEED,
    from_mapping,
    load_yaml,
    opt,
    resource_dir,
)
from ..errors import ConfigError
from ..workload import MAX_SAMPLES, SizeDistribution
from .core import SimWorkload, strategy_names


@dataclass(frozen=True, kw_only=True)
class InlineWorkload:
    name: str = opt(help="workload name in results")
    samples: int = opt(help="F: number of samples", min=1, max=MAX_SAMPLES)
    global_batch: int | None = opt(None, help="B: global batch (split evenly over ranks)", min=1, max=MAX_SAMPLES)
    local_batch: int | None = opt(None, help="b: local batch per rank", min=1, max=MAX_BATCH)
    size: SizeDistribution = opt(help="sample size distribution (seeded)")


@dataclass(frozen=True, kw_only=True)
class StudyRun:
    label: str = opt(help="the row's name (e.g. 'LBANN dynamic'); key of published_runtime_s")
    strategy: str = opt(help="strategy (dlbench list strategies) or lowerbound")
    options: dict = opt(factory=dict, help="the strategy's options, as dlbench run takes them")
    model: dict = opt(factory=dict, help="the row's model options (dlbench.simulate.core.MODEL_OPTIONS)")
    note: str = opt("", help="why the row is mapped the way it is (printed nowhere; for the reader)")


@dataclass(frozen=True, kw_only=True)
class Study:
    name: str = opt(help="study name")
    description: str = opt("", help="one line")
    system: str = opt(help="system profile: a name in configs/systems or a path")
    workload: dict = opt(help="an inline workload {name, samples, global_batch|local_batch, size}, "
                              "or {builtin: NAME, scale: full, accelerator: a100}")
    nodes: int = opt(help="N", min=1, max=MAX_NODES)
    ranks_per_node: int = opt(1, help="ranks per node", min=1, max=MAX_RANKS_PER_NODE)
    epochs: int = opt(1, help="E", min=1, max=MAX_EPOCHS)
    seed: int = opt(0, help="seed of permutations and sample sizes", min=0, max=MAX_SEED)
    strategies: tuple[str, ...] = opt((), help="strategies to cost (each with its default options)")
    runs: tuple[StudyRun, ...] = opt((), help="labelled rows: {label, strategy, options}")
    options: dict = opt(factory=dict, help="{strategy: {option: value}} for the strategies list")
    pls_q: float = opt(0.1, help="exchange fraction of pls", min=0, max=1)
    rules: str | dict | None = opt(None, help="the model's rule set: a preset (default, thesis) or a mapping "
                                               "{preset, gamma, write, tier_read, prologue}; default: the "
                                               "system profile's rules")
    published_runtime_s: dict[str, float] = opt(factory=dict, help="published runtimes to compare with, by "
                                                                    "strategy or row label")

    def entries(self) -> list[tuple[str, str, dict, dict]]:
        """(label, strategy, options, model options) of every row: the strategies list, then the labelled
        runs."""
        from .core import shorthand_options

        short = shorthand_options({"pls_q": self.pls_q}, self.strategies)
        out = []
        for name in self.strategies:
            o = dict(self.options.get(name, {}))
            for k, v in short.get(name, {}).items():
                o.setdefault(k, v)
            out.append((name, name, o, {}))
        out += [(r.label, r.strategy, dict(r.options), dict(r.model)) for r in self.runs]
        return out


def load(path: str | Path) -> Study:
    p = Path(path)
    if not p.is_file():
        cand = resource_dir("configs") / "studies" / (str(path) if str(path).endswith(".yaml") else f"{path}.yaml")
        if cand.is_file():
            p = cand
    st = from_mapping(Study, load_yaml(p, "study file"), where=str(p))
    known = strategy_names()
    for name in [*st.strategies, *(r.strategy for r in st.runs), *st.options]:
        if name not in known:
            from ..errors import unknown_choice

            raise unknown_choice(f"strategy (in {p})", name, known)
    labels = [e[0] for e in st.entries()]
    if not labels:
        raise ConfigError(f"study {p}: give strategies: [...] or runs: [{{label, strategy, options}}]")
    if len(set(labels)) != len(labels):
        raise ConfigError(f"study {p}: row labels repeat: {labels}")
    from .core import MODEL_OPTIONS

    for r in st.runs:
        for k in r.model:
            if k not in MODEL_OPTIONS:
                from ..errors import unknown_choice

                raise unknown_choice(f"model option of row {r.label!r} (in {p})", k, sorted(MODEL_OPTIONS))
    if st.rules is not None:
        from ..system import rules_from

        rules_from(st.rules, f"rules (in {p})")
    for k in st.published_runtime_s:
        if k not in labels:
            raise ConfigError(f"published_runtime_s.{k} (in {p}): not a row of the study; rows: {', '.join(labels)}")
    return st


def workload_of(st: Study, where: str = "") -> SimWorkload:
    w = dict(st.workload)
    W = st.nodes * st.ranks_per_node
    if "builtin" in w:
        from ..workload import load as load_workload
        from .core import from_workload

        extra = set(w) - {"builtin", "scale", "accelerator", "local_batch"}
        if extra:
            raise ConfigError(f"workload.{sorted(extra)[0]} (in {where}): allowed with builtin: scale, accelerator, local_batch")
        wl = load_workload(str(w["builtin"]), scale=w.get("scale", "full"))
        return from_workload(wl, accelerator=w.get("accelerator"), local_batch=w.get("local_batch"))
    iw = from_mapping(InlineWorkload, w, where=where, prefix="workload.")
    if (iw.global_batch is None) == (iw.local_batch is None):
        raise ConfigError(f"workload (in {where}): give exactly one of global_batch, local_batch")
    if iw.global_batch is not None:
        if iw.global_batch % W:
            raise ConfigError(f"workload.global_batch={iw.global_batch} (in {where}): must be a multiple of "
                              f"the {W} ranks")
        b = iw.global_batch // W
    else:
        b = iw.local_batch
    d = iw.size
    return SimWorkload(iw.name, iw.samples, b, d.kind, d.mean_bytes, d.std_bytes, d.min_bytes, d.max_bytes)
