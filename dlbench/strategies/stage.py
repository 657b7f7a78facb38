"""The step protocol every executor stage declares (``dlbench/strategies/stages/``), and the one loop that drives
it (``PlannedExecutor.epoch``: ``drive`` here).

A stage subclasses ``Stage`` and overrides the hooks it needs; the others are documented no-ops. Per epoch the
executor calls, on each of its stages in its order (``PlannedExecutor.epoch_stages``):

    begin(view)                          before the epoch's first step (``view``: the rank's ``EpochView``)
    for each step t:
        before_step(view, t)             the step's data into its ring slot (reads, receives, transfers posted)
        ... the batch goes to the trainer (``Ring.lend``) ...
        after_step(view, t)              after the trainer's step: fills, evictions, the slot handed back, sends
    finish(view)                         after the last step: nothing of the epoch left in flight (checked)
    abort(view)                          instead of ``finish`` when the epoch stopped early (an error, or the
                                         trainer closed the batch iterator): stop what ``begin`` started

and, once per run, ``close()`` on every exit path and ``stats()`` for run.json. The hooks are per step, never per
sample: a stage's per-sample work stays inside its own loop.

Two refinements declare the hooks a kind of stage cannot do without (abstract, so such a stage missing one
cannot be built): ``EpochStage`` (per-epoch state: ``begin`` and ``finish``), ``ClosingStage`` (threads, readers
or stored samples: ``close``). ``stats`` is required of every stage.

The contract is checked when a subclass is defined (``__init_subclass__``, as ``FormatDriver`` does for formats):
a public method named like a hook but not one (``before_stpe``, ``aftr_step``, ``finnish``) raises ``TypeError``
naming the hook it resembles, and a hook defined with the wrong parameters raises too.
"""

from __future__ import annotations

import difflib
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any

HOOKS = ("begin", "before_step", "after_step", "finish", "abort", "close", "stats")
# the parameters of each hook after ``self`` (a hook must take exactly these)
HOOK_PARAMS = {"begin": ("view",), "before_step": ("view", "t"), "after_step": ("view", "t"),
               "finish": ("view",), "abort": ("view",), "close": (), "stats": ()}
# a public name this close to a hook (difflib ratio) but not one is taken for a misspelling
NEAR_HOOK = 0.8


class Stage(ABC):
    """One executor stage (module doc): override the hooks it needs."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for name, value in vars(cls).items():
            if name.startswith("_") or not callable(value):
                continue
            if name in HOOK_PARAMS:
                params = tuple(inspect.signature(value).parameters)[1:]
                if params != HOOK_PARAMS[name]:
                    raise TypeError(f"stage class {cls.__module__}.{cls.__name__}: hook {name}{params} must take "
                                    f"({', '.join(HOOK_PARAMS[name])}) (dlbench.strategies.stage.Stage)")
                continue
            near = difflib.get_close_matches(name, HOOKS, n=1, cutoff=NEAR_HOOK)
            if near:
                raise TypeError(f"stage class {cls.__module__}.{cls.__name__}: unknown hook {name!r}; did you mean "
                                f"{near[0]!r}? (the hooks: {', '.join(HOOKS)}; dlbench.strategies.stage.Stage)")

    def begin(self, view: Any) -> None:
        """Before the first step of the epoch ``view`` (an ``EpochView``). Default: nothing."""
        return None

    def before_step(self, view: Any, t: int) -> None:
        """Before the trainer gets step ``t``'s batch: its part of the step's data in place. Default: nothing."""
        return None

    def after_step(self, view: Any, t: int) -> None:
        """After the trainer's step ``t`` (its compute returned). Default: nothing."""
        return None

    def finish(self, view: Any) -> None:
        """After the last step of the epoch ``view``: nothing of the epoch left in flight. Default: nothing."""
        return None

    def abort(self, view: Any) -> None:
        """The epoch ``view`` stopped before ``finish`` (an error, an early close): stop what ``begin`` started,
        without raising. Default: nothing."""
        return None

    def close(self) -> None:
        """Release threads, readers and stored samples (every exit path; idempotent). Default: nothing."""
        return None

    @abstractmethod
    def stats(self) -> dict[str, Any]:
        """This stage's counters by name (plain numbers; run.json's figures are built from them)."""


class EpochStage(Stage):
    """A stage with per-epoch state: it must define ``begin`` and ``finish``."""

    @abstractmethod
    def begin(self, view: Any) -> None:
        """Before the first step of the epoch ``view``."""

    @abstractmethod
    def finish(self, view: Any) -> None:
        """After the last step of the epoch ``view``: nothing of the epoch left in flight."""


class ClosingStage(Stage):
    """A stage that owns threads, open readers or stored samples: it must define ``close``."""

    @abstractmethod
    def close(self) -> None:
        """Release threads, readers and stored samples."""


def drive(stages: Sequence[Stage], view: Any, lend: Callable[[int], Any]) -> Iterator[Any]:
    """One epoch of ``stages`` through the protocol: yields ``lend(t)`` (step t's batch) between each step's
    ``before_step`` and ``after_step`` hooks; ``finish`` after the last step, else ``abort`` (every stage whose
    ``begin`` ran, in order) when the epoch stops early."""
    started: list[Stage] = []
    finished = False
    # the per-step hooks of the stages that override them (a default no-op costs a call per step otherwise)
    before = [st.before_step for st in stages if type(st).before_step is not Stage.before_step]
    after = [st.after_step for st in stages if type(st).after_step is not Stage.after_step]
    try:
        for st in stages:
            st.begin(view)
            started.append(st)
        for t in range(view.steps):
            for hook in before:
                hook(view, t)
            yield lend(t)
            for hook in after:
                hook(view, t)
        for st in stages:
            st.finish(view)
        finished = True
    finally:
        if not finished:
            for st in started:         # in order, as every hook (the ring after the loader joined its threads)
                st.abort(view)


__all__ = ["Stage", "EpochStage", "ClosingStage", "HOOKS", "drive"]
