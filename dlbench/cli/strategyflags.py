"""``run``'s strategy-option flags, routed from the strategy registry: one flag per option of every
registered strategy (``StrategyFlagsCommand`` follows the registry whenever the command parses or shows help),
and the routing of the given ones to the selected strategy's options (``route_strategy_options``)."""

from __future__ import annotations

import click

from ..errors import ConfigError


def strategy_option_fields() -> dict:
    """Every strategy-option flag of ``run``, by its click parameter name: {param: {"flag", "field", "owners",
    "rows" (each owner's describe_fields row), "defaults", "helps", "alias"}}.

    A field declared with its own flag (``opt(flag="--lbann-mode")``: a name that strategies use with
    different meanings) is that strategy's alone; ``--<name>`` stays as an alias (``alias``: {owner: its own
    flag}) that sets the selected strategy's field, so existing command lines keep working. A plain flag
    several strategies share must mean one thing to all of them: one type and one set of choices (a
    developer error otherwise, raised when the CLI is built)."""
    from .. import strategies
    from ..config import describe_fields, flag_name

    out: dict = {}

    def entry(param, flag, field, alias):
        ent = out.setdefault(param, {"flag": flag, "field": field, "owners": [], "rows": {}, "defaults": {},
                                     "helps": {}, "alias": alias})
        if ent["field"] != field or (ent["alias"] is None) != (alias is None):
            raise RuntimeError(f"strategy option flag {flag}: declared by fields of different names, or as its own "
                               f"flag by one strategy and shared by another; give each meaning its own flag "
                               f"(opt(flag=...))")
        return ent

    for name in strategies.names():
        for row in describe_fields(strategies.get(name).Options):
            own, plain = row["flag"], flag_name(row["name"])
            ents = [entry(own[2:].replace("-", "_"), own, row["name"], None)]
            if own != plain:
                alias = entry(row["name"], plain, row["name"], {})
                alias["alias"][name] = own
                ents.append(alias)
            for ent in ents:
                ent["owners"].append(name)
                ent["rows"][name] = row
                ent["defaults"][name] = row["default"]
                ent["helps"].setdefault(row["help"], []).append(name)
    for ent in out.values():
        kinds = {(r["type"], tuple(r["choices"] or ())) for r in ent["rows"].values()}
        if ent["alias"] is None and len(kinds) > 1:
            raise RuntimeError(f"strategy option {ent['flag']} of {', '.join(ent['owners'])}: different types or "
                               f"choices; give each strategy's its own flag (opt(flag=...))")
    return out


def route_strategy_options(strategy: str, values: dict) -> dict:
    """``run``'s strategy-option flags (click parameter -> value, None where not given) as the selected
    strategy's options {field: value}: a flag of another strategy, an alias (``--mode``) given a value the
    strategy's own flag does not take, or one option given twice with different values is a one-line
    ConfigError."""
    fields = strategy_option_fields()
    out: dict = {}
    via: dict = {}
    for param, v in values.items():
        if v is None:
            continue
        ent = fields.get(param)
        if ent is None:         # a key from a DLIO translation that is no flag: the options' check names it
            out[param], via[param] = v, f"--{param.replace('_', '-')}"
            continue
        flag, field = ent["flag"], ent["field"]
        if strategy not in ent["owners"]:
            raise ConfigError(f"{flag} is an option of {', '.join(ent['owners'])}, not of strategy {strategy}")
        if ent["alias"] is not None:
            own = ent["alias"][strategy]
            choices = ent["rows"][strategy]["choices"]
            if choices and str(v) not in map(str, choices):
                others = [f"{o}'s {f}" for o, f in ent["alias"].items()
                          if o != strategy and str(v) in map(str, ent["rows"][o]["choices"] or ())]
                raise ConfigError(f"{flag}={v}: strategy {strategy}'s {flag[2:]} ({own}) is one of "
                                  f"{', '.join(map(str, choices))}"
                                  + (f"; {v} is {' and '.join(others)}" if others else ""))
        if field in out and out[field] != v:
            raise ConfigError(f"{via[field]}={out[field]} and {flag}={v}: the same option of {strategy}; give one")
        out[field], via[field] = v, flag
    return out


def _defaults_text(defaults: dict) -> str:
    """``default X``, or per strategy where the owners' defaults differ: ``default 2 (clairvoyant), 0 (lbann, ...)``."""
    groups: dict = {}
    for owner, d in defaults.items():
        groups.setdefault(repr(d), (d, []))[1].append(owner)
    if len(groups) == 1:
        return f"default {next(iter(groups.values()))[0]}"
    return "default " + ", ".join(f"{d} ({', '.join(owners)})" for d, owners in groups.values())


def strategy_params() -> list[click.Option]:
    """One flag per strategy option (from the strategies' own Options dataclasses), sorted by name: a
    strategy's own flag says only its meaning; an alias (``--mode``) names the flags it stands for."""
    out = []
    for param, ent in sorted(strategy_option_fields().items()):
        row = next(iter(ent["rows"].values()))
        flag = ent["flag"]
        unit = f" [{row['unit']}]" if row["unit"] else ""
        if ent["alias"] is not None:
            own = ", ".join(f"{fl} ({o})" for o, fl in sorted(ent["alias"].items()))
            helptext = (f"the selected --strategy's own flag of this name: {own}; kept for existing command lines, "
                        f"a value that strategy's flag does not take is an error")
        elif len(ent["helps"]) == 1:
            helptext = f"({', '.join(ent['owners'])}) {row['help']}{unit}; {_defaults_text(ent['defaults'])}"
        else:   # one meaning, worded per owner (e.g. --loader-threads of the cache family and of local copies)
            helptext = ("; ".join(f"({', '.join(o)}) {h}" for h, o in ent["helps"].items())
                        + f"{unit}; {_defaults_text(ent['defaults'])}")
        if row["type"] == "bool":
            out.append(click.Option([f"{flag}/--no-{flag[2:]}", param], default=None, help=helptext))
        else:
            out.append(click.Option([flag, param], default=None, help=helptext, metavar=row["type"].upper()))
    return out


class StrategyFlagsCommand(click.Command):
    """``run``: its own options, then one flag per option of every registered strategy, also of one
    registered after this module was imported (``dlbench.strategies.register`` from a plugin or a test):
    the flags follow the registry whenever the command parses or shows help."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._own = list(self.params)
        self._names: tuple = ()
        self._sync()

    def _sync(self) -> None:
        from .. import strategies

        names = tuple(strategies.names())
        if names != self._names:
            self.params = [*self._own, *strategy_params()]
            self._names = names

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self._sync()
        return super().get_params(ctx)
