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
