"""Stopping on SIGINT and SIGTERM without losing the clean-up.

``StopSignals`` (a context manager the CLI wraps a command in) turns the **first** SIGINT or SIGTERM into an
exception in the main thread (``KeyboardInterrupt``, or ``Terminated`` for SIGTERM: exit 130 / 143), so the
command records what it did and removes what it wrote on its way out. Every **later** signal is only
counted, never raised: a second Ctrl-C used to land inside that clean-up and skip it (leaving hundreds of MB
of local copies), so it is deferred and said once on stderr (SIGKILL still ends the process at once).

``deferred()`` marks a section that even the first signal must not cut in two (removing files, writing the
record of a run): a signal that arrives inside it is raised when the section ends, unless an exception is
already on its way. ``pending()`` tells a loop that a signal arrived but its exception was swallowed
somewhere (a ``__del__``, a library's ``except``), so it can raise it at the next step instead of running on.
Outside a ``StopSignals`` block nothing changes (Python's default handlers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from .errors import Interrupted


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: handled as an interrupt (exit 143)."""

    signal_name = "SIGTERM"


def interrupt_for(name: str) -> KeyboardInterrupt:
    return Terminated() if name == "SIGTERM" else KeyboardInterrupt()


def interrupted(exc: BaseException, what: str) -> Interrupted:
    """``Interrupted`` for a command stopped by SIGINT (exit 130) or SIGTERM (143): one line saying what was
    kept or removed (``what``)."""
    sig = getattr(exc, "signal_name", "SIGINT")
    return Interrupted(f"interrupted by {sig} {what}", exit_code=143 if sig == "SIGTERM" else 130)


class _State:
    first: str | None = None      # the first signal received (SIGINT / SIGTERM), None before any
    raised = False                # its exception was raised in the main thread
    later = 0                     # signals received after the first (deferred, never raised)
    said = False                  # the "again" line was printed
    depth = 0                     # nesting of deferred() sections
    active = False                # inside a StopSignals block


_S = _State()


def _launcher_rank() -> int:
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        v = os.environ.get(k, "")
        if v.isdigit():
            return int(v)
    return 0


def pending() -> str | None:
    """The first signal received, or None (a loop raises ``interrupt_for(pending())`` when its exception
    did not reach it)."""
    return _S.first


def _handler(signum, frame) -> None:
    name = signal.Signals(signum).name
    if _S.first is None:
        _S.first = name
        if _S.depth == 0:
            _S.raised = True
            raise interrupt_for(name)
        return  # inside a deferred section: raised when it ends
    _S.later += 1
    if name == _S.first and not _S.said and _launcher_rank() == 0:   # the same key again: say it once
        _S.said = True
        try:
            os.write(2, f"dlbench: {name} again: finishing the clean-up first (SIGKILL ends at once and leaves "
                        f"files behind)\n".encode())
        except OSError:
            pass


@contextlib.contextmanager
def deferred():
    """A section no signal interrupts; a first signal received inside it is raised when it ends (unless an
    exception is already propagating, which then stays the one reported)."""
    _S.depth += 1
    ok = False
    try:
        yield
        ok = True
    finally:
        _S.depth -= 1
        if ok and _S.depth == 0 and _S.first is not None and not _S.raised and _S.active:
            _S.raised = True
            raise interrupt_for(_S.first)


class StopSignals:
    """Install the handler for SIGINT and SIGTERM in the main thread for the block (a process whose
    launcher ignored SIGINT, like a shell's background job, still stops cleanly on ``kill -INT``)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self):
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            _S.first, _S.raised, _S.later, _S.depth, _S.said = None, False, 0, 0, False
            _S.active = True
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, _handler)
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self._old and _S.first is not None:
            return False  # stopping on a signal: later ones stay deferred while the command reports and exits
        for s, old in self._old.items():
            signal.signal(s, old)
        if self._old:
            _S.active = False
        return False
