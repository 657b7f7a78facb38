"""The strategy registry: one name → one Strategy class; a miss lists the valid names.

``register`` checks the class: its ``semantics`` is a typed ``Semantics``, and a strategy whose ``Options`` take
``loader_threads`` passes them to its plan (two tiny pure plans, with 1 and 3 threads, must run a ``prefetch``
pipeline of that many threads): an option accepted and silently ignored fails at import."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..config import from_mapping, option_flag
from ..errors import unknown_choice
from ..plan.semantics import Semantics
from .base import Batch, Executor, PlanContext, PlanWorkload, RunContext, Strategy

_REGISTRY: dict[str, type[Strategy]] = {}


def _tiny_context() -> PlanContext:
    """The registration check's world: 2 ranks on 2 nodes, 8 samples of 64 bytes, one epoch (no dataset)."""
    return PlanContext(workload=None, n_samples=8, sample_nbytes=np.full(8, 64, np.int64), world_size=2, rank=0,
                       node_map=np.arange(2, dtype=np.int64), seed=0, epochs=1, local_batch=2)


def check_strategy(cls: type[Strategy]) -> None:
    """What ``register`` checks (module doc); one line naming the strategy and what is wrong."""
    if not isinstance(getattr(cls, "semantics", None), Semantics):
        raise TypeError(f"strategy {cls.name}: semantics {getattr(cls, 'semantics', None)!r} is not a "
                        f"dlbench.plan.semantics.Semantics")
    if "loader_threads" not in {f.name for f in dataclasses.fields(cls.Options)}:
        return
    ctx, st = _tiny_context(), cls()
    for t in (1, 3):
        got = st.plan(ctx, dataclasses.replace(cls.Options(), loader_threads=t)).pipeline
        if (got.kind, got.threads) != ("prefetch", t):
            raise TypeError(f"strategy {cls.name}: option loader_threads={t} is not passed to its plan (the plan's "
                            f"pipeline: {got.kind}, {got.threads} threads); give Plan(pipeline=...) the options' "
                            f"loader, e.g. strategies.cache.pipeline_of(options)")


def register(cls: type[Strategy]) -> type[Strategy]:
    check_strategy(cls)
    _REGISTRY[cls.name] = cls
    return cls


def _load_builtins() -> None:
    """Import the built-in strategy modules (each registers itself); idempotent, and independent of
    which strategy module happened to be imported first."""
    from . import clairvoyant, deepio, lbann, local, locality, naive, pls, prefetch, staging, surrogatetrain  # noqa: F401


def names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> Strategy:
    _load_builtins()
    if name not in _REGISTRY:
        raise unknown_choice("strategy", name, _REGISTRY)
    return _REGISTRY[name]()


def parse_options(strategy: Strategy, values: dict[str, Any], where: str = "", flags: bool = False) -> Any:
    """The strategy's Options from ``{field: value}`` (strict: unknown keys and bounds checked); ``flags``:
    the values came from the CLI's one flag per option, so messages name the flag (``--exchange-fraction``)."""
    return from_mapping(strategy.Options, values, where=where, flags=flags)


def option_args(name: str, options: dict[str, Any]) -> list[str]:
    """``dlbench run`` arguments for strategy ``name``'s options ``{field: value}``: each field under its own
    flag (``opt(flag=...)``: lbann's ``mode`` is ``--lbann-mode``), so echoed and spawned commands use the
    spelling the strategy's help shows."""
    cls = get(name).Options
    out: list[str] = []
    for k, v in options.items():
        out += [option_flag(cls, k), str(v)]
    return out


__all__ = ["Batch", "Executor", "PlanContext", "PlanWorkload", "RunContext", "Strategy", "check_strategy", "get", "names",
           "option_args", "parse_options", "register"]
