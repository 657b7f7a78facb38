"""The strategy registry: one name → one Strategy class; a miss lists the valid names."""

from __future__ import annotations

from typing import Any

from ..config import from_mapping, option_flag
from ..errors import unknown_choice
from .base import Batch, Executor, PlanContext, PlanWorkload, RunContext, Semantics, Strategy

_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
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


__all__ = ["Batch", "Executor", "PlanContext", "PlanWorkload", "RunContext", "Semantics", "Strategy", "get", "names", "option_args", "parse_options",
           "register"]
