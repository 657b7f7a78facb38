"""The ``dlbench`` command line: click commands, option parsing, mapping errors to exit codes.

No logic lives here, and nothing heavy (mpi4py, h5py, torch) is imported at import time: each command
imports what it needs when it runs. A ``DlbenchError`` becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import os
import sys

import click

from . import __version__
from .errors import ConfigError, DlbenchError


def _launcher_rank() -> int:
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if k in os.environ:
            try:
                return int(os.environ[k])
            except ValueError:
                pass
    return 0


class DlbenchGroup(click.Group):
    """Turns DlbenchError into one line and an exit code; usage errors keep click's format."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DlbenchError as e:
            # a config error is the same on every rank: say it once
            if not (isinstance(e, ConfigError) and _launcher_rank() != 0):
                click.echo(f"dlbench: error: {e}", err=True)
            sys.stdout.flush()
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("dlbench: interrupted", err=True)
            ctx.exit(130)

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            from .errors import did_you_mean

            if args and "No such command" in str(e):
                raise click.UsageError(f"unknown command '{args[0]}'; choose one of: "
                                       f"{', '.join(sorted(self.commands))}{did_you_mean(args[0], self.commands)}",
                                       ctx) from None
            raise


@click.group(cls=DlbenchGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dlbench")
def main() -> None:
    """dlbench: how much of your deep-learning epoch is I/O, and which data-loading strategy removes it."""


# ===== data commands: generate, verify, list, show ==========================================================


# ===== run commands: run, report, compare ===================================================================


def _strategy_option_fields() -> dict:
    """Every strategy's Options fields, by name: {field: {"owners": [...], "meta": describe_fields row}}."""
    from . import strategies
    from .config import describe_fields

    out: dict = {}
    for name in strategies.names():
        strat = strategies.get(name)
        for row in describe_fields(strat.Options):
            ent = out.setdefault(row["name"], {"owners": [], "row": row})
            ent["owners"].append(name)
    return out


def _strategy_options(f):
    """Add one flag per strategy option (from the strategies' own Options dataclasses)."""
    for name, ent in sorted(_strategy_option_fields().items(), reverse=True):
        row = ent["row"]
        flag = "--" + name.replace("_", "-")
        owners = ", ".join(ent["owners"])
        unit = f" [{row['unit']}]" if row["unit"] else ""
        helptext = f"({owners}) {row['help']}{unit}; default {row['default']}"
        if row["type"] == "bool":
            f = click.option(f"{flag}/--no-{flag[2:]}", name, default=None, help=helptext)(f)
        else:
            f = click.option(flag, name, default=None, help=helptext, metavar=row["type"].upper())(f)
    return f


@main.command()
@click.option("--workload", "-w", default="cosmoflow", show_default=True,
              help="built-in workload name or the path of your own workload YAML")
@click.option("--strategy", "-s", default="naive", show_default=True, help="loading strategy (dlbench list strategies)")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="dataset dir from `dlbench generate`; default: $DLBENCH_DATA_DIR (~/.cache/dlbench/data)/"
                   "<workload>-tiny-seed<seed>, generated on first use")
@click.option("--scale", default=None, help="preset for the default data dir's dataset: tiny|small|full")
@click.option("--epochs", "-e", type=int, default=3, show_default=True)
@click.option("--batch-size", "-b", type=int, default=None, help="local batch per rank [default: the workload's]")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the dataset and the shuffle")
@click.option("--out", "-o", default="results", show_default=True, help="results root: <out>/<workload>/<strategy>/<UTC stamp>/")
@click.option("--compute", type=click.Choice(["sleep", "torch"]), default="sleep", show_default=True,
              help="sleep: emulated step time; torch: the real model's training step")
@click.option("--accelerator", default="a100", show_default=True, help="sleep step time from the workload's profile: v100|a100|h100")
@click.option("--compute-time", type=float, default=None, help="sleep this many seconds per step instead of the profile")
@click.option("--compute-stdev", type=float, default=0.0, show_default=True, help="normal jitter of the step time [s], seeded per rank")
@click.option("--compute-profile", type=click.Path(dir_okay=False), default=None, help="a YAML from `dlbench calibrate`")
@click.option("--device", default="auto", show_default=True, help="torch compute device: auto|cpu|cuda")
@click.option("--barrier/--no-barrier", default=False, show_default=True, help="emulated allreduce barrier after every step (sleep compute)")
@click.option("--checkpoint-every", type=int, default=0, show_default=True, help="write an fsync'd checkpoint of the model's size every N steps (0: never)")
@click.option("--ranks-per-node", type=int, default=None, help="emulate nodes of K ranks on one machine [default: MPI's shared-memory split]")
@click.option("--verify", is_flag=True, help="check every delivered sample's bytes and order against the generator and the plan")
@click.option("--dry-run", is_flag=True, help="print the plan, bytes per tier and checks; touch nothing")
@_strategy_options
def run(workload, strategy, data_dir, scale, epochs, batch_size, seed, out, compute, accelerator, compute_time,
        compute_stdev, compute_profile, device, barrier, checkpoint_every, ranks_per_node, verify, dry_run,
        **strategy_opts):
    """Run the measured epoch loop for one strategy (serially, or under mpiexec/srun)."""
    import json

    from . import report, strategies
    from .comm import get_comm
    from .errors import unknown_choice
    from .runner import ACCELERATORS, RunConfig
    from .runner import run as do_run

    strategies.get(strategy)  # unknown strategy: one line with the choices
    fields = _strategy_option_fields()
    given = {k: v for k, v in strategy_opts.items() if v is not None}
    for k in given:
        if strategy not in fields[k]["owners"]:
            raise ConfigError(f"--{k.replace('_', '-')} is an option of {', '.join(fields[k]['owners'])}, "
                              f"not of strategy {strategy}")
    if accelerator not in ACCELERATORS:
        raise unknown_choice("accelerator", accelerator, ACCELERATORS)
    for name, val, lo in (("--epochs", epochs, 1), ("--batch-size", batch_size, 1), ("--checkpoint-every", checkpoint_every, 0)):
        if val is not None and val < lo:
            raise ConfigError(f"{name}={val}: must be >= {lo}")
    for name, val in (("--compute-time", compute_time), ("--compute-stdev", compute_stdev)):
        if val is not None and val < 0:
            raise ConfigError(f"{name}={val}: must be >= 0 seconds")
    cfg = RunConfig(workload=workload, scale=scale, strategy=strategy, options=given, data_dir=data_dir,
                    epochs=epochs, batch_size=batch_size, seed=seed, out=out, compute=compute,
                    accelerator=accelerator, compute_time_s=compute_time, compute_stdev_s=compute_stdev,
                    compute_profile=compute_profile, device=device, barrier=barrier,
                    checkpoint_every=checkpoint_every, verify=verify, ranks_per_node=ranks_per_node,
                    dry_run=dry_run)
    comm = get_comm(ranks_per_node=ranks_per_node)
    res = do_run(cfg, comm)
    if comm.rank != 0:
        return
    if dry_run:
        click.echo(json.dumps(res["dry_run"], indent=2, default=str))
        return
    click.echo(report.render_summary(res["run"]))
    warn = (res["run"].get("summary", {}).get("page_cache") or {}).get("warning")
    if warn:
        click.echo(f"dlbench: warning: {warn}", err=True)
    click.echo(f"results: {res['run_dir']}")


@main.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def report_cmd(run_dir):
    """Re-render a run's summary from its results folder."""
    from . import report, results

    click.echo(report.render_summary(results.read_run(run_dir)))


@main.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def compare_cmd(run_dirs, fmt):
    """Put runs side by side: strategy, ranks, epoch time, exposed I/O share, read share, AU, MB/s."""
    from . import report

    click.echo(report.compare(list(run_dirs), fmt=fmt))


# ===== simulate =============================================================================================


@main.command("simulate")
@click.option("--system", "system", metavar="PROFILE", help="system profile: a name in configs/systems or a YAML path")
@click.option("--workload", metavar="W", help="built-in workload name or YAML path (sample sizes and batch)")
@click.option("--scale", default="full", show_default=True, help="workload preset: tiny, small, full")
@click.option("--samples", type=int, default=None, help="override the number of samples F")
@click.option("--nodes", type=int, default=None, help="N: nodes")
@click.option("--ranks-per-node", type=int, default=1, show_default=True, help="K: ranks per node")
@click.option("--strategies", default="naive,prefetch", show_default=True,
              help="comma-separated: lowerbound, naive, prefetch, staging, local, pls")
@click.option("--epochs", type=int, default=1, show_default=True, help="E: epochs")
@click.option("--local-batch", type=int, default=None, help="b: local batch (default: the workload's)")
@click.option("--accelerator", default=None, help="use the workload's step time on this accelerator instead of c")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of permutations and sample sizes")
@click.option("--pls-q", type=float, default=0.1, show_default=True, help="exchange fraction Q of pls")
@click.option("--serial-write", is_flag=True, help="a loader thread copies into the buffer after (not while) fetching")
@click.option("--study", metavar="YAML", default=None, help="a study file (configs/studies/*.yaml) instead of the flags")
@click.option("--out", default="results", show_default=True, help="results root")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def simulate_cmd(system, workload, scale, samples, nodes, ranks_per_node, strategies, epochs, local_batch,
                 accelerator, seed, pls_q, serial_write, study, out, fmt):
    """Cost strategies' plans with the HDMLP/NoPFS performance model (no I/O): one results folder per
    strategy (summary.simulated = true) and a comparison table."""
    from .config import to_dict
    from .errors import unknown_choice
    from .simulate import STRATEGIES, load_profile, simulate
    from .simulate.output import compare_table, write_simulated_run

    reference = None
    if study:
        from .simulate import study as study_mod

        st = study_mod.load(study)
        profile = load_profile(st.system)
        wl = study_mod.workload_of(st, where=study)
        names, nodes, ranks_per_node, epochs, seed, pls_q = (list(st.strategies), st.nodes, st.ranks_per_node,
                                                            st.epochs, st.seed, st.pls_q)
        reference = dict(st.published_runtime_s) or None
        cfg_extra = {"study": study, "study_config": to_dict(st)}
    else:
        missing = [f for f, v in (("--system", system), ("--workload", workload), ("--nodes", nodes)) if v is None]
        if missing:
            raise ConfigError(f"simulate needs {', '.join(missing)} (or --study FILE)")
        from .simulate import from_workload
        from .workload import load as load_workload

        profile = load_profile(system)
        wl = from_workload(load_workload(workload, scale=None if samples else scale, samples=samples),
                           accelerator=accelerator, local_batch=local_batch)
        names = [s.strip() for s in strategies.split(",") if s.strip()]
        for s in names:
            if s not in STRATEGIES:
                raise unknown_choice("strategy for simulate", s, STRATEGIES)
        cfg_extra = {}
    results = simulate(names, wl=wl, profile=profile, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs,
                       seed=seed, pls_q=pls_q, write_overlap=not serial_write)
    dirs = []
    for name, summary in results.items():
        config = {"command": "simulate", "system": to_dict(profile), "workload": to_dict(wl), "strategy": name,
                  "nodes": nodes, "ranks_per_node": ranks_per_node, "epochs": epochs, "seed": seed,
                  "pls_q": pls_q, "write_overlap": not serial_write, **cfg_extra}
        dirs.append(write_simulated_run(out, config=config, summary=summary))
    click.echo(compare_table(dirs, fmt=fmt, reference_s=reference))



# ===== compute: calibrate ===================================================================================


if __name__ == "__main__":  # pragma: no cover
    main()
