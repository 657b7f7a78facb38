"""What a strategy is: an ``Options`` dataclass, a pure planner and an executor.

A strategy module defines a subclass of ``Strategy`` with ``name``, ``summary``, ``semantics`` (the row of
docs/STRATEGIES.md's sample-order table), an ``Options`` frozen dataclass (fields declared with
``config.opt``: defaults, units, help) and two methods:

- ``plan(ctx, options) -> Plan`` — pure: NumPy only, no files, MPI or clocks;
- ``executor(ctx, plan, options) -> Executor`` — carries the plan out on real files and ranks.

An ``Executor`` yields, for every step of an epoch, a ``Batch``: the rows of the samples the trainer
consumes, in the plan's order. It records its own ``read``/``decode``/``stage``/``exchange`` intervals in
``ctx.timeline``; the runner records ``stall`` (time blocked in ``next()``) and everything after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any, ClassVar

import numpy as np

from ..plan import Plan


@dataclass(frozen=True)
class Semantics:
    """A row of the sample-order semantics table (docs/STRATEGIES.md)."""

    full_permutation_each_epoch: str
    global_batch_is_global_shuffle: str
    order_changes: str

    def as_dict(self) -> dict:
        return {"each_epoch_a_full_permutation": self.full_permutation_each_epoch,
                "global_batch_is_global_shuffles": self.global_batch_is_global_shuffle,
                "order_changes": self.order_changes}


@dataclass
class RunContext:
    """Everything a planner and an executor may look at. Planners read only the plain fields
    (workload, n_samples, sample_nbytes, world, seed, epochs, local_batch); executors also use the
    comm, the data dir, the manifest and the timeline."""

    workload: Any                  # dlbench.workload.Workload
    n_samples: int
    sample_nbytes: np.ndarray      # stored bytes per sample (int64)
    world_size: int
    rank: int
    node_map: np.ndarray
    seed: int
    epochs: int
    local_batch: int
    drop_last: bool = False
    data_dir: Path | None = None
    manifest: Any = None
    comm: Any = None
    timeline: Any = None
    reader_factory: Any = None     # () -> SampleReader of the shared tier (throttled when the profile models it)
    system: Any = None             # dlbench.system.SystemProfile (--system)
    local_dir: Path | None = None  # --local-dir: node-local storage root (node<k> under it per node)
    memory_budget_bytes: float | None = None   # memory tier per node (the profile's), None: unbounded
    io_counters: Any = None        # dlbench.storage.counters.CounterSet of this process (None: not counted)
    cache: str = "keep"            # --cache keep|drop|direct (dlbench.storage.pagecache): direct = O_DIRECT tier reads
    clock: Callable[[], int] = perf_counter_ns   # injectable (a fake clock in tests)


@dataclass
class Batch:
    """One step's delivery: ``rows[:n]`` hold the samples ``ids[:n]`` (uint8 rows: stored bytes, or the
    decoded image for JPEG workloads)."""

    rows: np.ndarray
    ids: np.ndarray
    n: int


class Executor:
    """Carries a plan out. ``start()`` runs the prologue (staging), ``epoch(e)`` yields one Batch per
    step, ``close()`` releases threads, processes and files. ``stats()`` may add strategy figures.
    ``interrupted`` is set by the runner when the run is being interrupted on every rank (Ctrl-C, SIGTERM)."""

    interrupted = False

    def start(self) -> None:
        return None

    def epoch(self, e: int) -> Iterator[Batch]:
        raise NotImplementedError

    def stats(self) -> dict:
        return {}

    def close(self) -> None:
        return None

    def peer_stop(self) -> tuple[str, int] | None:
        """(signal, rank) of another rank of the node found stopping on a signal (executors with node-local
        files: their stop markers), or None."""
        return None


class Strategy:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    semantics: ClassVar[Semantics]
    Options: ClassVar[type]

    def plan(self, ctx: RunContext, options: Any) -> Plan:
        raise NotImplementedError

    def executor(self, ctx: RunContext, plan: Plan, options: Any) -> Executor:
        raise NotImplementedError
