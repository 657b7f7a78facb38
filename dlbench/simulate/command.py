"""``dlbench simulate``'s library side: ``SimulateConfig`` (the resolved settings: profile, workload, rows,
world, options; validated once, in ``__post_init__``, before anything is costed), ``SimulateConfig.from_flags``
(the flags' settings: system, workload, nodes, ... resolved as ``dlbench run`` resolves them) and ``run`` (cost
the rows, write one results folder per costed row: all of them or, on a full disk, none)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import MAX_BATCH, MAX_EPOCHS, MAX_NODES, MAX_RANKS_PER_NODE, check_counts, check_seconds
from ..errors import ConfigError, DlbenchError, unknown_choice
from ..system import SystemProfile
from .core import SimWorkload


@dataclass
class SimulateConfig:
    """What ``simulate`` costs. ``names``: the rows (strategy names, or a study's (label, strategy, options...)
    tuples); ``options``: {strategy: {option: value}}; ``workload_args``: (workload, scale, samples) of the
    flags (the checkpoint's size; None with a study); ``extra``: keys added to every row's config (a study's
    file); ``reference``: published run times by row. ``__post_init__`` checks everything once (one line
    each, naming the flag) and sets ``profile`` (``--loader-threads``) and ``checkpoint`` (the costed
    checkpoint schedule of ``--checkpoint-every``, or None)."""

    names: list
    profile: SystemProfile
    wl: SimWorkload
    nodes: int
    ranks_per_node: int
    epochs: int
    seed: int
    options: dict = field(default_factory=dict)
    pls_q: float | None = None
    loader_threads: int | None = None
    serial_write: bool = False
    rules: Any = None
    out: str = "results"
    study: str | None = None
    workload_args: tuple | None = None
    checkpoint_every: int = 0
    checkpoint_first: int = 0
    write_curve: str | None = None
    reference: dict | None = None
    extra: dict = field(default_factory=dict)
    checkpoint: Callable[[list[int]], dict] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ConfigError(f"--seed={self.seed}: must be >= 0")
        check_overrides(self.rows, self.options, self.pls_q, self.loader_threads)
        if self.loader_threads is not None:
            self.profile = dataclasses.replace(self.profile, staging=dataclasses.replace(
                self.profile.staging, threads=self.loader_threads))
        if self.ranks_per_node < 1:
            raise ConfigError(f"--ranks-per-node={self.ranks_per_node}: must be >= 1")
        from .core import check_size, prologue_rows

        check_size(self.wl, self.nodes, self.ranks_per_node, prologue=prologue_rows(
            self.names, self.wl, self.nodes, self.ranks_per_node, self.options, profile=self.profile, seed=self.seed))
        from .checkpoint import simulated_checkpoints

        self.checkpoint = simulated_checkpoints(
            self.checkpoint_every, self.write_curve, study=self.study, workload_args=self.workload_args,
            profile=self.profile, nodes=self.nodes, ranks_per_node=self.ranks_per_node, first=self.checkpoint_first)

    @property
    def rows(self) -> set[str]:
        """The strategies simulated (a row's strategy, not its label)."""
        return {x if isinstance(x, str) else x[1] for x in self.names}

    @classmethod
    def from_flags(cls, *, system: str | None, workload: str | None, scale: str, samples: int | None,
                   nodes: int | None, ranks_per_node: int, strategies: str, epochs: int, batch_size: int | None,
                   accelerator: str | None, compute_time: float | None, seed: int | None,
                   **rest: Any) -> SimulateConfig:
        """The settings of the flags (no --study): the profile, the workload at ``batch_size`` (default: the
        workload's) with ``dlbench run``'s compute default, the rows of ``strategies`` (comma-separated)."""
        from ..workload import load as load_workload
        from . import load_profile
        from .core import from_workload, strategy_names

        missing = [f for f, v in (("--system", system), ("--workload", workload), ("--nodes", nodes)) if v is None]
        if missing:
            raise ConfigError(f"simulate needs {', '.join(missing)} (or --study FILE)")
        assert system is not None and workload is not None and nodes is not None
        if compute_time is not None:
            check_seconds("--compute-time", compute_time)
        check_counts(("--nodes", nodes, 1, MAX_NODES), ("--epochs", epochs, 1, MAX_EPOCHS),
                     ("--batch-size", batch_size, 1, MAX_BATCH),
                     ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE))
        names = [s.strip() for s in strategies.split(",") if s.strip()]
        if not names:
            raise ConfigError(f"--strategies={strategies!r}: name at least one of {', '.join(strategy_names())}")
        for s in names:
            if s not in strategy_names():
                raise unknown_choice("strategy for simulate", s, strategy_names())
        profile = load_profile(system)
        # the same compute default as `dlbench run` (the workload's published a100 step time, else a measured
        # one) unless the profile states a compute throughput c (a paper's system) or a flag picks one
        wl = from_workload(load_workload(workload, scale=scale, samples=samples), accelerator=accelerator,
                           local_batch=batch_size, step_time_s=compute_time,
                           default_step=profile.compute_mb_per_s is None)
        per_step = wl.local_batch * nodes * ranks_per_node
        if per_step > wl.samples:
            raise ConfigError(f"--batch-size={wl.local_batch}: a global batch of {per_step:,} samples ({nodes} nodes "
                              f"x {ranks_per_node} ranks x {wl.local_batch}) is larger than the dataset "
                              f"({wl.samples:,} samples); use a smaller batch or more samples")
        return cls(names=names, profile=profile, wl=wl, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs,
                   seed=0 if seed is None else seed, workload_args=(workload, scale, samples), **rest)


def check_overrides(rows: set[str], options: dict, pls_q: float | None, loader_threads: int | None) -> None:
    """simulate's ``--option``, ``--pls-q`` and ``--loader-threads`` against the rows costed here (the flags', a
    model study's or a measured study's simulate part): one line each, naming the flag."""
    for s in options:
        if s not in rows:
            raise ConfigError(f"--option {s}.…: strategy {s} is not simulated here (rows: "
                              f"{', '.join(sorted(rows))}); add it to --strategies or drop the option")
    if pls_q is not None:
        _check_pls_q(pls_q, rows)
    if loader_threads is not None and not 1 <= loader_threads <= 1024:
        raise ConfigError(f"--loader-threads={loader_threads}: must be from 1 to 1024")


def _check_pls_q(pls_q: float, rows: set[str]) -> None:
    if not math.isfinite(pls_q) or not 0 <= pls_q <= 1:
        raise ConfigError(f"--pls-q={pls_q}: must be from 0 to 1")
    from .. import strategies as _st

    owners = [n for n in _st.names() if "pls_q" in _st.get(n).shorthands]
    if not rows & set(owners):
        raise ConfigError(f"--pls-q={pls_q}: {' or '.join(owners)} is not simulated here; add {' or '.join(owners)} "
                          f"to --strategies or drop --pls-q")


@dataclass
class SimulateResult:
    """``run``'s outcome: ``results`` {label: summary} (N/A rows included), ``na`` the N/A rows, ``dirs`` the
    results folders written (one per costed row)."""

    results: dict
    na: dict
    dirs: list


def run(cfg: SimulateConfig) -> SimulateResult:
    """Cost ``cfg``'s rows (``simulate``; a capacity rule's refusal is an N/A row) and write one results
    folder per costed row (each whole or not at all; on a full disk part-way, the ones written before go too).
    SIGINT/SIGTERM: an ``Interrupted`` saying how many folders were kept."""
    from ..config import to_dict
    from ..stop import StopSignals, deferred, interrupted
    from .core import simulate
    from .output import write_simulated_run

    dirs: list = []
    results: dict = {}
    na: dict = {}
    try:
        with StopSignals():
            results = simulate(cfg.names, wl=cfg.wl, profile=cfg.profile, nodes=cfg.nodes,
                               ranks_per_node=cfg.ranks_per_node, epochs=cfg.epochs, seed=cfg.seed, pls_q=cfg.pls_q,
                               write_overlap=False if cfg.serial_write else None, options=cfg.options,
                               loader_threads=cfg.loader_threads, rules=cfg.rules, na_rows=True,
                               checkpoint=cfg.checkpoint)
            na = {k: v for k, v in results.items() if "not_applicable" in v}
            for label, summary in results.items():
                if label in na:
                    continue
                config = {"command": "simulate", "system": to_dict(cfg.profile), "workload": to_dict(cfg.wl),
                          "strategy": summary["strategy"], "label": label, "options": summary.get("options", {}),
                          "nodes": cfg.nodes, "ranks_per_node": cfg.ranks_per_node, "epochs": cfg.epochs,
                          "seed": cfg.seed, "loader_threads": cfg.loader_threads, "rules": summary["model_rules"],
                          "write_overlap": summary["model_rules"]["write"] == "overlap", **cfg.extra}
                with deferred():  # a folder is written whole or not at all
                    dirs.append(write_simulated_run(cfg.out, config=config, summary=summary))
    except DlbenchError as e:   # a full disk part-way: the folders written before it go too (nothing partial)
        from ..errors import OutputError
        from ..results import remove_run_dir

        if isinstance(e, OutputError):
            for d in dirs:
                remove_run_dir(d)
        raise
    except KeyboardInterrupt as e:
        kept = f"{len(dirs)} of {len(results)} result folders written under {cfg.out} (each complete)" if results \
            else "nothing written (the model had not finished)"
        raise interrupted(e, f"during simulate: {kept}") from None
    return SimulateResult(results, na, dirs)


def print_result(res: SimulateResult, *, echo: Callable[..., Any], fmt: str = "table",
                 reference: dict | None = None) -> None:
    """``simulate``'s output of ``run``'s result: the comparison table of the folders written, what a plan
    changed about the run (its warnings, on stderr) and the N/A rows; N/A rows end in a CapacityError (the
    other rows are complete)."""
    from .output import compare_table

    if res.dirs:
        echo(compare_table(res.dirs, fmt=fmt, reference_s=reference))
    for label, v in res.results.items():   # what a plan changed about the run (e.g. staging beyond capacity)
        if v.get("plan_warning"):
            echo(f"dlbench: warning: {label}: {v['plan_warning']}", err=True)
    for label, v in res.na.items():
        echo(f"{label}: N/A ({v['not_applicable']})")
    if res.na:
        from ..errors import CapacityError

        raise CapacityError(f"{len(res.na)} of {len(res.results)} rows could not be costed (N/A above; the others "
                            f"are complete)")
