"""The measured epoch loop.

``run(cfg, comm)`` checks the dataset, builds the strategy's plan, lets its executor deliver batches and
records, per rank, intervals of ``stall`` (the trainer blocked in ``next()`` waiting for its batch),
``compute`` (and ``transfer``/``barrier`` from the compute object), ``checkpoint`` and ``barrier``; the
executor records ``read``/``decode``/``stage``/``exchange`` itself. Nothing is logged inside the loop;
intervals go into preallocated buffers, are gathered to rank 0 at the end, and turned into figures by
``metrics`` and a results folder by ``results``. The runner computes no statistics and prints nothing.

Failure: a rank that raises writes the results folder with the error (so it records the failure), and
under MPI aborts the whole job with its message, so no rank hangs in a collective.
"""

from __future__ import annotations

import os
import socket
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import strategies
from .config import MAX_STEP_TIME_S
from .errors import CapacityError, ConfigError, DataError, DlbenchError, Interrupted, RunError
from .stop import Terminated, deferred, interrupt_for, pending  # noqa: F401 - Terminated: the CLI's name for it
from .timeline import PHASE_ID, Timeline

ACCELERATORS = ("v100", "a100", "h100")


@dataclass
class RunConfig:
    workload: str = "cosmoflow"
    scale: str | None = None
    samples: int | None = None
    strategy: str = "naive"
    options: dict = field(default_factory=dict)
    data_dir: str | None = None
    epochs: int = 3
    batch_size: int | None = None
    seed: int = 0
    out: str = "results"
    compute: str = "sleep"                 # sleep | torch
    accelerator: str | None = None         # None: a100 where published, else a measured entry (Workload.choose_step_time)
    precision: str = "fp32"                # torch compute: fp32 | bf16 | fp16
    compute_time_s: float | None = None
    compute_stdev_s: float = 0.0
    compute_profile: str | None = None
    device: str = "auto"
    model: str | None = None
    barrier: bool = False
    checkpoint_every: int = 0
    verify: bool = False
    ranks_per_node: int | None = None
    dry_run: bool = False
    system: str = "local"                  # system profile: name in configs/systems or a YAML path
    local_dir: str | None = None           # node-local storage root (default: default_local_dir())
    inject: tuple = ()                     # --inject KIND=VALUE (dlbench.storage.inject)
    cache: str = "keep"                    # --cache keep|drop|direct (dlbench.storage.pagecache)
    read_via: str = "auto"                 # --read-via auto|library|pread (formats.open_reader)


def default_local_dir() -> Path:
    """``$TMPDIR/dlbench-local`` (each run uses its own ``run-<tag>/node<k>`` under it)."""
    import tempfile

    return Path(tempfile.gettempdir()) / "dlbench-local"


def default_data_dir(workload: str, scale: str, seed: int, tag: str = "") -> Path:
    """``$DLBENCH_DATA_DIR/<workload>[-<tag>]-<scale>-seed<seed>``; ``$DLBENCH_DATA_DIR`` defaults to
    ``~/.cache/dlbench/data``. ``tag`` (``data_dir_tag``) tells a user's YAML apart from a built-in of the
    same name."""
    from .host import data_root

    return data_root() / f"{Path(workload).name}{'-' + tag if tag else ''}-{scale}-seed{seed}"


def data_dir_tag(spec_path: str, workload) -> str:
    """'' for a built-in workload file; for a user's YAML ``user-<hash>``, the hash (12 hex digits of
    SHA-256) taken over the resolved data-defining spec (``manifest.spec_of``): a user YAML whose ``name:``
    equals a built-in's never lands on the built-in's default dataset, and editing its shapes gives a new
    dataset while editing its step times does not."""
    import hashlib
    import json

    from .config import resource_dir
    from .data.manifest import spec_of

    try:
        builtin = Path(spec_path).resolve() == (resource_dir("workloads") / f"{workload.name}.yaml").resolve()
    except OSError:
        builtin = False
    if builtin:
        return ""
    h = hashlib.sha256(json.dumps(spec_of(workload), sort_keys=True, default=str).encode()).hexdigest()
    return f"user-{h[:12]}"


def check_compute_options(cfg: RunConfig, workload_name: str | None = None) -> None:
    """Compute options that would be ignored or contradict each other are errors (before any data is
    generated): --compute-time/--compute-profile/--compute-stdev with --compute torch (the real step is
    measured, not emulated), --compute-time with --compute-profile, and a profile calibrated for another
    workload."""
    if cfg.compute == "torch":
        for flag, val in (("--compute-time", cfg.compute_time_s), ("--compute-profile", cfg.compute_profile),
                          ("--compute-stdev", cfg.compute_stdev_s or None)):
            if val is not None:
                raise ConfigError(f"{flag}={val}: conflicts with --compute torch (the real model's step is "
                                  f"measured, not emulated); drop {flag} or use --compute sleep")
    if cfg.compute_time_s is not None and cfg.compute_profile:
        raise ConfigError(f"--compute-time={cfg.compute_time_s} and --compute-profile={cfg.compute_profile} "
                          f"conflict: both set the sleep step time; pass one of them")
    if cfg.compute_profile and workload_name is not None:
        from .compute.calibrate import load_compute_profile

        _t, _b, meta = load_compute_profile(cfg.compute_profile)
        prof_wl = meta.get("workload")
        if prof_wl is not None and str(prof_wl) != workload_name:
            raise ConfigError(f"--compute-profile={cfg.compute_profile}: calibrated for workload '{prof_wl}', "
                              f"not '{workload_name}'; calibrate this one with `dlbench calibrate --workload "
                              f"{workload_name}`")


class _CacheControl:
    """``--cache keep|drop|direct`` on one rank (``dlbench.storage.pagecache``): what is read with O_DIRECT,
    the eviction before the prologue and every epoch (``drop``, and ``direct`` where a layout falls back to
    buffered reads), and per epoch the bytes requested from files and those that reached the device (this
    process and the executor's DataLoader workers, ``worker_io``)."""

    def __init__(self, mode: str, workload, manifest, data_dir: Path, comm, local_root: Path, *, probe: bool = True):
        from .data.manifest import MANIFEST_NAME
        from .errors import unknown_choice
        from .storage import pagecache

        if mode not in pagecache.CACHE_MODES:
            raise unknown_choice("cache", mode, pagecache.CACHE_MODES)
        # data_dir None: a fake reader (tests): nothing on disk to evict or probe; probe False: --dry-run
        self.mode, self.comm, self.manifest = mode, comm, manifest
        self.data_dir = Path(data_dir) if data_dir is not None and probe else None
        self.pc = pagecache
        self.warning = None
        self.read_direct = False
        if mode == "direct":
            ok, why = pagecache.direct_support(workload.layout)
            self.read_direct = ok
            self.warning = why or None
            paths = list(getattr(manifest, "paths", []) or [])
            if ok and paths and self.data_dir is not None:           # a file system that refuses O_DIRECT: one line now, not mid-run
                os.close(pagecache.open_direct(os.fsencode(str(self.data_dir / paths[0]))))
            if probe and local_root.is_dir():
                probe = local_root / f".dlbench-direct-probe-{os.getpid()}"
                try:
                    probe.write_bytes(b"\0" * pagecache.DIRECT_ALIGN)
                    os.close(pagecache.open_direct(os.fsencode(str(probe)), flag="--cache direct (--local-dir)"))
                finally:
                    probe.unlink(missing_ok=True)
        self.evicting = mode == "drop" or (mode == "direct" and not self.read_direct)
        self.leader = comm.rank == min(comm.node_ranks())   # one rank per node evicts
        self.accounting = None
        if comm.rank == 0 and self.data_dir is not None and (self.data_dir / MANIFEST_NAME).exists():
            self.accounting = pagecache.device_accounting(self.data_dir / MANIFEST_NAME)
        self.epochs: list[dict] = []
        self.evictions: list[dict] = []
        self._mark = None

    def evict_before(self, e: int, timeline, clock, executor, io) -> None:
        """Evict (node leader) and wait at the barrier; the ``evict`` phase interval, tagged with the epoch it
        precedes (the prologue's: epoch 0, so the prologue's bounds stay the staging's own)."""
        if not self.evicting:
            return
        from .timeline import PHASE_ID

        t0 = clock()
        got = {"files": 0, "bytes": 0}
        self.comm.barrier()   # every rank is done with the prologue / last epoch (its local copies all written)
        if self.leader:
            paths = ([str(self.data_dir / p) for p in self.manifest.paths] if self.data_dir is not None
                     else [])
            root = getattr(executor, "root", None)      # localcopy/planned: the run's node-local directory
            if root is not None:
                paths += self.pc.files_under(Path(root) / f"node{self.comm.node}")
            got = self.pc.evict(paths)
        self.comm.barrier()
        t1 = clock()
        timeline.add(PHASE_ID["evict"], t0, t1, max(e, 0), -1, got["bytes"])
        self.evictions.append({"before_epoch": e, "evict_s": (t1 - t0) * 1e-9, **got})

    def _totals(self, executor, io) -> tuple[int, int, int]:
        """(requested bytes, rchar, read_bytes) so far: this process plus its live DataLoader workers. Linux adds
        a child's /proc/<pid>/io to its parent's when the parent reaps it (a DataLoader's workers at the end of
        every epoch, unless persistent), so reaped workers are already in /proc/self/io; a worker still alive
        (or not yet reaped) is read from its own /proc/<pid>/io (its counters start at 0 at fork)."""
        from .counters import IDX

        own = _proc_io()
        rc, rb = own.get("rchar", 0), own.get("read_bytes", 0)
        me = os.getpid()
        for pid in getattr(executor, "worker_io", None) or {}:
            if _parent_of(pid) == me:      # still our child: not yet in our own counters
                w = self.pc.proc_io(pid)
                rc += w.get("rchar", 0)
                rb += w.get("read_bytes", 0)
        b = IDX["POSIX_BYTES_READ"]
        req = sum(vec[b] for cls, vec in io.totals().items() if cls in ("shared", "local"))
        return int(req), int(rc), int(rb)

    def epoch_io(self, e: int | None, executor, io) -> None:
        """``e`` None: mark the start (before the prologue); else record epoch ``e``'s bytes since the last mark
        (-1: the prologue): epoch e's bytes run from the end of e - 1 to its end, so what loader threads read
        between epochs (while the plan is built and the cache evicted) counts toward the epoch it serves."""
        now = self._totals(executor, io)
        if e is not None:
            start = self._mark
            self.epochs.append({"epoch": e, "requested_bytes": now[0] - start[0], "rchar_bytes": now[1] - start[1],
                                "device_read_bytes": now[2] - start[2]})
        self._mark = now

    def rank_record(self) -> dict:
        return {"epochs": self.epochs, "evictions": self.evictions, "accounting": self.accounting}


def _parent_of(pid: int) -> int:
    """The parent pid of ``pid`` from /proc/<pid>/stat (-1 when it is gone)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _proc_io() -> dict:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


class Loop:
    """One rank's run: set up, run every epoch, and return its Timeline arrays."""

    def __init__(self, cfg: RunConfig, comm, workload, manifest, data_dir: Path, *, reader_factory=None,
                 clock=None):
        self.cfg, self.comm, self.workload, self.manifest, self.data_dir = cfg, comm, workload, manifest, data_dir
        self.strategy = strategies.get(cfg.strategy)
        self.options = strategies.parse_options(self.strategy, cfg.options, where=f"strategy {cfg.strategy}",
                                               flags=True)
        b = cfg.batch_size or workload.batch_size
        per_rank = -(-manifest.samples // comm.size)
        if b > per_rank:
            raise ConfigError(f"--batch-size={b}: larger than the per-rank share of {per_rank} samples "
                              f"({manifest.samples} samples / {comm.size} ranks); use at most {per_rank}")
        self.local_batch = b
        self.checkpoint_nbytes = workload.checkpoint_nbytes()
        if cfg.checkpoint_every and not self.checkpoint_nbytes:
            raise ConfigError(f"--checkpoint-every={cfg.checkpoint_every}: workload {workload.name} gives no model "
                              f"size (model.parameters in its YAML), so the checkpoint size is unknown")
        from .data.formats import open_reader
        from .storage import throttled_factory
        from .storage.counters import CounterSet
        from .system import load as load_profile

        self.system = load_profile(cfg.system)
        self.pfs_model = self.system.pfs_model()
        self.io = io = CounterSet()  # Darshan-style counters of this rank (readers, tiers, checkpoints)
        from .storage.inject import injecting_factory
        from .storage.inject import parse as parse_injection

        self.injection = parse_injection(cfg.inject, comm.size)
        self._injected_readers: list = []
        self.cache = _CacheControl(cfg.cache, workload, manifest, data_dir, comm,
                                   Path(cfg.local_dir) if cfg.local_dir else default_local_dir(),
                                   probe=not cfg.dry_run)
        direct = self.cache.read_direct
        base_factory = reader_factory or (lambda: open_reader(data_dir, manifest, workload, counters=io,
                                                              direct=direct, via=cfg.read_via))
        self.ctx = strategies.RunContext(
            workload=workload, n_samples=manifest.samples, sample_nbytes=manifest.sample_nbytes(),
            world_size=comm.size, rank=comm.rank, node_map=comm.node_map, seed=cfg.seed, epochs=cfg.epochs,
            local_batch=b, data_dir=data_dir, manifest=manifest, comm=comm,
            # every read of the shared tier goes through the PFS model when the profile has one
            reader_factory=injecting_factory(throttled_factory(base_factory, self.pfs_model), self.injection,
                                             seed=cfg.seed, rank=comm.rank, n_samples=manifest.samples,
                                             where=getattr(manifest, "file_of", None),
                                             registry=self._injected_readers),
            system=self.system, local_dir=Path(cfg.local_dir) if cfg.local_dir else default_local_dir(),
            memory_budget_bytes=self.system.tier_capacity_bytes("memory"), io_counters=io, cache=cfg.cache)
        if clock is not None:
            self.ctx.clock = clock
        self.plan = self.strategy.plan(self.ctx, self.options)
        from .workload import tfrecord_options

        if (workload.layout == "tfrecord" and tfrecord_options(workload).read == "tfdata"
                and self.plan.meta.get("read_pattern") != "tfdata"):
            raise ConfigError(f"--strategy={cfg.strategy}: the tfrecord read pattern tfdata (tf.data's order) is "
                              f"planned by the naive and prefetch strategies only; use one of them, or "
                              f"tfrecord.read: indexed in the workload")
        self.executor = None
        self.started = False

    # ---- compute ----------------------------------------------------------------------------------
    def step_time_s(self) -> tuple[float, str]:
        """(seconds per step at the local batch, where the figure comes from) for sleep compute."""
        return sleep_step_time(self.cfg, self.workload, self.local_batch)[:2]

    def make_compute(self):
        cfg = self.cfg
        if cfg.compute == "torch":
            from .compute.torch_step import TorchCompute

            rows = max(self.local_batch, int(self.plan.meta.get("max_step_samples", 0)))   # unequal batches
            tc = TorchCompute(self.workload, rows, device=cfg.device,
                              comm=self.comm if self.comm.size > 1 else None, seed=cfg.seed, model=cfg.model,
                              precision=cfg.precision)
            factor = self.injection.factor_for(self.comm.rank)
            if factor > 1:
                from .storage.inject import SlowCompute

                return SlowCompute(tc, factor)
            return tc
        from .compute.sleep import SleepCompute

        t, _src = self.step_time_s()
        # batch_size: the step time is for a local batch; a step delivering n samples takes n / b of it
        return SleepCompute(t * self.injection.factor_for(self.comm.rank), stdev_s=cfg.compute_stdev_s,
                            seed=cfg.seed, rank=self.comm.rank, barrier=self.comm if cfg.barrier else None,
                            batch_size=self.local_batch)

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self, timeline: Timeline, compute=None, checkpoint_dir: Path | None = None, progress=None) -> dict:
        """``progress``: None, or a hook (``dlbench.progress.StepProgress``) called with the clock values
        the loop already took: ``epoch_start(e, steps, t)``, ``step(s, t0, t1, n)``, ``epoch_end(e, t)``."""
        cfg, comm, plan = self.cfg, self.comm, self.plan
        self.ctx.timeline = timeline
        compute = compute if compute is not None else self.make_compute()
        executor = self.executor = self.strategy.executor(self.ctx, plan, self.options)
        verifier = _Verifier(self.workload, cfg.seed, self.ctx) if cfg.verify else None
        STALL, CKPT, PLAN, VERIFY = PHASE_ID["stall"], PHASE_ID["checkpoint"], PHASE_ID["plan"], PHASE_ID["verify"]
        clock = self.ctx.clock
        io0 = _proc_io()
        cache = self.cache
        global_step = 0
        ckpt_dir = Path(checkpoint_dir if checkpoint_dir is not None else cfg.out)
        delivered = 0
        ckpt_io = None
        try:
            comm.barrier()
            cache.evict_before(-1, timeline, clock, executor, self.io)   # --cache drop: before the prologue
            cache.epoch_io(None, executor, self.io)
            executor.start()
            cache.epoch_io(-1, executor, self.io)        # the prologue's requested / device bytes
            if pending() is not None:
                raise interrupt_for(pending())
            self.started = True                # past the prologue: a failure from here on is a measured run's
            for e in range(cfg.epochs):
                # the epoch's plan is built here, before its clock starts (it used to be built inside step
                # 0's stall: 25-330 ms at 1.28 M samples); its time is the ``plan`` phase, reported apart
                p0 = clock()
                plan.epoch(e)
                timeline.add(PLAN, p0, clock(), e, -1)
                cache.evict_before(e, timeline, clock, executor, self.io)  # --cache drop: outside the epoch
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
                    compute.step(batch.rows, batch.ids, batch.n, timeline, e, s)
                    delivered += batch.n
                    epoch_samples += batch.n
                    global_step += 1
                    if cfg.checkpoint_every and global_step % cfg.checkpoint_every == 0:
                        from .compute.sleep import write_checkpoint

                        c0 = clock()
                        if comm.rank == 0:  # rank 0 writes; every rank waits for it
                            w_s = write_checkpoint(ckpt_dir, self.checkpoint_nbytes, None, e, s)
                            if ckpt_io is None:
                                ckpt_io = self.io.new("checkpoint")
                            ckpt_io.open()
                            ckpt_io.write(self.checkpoint_nbytes, int(w_s * 1e9),
                                          count=-(-self.checkpoint_nbytes // (64 << 20)))
                        comm.barrier()
                        timeline.add(CKPT, c0, clock(), e, s, self.checkpoint_nbytes if comm.rank == 0 else 0)
                    s += 1
                    if pending() is not None:  # a signal whose exception was swallowed on its way here
                        raise interrupt_for(pending())
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
        io1 = _proc_io()
        extra_tl = list(getattr(executor, "extra_timelines", lambda: [])())
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
        }


def check_seconds(name: str, value, *, lo: float = 0.0, hi: float = MAX_STEP_TIME_S) -> float:
    """A finite number of seconds in [lo, hi] (``inf``, ``nan`` and ``1e308`` are one-line errors)."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise ConfigError(f"{name}={value}: must be a finite number of seconds from {lo:g} to {hi:g}")
    return float(value)


def sleep_step_time(cfg: RunConfig, workload, local_batch: int) -> tuple[float, str, dict]:
    """Sleep compute's step time at ``local_batch``: ``(seconds, source line, record)``. ``--compute-time``
    first, then ``--compute-profile``, then the workload's figure for ``--accelerator`` (default: a100 where
    published, else a measured entry; see ``Workload.choose_step_time``)."""
    if cfg.compute_time_s is not None:
        t = check_seconds("--compute-time", cfg.compute_time_s)
        return t, f"--compute-time {t:g}", {"kind": "flag"}
    if cfg.compute_profile:
        from .compute.calibrate import load_compute_profile

        t, b, meta = load_compute_profile(cfg.compute_profile)
        return t * local_batch / b, (f"profile {cfg.compute_profile} ({t:g} s at batch {b}, scaled linearly to "
                                     f"batch {local_batch})"), {"kind": "profile", "device": meta.get("device")}
    ch = workload.choose_step_time(cfg.accelerator, cfg.model)
    return ch.scaled(local_batch), ch.describe(local_batch), {
        "kind": ch.kind, "accelerator": ch.accelerator, "model": ch.model, "reference_step_time_s": ch.step_time_s,
        "reference_batch_size": ch.batch_size, "default": cfg.accelerator is None}


def check_compute(cfg: RunConfig) -> None:
    """Every compute option checked before anything is generated or written: the step-time source of sleep
    compute (accelerator, profile, --compute-time), or torch's device, model and precision."""
    from . import workload as wl_mod

    if cfg.compute not in ("sleep", "torch"):
        raise ConfigError(f"--compute={cfg.compute}: choose one of sleep, torch")
    check_seconds("--compute-stdev", cfg.compute_stdev_s)
    if cfg.compute_time_s is not None:
        check_seconds("--compute-time", cfg.compute_time_s)
    spec, path = wl_mod.load_spec(cfg.workload)
    workload = wl_mod.resolve(spec, spec_path=path)
    if cfg.compute == "sleep":
        if cfg.precision != "fp32":
            raise ConfigError(f"--precision={cfg.precision}: applies to --compute torch; sleep compute sleeps a "
                              f"measured or published step time (use --compute-profile FILE from `dlbench "
                              f"calibrate --precision {cfg.precision}` for a {cfg.precision} step time)")
        sleep_step_time(cfg, workload, cfg.batch_size or workload.batch_size)
        return
    from .compute.models import model_name_for
    from .compute.torch_step import check_precision

    model_name_for(workload, cfg.model)
    check_precision(cfg.precision, cfg.device)


class _Verifier:
    """--verify: every delivered batch is the plan's step, in order, and every row's bytes equal what the
    generator wrote for that sample (JPEGs: the decode of the generated file)."""

    def __init__(self, workload, seed: int, ctx):
        from .data.content import expected_row

        self.workload, self.seed, self.ctx = workload, seed, ctx
        self.expected_row = expected_row
        self.count = 0
        self.jpeg = workload.format.decodes
        if self.jpeg:
            self.reader = ctx.reader_factory()
            self.tmp = np.empty(workload.decoded_nbytes, dtype=np.uint8)
        self.seen: list[np.ndarray] = []

    def check(self, plan, e: int, s: int, batch) -> None:
        want = plan.epoch(e).step_samples(self.ctx.rank, s)
        got = np.asarray(batch.ids[:batch.n])
        if not np.array_equal(want, got):
            raise RunError(f"--verify: epoch {e} step {s} rank {self.ctx.rank}: delivered samples "
                           f"{got[:8].tolist()}... differ from the plan's {want[:8].tolist()}...")
        for j, i in enumerate(got.tolist()):
            exp = self.expected_row(self.workload, self.seed, i)
            if self.jpeg:
                n = self.reader.decode_into(exp, len(exp), self.tmp)
                exp = self.tmp if n is None else self.tmp[:n]   # rows of varying size (tfrecord) say how long
            row = batch.rows[j, :len(exp)]
            if len(exp) > batch.rows.shape[1] or not np.array_equal(row, exp):
                raise RunError(f"--verify: epoch {e} step {s} rank {self.ctx.rank}: sample {i}'s bytes "
                               f"differ from what the generator wrote")
            self.count += 1
        self.seen.append(got)

    def end_epoch(self, plan, e: int) -> None:
        got = np.concatenate(self.seen) if self.seen else np.zeros(0, np.int64)
        self.seen = []
        want = plan.epoch(e).rank_samples(self.ctx.rank)
        if not np.array_equal(np.sort(got), np.sort(want)):
            missing = np.setdiff1d(want, got)
            raise RunError(f"--verify: epoch {e} rank {self.ctx.rank}: samples missing "
                           f"{missing[:8].tolist()} or duplicated")
        if self.ctx.comm is not None:
            counts = np.bincount(got, minlength=plan.n_samples).astype(np.int64)
            total = self.ctx.comm.allreduce(counts, op="sum")
            exp = np.zeros(plan.n_samples, np.int64)
            ep = plan.epoch(e)
            np.add.at(exp, ep.sample_ids[ep.sample_ids >= 0], 1)
            if not np.array_equal(total, exp):
                bad = np.nonzero(total != exp)[0]
                raise RunError(f"--verify: epoch {e}: samples {bad[:8].tolist()} delivered "
                               f"{total[bad[:8]].tolist()} times across ranks, plan says {exp[bad[:8]].tolist()}")


class _VirtualManifest:
    """What --dry-run plans against when the dataset does not exist yet (mean sample sizes)."""

    def __init__(self, workload, seed: int):
        from .config import to_dict

        self.workload, self.seed, self.samples = workload.name, seed, workload.samples
        self.spec = {**to_dict(workload), "note": "dataset not generated yet: sizes are the workload's mean"}
        self._nbytes = workload.sample_nbytes

    def sample_nbytes(self) -> np.ndarray:
        return np.full(self.samples, self._nbytes, dtype=np.int64)


def resolve_dataset(cfg: RunConfig, comm, *, generate_if_missing: bool = True):
    """Load the workload and its dataset's manifest; with no --data-dir, generate the tiny preset in
    the default location on first use."""
    from . import workload as wl_mod
    from .data.manifest import Manifest

    explicit = cfg.data_dir is not None
    spec, path = wl_mod.load_spec(cfg.workload)
    scale = cfg.scale or ("tiny" if not explicit and cfg.samples is None else None)
    if explicit:
        data_dir = Path(cfg.data_dir)
    else:
        tag = data_dir_tag(path, wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path))
        data_dir = default_data_dir(spec.name, scale or "custom", cfg.seed, tag)
    if not Manifest.exists(data_dir) and cfg.dry_run:
        workload = wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path)
        return workload, _VirtualManifest(workload, cfg.seed), data_dir
    if not explicit and not Manifest.exists(data_dir):
        if not generate_if_missing:
            raise DataError(f"no dataset at {data_dir}; run `dlbench generate --workload {cfg.workload} "
                            f"--data-dir {data_dir}`")
        from .data.generate import generate

        workload = wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path)
        if comm.rank == 0:
            data_dir.parent.mkdir(parents=True, exist_ok=True)
        comm.barrier()
        generate(workload, data_dir, seed=cfg.seed, comm=comm, progress=False)
    if not data_dir.exists():
        raise DataError(f"--data-dir {data_dir}: no such directory; create a dataset with "
                        f"`dlbench generate --workload {cfg.workload} --data-dir {data_dir}`")
    manifest = Manifest.load(data_dir)
    if manifest.workload != spec.name:
        raise DataError(f"--data-dir {data_dir} holds a dataset of workload '{manifest.workload}', not "
                        f"'{spec.name}'; generate one with `dlbench generate --workload {cfg.workload} "
                        f"--data-dir NEW_DIR`")
    if cfg.seed != manifest.seed:
        raise DataError(f"--seed={cfg.seed}: the dataset at {data_dir} was generated with seed {manifest.seed}; "
                        f"pass --seed {manifest.seed} or generate another dataset")
    _check_spec_matches(cfg, spec, path, manifest, data_dir)
    from .data.verify import check_regular_files, workload_of

    check_regular_files(data_dir, manifest, comm)  # a FIFO hung the run in open(); a symlink loop: traceback

    return workload_of(manifest, cfg.workload), manifest, data_dir


def _check_spec_matches(cfg: RunConfig, spec, path: str, manifest, data_dir: Path) -> None:
    """The workload the user named must describe the dataset found: same data-defining spec (arrays,
    shapes, dtypes, layout, counts) at the manifest's scale. Before, a user YAML named like a built-in ran
    on the built-in's data with the built-in's shapes, silently."""
    from . import workload as wl_mod
    from .data.manifest import spec_of

    scale = manifest.scale.split("+")[0] if manifest.scale else None
    try:
        w = wl_mod.resolve(spec, scale=scale if scale in wl_mod.SCALES else None, samples=manifest.samples,
                           spec_path=path)
        want = spec_of(w)
    except ConfigError as e:
        raise DataError(f"--workload {cfg.workload} ({path}) does not describe the dataset at {data_dir}: "
                        f"{e}") from None
    have = manifest.spec or {}
    diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if diff:
        raise DataError(f"--workload {cfg.workload} ({path}) does not describe the dataset at {data_dir}: "
                        f"{', '.join(diff)} differ from what it was generated with; generate this workload's "
                        f"dataset with `dlbench generate --workload {cfg.workload} --data-dir NEW_DIR` (or leave "
                        f"--data-dir out: a user YAML gets its own default dataset)")


def run(cfg: RunConfig, comm, progress=None) -> dict:
    """Execute one run on every rank; rank 0 returns ``{"run_dir", "run"}``, others ``{}``. ``progress``:
    this rank's per-step hook (``Loop.run``), None for none."""
    from . import results
    from . import workload as wl_mod
    from .config import to_dict

    check_compute(cfg)  # before any dataset is generated
    check_compute_options(cfg, wl_mod.load_spec(cfg.workload)[0].name)
    from .storage import check_read_call

    check_read_call()  # DLBENCH_READ_CALL
    if not cfg.dry_run:
        err = None
        if comm.rank == 0:
            try:
                results.check_out_dir(cfg.out)
            except ConfigError as e:
                err = str(e)
        err = comm.bcast(err)
        if err:
            raise ConfigError(err)
    workload, manifest, data_dir = resolve_dataset(cfg, comm, generate_if_missing=not cfg.dry_run)
    loop = Loop(cfg, comm, workload, manifest, data_dir)
    config_echo = {**to_dict(cfg), "data_dir": str(data_dir), "local_batch": loop.local_batch,
                   "options": to_dict(loop.options), "ranks": comm.size, "nodes": comm.nodes,
                   "workload_spec": manifest.spec, "shared_tier": loop.system.describe_shared_tier(),
                   "local_dir": str(loop.ctx.local_dir), "hosts": comm.allgather(socket.gethostname()),
                   "ranks_per_node_source": getattr(comm, "layout_source", None)}
    if cfg.compute == "sleep":
        (config_echo["compute_step_time_s"], config_echo["compute_step_time_source"],
         config_echo["compute_step_time"]) = sleep_step_time(cfg, workload, loop.local_batch)
    if cfg.dry_run:
        return {"dry_run": dry_run_summary(loop, config_echo)}

    err = None
    run_dir = None
    if comm.rank == 0:
        try:
            run_dir = results.new_run_dir(Path(cfg.out), workload.name, cfg.strategy)
            results.write_run(run_dir, config=config_echo, summary={}, error="incomplete: the run did not finish")
        except ConfigError as e:
            err = str(e)
        except OSError as e:
            if run_dir is not None:
                results.remove_run_dir(run_dir)
            err = f"--out {cfg.out}: cannot write results there: {e.strerror or e}; pass --out DIR with space"
    run_dir, err = comm.bcast((str(run_dir) if run_dir else None, err))
    if err:
        raise ConfigError(err)  # every rank: nothing has run yet
    # each rank writes its own interval files into the run folder as its buffer fills (bounded memory);
    # a rank that cannot see the folder (not a shared file system) keeps its intervals and sends them
    spill = Path(run_dir) if Path(run_dir).is_dir() else None
    timeline = Timeline(TIMELINE_BUFFER if spill is not None else _capacity(loop), comm.rank, spill_dir=spill)
    try:
        mine = loop.run(timeline, checkpoint_dir=Path(run_dir), progress=progress)
        if mine["arrays"] is None:
            from . import metrics
            from .timeline import load_spilled

            mine["reduced"] = metrics.rank_reduce(load_spilled(spill, comm.rank)[0], cfg.epochs)
    except BaseException as exc:  # record the failure, then stop every rank
        with deferred():  # a second signal does not cut the record and the clean-up short
            _failed(cfg, comm, loop, Path(run_dir), config_echo, timeline, exc)
        raise  # pragma: no cover - _failed always raises or ends the process
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0:
        return {}
    return _finish(cfg, comm, workload, manifest, loop, config_echo, Path(run_dir), gathered)


TIMELINE_BUFFER = 1 << 16   # records a rank's timeline holds before writing them out (≈ 2 × 2.3 MB)


def _signal_name(exc: BaseException) -> str:
    return getattr(exc, "signal_name", "SIGINT")


def _failed(cfg, comm, loop: Loop, run_dir: Path, config_echo: dict, timeline, exc: BaseException) -> None:
    """A rank's run stopped: the executor has closed (its local copies are removed, ``cleanup_note``).

    - An early check (ConfigError or CapacityError before the prologue finished: nothing was measured):
      the results folder is removed, the error is the message.
    - An interrupt (SIGINT, SIGTERM): rank 0 records ``status: interrupted`` and says so once; under MPI a
      rank other than 0 gives rank 0 two seconds to do that and end the job, and only then (rank 0 not
      interrupted) records and ends it itself. Exit code 130 (SIGINT) or 143 (SIGTERM).
    - Anything else: the folder records the error and the traceback; under MPI the job is aborted with the
      rank's message so no rank hangs in a collective."""
    from . import results

    ex = loop.executor
    # another rank of the node stopping on a signal (its stop marker): this rank was told by it (a forwarded
    # SIGTERM), or a read of a local copy failed while it stopped; either way the run was interrupted
    peer = ex.peer_stop() if ex is not None and hasattr(ex, "peer_stop") else None
    interrupted = isinstance(exc, KeyboardInterrupt) or peer is not None
    if interrupted and not isinstance(exc, KeyboardInterrupt) and ex is not None and not ex.interrupted:
        ex.interrupted = True
        with deferred():
            ex.close()    # idempotent: now as an interrupted rank (removes what is left if it is the last)
    note = getattr(ex, "cleanup_note", "") or ""
    tail = f"; {note}" if note else ""
    if interrupted:
        sig, origin = (peer if peer is not None and (peer[0] == "SIGTERM" or not isinstance(exc, KeyboardInterrupt))
                       else (_signal_name(exc), comm.rank))
        code = 143 if sig == "SIGTERM" else 130
        if comm.size > 1 and comm.rank != 0:
            import time

            time.sleep(2.0)  # rank 0 (interrupted too, as under Ctrl-C) records the run and ends the job
        where = f" on rank {origin}" if comm.size > 1 else ""
        try:
            results.write_run(run_dir, config=config_echo, summary={}, intervals=[timeline.arrays()],
                              error=f"interrupted by {sig}{where}", status="interrupted",
                              extra={"interrupted_rank": origin})
            rec = f"results (status interrupted): {run_dir}"
        except Exception:  # noqa: BLE001 - never mask the interrupt
            rec = f"the results folder {run_dir} could not be updated"
        msg = f"interrupted by {sig}{where}; {rec}{tail}"
        if comm.size > 1:
            comm.abort(f"dlbench: {msg}", code)
        raise Interrupted(msg, exit_code=code) from None
    early = isinstance(exc, (ConfigError, CapacityError)) and not loop.started
    msg = str(exc) if isinstance(exc, DlbenchError) else f"{type(exc).__name__}: {exc}"
    if early:
        results.remove_run_dir(run_dir)
        if comm.size > 1:
            comm.abort(f"dlbench: error: rank {comm.rank}: {msg}{tail}", exc.exit_code)
        raise _with_message(exc, f"{msg}{tail}") from None
    tb = traceback.format_exc()
    try:
        results.write_run(run_dir, config=config_echo, summary={}, intervals=[timeline.arrays()],
                          error=f"rank {comm.rank}: {msg}", extra={"traceback": tb, "failed_rank": comm.rank,
                                                                   "cleanup": note or None})
        rec = f"results with the error: {run_dir}"
    except Exception:  # noqa: BLE001 - never mask the original error
        rec = f"the results folder {run_dir} could not be updated"
    if comm.size > 1:
        comm.abort(f"dlbench: error: rank {comm.rank}: {msg}\n{rec}{tail}", getattr(exc, "exit_code", 5))
    if isinstance(exc, DlbenchError):
        raise _with_message(exc, f"{msg} ({rec}{tail})") from None
    raise RunError(f"run failed: {msg} ({rec}{tail})") from exc


def _with_message(exc: DlbenchError, message: str) -> DlbenchError:
    """The same error type with a longer message (where the results and the local copies went)."""
    try:
        new = type(exc)(message)
    except TypeError:  # pragma: no cover - a subclass with another signature
        return exc
    new.exit_code = exc.exit_code
    return new


def _capacity(loop: Loop) -> int:
    # an estimate from the sizes (building epoch 0's plan here would hide its cost from the ``plan`` phase)
    steps = -(-loop.manifest.samples // max(loop.comm.size * loop.local_batch, 1)) + 1
    per_step = 4 + 2 * loop.local_batch
    return max(1024, min(per_step * steps * loop.cfg.epochs + 64, 1 << 22))


def _finish(cfg, comm, workload, manifest, loop, config_echo, run_dir: Path, gathered: list) -> dict:
    from . import counters, metrics, results
    from .plan.quality import order_quality

    if all(g.get("reduced") is not None for g in gathered):
        # every rank reduced its own interval files: summary from the small per-rank figures
        red = sorted((g["reduced"] for g in gathered), key=lambda x: x["rank"])
        summary = metrics.summarize_breakdowns([x["breakdown"] for x in red], red[0]["epoch_ids"],
                                               workload=workload.name, strategy=cfg.strategy, ranks=comm.size,
                                               nodes=comm.nodes)
        tier_io = metrics.merge_tier_io([x["tier_io"] for x in red])
        latency = metrics.merge_read_latency([x["read_latency"] for x in red])
        per_rank = results.SpilledIntervals(run_dir)
    else:
        if any(g.get("reduced") is not None for g in gathered):  # mixed: some ranks could not see the folder
            from .timeline import load_spilled

            for g in gathered:
                if g.get("arrays") is None:
                    g["arrays"] = load_spilled(run_dir, g["reduced"]["rank"])[0]
        per_rank = [g["arrays"] for g in gathered]
        summary = metrics.summarize(per_rank, workload=workload.name, strategy=cfg.strategy, ranks=comm.size,
                                    nodes=comm.nodes, epochs=cfg.epochs)
        tier_io = metrics.tier_io(per_rank)
        latency = metrics.merge_read_latency([metrics.read_latency_rank(a) for a in per_rank])
    summary["semantics"] = loop.plan.meta.get("semantics") or loop.strategy.semantics.as_dict()
    summary["order"] = loop.plan.meta.get("order")
    if workload.layout == "tfrecord":   # the read pattern: indexed (pread per record) or tfdata (tf.data streams)
        from .workload import tfrecord_options

        summary["tfrecord_read"] = tfrecord_options(workload).read
    summary["order_quality"] = order_quality(loop.plan)
    summary["shared_tier"] = loop.system.describe_shared_tier()
    summary["tier_io"] = tier_io
    summary["read_latency"] = latency
    if loop.plan.meta.get("warning"):
        summary["plan_warning"] = loop.plan.meta["warning"]
    if "staged_fraction" in loop.plan.meta:   # staging beyond a node's capacity: the share of its subset staged
        summary["staged_fraction"] = loop.plan.meta["staged_fraction"]
    summary["compute"] = {"mode": cfg.compute, **(gathered[0].get("compute") or {})}
    if cfg.compute == "sleep":
        summary["compute"]["step_time_s"] = config_echo["compute_step_time_s"]
        summary["compute"]["source"] = config_echo["compute_step_time_source"]
        summary["compute"].update(config_echo["compute_step_time"])
    summary["strategy_stats"] = [g["strategy_stats"] for g in gathered]
    summary["verified_samples"] = int(sum(g["verified"] for g in gathered)) if cfg.verify else None
    summary["page_cache"] = page_cache_check(manifest, gathered)
    from .host import meminfo
    from .storage import pagecache

    summary["cache"] = pagecache.summarize(cfg.cache, [g.get("cache") or {} for g in gathered],
                                           direct_reads=loop.cache.read_direct, warning=loop.cache.warning,
                                           dataset_bytes=int(manifest.sample_nbytes().sum()),
                                           node_mem_bytes=meminfo("MemTotal"))
    if cfg.cache != "keep" and summary["cache"]["verdict"] == "cold":
        summary["page_cache"]["warning"] = None   # the eviction / O_DIRECT made the reads cold (verdict says so)
    # bookkeeping inside the timed loop: moving >= FLUSH_RECORDS pending records into arrays mid-epoch
    summary["timeline_flush_s"] = [float(g.get("timeline_flush_s", 0.0)) for g in gathered]
    if loop.injection.active:
        worker_retries = sum(((g.get("strategy_stats") or {}).get("worker_io") or {}).get("read_retries", 0)
                             for g in gathered)
        summary["injected"] = {**loop.injection.describe(),
                               "read_retries": int(sum(g.get("read_retries", 0) for g in gathered) + worker_retries)}
    summary["io_counters"] = counters.summarize([g.get("io_counters") or {} for g in gathered])
    from .storage import READ_CALL

    summary["io_counters"]["read_call"] = "lseek+readv" if READ_CALL == "readv" else "preadv (glibc preadv64v2)"
    from .dlio import au_verdict

    summary["au_rule"] = au_verdict(summary.get("au"), workload.au_threshold, workload.au_threshold_source)
    try:
        results.write_run(run_dir, config=config_echo, summary=summary, intervals=per_rank, error=None)
    except OSError as e:
        # a full disk (or the folder gone): the figures are measured, keep them on stdout; nothing half-written
        results.remove_run_dir(run_dir)
        doc = {"schema": results.SCHEMA, "status": "ok", "config": config_echo, "summary": summary,
               "error": None, "run_dir": None}
        return {"run_dir": None, "run": doc,
                "write_error": f"--out {cfg.out}: the results could not be written to {run_dir} "
                               f"({e.strerror or e}); nothing was kept there: the summary above is the only "
                               f"record of this run"}
    return {"run_dir": str(run_dir), "run": results.read_run(run_dir)}


def page_cache_check(manifest, gathered: list) -> dict:
    """Did the reads reach the device? ``read_bytes`` (/proc/self/io: bytes the block layer fetched for
    this process) against ``rchar`` (bytes returned by read calls). If the dataset fits in memory and
    under 10 % of what was read came from the device, the run measured the page cache, not storage
    (MLPerf Storage asks for a dataset ≥ 5× host memory). Counts the trainer processes only: the DataLoader
    workers' reads are already in them (the kernel adds a child's I/O counters to its parent's when the
    parent reaps it, and the executor has shut its workers down before the trainer's counters are read);
    adding the workers' own figures (``strategy_stats.worker_io``, kept as ``workers_rchar_bytes``) counted
    prefetch's reads twice."""
    from .host import meminfo

    mem = meminfo("MemTotal")
    ds = int(manifest.sample_nbytes().sum())

    def total(key: str) -> int:
        # the workers are not added: the executor's close() joins (reaps) them before the trainer's last reading,
        # and Linux adds a reaped child's /proc/<pid>/io to its parent's (adding them counted their bytes twice)
        return int(sum(g["io"].get(key, 0) for g in gathered))

    rchar, dev = total("rchar"), total("read_bytes")
    workers_rchar = int(sum(((g.get("strategy_stats") or {}).get("worker_io") or {}).get("rchar", 0)
                            for g in gathered))
    fits = bool(mem and ds < mem)
    from_memory = rchar > 0 and dev < 0.1 * rchar
    warn = None
    if fits and (from_memory or rchar == 0):
        warn = (f"dataset ({ds / 1e9:.2f} GB) fits in the page cache ({mem / 1e9:.1f} GB RAM) and "
                f"{dev / 1e6:.1f} MB of {rchar / 1e6:.1f} MB read came from the device: I/O figures measure "
                f"memory, not storage (MLPerf Storage asks for a dataset >= 5x RAM)")
    return {"dataset_bytes": ds, "mem_total_bytes": mem, "fits_in_memory": fits, "rchar_bytes": rchar,
            "device_read_bytes": dev, "workers_rchar_bytes": workers_rchar, "warning": warn}


def dry_run_summary(loop: Loop, config_echo: dict) -> dict:
    """What would run: the plan's shape, bytes per tier, capacity checks. Touches nothing."""
    plan = loop.plan
    out = {"config": config_echo, "plan": plan.summary(),
           "bytes_by_tier": plan.bytes_by_tier(loop.ctx.sample_nbytes),
           "semantics": loop.plan.meta.get("semantics") or loop.strategy.semantics.as_dict(),
           "order": loop.plan.meta.get("order"), "shared_tier": loop.system.describe_shared_tier(),
           "capacity": {k: loop.plan.meta[k] for k in ("needed_per_node_bytes", "capacity_per_node_bytes",
                                                         "capacity_source", "cache_peak_samples", "cache_peak_bytes",
                                                         "cache_bytes_per_rank", "cache_capacity_per_rank_bytes",
                                                         "cache_capacity_source", "local_cache_peak_bytes")
                        if k in loop.plan.meta}}
    return out
