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
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import strategies
from .errors import ConfigError, DataError, DlbenchError, RunError
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
    accelerator: str = "a100"
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


def default_local_dir() -> Path:
    """``$TMPDIR/dlbench-local`` (each run uses its own ``run-<tag>/node<k>`` under it)."""
    import tempfile

    return Path(tempfile.gettempdir()) / "dlbench-local"


def default_data_dir(workload: str, scale: str, seed: int) -> Path:
    """``$DLBENCH_DATA_DIR/<workload>-<scale>-seed<seed>``; ``$DLBENCH_DATA_DIR`` defaults to
    ``~/.cache/dlbench/data``."""
    root = Path(os.environ.get("DLBENCH_DATA_DIR") or Path.home() / ".cache" / "dlbench" / "data")
    return root / f"{Path(workload).stem}-{scale}-seed{seed}"


def _proc_io() -> dict:
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f)}
    except OSError:
        return {}


def _mem_total_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Loop:
    """One rank's run: set up, run every epoch, and return its Timeline arrays."""

    def __init__(self, cfg: RunConfig, comm, workload, manifest, data_dir: Path, *, reader_factory=None,
                 clock=None):
        self.cfg, self.comm, self.workload, self.manifest, self.data_dir = cfg, comm, workload, manifest, data_dir
        self.strategy = strategies.get(cfg.strategy)
        self.options = strategies.parse_options(self.strategy, cfg.options, where=f"--opt for {cfg.strategy}")
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
        from .system import load as load_profile

        self.system = load_profile(cfg.system)
        self.pfs_model = self.system.pfs_model()
        base_factory = reader_factory or (lambda: open_reader(data_dir, manifest, workload))
        self.ctx = strategies.RunContext(
            workload=workload, n_samples=manifest.samples, sample_nbytes=manifest.sample_nbytes(),
            world_size=comm.size, rank=comm.rank, node_map=comm.node_map, seed=cfg.seed, epochs=cfg.epochs,
            local_batch=b, data_dir=data_dir, manifest=manifest, comm=comm,
            # every read of the shared tier goes through the PFS model when the profile has one
            reader_factory=throttled_factory(base_factory, self.pfs_model),
            system=self.system, local_dir=Path(cfg.local_dir) if cfg.local_dir else default_local_dir(),
            memory_budget_bytes=self.system.tier_capacity_bytes("memory"))
        if clock is not None:
            self.ctx.clock = clock
        self.plan = self.strategy.plan(self.ctx, self.options)

    # ---- compute ----------------------------------------------------------------------------------
    def step_time_s(self) -> tuple[float, str]:
        cfg, wl = self.cfg, self.workload
        if cfg.compute_time_s is not None:
            return cfg.compute_time_s, f"--compute-time {cfg.compute_time_s}"
        if cfg.compute_profile:
            from .compute.calibrate import load_compute_profile

            t, b, _meta = load_compute_profile(cfg.compute_profile)
            return t * self.local_batch / b, f"profile {cfg.compute_profile} ({t} s at batch {b}, scaled linearly)"
        if cfg.accelerator not in wl.compute:
            raise ConfigError(
                f"--accelerator={cfg.accelerator}: workload {wl.name} has no published step time for it"
                f" (known: {', '.join(sorted(wl.compute)) or 'none'}); pass --compute-time SECONDS or "
                f"--compute-profile FILE (from `dlbench calibrate --workload {wl.name}`)")
        st = wl.compute[cfg.accelerator]
        return wl.step_time(cfg.accelerator, self.local_batch), (
            f"{cfg.accelerator}: {st.step_time_s} s at batch {st.batch_size} ({st.source}), scaled linearly")

    def make_compute(self):
        cfg = self.cfg
        if cfg.compute == "torch":
            from .compute.torch_step import TorchCompute

            rows = max(self.local_batch, int(self.plan.meta.get("max_step_samples", 0)))   # unequal batches
            return TorchCompute(self.workload, rows, device=cfg.device,
                                comm=self.comm if self.comm.size > 1 else None, seed=cfg.seed, model=cfg.model)
        from .compute.sleep import SleepCompute

        t, _src = self.step_time_s()
        # batch_size: the step time is for a local batch; a step delivering n samples takes n / b of it
        return SleepCompute(t, stdev_s=cfg.compute_stdev_s, seed=cfg.seed, rank=self.comm.rank,
                            barrier=self.comm if cfg.barrier else None, batch_size=self.local_batch)

    # ---- the loop ---------------------------------------------------------------------------------
    def run(self, timeline: Timeline, compute=None, checkpoint_dir: Path | None = None) -> dict:
        cfg, comm, plan = self.cfg, self.comm, self.plan
        self.ctx.timeline = timeline
        compute = compute if compute is not None else self.make_compute()
        executor = self.strategy.executor(self.ctx, plan, self.options)
        verifier = _Verifier(self.workload, cfg.seed, self.ctx) if cfg.verify else None
        STALL, CKPT = PHASE_ID["stall"], PHASE_ID["checkpoint"]
        clock = self.ctx.clock
        io0 = _proc_io()
        global_step = 0
        ckpt_dir = Path(checkpoint_dir if checkpoint_dir is not None else cfg.out)
        delivered = 0
        try:
            comm.barrier()
            executor.start()
            for e in range(cfg.epochs):
                comm.barrier()
                t_epoch = clock()
                it = executor.epoch(e)
                s = 0
                epoch_samples = 0
                while True:
                    t0 = clock()
                    batch = next(it, None)
                    t1 = clock()
                    if batch is None:
                        break
                    timeline.add(STALL, t0, t1, e, s)
                    if verifier is not None:
                        verifier.check(plan, e, s, batch)
                    compute.step(batch.rows, batch.ids, batch.n, timeline, e, s)
                    delivered += batch.n
                    epoch_samples += batch.n
                    global_step += 1
                    if cfg.checkpoint_every and global_step % cfg.checkpoint_every == 0:
                        from .compute.sleep import write_checkpoint

                        c0 = clock()
                        if comm.rank == 0:  # rank 0 writes; every rank waits for it
                            write_checkpoint(ckpt_dir, self.checkpoint_nbytes, None, e, s)
                        comm.barrier()
                        timeline.add(CKPT, c0, clock(), e, s, self.checkpoint_nbytes if comm.rank == 0 else 0)
                    s += 1
                timeline.mark_epoch(e, t_epoch, clock(), samples=epoch_samples)
                if s != plan.epoch(e).steps:
                    raise RunError(f"strategy {cfg.strategy} delivered {s} steps in epoch {e}; "
                                   f"its plan has {plan.epoch(e).steps}")
                if verifier is not None:
                    verifier.end_epoch(plan, e)
        finally:
            executor.close()
            compute_info = compute.describe() if hasattr(compute, "describe") else {}
            compute.close()
        io1 = _proc_io()
        extra = [t.arrays() for t in getattr(executor, "extra_timelines", lambda: [])()]
        arrays = Timeline.merge([timeline.arrays(), *extra]) if extra else timeline.arrays()
        return {
            "arrays": arrays,
            "io": {k: io1.get(k, 0) - io0.get(k, 0) for k in ("rchar", "read_bytes")},
            "compute": compute_info,
            "strategy_stats": executor.stats(),
            "delivered_samples": delivered,
            "verified": verifier.count if verifier is not None else 0,
        }


class _Verifier:
    """--verify: every delivered batch is the plan's step, in order, and every row's bytes equal what the
    generator wrote for that sample (JPEGs: the decode of the generated file)."""

    def __init__(self, workload, seed: int, ctx):
        from .data.content import expected_row

        self.workload, self.seed, self.ctx = workload, seed, ctx
        self.expected_row = expected_row
        self.count = 0
        self.jpeg = workload.layout == "jpeg_folders"
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
                self.reader.decode_into(exp, len(exp), self.tmp)
                exp = self.tmp
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
    data_dir = Path(cfg.data_dir) if explicit else default_data_dir(spec.name, scale or "custom", cfg.seed)
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
    from .data.verify import workload_of

    return workload_of(manifest, cfg.workload), manifest, data_dir


def run(cfg: RunConfig, comm) -> dict:
    """Execute one run on every rank; rank 0 returns ``{"run_dir", "run"}``, others ``{}``."""
    from . import results
    from .config import to_dict

    workload, manifest, data_dir = resolve_dataset(cfg, comm, generate_if_missing=not cfg.dry_run)
    if cfg.compute not in ("sleep", "torch"):
        raise ConfigError(f"--compute={cfg.compute}: choose one of sleep, torch")
    loop = Loop(cfg, comm, workload, manifest, data_dir)
    config_echo = {**to_dict(cfg), "data_dir": str(data_dir), "local_batch": loop.local_batch,
                   "options": to_dict(loop.options), "ranks": comm.size, "nodes": comm.nodes,
                   "workload_spec": manifest.spec, "shared_tier": loop.system.describe_shared_tier(),
                   "local_dir": str(loop.ctx.local_dir)}
    if cfg.compute == "sleep":
        config_echo["compute_step_time_s"], config_echo["compute_step_time_source"] = loop.step_time_s()
    if cfg.dry_run:
        return {"dry_run": dry_run_summary(loop, config_echo)}

    run_dir = None
    if comm.rank == 0:
        run_dir = results.new_run_dir(Path(cfg.out), workload.name, cfg.strategy)
        results.write_run(run_dir, config=config_echo, summary={}, error="incomplete: the run did not finish")
    run_dir = comm.bcast(str(run_dir) if run_dir else None)
    timeline = Timeline(_capacity(loop), comm.rank)
    try:
        mine = loop.run(timeline, checkpoint_dir=Path(run_dir))
    except BaseException as exc:  # record the failure, then stop every rank
        msg = str(exc) if isinstance(exc, DlbenchError) else f"{type(exc).__name__}: {exc}"
        tb = traceback.format_exc()
        try:
            results.write_run(Path(run_dir), config=config_echo, summary={},
                              intervals=[timeline.arrays()], error=f"rank {comm.rank}: {msg}",
                              extra={"traceback": tb, "failed_rank": comm.rank})
        except Exception:  # pragma: no cover - never mask the original error
            pass
        if comm.size > 1:
            comm.abort(f"dlbench: error: rank {comm.rank}: {msg}\nresults (with the error): {run_dir}",
                       getattr(exc, "exit_code", 5))
        if isinstance(exc, DlbenchError):
            raise
        raise RunError(f"run failed: {msg} (results with the error: {run_dir})") from exc
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0:
        return {}
    return _finish(cfg, comm, workload, manifest, loop, config_echo, Path(run_dir), gathered)


def _capacity(loop: Loop) -> int:
    steps = loop.plan.epoch(0).steps
    per_step = 4 + 2 * loop.local_batch
    return max(1024, min(per_step * steps * loop.cfg.epochs + 64, 1 << 22))


def _finish(cfg, comm, workload, manifest, loop, config_echo, run_dir: Path, gathered: list) -> dict:
    from . import metrics, results
    from .plan.quality import order_quality

    per_rank = [g["arrays"] for g in gathered]
    summary = metrics.summarize(per_rank, workload=workload.name, strategy=cfg.strategy, ranks=comm.size,
                                nodes=comm.nodes, epochs=cfg.epochs)
    summary["semantics"] = loop.plan.meta.get("semantics") or loop.strategy.semantics.as_dict()
    summary["order"] = loop.plan.meta.get("order")
    summary["order_quality"] = order_quality(loop.plan)
    summary["shared_tier"] = loop.system.describe_shared_tier()
    summary["tier_io"] = metrics.tier_io(per_rank)
    if loop.plan.meta.get("warning"):
        summary["plan_warning"] = loop.plan.meta["warning"]
    summary["compute"] = {"mode": cfg.compute, **(gathered[0].get("compute") or {})}
    if cfg.compute == "sleep":
        summary["compute"]["step_time_s"] = config_echo["compute_step_time_s"]
        summary["compute"]["source"] = config_echo["compute_step_time_source"]
    summary["strategy_stats"] = [g["strategy_stats"] for g in gathered]
    summary["verified_samples"] = int(sum(g["verified"] for g in gathered)) if cfg.verify else None
    summary["page_cache"] = page_cache_check(manifest, gathered)
    results.write_run(run_dir, config=config_echo, summary=summary, intervals=per_rank, error=None)
    return {"run_dir": str(run_dir), "run": results.read_run(run_dir)}


def page_cache_check(manifest, gathered: list) -> dict:
    """Did the reads reach the device? ``read_bytes`` (/proc/self/io: bytes the block layer fetched for
    this process) against ``rchar`` (bytes returned by read calls). If the dataset fits in memory and
    under 10 % of what was read came from the device, the run measured the page cache, not storage
    (MLPerf Storage asks for a dataset ≥ 5× host memory). Counts the trainer processes only; DataLoader
    workers' reads are not included (they are separate processes)."""
    mem = _mem_total_bytes()
    ds = int(manifest.sample_nbytes().sum())
    rchar = int(sum(g["io"].get("rchar", 0) for g in gathered))
    dev = int(sum(g["io"].get("read_bytes", 0) for g in gathered))
    fits = bool(mem and ds < mem)
    from_memory = rchar > 0 and dev < 0.1 * rchar
    warn = None
    if fits and (from_memory or rchar == 0):
        warn = (f"dataset ({ds / 1e9:.2f} GB) fits in the page cache ({mem / 1e9:.1f} GB RAM) and "
                f"{dev / 1e6:.1f} MB of {rchar / 1e6:.1f} MB read came from the device: I/O figures measure "
                f"memory, not storage (MLPerf Storage asks for a dataset >= 5x RAM)")
    return {"dataset_bytes": ds, "mem_total_bytes": mem, "fits_in_memory": fits, "rchar_bytes": rchar,
            "device_read_bytes": dev, "warning": warn}


def dry_run_summary(loop: Loop, config_echo: dict) -> dict:
    """What would run: the plan's shape, bytes per tier, capacity checks. Touches nothing."""
    plan = loop.plan
    out = {"config": config_echo, "plan": plan.summary(),
           "bytes_by_tier": plan.bytes_by_tier(loop.ctx.sample_nbytes),
           "semantics": loop.plan.meta.get("semantics") or loop.strategy.semantics.as_dict(),
           "order": loop.plan.meta.get("order"), "shared_tier": loop.system.describe_shared_tier(),
           "capacity": {k: loop.plan.meta[k] for k in ("needed_per_node_bytes", "capacity_per_node_bytes",
                                                         "capacity_source") if k in loop.plan.meta}}
    return out
