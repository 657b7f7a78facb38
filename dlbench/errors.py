"""The DlbenchError family: one-line, user-facing errors with exit codes.

Library code raises these; the CLI prints ``str(err)`` on one line and exits with ``err.exit_code``.
A message names the parameter, the bad value, what is allowed and, where known, where the value came
from (a flag, a file, a default).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class DlbenchError(Exception):
    """Base of every error meant for a user. ``exit_code`` is what the CLI exits with."""

    exit_code = 2

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # always one line


class ConfigError(DlbenchError):
    """Bad option, flag or configuration file value."""

    exit_code = 2


class DataError(DlbenchError):
    """Dataset missing, of another workload or seed, corrupt, or not matching its manifest."""

    exit_code = 3


class CapacityError(DlbenchError):
    """A tier is too small for what a strategy needs."""

    exit_code = 4


class RunError(DlbenchError):
    """A run failed (a rank raised, verification failed, ...)."""

    exit_code = 5


class Interrupted(DlbenchError):
    """The run was interrupted (SIGINT: exit 130, SIGTERM: 143); the message says what was recorded."""

    exit_code = 130

    def __init__(self, message: str, exit_code: int = 130):
        super().__init__(message)
        self.exit_code = exit_code


class OutputError(DlbenchError):
    """Measured results could not be written (a full disk): the figures were printed instead."""

    exit_code = 6


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_choice(kind: str, value: object, choices: Iterable[str], where: str = "") -> ConfigError:
    """``unknown strategy 'plss'; choose one of: a, b, c (did you mean 'pls'?)``."""
    names = sorted(str(c) for c in choices)
    src = f" in {where}" if where else ""
    return ConfigError(
        f"unknown {kind} '{value}'{src}; choose one of: {', '.join(names)}{did_you_mean(str(value), names)}"
    )
