"""One rank's measured epoch loop (``Loop``).

``Loop(cfg, comm, workload, manifest, data_dir)`` sets the rank up: the strategy and its options, the
executor's context (``RunContext``) and the planner's (``PlanContext``, from the same fields), the plan,
the I/O counters, the fault injection and ``--cache``. ``Loop.run(timeline)`` lets the executor deliver
batches and records ``stall`` (the trainer blocked in ``next()`` waiting for its batch), ``plan`` (each
epoch's plan, before its clock), ``verify``, ``checkpoint`` and ``evict``; the compute object records
``compute`` (and ``transfer``/``barrier``), the executor ``read``/``decode``/``stage``/``exchange``. Nothing
is logged inside the loop: intervals go into preallocated buffers. The loop computes no statistics and
prints nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import strategies
from ..checkpoint.schedule import checkpoint_nbytes
from ..errors import ConfigError, RunError
from ..stop import deferred, interrupt_for, pending
from ..timeline import PHASE_ID, Timeline
from .cache import CacheControl
from .checkpoint import Checkpointer
from .setup import RunConfig, default_local_dir, sleep_step_time
from .verify_host import Verifier

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..comm import Comm
    from ..data.formats import SampleReader
    from ..plan import Plan
    from ..strategies.base import Executor
    from ..workload import Workload


class Loop:
    """One rank's run: set up, run every epoch, and return its Timeline arrays."""

    def __init__(self, cfg: RunConfig, comm: Comm, workload: Workload, manifest: Any, data_dir: Path | None, *,
                 reader_factory: Callable[[], SampleReader] | None = None, clock: Callable[[], int] | None = None):
        from ..data.formats import open_reader
        from ..storage import throttled_factory
        from ..storage.counters import CounterSet
        from ..storage.inject import injecting_factory
        from ..storage.inject import parse as parse_injection
        from ..system import load as load_profile

        self.cfg, self.comm, self.workload, self.manifest, self.data_dir = cfg, comm, workload, manifest, data_dir
        self.strategy = strategies.get(cfg.strategy)
        self.options = strategies.parse_options(self.strategy, cfg.options, where=f"strategy {cfg.strategy}",
                                               flags=True)
        b = workload.local_batch(cfg.batch_size)
        per_rank = -(-manifest.samples // comm.size)
        if b > per_rank:
            raise ConfigError(f"--batch-size={b}: larger than the per-rank share of {per_rank} samples "
                              f"({manifest.samples} samples / {comm.size} ranks); use at most {per_rank}")
        self.local_batch = b
        self.checkpoint_nbytes = checkpoint_nbytes(cfg.checkpoint_every, workload)
        self.system = load_profile(cfg.system)
        self.pfs_model = self.system.pfs_model()
        self.io = io = CounterSet()  # Darshan-style counters of this rank (readers, tiers, checkpoints)
        self.injection = parse_injection(cfg.inject, comm.size)
        self._injected_readers: list = []
        local_dir = Path(cfg.local_dir) if cfg.local_dir else default_local_dir()
        self.cache = CacheControl(cfg.cache, workload, manifest, data_dir, comm, local_dir, probe=not cfg.dry_run)
        direct = self.cache.policy.shared_direct
        s3_url = cfg.data_dir if isinstance(cfg.data_dir, str) and cfg.data_dir.startswith("s3://") else None

        def open_shared() -> SampleReader:
            if data_dir is None:
                raise ConfigError("no --data-dir and no reader: nothing to read the shared tier from")
            if s3_url is not None:   # the shared tier is a bucket (dlbench.storage.s3): the backend per reader
                from ..storage.s3 import open_run_backend

                return open_reader(data_dir, manifest, workload, counters=io, direct=direct, via=cfg.read_via,
                                   storage=open_run_backend(s3_url, manifest))
            return open_reader(data_dir, manifest, workload, counters=io, direct=direct, via=cfg.read_via)

        base_factory = reader_factory or open_shared
        self.ctx = strategies.RunContext(
            workload=workload, n_samples=manifest.samples, sample_nbytes=manifest.sample_nbytes(),
            world_size=comm.size, rank=comm.rank, node_map=comm.node_map, seed=cfg.seed, epochs=cfg.epochs,
            local_batch=b, data_dir=data_dir, manifest=manifest, comm=comm,
            # every read of the shared tier goes through the PFS model when the profile has one
            reader_factory=injecting_factory(throttled_factory(base_factory, self.pfs_model), self.injection,
                                             seed=cfg.seed, rank=comm.rank, n_samples=manifest.samples,
                                             where=getattr(manifest, "file_of", None),
                                             registry=self._injected_readers),
            system=self.system, local_dir=local_dir, memory_budget_bytes=self.system.tier_capacity_bytes("memory"),
            io_counters=io, cache=self.cache.policy)
        if clock is not None:
            self.ctx.clock = clock
        self.plan: Plan = self.strategy.plan(self.ctx.plan_context(), self.options)
        workload.format.driver().check_plan(workload, self.plan, cfg.strategy)   # a format's own read order
        self.executor: Executor | None = None
        self.started = False
        self.evaluator: Any = None   # DLIO's evaluation after an epoch (run.evaluate.Evaluator), set by the driver

    # ---- compute ----------------------------------------------------------------------------------
    def step_time_s(self) -> tuple[float, str]:
        """(seconds per step at the local batch, where the figure comes from) for sleep compute."""
        return sleep_step_time(self.cfg, self.workload, self.local_batch)[:2]

    def make_compute(self) -> Any:
        cfg = self.cfg
        if cfg.compute == "torch":
            from ..compute.torch_step import TorchCompute

            rows = max(self.local_batch, self.plan.max_step_samples or 0)   # unequal batches
            factor = self.injection.factor_for(self.comm.rank)
            # a slow rank (--inject slow-rank) stretches the host-timed step: with an asynchronous step
            # (--overlap) there is nothing host-timed to stretch, so auto means off there
            if factor > 1 and cfg.overlap == "on":
                raise ConfigError(f"--overlap on: --inject slow-rank={self.comm.rank}:{factor:g} stretches a "
                                  f"host-timed step; an overlapped step is timed on the device; use --overlap "
                                  f"off or auto")
            overlap = "off" if factor > 1 else cfg.overlap
            tc = TorchCompute(self.workload, rows, device=cfg.device,
                              comm=self.comm if self.comm.size > 1 else None, seed=cfg.seed, model=cfg.model,
                              precision=cfg.precision, overlap=overlap)
            if factor > 1:
                from ..compute.slow import SlowCompute

                return SlowCompute(tc, factor)
            return tc
        from ..compute.sleep import SleepCompute

        t, _src = self.step_time_s()
        # batch_size: the step time is for a local batch; a step delivering n samples takes n / b of it
        return SleepCompute(t * self.injection.factor_for(self.comm.rank), stdev_s=cfg.compute_stdev_s,
                            seed=cfg.seed, rank=self.comm.rank, barrier=self.comm if cfg.barrier else None,
                            batch_size=self.local_batch)

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self, timeline: Timeline, compute: Any = None, checkpoint_dir: Path | None = None,
            progress: Any = None) -> dict:
        """``progress``: None, or a hook (``dlbench.progress.StepProgress``) called with the clock values
        the loop already took: ``epoch_start(e, steps, t)``, ``step(s, t0, t1, n)``, ``epoch_end(e, t)``."""
        from ..storage.pagecache import proc_io

        cfg, comm, plan = self.cfg, self.comm, self.plan
        self.ctx.timeline = timeline
        compute = compute if compute is not None else self.make_compute()
        drain = getattr(compute, "drain", None)
        executor = self.executor = self.strategy.executor(self.ctx, plan, self.options)
        host_alloc = getattr(compute, "host_allocator", None)   # torch on CUDA, --overlap on: pinned memory
        host_alloc = host_alloc() if host_alloc is not None else None
        if host_alloc is not None and hasattr(executor, "batch_memory"):
            executor.batch_memory(host_alloc)   # the loader reads into pinned buffers (Batch.hold, below)
        verifier = Verifier(self.workload, cfg.seed, self.ctx) if cfg.verify else None
        STALL, PLAN, VERIFY = PHASE_ID["stall"], PHASE_ID["plan"], PHASE_ID["verify"]
        clock = self.ctx.clock
        io0 = proc_io()
        cache = self.cache
        ckpt = Checkpointer(cfg.checkpoint_every, self.checkpoint_nbytes, comm, self.io,
                            Path(checkpoint_dir if checkpoint_dir is not None else cfg.out), clock,
                            first=cfg.checkpoint_first, model=cfg.checkpoint_model)
        global_step = 0
        delivered = 0
        try:
            comm.barrier()
            cache.evict_before(-1, timeline, clock, executor)   # --cache drop: before the prologue
            cache.epoch_io(None, executor, self.io)
            executor.start()
            cache.epoch_io(-1, executor, self.io)        # the prologue's requested / device bytes
            sig = pending()
            if sig is not None:
                raise interrupt_for(sig)
            self.started = True                # past the prologue: a failure from here on is a measured run's
            for e in range(cfg.epochs):
                # the epoch's plan is built here, before its clock starts (it used to be built inside step
                # 0's stall: 25-330 ms at 1.28 M samples); its time is the ``plan`` phase, reported apart
                p0 = clock()
                plan.epoch(e)
                timeline.add(PLAN, p0, clock(), e, -1)
                cache.evict_before(e, timeline, clock, executor)  # --cache drop: outside the epoch
                comm.barrier()
                t_epoch = clock()
                it = executor.epoch(e)
                if progress is not None:
                    progress.epoch_start(e, plan.epoch(e).steps, t_epoch)
                s = 0
                epoch_samples = 0
                while True:
                    t0 = clock()
                    batch = next(it, None)
                    t1 = clock()
                    if batch is None:
                        break
                    timeline.add(STALL, t0, t1, e, s)
                    if progress is not None:
                        progress.step(s, t0, t1, batch.n)
                    if verifier is not None:
                        v0 = clock()
                        verifier.check(plan, e, s, batch)
                        timeline.add(VERIFY, v0, clock(), e, s)
                    if batch.hold is None:
                        compute.step(batch.rows, batch.ids, batch.n, timeline, e, s)
                    else:   # the loader's pinned buffer: reused once the compute's copy from it completed
                        compute.step(batch.rows, batch.ids, batch.n, timeline, e, s, hold=batch.hold)
                    delivered += batch.n
                    epoch_samples += batch.n
                    global_step += 1
                    if ckpt.every:
                        ckpt.after_step(global_step, timeline, e, s)
                    s += 1
                    sig = pending()
                    if sig is not None:  # a signal whose exception was swallowed on its way here
                        raise interrupt_for(sig)
                if drain is not None:   # asynchronous compute (--overlap): the epoch's steps end inside it
                    drain(timeline)
                t_end = clock()
                timeline.mark_epoch(e, t_epoch, t_end, samples=epoch_samples)
                cache.epoch_io(e, executor, self.io)
                if progress is not None:
                    progress.epoch_end(e, t_end)
                if s != plan.epoch(e).steps:
                    raise RunError(f"strategy {cfg.strategy} delivered {s} steps in epoch {e}; "
                                   f"its plan has {plan.epoch(e).steps}")
                if verifier is not None:
                    verifier.end_epoch(plan, e)
                if self.evaluator is not None:
                    self.evaluator.after_epoch(e, timeline, clock)   # outside the epoch clock (phase eval)
                    cache.skip_io(executor, self.io)                  # its reads are no epoch's bytes
        except KeyboardInterrupt:
            # every rank of the node is being interrupted (a SIGTERM to one rank is forwarded to the node's
            # others by remove_local_tier): each removes its own copies, the last one out the run directory
            executor.interrupted = True
            raise
        finally:
            with deferred():  # no signal cuts the removal of the local copies in two
                executor.close()
            compute_info = compute.describe() if hasattr(compute, "describe") else {}
            compute.close()
        io1 = proc_io()
        extra_tl = executor.extra_timelines()
        arrays: dict | None
        if timeline.spill_path is not None:
            # bounded memory: every timeline's records are in its own file in the run folder; the caller
            # reduces them (metrics.rank_reduce) where they are, and rank 0 never gathers intervals
            for t in (timeline, *extra_tl):
                t.finish()
            arrays = None
        else:
            extra = [t.arrays() for t in extra_tl]
            arrays = Timeline.merge([timeline.arrays(), *extra]) if extra else timeline.arrays()
        return {
            "arrays": arrays,
            "io": {k: io1.get(k, 0) - io0.get(k, 0) for k in ("rchar", "read_bytes")},
            "compute": compute_info,
            "strategy_stats": executor.stats(),
            "delivered_samples": delivered,
            "verified": verifier.count if verifier is not None else 0,
            "read_retries": int(sum(r.retries for r in self._injected_readers)),
            "timeline_flush_s": sum(t.hot_flush_ns for t in (timeline, *extra_tl)) * 1e-9,
            "io_counters": self.io.totals(),
            "cache": cache.rank_record(),
            "s3": _s3_stats(),
        }


def _s3_stats() -> dict | None:
    """This rank's S3 request counters (None: the shared tier is not S3)."""
    import sys

    mod = sys.modules.get("dlbench.storage.s3")
    return mod.process_stats() if mod is not None else None
