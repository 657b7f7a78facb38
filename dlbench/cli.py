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


# ===== compute: calibrate ===================================================================================


@main.command()
@click.option("--workload", "-w", "workload_name", required=True, help="built-in workload name or a workload YAML path")
@click.option("--scale", type=click.Choice(["tiny", "small", "full"]), default="full", show_default=True,
              help="sample shapes to measure at (full: the real sample)")
@click.option("--batch-size", "-b", type=int, default=None, help="local batch size [default: the workload's]")
@click.option("--steps", type=int, default=10, show_default=True, help="measured steps")
@click.option("--warmup", type=int, default=2, show_default=True, help="warm-up steps (not measured)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: CUDA when available, else CPU")
@click.option("--model", default=None, help="model variant (e.g. deepcam_resnet50) [default: the workload's]")
@click.option("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="profile file [default: ./<workload>[-<scale>]-<device>-b<B>.compute.yaml, scale named unless full]")
def calibrate(workload_name, scale, batch_size, steps, warmup, device, model, threads, out):
    """Measure the real training-step time (torch) on this machine and write a compute profile YAML
    (use it with --compute-profile FILE, or merge it into the workload file)."""
    from .compute.calibrate import calibrate as run_calibrate
    from .compute.calibrate import default_profile_path, format_profile, write_profile
    from .workload import load

    wl = load(workload_name, scale=scale)
    prof = run_calibrate(wl, batch_size=batch_size, steps=steps, warmup=warmup, device=device, model=model,
                         threads=threads)
    path = write_profile(prof, out or default_profile_path(prof))
    click.echo(format_profile(prof))
    click.echo(f"  wrote {path}")


if __name__ == "__main__":  # pragma: no cover
    main()
