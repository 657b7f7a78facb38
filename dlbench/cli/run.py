"""``dlbench run``: parse the flags (the strategy's own through ``strategyflags``; a DLIO config's
settings where no flag was typed), build a validated ``RunConfig``, run it (``run.driver.run``), print."""

from __future__ import annotations

import os

import click

from ..data.registry import read_via_help
from ..errors import ConfigError
from . import options
from .group import sigterm_as_interrupt, stdout_broken
from .strategyflags import StrategyFlagsCommand, route_strategy_options


@click.command(cls=StrategyFlagsCommand)
@options.workload(default="cosmoflow", help="built-in workload name or the path of your own workload YAML")
@click.option("--strategy", "-s", default="naive", show_default=True, help="loading strategy (dlbench list strategies)")
@options.data_dir(help="dataset dir from `dlbench generate`; default: $DLBENCH_DATA_DIR (~/.cache/dlbench/data)/"
                   "<workload>-tiny-seed<seed>, generated on first use")
@options.scale(help="preset for the default data dir's dataset: tiny|small|full")
@options.epochs(default=3)
@options.batch_size()
@options.seed(help="seed of the dataset and the shuffle")
@options.out(help="results root: <out>/<workload>/<strategy>/<UTC stamp>/")
@click.option("--compute", type=click.Choice(["sleep", "torch"]), default="sleep", show_default=True,
              help="sleep: emulated step time; torch: the real model's training step")
@click.option("--accelerator", default=None,
              help="sleep step time from the workload's figures: v100|a100|h100 [default: a100 where published, "
                   "else the workload's measured entry; the summary names the source]")
@click.option("--compute-time", type=float, default=None, help="sleep this many seconds per step instead of the profile")
@click.option("--compute-stdev", type=float, default=0.0, show_default=True, help="normal jitter of the step time [s], seeded per rank")
@click.option("--compute-profile", type=click.Path(dir_okay=False), default=None, help="a YAML from `dlbench calibrate`")
@click.option("--device", default="auto", show_default=True, help="torch compute device: auto|cpu|cuda")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="torch compute: fp32; bf16 (autocast, CPU or CUDA); fp16 (CUDA: autocast + gradient scaler)")
@click.option("--overlap", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="torch compute: copy the next batch to the device on a side stream while the step computes "
                   "(auto: on with CUDA and one rank); off: synchronous copy, then the step")
@click.option("--model", default=None, help="another model for the workload (e.g. deepcam_resnet50): torch compute "
                                            "trains it, sleep compute uses its measured step time")
@click.option("--barrier/--no-barrier", default=False, show_default=True, help="emulated allreduce barrier after every step (sleep compute)")
@click.option("--checkpoint-every", type=int, default=0, show_default=True, help="write an fsync'd checkpoint of the model's size every N steps (0: never)")
@options.ranks_per_node(help="emulate nodes of K ranks on one machine [default: MPI's shared-memory split]")
@click.option("--verify", is_flag=True, help="check every delivered sample's bytes and order against the generator and the plan")
@click.option("--dry-run", is_flag=True, help="print the plan, bytes per tier and checks; touch nothing")
@click.option("--progress/--no-progress", default=None,
              help="live line on rank 0: epoch, step, exposed I/O so far, samples/s (default: on a terminal)")
@options.system(help="system profile (configs/systems name or YAML path); one with a pfs section throttles every "
                   "read of the dataset dir to its modelled time (laptop-pfs); local: no throttling")
@click.option("--local-dir", type=click.Path(file_okay=False), default=None,
              help="node-local storage for staging/local/pls (node<k> per node under it) [default: "
                   "$TMPDIR/dlbench-local]")
@click.option("--inject", multiple=True, metavar="KIND=VALUE",
              help="fault injection (repeatable): slow-rank=R:FACTOR (rank R's reads and compute take FACTOR x), "
                   "fail-read=P (each shared-tier read fails with probability P, seeded, and is retried; retries "
                   "in the summary)")
@click.option("--cache", type=click.Choice(["keep", "drop", "direct"]), default="keep", show_default=True,
              help="page cache: keep (as it comes); drop (evict the dataset and local copies with posix_fadvise "
                   "before every epoch, one rank per node); direct (O_DIRECT reads where the layout is read by "
                   "offset). The summary gives requested vs device bytes per epoch and a cold/warm verdict")
@click.option("--read-via", type=click.Choice(["auto", "library", "pread"]), default="auto", show_default=True,
              help="how samples are read: library (the format's own reader), pread (byte ranges at offsets), "
                   "auto (the layout's default). Per layout: " + read_via_help())
@click.option("--ceiling-steps", type=click.IntRange(0, 100_000), default=32, show_default=True,
              help="after the epochs, replay this many steps of the plan from memory (no compute, no PFS model) "
                   "for dlbench's own ceiling and the run's headroom; 0: off")
@click.option("--dlio-config", type=click.Path(dir_okay=False), default=None,
              help="a DLIO workload YAML (its dataset, reader, train, checkpoint and metric.au); DLIO's Hydra "
                   "overrides follow as arguments: ++workload.dataset.num_files_train=16")
@click.option("--allow-unsupported", is_flag=True,
              help="--dlio-config: warn about DLIO settings dlbench does not emulate instead of stopping")
@click.argument("dlio_overrides", nargs=-1, metavar="[++workload.KEY=VALUE]...")
def run(workload, strategy, data_dir, scale, epochs, batch_size, seed, out, compute, accelerator, compute_time,
        compute_stdev, compute_profile, device, precision, model, barrier, checkpoint_every, ranks_per_node, verify,
        dry_run, progress, system, local_dir, inject, cache, read_via="auto", dlio_config=None,
        allow_unsupported=False, dlio_overrides=(), overlap="auto", ceiling_steps=32, **strategy_opts):
    """Run the measured epoch loop for one strategy (serially, or under mpiexec/srun)."""
    import json

    from .. import strategies
    from ..comm import get_comm
    from ..run.driver import run as do_run
    from ..run.setup import RunConfig

    dlio_t = None
    if dlio_overrides and not dlio_config:
        raise ConfigError(f"argument {dlio_overrides[0]!r}: overrides need --dlio-config FILE")
    if dlio_config:
        (workload, strategy, epochs, batch_size, seed, compute_time, compute_stdev, scale, strategy_opts,
         dlio_t) = _from_dlio(dlio_config, dlio_overrides, allow_unsupported, locals())
        if dlio_t.run.get("data_dir") and data_dir is None:   # storage_type s3: the bucket (dlbench.storage.s3)
            data_dir = dlio_t.run["data_dir"]
            for k, v in dlio_t.run["storage_env"].items():
                os.environ.setdefault(k, v)
    strategies.get(strategy)  # unknown strategy: one line with the choices
    given = route_strategy_options(strategy, strategy_opts)
    cfg = RunConfig(workload=workload, scale=scale, strategy=strategy, options=given, data_dir=data_dir,
                    epochs=epochs, batch_size=batch_size, seed=seed, out=out, compute=compute,
                    accelerator=accelerator, compute_time_s=compute_time, compute_stdev_s=compute_stdev,
                    compute_profile=compute_profile, device=device, precision=precision, model=model, barrier=barrier,
                    checkpoint_every=checkpoint_every, verify=verify, ranks_per_node=ranks_per_node,
                    dry_run=dry_run, system=system, local_dir=local_dir, inject=tuple(inject), cache=cache,
                    read_via=read_via, overlap=overlap, ceiling_steps=ceiling_steps,
                    eval=dlio_t.run.get("eval") if dlio_t is not None else None,
                    generate_s3=bool(dlio_t is not None and dlio_t.run.get("data_dir")
                                     and data_dir == dlio_t.run["data_dir"])).validate()
    comm = get_comm(ranks_per_node=ranks_per_node)
    if dlio_t is not None:
        from ..dlio import checkpoint_schedule

        cfg.checkpoint_every, cfg.checkpoint_first, cfg.checkpoint_model = checkpoint_schedule(
            dlio_t, comm.size, cfg.batch_size, bool(given.get("drop_last_batch")), checkpoint_every)
    from ..progress import StepProgress, wanted

    # rank 0's own figures (its stall, its samples); under MPI the line says so
    hook = StepProgress(epochs, force_terminal=True if progress else None,
                        label=f"rank 0 of {comm.size}: " if comm.size > 1 else "") if (
        comm.rank == 0 and not dry_run and wanted(progress)) else None
    try:
        with sigterm_as_interrupt():
            res = do_run(cfg, comm, progress=hook)
    finally:
        if hook is not None:
            hook.close()
    if comm.rank != 0:
        return
    if dry_run:
        click.echo(json.dumps(res["dry_run"], indent=2, default=str))
        return
    _print_run(res)


def _print_run(res: dict) -> None:
    """The summary, the run's warnings on stderr, and where its results are (stdout on a full device: the
    run is recorded all the same; the error says where)."""
    from .. import report
    from ..errors import OutputError

    try:
        click.echo(report.render_summary(res["run"]))
    except OSError as e:
        if not stdout_broken(e):
            raise
        raise OutputError(f"cannot write to standard output: {e.strerror or e}; the run finished and its results "
                          f"are in {res['run_dir']} (dlbench report {res['run_dir']})") from None
    summary = res["run"].get("summary", {})
    for w in ((summary.get("page_cache") or {}).get("warning"), (summary.get("ceiling") or {}).get("warning"),
              (summary.get("cache") or {}).get("residency_warning"), summary.get("preloaded_warning")):
        if w:
            click.echo(f"dlbench: warning: {w}", err=True)
    if summary.get("injected"):
        click.echo(f"dlbench: warning: faults injected (--inject): {summary['injected']}", err=True)
    if summary.get("plan_warning"):
        click.echo(f"dlbench: warning: {summary['plan_warning']}", err=True)
    if res.get("write_error"):
        raise OutputError(res["write_error"])
    click.echo(f"results: {res['run_dir']}")


def _from_dlio(path, overrides, allow_unsupported, given):
    """``run --dlio-config``: translate the DLIO config (dlbench.dlio), write its workload YAML under the data
    root, and return the run settings, where a flag typed on the command line wins over the config's."""
    from .. import dlio
    from ..host import data_root

    ctx = click.get_current_context()

    def typed(name):
        return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)

    for flag in ("workload", "scale"):
        if typed(flag):
            raise ConfigError(f"--{flag} with --dlio-config {path}: the DLIO config defines the dataset; give one "
                              f"(override its keys with ++workload.dataset.KEY=VALUE)")
    t = dlio.load(path, overrides, allow_unsupported=allow_unsupported)
    for n in t.notes:   # what the translation did with keys that have no effect or differ from DLIO (as import)
        click.echo(f"dlbench: note: {n}", err=True)
    if t.unsupported:
        click.echo(f"dlbench: warning: DLIO settings not emulated (--allow-unsupported): "
                   f"{'; '.join(t.unsupported)}", err=True)
    typed_flags = {n for n in ("strategy", "epochs", "batch_size", "seed", "compute_time", "compute_stdev")
                   if typed(n)}
    settings, notes = dlio.run_settings(t, given, typed_flags, data_root() / "dlio-workloads")
    for n in notes:
        click.echo(f"dlbench: note: {n}", err=True)
    return (*settings, t)
