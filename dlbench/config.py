"""Strict, declarative configuration: frozen dataclasses whose field metadata drives parsing,
validation, help text and the echo into results.

``opt(default, help=..., unit=..., min=..., max=..., choices=..., flag=...)`` declares a field; ``from_mapping``
builds a dataclass from a YAML/CLI mapping, converting each value once to its declared type, rejecting
unknown keys with a did-you-mean and out-of-range values with one line naming the parameter, the value,
what is allowed and where it came from. ``parse_overrides`` turns ``--set k=v`` pairs into a mapping.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, did_you_mean

# Ceilings far above any real job, one place for every command, file and flag: a value past one is a typo,
# refused in one line instead of an allocation error, an integer overflow or a run that never ends.
MAX_EPOCHS = 100_000
MAX_NODES = 1_000_000
MAX_RANKS_PER_NODE = 65_536
MAX_THREADS = 4_096
MAX_SEED = 2**63 - 1
MAX_STEP_TIME_S = 86_400.0          # one step of a day
MAX_BATCH = 1 << 24                 # samples in one step
MAX_SAMPLE_BYTES = 64 << 30         # one sample's bytes: beyond this a "sample" is a typo, not a workload
MAX_FILE_BYTES = float(MAX_SAMPLE_BYTES)   # a drawn sample/file size (record_size, JPEG sizes): the same bound
MAX_PARAMETERS = 10**13             # a checkpoint of 120 TB



def check_seconds(name: str, value, *, lo: float = 0.0, hi: float = MAX_STEP_TIME_S) -> float:
    """A finite number of seconds in [lo, hi] (``inf``, ``nan`` and ``1e308`` are one-line errors)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise ConfigError(f"{name}={value}: must be a finite number of seconds from {lo:g} to {hi:g}")
    return float(value)


def check_counts(*items) -> None:
    """``(flag, value, lo, hi)``: each given integer within [lo, hi] (the ceilings above), else one line naming
    the flag (a count past a ceiling is a typo that would allocate, overflow or never end). The one bounds
    check of every command's counts (run, simulate, study, calibrate, jobscript)."""
    for name, val, lo, hi in items:
        if val is None:
            continue
        if val < lo:
            raise ConfigError(f"{name}={val}: must be >= {lo}")
        if val > hi:
            raise ConfigError(f"{name}={val}: must be <= {hi:,}")


_MISSING = dataclasses.MISSING


def opt(default: Any = _MISSING, *, help: str = "", unit: str = "", min: float | None = None,
        max: float | None = None, choices: tuple | Callable[[], tuple] | None = None, factory: Any = _MISSING,
        flag: str | None = None) -> Any:
    """A dataclass field with the metadata that validation, help and ``list -v`` read. ``flag``: the field's
    command-line flag when it is not ``--<name>``: a strategy option whose name another strategy uses with
    another meaning is the strategy's own (lbann's ``mode`` is ``--lbann-mode``; the key stays ``mode``).
    ``choices``: a tuple, or a function returning one, asked at each check (a registry's names: a format
    registered after the import is accepted)."""
    if flag is not None and not (flag.startswith("--") and flag[2:].replace("-", "").isalnum()):
        raise ValueError(f"opt(flag={flag!r}): a flag is --words-with-dashes")
    meta = {"help": help, "unit": unit, "min": min, "max": max, "choices": choices, "flag": flag}
    if factory is not _MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def describe_fields(cls) -> list[dict]:
    """One dict per field: name, type, default, unit, help, bounds, choices (for help and listings)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not _MISSING:
            default = f.default
        elif f.default_factory is not _MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            default = None
        out.append({
            "name": f.name, "type": _type_name(hints[f.name]), "default": default,
            "unit": f.metadata.get("unit", ""), "help": f.metadata.get("help", ""),
            "min": f.metadata.get("min"), "max": f.metadata.get("max"),
            "choices": _choices(f.metadata), "flag": field_flag(f),
        })
    return out


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def convert(value: Any, tp: Any, name: str, where: str) -> Any:
    """Convert ``value`` to the type ``tp`` once, at load, or raise a one-line ConfigError."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        if value is None and type(None) in args:
            return None
        last: ConfigError | None = None
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(value, a, name, where)
            except ConfigError as e:
                last = e
        raise last or ConfigError(f"{name}={value!r}{where}: bad value")
    if tp is Any:
        return value
    if origin in (tuple, list):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v != ""]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}={value!r}{where}: expected a list")
        inner = args[0] if args else Any
        return tuple(convert(v, inner, f"{name}[{i}]", where) for i, v in enumerate(value))
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name}={value!r}{where}: expected a mapping")
        kt, vt = (args + (Any, Any))[:2] if args else (Any, Any)
        return {convert(k, kt, name, where): convert(v, vt, f"{name}.{k}", where) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name}={value!r}{where}: expected a mapping of {tp.__name__} fields")
        return from_mapping(tp, value, where=where, prefix=f"{name}.")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{name}={value!r}{where}: expected true or false")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}{where}: expected an integer")
        if isinstance(value, int):
            return value
        try:
            f = float(str(value).replace("_", ""))
        except ValueError:
            raise ConfigError(f"{name}={value!r}{where}: expected an integer") from None
        if not math.isfinite(f) or f != int(f):
            raise ConfigError(f"{name}={value!r}{where}: expected an integer")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}{where}: expected a number")
        try:
            f = float(str(value).replace("_", "")) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name}={value!r}{where}: expected a number") from None
        if not math.isfinite(f):   # nan passes every bound check and inf no sane one; run.json stays strict JSON
            raise ConfigError(f"{name}={value!r}{where}: expected a finite number")
        return f
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{name}={value!r}{where}: expected a string")
        return str(value)
    return value


def flag_name(field_name: str) -> str:
    """The command-line flag of an option field: ``exchange_fraction`` -> ``--exchange-fraction``."""
    return "--" + field_name.replace("_", "-")


def field_flag(f: dataclasses.Field) -> str:
    """The command-line flag of a dataclass field: its ``opt(flag=...)``, else ``flag_name`` of its name."""
    return f.metadata.get("flag") or flag_name(f.name)


def option_flag(cls, name: str) -> str:
    """The command-line flag of the field ``name`` of the options dataclass ``cls``."""
    return field_flag(next(f for f in dataclasses.fields(cls) if f.name == name))


def from_mapping(cls, data: Mapping[str, Any] | None, *, where: str = "", prefix: str = "", flags: bool = False):
    """Build the dataclass ``cls`` from ``data`` strictly (unknown keys, types, bounds, choices).
    ``flags``: the values came from command-line flags (one per field), so messages name the flag
    (``--exchange-fraction=5``) instead of the key."""
    data = dict(data or {})
    src = f" (in {where})" if where and not where.startswith(" (") else where
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in data:
        if key not in fields:
            if flags:
                raise ConfigError(f"unknown option {flag_name(key)}{src}; allowed: "
                                  f"{', '.join(sorted(field_flag(f) for f in fields.values())) or 'none'}")
            raise ConfigError(
                f"unknown key '{prefix}{key}'{src}; allowed: {', '.join(sorted(fields))}"
                f"{did_you_mean(key, fields)}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:  # type: ignore[misc]
                raise ConfigError(f"missing key '{prefix}{name}'{src}" + (f": {f.metadata['help']}" if f.metadata.get("help") else ""))
            continue
        shown = field_flag(f) if flags else prefix + name
        value = convert(data[name], hints[name], shown, src)
        check_bounds(shown, value, f.metadata, src)
        kwargs[name] = value
    return cls(**kwargs)


def _choices(meta: Mapping[str, Any]) -> tuple | None:
    c = meta.get("choices")
    return tuple(c()) if callable(c) else c


def check_bounds(name: str, value: Any, meta: Mapping[str, Any], where: str = "") -> None:
    """Raise ConfigError when ``value`` is outside the field's min/max/choices."""
    unit = f" {meta.get('unit')}" if meta.get("unit") else ""
    lo, hi, choices = meta.get("min"), meta.get("max"), _choices(meta)
    vals = value if isinstance(value, tuple) else (value,)
    for v in vals:
        if v is None:
            continue
        if choices and v not in choices:
            raise ConfigError(f"{name}={v!r}{where}: choose one of {', '.join(map(str, choices))}"
                              f"{did_you_mean(str(v), map(str, choices))}")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if lo is not None and v < lo:
                raise ConfigError(f"{name}={v}{where}: must be >= {lo}{unit}")
            if hi is not None and v > hi:
                raise ConfigError(f"{name}={v}{where}: must be <= {hi}{unit}")


def to_dict(obj: Any) -> Any:
    """A JSON-ready echo of a (nested) dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, Enum):   # a typed choice (storage.pagecache.CacheMode): its option string
        return obj.value
    return obj


class _DuplicateKey(Exception):
    def __init__(self, key, first: int, again: int):
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last value
    silently: a workload, study or DLIO file with ``epochs:`` twice ran with whichever came last). Merge keys
    (``<<``) are not duplicates."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue   # PyYAML refuses an unhashable key itself
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise _DuplicateKey(key, seen[key], line)
                seen[key] = line
        return super().construct_mapping(node, deep)


def load_yaml(path: str | Path, what: str = "file") -> dict:
    """Read a YAML mapping, with one-line errors for a missing file, bad syntax or a key given twice."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{what} '{path}' not found")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except _DuplicateKey as e:
        raise ConfigError(f"{what} '{path}': key '{e.key}' appears twice in one mapping (lines {e.first} and "
                          f"{e.again}); allowed: each key once (YAML would keep the last value silently)") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} '{path}' is not a text YAML file (byte {e.start} is not UTF-8: "
                          f"{e.object[e.start:e.start + 1]!r})") from None
    except OSError as e:
        raise ConfigError(f"{what} '{path}' cannot be read ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{what} '{path}':{at} is not valid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{what} '{path}' must hold a mapping at top level, found {type(data).__name__}")
    return data


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict:
    """``('a.b=1', 'c=x')`` → ``{'a': {'b': '1'}, 'c': 'x'}`` (values converted later, by the schema)."""
    out: dict = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = yaml.safe_load(value) if value else value
    return out


def resource_dir(name: str) -> Path:
    """Where the packaged ``workloads/`` or ``configs/`` folder is: inside the installed package
    (``dlbench/_data/<name>``, a non-editable install) or at the source tree's top level."""
    here = Path(__file__).resolve().parent
    for cand in (here / "_data" / name, here.parent / name):
        if cand.is_dir():
            return cand
    raise ConfigError(f"packaged folder '{name}' not found next to {here}; reinstall dlbench")
