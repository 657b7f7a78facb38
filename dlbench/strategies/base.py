"""What a strategy is: an ``Options`` dataclass, a pure planner and an executor.

A strategy module defines a subclass of ``Strategy`` with ``name``, ``summary``, ``semantics`` (the row of
docs/STRATEGIES.md's sample-order table: a typed ``dlbench.plan.semantics.Semantics``), an ``Options`` frozen dataclass (fields declared with
``config.opt``: defaults, units, help) and two methods:

- ``plan(ctx: PlanContext, options) -> Plan`` — pure: NumPy only, no files, MPI or clocks;
- ``executor(ctx: RunContext, plan, options) -> Executor`` — carries the plan out on real files and ranks.

An ``Executor`` yields, for every step of an epoch, a ``Batch``: the rows of the samples the trainer
consumes, in the plan's order. It records its own ``read``/``decode``/``stage``/``exchange`` intervals in
``ctx.timeline``; the runner records ``stall`` (time blocked in ``next()``) and everything after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..plan import Plan
from ..plan.semantics import Semantics
from ..storage.pagecache import ReadPolicy

if TYPE_CHECKING:
    from ..comm import Comm
    from ..data.formats import SampleReader
    from ..data.manifest import Manifest
    from ..storage.counters import CounterSet
    from ..system import SystemProfile
    from ..timeline import Timeline
    from ..workload import TFRecordSpec, WebDatasetSpec, Workload


@dataclass(frozen=True)
class PlanWorkload:
    """What a planner may know of the workload (``PlanContext.workload``), one typed record built alike by a run
    (``of_workload``: from the resolved ``Workload``) and by the simulator (from its ``SimWorkload``: a name and
    a layout, no files)."""

    name: str
    layout: str | None = None                     # the data layout (None: a simulated workload of any layout)
    samples_per_file: int | None = None           # None: no files (the simulator's workload)
    tfrecord: TFRecordSpec | None = None          # the tfrecord read pattern (None: the defaults)
    webdataset: WebDatasetSpec | None = None      # the webdataset read pattern (None: the defaults)

    @classmethod
    def of_workload(cls, wl: Workload) -> PlanWorkload:
        """A run's record of its workload. The files' facts are read where the object has them (a stand-in
        workload of a test may carry a name and a layout only: the rest is then unknown, as in the simulator)."""
        return cls(name=wl.name, layout=wl.layout, samples_per_file=getattr(wl, "samples_per_file", None),
                   tfrecord=getattr(wl, "tfrecord", None), webdataset=getattr(wl, "webdataset", None))


@dataclass(frozen=True)
class PlanContext:
    """What a planner may look at (``Strategy.plan``), and nothing else: sizes, the world, the seeds, the
    workload's planning facts and the system profile's capacities. Built by the runner
    (``RunContext.plan_context``) and by the simulator (``simulate.core.sim_context``) from the same
    inputs, so ``run`` and ``simulate`` plan alike. Planners are pure: no files, MPI or clocks here."""

    workload: PlanWorkload | None  # layout, tfrecord/webdataset read pattern, samples per file (None: no dataset)
    n_samples: int
    sample_nbytes: np.ndarray      # stored bytes per sample (int64)
    world_size: int
    rank: int                      # the planning rank: per-rank capacities divide its node's memory by its ranks
    node_map: np.ndarray           # (W,) node of every rank
    seed: int
    epochs: int
    local_batch: int
    system: SystemProfile | None = None         # --system: tier capacities and names for capacity messages
    memory_budget_bytes: float | None = None    # memory tier per node (the profile's), None: unbounded


@dataclass
class RunContext:
    """Everything an executor may look at: ``PlanContext``'s fields (same names) plus the comm, the data
    dir, the manifest, the timeline, the reader factory, the counters and the clock. ``plan_context()`` is
    the planner's view of it."""

    workload: Workload
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
    manifest: Manifest | None = None
    comm: Comm | None = None
    timeline: Timeline | None = None
    reader_factory: Callable[[], SampleReader] | None = None   # the shared tier (throttled when the profile models it)
    system: SystemProfile | None = None          # --system
    local_dir: Path | None = None  # --local-dir: node-local storage root (node<k> under it per node)
    memory_budget_bytes: float | None = None   # memory tier per node (the profile's), None: unbounded
    io_counters: CounterSet | None = None        # Darshan-style counters of this process (None: not counted)
    cache: ReadPolicy = ReadPolicy()   # --cache resolved (dlbench.storage.pagecache): local_direct = O_DIRECT tier reads
    clock: Callable[[], int] = perf_counter_ns   # injectable (a fake clock in tests)

    def plan_context(self) -> PlanContext:
        """The planner's view: exactly ``PlanContext``'s fields, taken from this context (the workload as its
        ``PlanWorkload``)."""
        out = {f.name: getattr(self, f.name) for f in fields(PlanContext)}
        if self.workload is not None:
            out["workload"] = PlanWorkload.of_workload(self.workload)
        return PlanContext(**out)


@dataclass
class Batch:
    """One step's delivery: ``rows[:n]`` hold the samples ``ids[:n]`` (uint8 rows: stored bytes, or the
    decoded image for JPEG workloads). ``hold``: set when ``rows`` is the loader's pinned buffer
    (``stages.ring.Ring``): a consumer that still reads it after its step returned (an asynchronous device copy)
    calls ``hold(done)`` and the executor reuses the buffer only once ``done`` completed."""

    rows: np.ndarray
    ids: np.ndarray
    n: int
    hold: Callable[[Any], None] | None = None


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

    def extra_timelines(self) -> list[Timeline]:
        """Timelines the executor filled besides ``ctx.timeline`` (its threads' or worker processes'); the
        runner finishes or merges them with the rank's own."""
        return []

    def unreaped_io(self) -> tuple[int, int]:
        """(rchar, read_bytes) read so far by this executor's child processes that are still running, so not
        yet in this process's /proc/self/io (Linux adds a child's counters to its parent's when it is
        reaped). (0, 0) for an executor without child processes."""
        return 0, 0

    def close(self) -> None:
        return None

    def peer_stop(self) -> tuple[str, int] | None:
        """(signal, rank) of another rank of the node found stopping on a signal (executors with node-local
        files: their stop markers), or None."""
        return None

    def local_copies_dir(self) -> Path | None:
        """The directory of this node's node-local copies written during the run (``--cache drop`` evicts
        their pages with the dataset's before every epoch), or None: the executor keeps none on disk."""
        return None


class Strategy:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    semantics: ClassVar[Semantics]
    Options: ClassVar[type]
    display: ClassVar[str] = ""    # the name in simulate's study tables (default: ``name``)
    # shorthands of ``simulate``/study files for one of this strategy's options: {shorthand: option field}
    # (pls: {"pls_q": "exchange_fraction"}); a row of this strategy takes the shorthand's value unless it sets
    # the option itself
    shorthands: ClassVar[dict[str, str]] = {}

    @classmethod
    def display_name(cls) -> str:
        return cls.display or cls.name

    def sim_defaults(self, rules: Any) -> dict:
        """Options ``simulate`` gives this strategy under the model's rule set ``rules`` (``ModelRules``)
        before the row's own (staging under the thesis rules: the reference simulator's redraw)."""
        return {}

    def prologue_rows(self, n_samples: int, nodes: int, ranks_per_node: int, options: Any,
                      ctx: PlanContext | None = None) -> int:
        """An upper bound on the rows of this strategy's ``Plan.prologue`` for a world of ``nodes`` x
        ``ranks_per_node`` (the simulator's size check, before planning): at most one row per sample unless
        the strategy says otherwise (staging's all-gather: a row per sample and storage group). ``ctx``: the
        planner's view of that world where the caller has it (sizes and capacities: a tighter bound)."""
        return int(n_samples)

    def run_label(self, options: dict) -> str | None:
        """``report``/``compare``'s label of a run of this strategy with ``options`` (run.json's), or None
        for the generic one (the options that differ from the defaults)."""
        return None

    def plan(self, ctx: PlanContext, options: Any) -> Plan:
        raise NotImplementedError

    def executor(self, ctx: RunContext, plan: Plan, options: Any) -> Executor:
        raise NotImplementedError
