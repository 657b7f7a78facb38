"""``run(cfg, comm)``: one run on every rank. Loads the workload spec once, checks the options, resolves the
dataset (``setup``), sets the rank's loop up (``loop.Loop``), writes the results folder's first record,
runs the epochs into a timeline that spills into the run folder, gathers to rank 0 and assembles the
summary (``summary.finish``).

Failure: a rank that raises writes the results folder with the error (so it records the failure), and
under MPI aborts the whole job with its message, so no rank hangs in a collective.
"""

from __future__ import annotations

import os
import socket
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CapacityError, ConfigError, DlbenchError, Interrupted, RunError
from ..stop import deferred
from ..timeline import Timeline
from .ceiling import replay
from .evaluate import make_evaluator
from .loop import Loop
from .setup import RunConfig, check_compute, check_compute_options, plan_size_error, resolve_dataset, sleep_step_time
from .summary import dry_run_summary, finish

if TYPE_CHECKING:
    from ..comm import Comm


def run(cfg: RunConfig, comm: Comm, progress: Any = None) -> dict:
    """Execute one run on every rank; rank 0 returns ``{"run_dir", "run"}``, others ``{}``. ``progress``:
    this rank's per-step hook (``Loop.run``), None for none."""
    from .. import results
    from .. import workload as wl_mod
    from ..config import to_dict

    # every rank runs the same configuration (ranks started with other arguments: one line, every rank stops)
    # (and the DLBENCH_* variables that change how it reads; the data root is checked as each rank sees it)
    env = {k: v for k, v in os.environ.items()
           if k.startswith("DLBENCH_") and k not in ("DLBENCH_DATA_DIR", "DLBENCH_NO_MPI", "DLBENCH_FORCE_MPI")}
    comm.agree({**to_dict(cfg), "environment": env}, "the run's configuration")
    err: BaseException | None = None
    try:  # checks without collectives: a failure on any rank (a node without the file) stops every rank
        spec, spec_path = wl_mod.load_spec(cfg.workload)   # the one load of the workload spec in a run
        check_compute(cfg, spec, spec_path)  # before any dataset is generated
        check_compute_options(cfg, spec.name)
        from ..storage import check_read_call

        check_read_call()  # DLBENCH_READ_CALL
    except Exception as e:  # noqa: BLE001 - every rank raises the first failed rank's error
        err = e
    comm.settle(err)
    if not cfg.dry_run:
        out_err = None
        if comm.rank == 0:
            try:
                results.check_out_dir(cfg.out)
            except ConfigError as e:
                out_err = str(e)
        out_err = comm.bcast(out_err)
        if out_err:
            raise ConfigError(out_err)
    locks: list = []   # the dataset's read lock: held while this rank may read the dataset
    try:
        return _run(cfg, comm, progress, spec, spec_path, locks)
    finally:
        for lock in locks:
            lock.release()


def _run(cfg: RunConfig, comm: Comm, progress: Any, spec: Any, spec_path: str, locks: list) -> dict:
    from .. import results
    from ..config import to_dict

    workload, manifest, data_dir = resolve_dataset(cfg, comm, spec, spec_path, generate_if_missing=not cfg.dry_run,
                                                   locks=locks)
    from ..host import meminfo

    too_big = plan_size_error(manifest.samples, len(comm.node_ranks()), workload.name,
                              meminfo("MemAvailable")) if comm.rank == 0 else None
    too_big = comm.bcast(too_big)     # rank 0's verdict: every rank stops or none
    if too_big:
        raise ConfigError(too_big)
    err: BaseException | None = None
    try:  # the loop's set-up uses no collective (the plan is pure): any rank's failure stops every rank here
        loop = Loop(cfg, comm, workload, manifest, data_dir)
    except Exception as e:  # noqa: BLE001 - re-raised on every rank by settle
        err = e
    comm.settle(err)
    config_echo = {**to_dict(cfg), "data_dir": str(data_dir), "local_batch": loop.local_batch,
                   "options": to_dict(loop.options), "ranks": comm.size, "nodes": comm.nodes,
                   "workload_spec": manifest.spec, "shared_tier": loop.system.describe_shared_tier(),
                   "local_dir": str(loop.ctx.local_dir), "hosts": comm.allgather(socket.gethostname()),
                   "ranks_per_node_source": getattr(comm, "layout_source", None)}
    if str(cfg.data_dir or "").startswith("s3://"):   # the bucket; data_dir above is its local control folder
        config_echo.update(data_dir=str(cfg.data_dir), data_control_dir=str(data_dir))
    if cfg.compute == "sleep":
        (config_echo["compute_step_time_s"], config_echo["compute_step_time_source"],
         config_echo["compute_step_time"]) = sleep_step_time(cfg, workload, loop.local_batch)
    if cfg.dry_run:
        return {"dry_run": dry_run_summary(loop, config_echo)}
    loop.evaluator = make_evaluator(cfg, comm, spec, spec_path, loop, data_dir)   # DLIO's evaluation, or None

    rec_err: str | None = None
    run_dir = None
    if comm.rank == 0:
        try:
            run_dir = results.new_run_dir(Path(cfg.out), workload.name, cfg.strategy)
            results.write_run(run_dir, config=config_echo, summary={}, error="incomplete: the run did not finish")
        except ConfigError as e:
            rec_err = str(e)
        except OSError as e:
            if run_dir is not None:
                results.remove_run_dir(run_dir)
            rec_err = f"--out {cfg.out}: cannot write results there: {e.strerror or e}; pass --out DIR with space"
    run_dir, rec_err = comm.bcast((str(run_dir) if run_dir else None, rec_err))
    if rec_err:
        raise ConfigError(rec_err)  # every rank: nothing has run yet
    # each rank writes its own interval files into the run folder as its buffer fills (bounded memory);
    # a rank that cannot see the folder (not a shared file system) keeps its intervals and sends them
    spill = Path(run_dir) if Path(run_dir).is_dir() else None
    timeline = Timeline(TIMELINE_BUFFER if spill is not None else _capacity(loop), comm.rank, spill_dir=spill)
    try:
        mine = loop.run(timeline, checkpoint_dir=Path(run_dir), progress=progress)
        if loop.evaluator is not None:
            loop.evaluator.close()
            mine["eval"] = loop.evaluator.passes
        mine["ceiling"] = replay(loop, cfg.ceiling_steps)   # outside every epoch clock (run.ceiling)
        from ..provenance import preloaded_libraries

        mine["preloaded"] = preloaded_libraries()      # this rank's process: a cache-/fsync-defeating library
        if mine["arrays"] is None:
            from .. import metrics
            from ..timeline import load_spilled

            mine["reduced"] = metrics.rank_reduce(load_spilled(spill, comm.rank)[0], cfg.epochs)
    except BaseException as exc:  # record the failure, then stop every rank
        with deferred():  # a second signal does not cut the record and the clean-up short
            _failed(cfg, comm, loop, Path(run_dir), config_echo, timeline, exc)
        raise  # pragma: no cover - _failed always raises or ends the process
    gathered = comm.gather(mine, root=0)
    if comm.rank != 0 or gathered is None:   # None: not the root
        return {}
    return finish(cfg, comm, workload, manifest, loop, config_echo, Path(run_dir), gathered)


TIMELINE_BUFFER = 1 << 16   # records a rank's timeline holds before writing them out (≈ 2 × 2.3 MB)


def _signal_name(exc: BaseException) -> str:
    return getattr(exc, "signal_name", "SIGINT")


def _failed(cfg: RunConfig, comm: Comm, loop: Loop, run_dir: Path, config_echo: dict, timeline: Timeline,
            exc: BaseException) -> None:
    """A rank's run stopped: the executor has closed (its local copies are removed, ``cleanup_note``).

    - An early check (ConfigError or CapacityError before the prologue finished: nothing was measured):
      the results folder is removed, the error is the message.
    - An interrupt (SIGINT, SIGTERM): rank 0 records ``status: interrupted`` and says so once; under MPI a
      rank other than 0 gives rank 0 two seconds to do that and end the job, and only then (rank 0 not
      interrupted) records and ends it itself. Exit code 130 (SIGINT) or 143 (SIGTERM).
    - Anything else: the folder records the error and the traceback; under MPI the job is aborted with the
      rank's message so no rank hangs in a collective."""
    from .. import results

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
    msg = str(exc) if isinstance(exc, DlbenchError) else f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (ConfigError, CapacityError)) and not loop.started:
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
