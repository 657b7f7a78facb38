"""The lifecycle every executor stage shares (``stages.py``), taken from what ``PlannedExecutor`` calls on each.

- ``Stage``: every stage reports its counters, ``stats() -> dict`` (plain numbers by name, read after or between
  epochs; the executor's run.json figures are built from the same attributes).
- ``EpochStage``: a stage with per-epoch state: ``begin(view)`` before the epoch's first step (the epoch's
  messages worked out, loader threads started), ``finish(view)`` after its last (every send completed, loader
  threads joined). In between, each stage has its own step hooks, called by the trainer's thread in step order:
  ``Loader.fill(view, t)`` / ``wait(t)`` / ``release(t)``, ``PeerPush.post_recvs(view, t, buf)`` /
  ``wait_recvs(view, t)`` / ``post_sends(view, upto)``, ``Filler.submit(g, ...)`` / ``wait(g)``.
- ``ClosingStage``: a stage that owns threads, open readers or stored samples: ``close()`` releases them on every
  exit path (errors included).

The stages declare these by subclassing (``class Loader(EpochStage, ClosingStage)``); the methods are abstract,
so a stage that misses one cannot be built. ``isinstance`` works on any object (runtime-checkable), so test fakes
need not subclass.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Stage(Protocol):
    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """This stage's counters by name."""


@runtime_checkable
class EpochStage(Stage, Protocol):
    @abstractmethod
    def begin(self, view: Any) -> None:
        """Before the first step of the epoch ``view`` (an ``EpochView``)."""

    @abstractmethod
    def finish(self, view: Any) -> None:
        """After the last step of the epoch ``view``: nothing of the epoch left in flight."""


@runtime_checkable
class ClosingStage(Stage, Protocol):
    @abstractmethod
    def close(self) -> None:
        """Release threads, readers and stored samples."""


__all__ = ["Stage", "EpochStage", "ClosingStage"]
