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


def _human_bytes(n: float) -> str:
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{int(n)} B"


@main.command()
@click.option("--workload", "-w", "workload_name", required=True, help="workload name or path to a workload YAML")
@click.option("--scale", default=None, help="preset: tiny, small or full (default: tiny, or full with --samples)")
@click.option("--samples", type=int, default=None, help="number of samples (overrides the preset's count)")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="where the dataset is written")
@click.option("--seed", type=int, default=0, show_default=True, help="content seed: same seed, same bytes")
@click.option("--force", is_flag=True, help="replace a dataset of another workload, seed or size in --data-dir")
@click.option("--fsync", is_flag=True, help="fsync every file before renaming it (slower, durable)")
@click.option("--progress/--no-progress", default=None, help="progress bar (default: on a terminal)")
def generate(workload_name, scale, samples, data_dir, seed, force, fsync, progress):
    """Write a workload's synthetic dataset (serially, or under mpiexec/srun: ranks write disjoint files).

    Deterministic (sample bytes depend only on workload, seed and index), atomic (files are renamed when
    complete) and resumable (a re-run finishes what is missing)."""
    from .comm import get_comm
    from .data.generate import generate as run_generate
    from .workload import load

    wl = load(workload_name, scale=scale, samples=samples)
    comm = get_comm()
    res = run_generate(wl, data_dir, seed=seed, force=force, comm=comm, fsync=fsync,
                       progress=progress if comm.rank == 0 else False)
    if comm.rank == 0:
        click.echo(res.line())


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="the dataset to check")
@click.option("--content", "check_content", is_flag=True, help="also recompute every sample and compare bytes")
def verify(data_dir, check_content):
    """Check a dataset against its manifest: files present, sizes, HDF5 shapes (and bytes with --content)."""
    from .comm import get_comm
    from .data.manifest import Manifest
    from .data.verify import verify as run_verify
    from .errors import DataError

    comm = get_comm()
    m = Manifest.load(data_dir)
    problems = run_verify(data_dir, content=check_content, comm=comm, manifest=m)
    if problems:
        if comm.rank == 0:
            for p in problems:
                click.echo(p)
        raise DataError(f"--data-dir {data_dir}: {len(problems)} problem(s) in {m.describe()}")
    if comm.rank == 0:
        what = "files, sizes, shapes and content" if check_content else "files, sizes and shapes"
        click.echo(f"ok: {m.describe()}, {_human_bytes(m.dataset_nbytes)}: {what} match the manifest")


@main.group("list")
def list_group():
    """List what dlbench knows: workloads, ..."""


@list_group.command("workloads")
def list_workloads():
    """The packaged workloads (name, layout, real sample count, bytes per sample)."""
    from .workload import builtin_names, load_spec, resolve

    click.echo(f"{'workload':<10} {'layout':<16} {'samples':>10} {'sample':>10} {'dataset':>10}  description")
    for name in builtin_names():
        spec, path = load_spec(name)
        w = resolve(spec, scale="full", spec_path=path)
        click.echo(f"{name:<10} {w.layout:<16} {w.samples:>10,} {_human_bytes(w.sample_nbytes):>10} "
                   f"{_human_bytes(w.dataset_nbytes):>10}  {spec.description}")


@main.command()
@click.argument("workload_name", metavar="WORKLOAD")
@click.option("--scale", default=None, help="tiny, small or full (default: all presets)")
@click.option("--samples", type=int, default=None, help="number of samples")
def show(workload_name, scale, samples):
    """A workload's arrays, layout, sizes per preset, compute profiles and model."""
    from .workload import load_spec, resolve

    spec, path = load_spec(workload_name)
    scales = [scale] if scale or samples else [s for s in ("tiny", "small", "full")
                                               if s in spec.presets or s == "full"]
    resolved = [resolve(spec, scale=sc, samples=samples, spec_path=path) for sc in scales]  # errors first
    click.echo(f"{spec.name}: {spec.description}")
    click.echo(f"  file: {path}")
    click.echo(f"  layout: {spec.layout}")
    for w in resolved:
        click.echo(f"  [{w.scale}] {w.samples:,} samples, {w.files:,} files, "
                   f"{_human_bytes(w.sample_nbytes)} per sample ({w.sample_nbytes:,} B"
                   f"{' mean' if w.layout == 'jpeg_folders' else ''}), dataset {_human_bytes(w.dataset_nbytes)}, "
                   f"local batch {w.batch_size}" + (f", {w.samples_per_file} samples per file"
                                                    if w.layout == "hdf5_blocks" else "")
                   + (f", {w.classes} classes" if w.classes else ""))
        for a in w.arrays:
            click.echo(f"      {a.name}: {list(a.shape)} {a.dtype} ({a.role}, {a.nbytes:,} B)")
        if w.jpeg is not None:
            sz = w.jpeg.size
            click.echo(f"      jpeg: {sz.kind} size mean {sz.mean_bytes:,.0f} B sd {sz.std_bytes:,.0f} B, "
                       f"clipped to [{sz.min_bytes:,.0f}, {sz.max_bytes:,.0f}] B; decoded "
                       f"{list(w.jpeg.decoded_shape)} uint8 ({w.decoded_nbytes:,} B)")
    if spec.compute:
        click.echo("  compute (step time):")
        for acc, st in spec.compute.items():
            click.echo(f"    {acc}: {st.step_time_s} s at batch {st.batch_size} ({st.source})")
    else:
        click.echo("  compute: none published (dlbench calibrate, or --compute-time)")
    if spec.model is not None:
        params = f"{spec.model.parameters:,} parameters" if spec.model.parameters else "parameters not listed"
        click.echo(f"  model: {spec.model.name}, {params} ({spec.model.source})")
    for src in spec.sources:
        click.echo(f"  source: {src}")



# ===== run commands: run, report, compare ===================================================================


# ===== simulate =============================================================================================


# ===== compute: calibrate ===================================================================================


if __name__ == "__main__":  # pragma: no cover
    main()
