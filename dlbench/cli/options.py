"""The options several commands share, declared once: each flag's name, short flag, type and parameter name
live here; a command passes only what differs (its default and its help). ``batch_size`` is the one batch
option (``--batch-size``/``-b`` on run, simulate and calibrate, default: the workload's, resolved by
``Workload.local_batch``); simulate's old ``--local-batch`` is its hidden, deprecated alias."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from ..config import MAX_SEED
from ..errors import ConfigError

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def workload(*, default: str | None = None, required: bool = False, param: str = "workload",
             help: str = "workload name or path to a workload YAML", **kw: Any) -> Decorator:
    return click.option("--workload", "-w", param, default=default, required=required,
                        show_default=default is not None, help=help, **kw)


def scale(*, default: str | None = None, help: str = "preset: tiny, small or full", **kw: Any) -> Decorator:
    return click.option("--scale", default=default, show_default=default is not None, help=help, **kw)


def samples(*, help: str = "number of samples (overrides the preset's count)") -> Decorator:
    return click.option("--samples", type=int, default=None, help=help)


def seed(*, default: int | None = 0, help: str | None = None, bounded: bool = True) -> Decorator:
    """``--seed``: from 0 to 2**63 - 1 (``bounded``: click says so; else the command's check_counts does)."""
    return click.option("--seed", type=click.IntRange(0, MAX_SEED) if bounded else int, default=default,
                        show_default=default is not None, help=help)


def data_dir(*, required: bool = False, help: str, param: str = "data_dir") -> Decorator:
    return click.option("--data-dir", param, required=required, type=click.Path(file_okay=False), default=None,
                        help=help)


def epochs(*, default: int | None, help: str | None = None) -> Decorator:
    return click.option("--epochs", "-e", type=int, default=default, show_default=default is not None, help=help)


def ranks_per_node(*, default: int | None = None, help: str) -> Decorator:
    return click.option("--ranks-per-node", type=int, default=default, show_default=default is not None, help=help)


def out(*, default: str | None = "results", help: str, param: str = "out", required: bool = False,
        **kw: Any) -> Decorator:
    return click.option("--out", "-o", param, default=default, required=required,
                        show_default=default is not None, help=help, **kw)


def system(*, default: str | None = "local", help: str) -> Decorator:
    return click.option("--system", "system", default=default, show_default=default is not None,
                        metavar="PROFILE", help=help)


BATCH_HELP = "local batch per rank [default: the workload's]"


def batch_size(*, help: str = BATCH_HELP, deprecated_alias: str | None = None) -> Decorator:
    """``--batch-size``/``-b`` (parameter ``batch_size``, None: the workload's). ``deprecated_alias``
    (``--local-batch``): still accepted, hidden from --help, with a one-line note on stderr; given with a
    different --batch-size it is an error."""

    with_batch = click.option("--batch-size", "-b", "batch_size", type=int, default=None, help=help)

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        if deprecated_alias is not None:
            alias_param = deprecated_alias.lstrip("-").replace("-", "_")

            @functools.wraps(f)
            def merged(*a: Any, **kw: Any) -> Any:
                old = kw.pop(alias_param)
                if old is not None:
                    click.echo(f"dlbench: note: {deprecated_alias} is deprecated; use --batch-size", err=True)
                    if kw["batch_size"] is not None and kw["batch_size"] != old:
                        raise ConfigError(f"{deprecated_alias}={old} and --batch-size={kw['batch_size']}: the same "
                                          f"option; give --batch-size")
                    kw["batch_size"] = old
                return f(*a, **kw)

            return with_batch(click.option(deprecated_alias, alias_param, type=int, default=None, hidden=True)(merged))
        return with_batch(f)

    return deco
