"""The data commands: ``generate``, ``verify``, ``list strategies|workloads``, ``show``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..units import format_bytes
from . import options
from .group import sigterm_as_interrupt


@click.command()
@options.workload(required=True, param="workload_name")
@options.scale(help="preset: tiny, small or full (default: tiny, or full with --samples)")
@options.samples()
@options.data_dir(required=True, help="where the dataset is written")
@options.seed(help="content seed: same seed, same bytes")
@click.option("--force", is_flag=True, help="replace a dataset of another workload, seed or size in --data-dir")
@click.option("--fsync", is_flag=True, help="fsync every file before renaming it (slower, durable)")
@click.option("--progress/--no-progress", default=None, help="progress bar (default: on a terminal)")
def generate(workload_name, scale, samples, data_dir, seed, force, fsync, progress):
    """Write a workload's synthetic dataset (serially, or under mpiexec/srun: ranks write disjoint files).

    Deterministic (sample bytes depend only on workload, seed and index), atomic (files are renamed when
    complete) and resumable (a re-run finishes what is missing)."""
    from ..comm import get_comm
    from ..data.generate import generate as run_generate
    from ..workload import load

    wl = load(workload_name, scale=scale, samples=samples)
    comm = get_comm()
    write: Callable[..., Any] = run_generate
    if data_dir.startswith("s3://"):   # objects in a bucket (dlbench.storage.s3)
        from ..data.bucket import generate_to

        write = generate_to
    with sigterm_as_interrupt():
        res = write(wl, data_dir, seed=seed, force=force, comm=comm, fsync=fsync,
                           progress=progress if comm.rank == 0 else False)
    if comm.rank == 0:
        click.echo(res.line())


@click.command()
@options.data_dir(required=True, help="the dataset to check")
@click.option("--content", "check_content", is_flag=True,
              help="also recompute every sample and compare bytes (checks the checksums too)")
@click.option("--checksum", "check_sum", is_flag=True,
              help="also read every file whole and compare its checksum with the one generate recorded: catches "
                   "flipped bytes; reads the whole dataset, as an epoch does (the default check reads metadata only)")
def verify(data_dir, check_content, check_sum):
    """Check a dataset against its manifest: files present, sizes, HDF5 shapes (checksums with --checksum,
    every sample's bytes with --content)."""
    from ..comm import get_comm
    from ..data.verify import verify_dataset
    from ..errors import DataError

    comm = get_comm()
    m, problems, what = verify_dataset(data_dir, content=check_content, checksum=check_sum, comm=comm)
    if problems:
        if comm.rank == 0:
            for p in problems:
                click.echo(p)
        raise DataError(f"--data-dir {data_dir}: {len(problems)} problem(s) in {m.describe()}")
    if comm.rank == 0:
        click.echo(f"ok: {m.describe()}, {format_bytes(m.dataset_nbytes)}: {what} match the manifest")


@click.group("list")
def list_group():
    """List what dlbench knows: workloads, strategies."""


@list_group.command("strategies")
@click.option("--verbose", "-v", is_flag=True, help="each strategy's options with defaults, units and help")
def list_strategies(verbose):
    """The loading strategies: name, what it does, its sample-order semantics (and options with -v)."""
    from .. import strategies
    from ..config import describe_fields

    for name in strategies.names():
        st = strategies.get(name)
        sem = st.semantics
        click.echo(f"{name:<10} {st.summary}")
        click.echo(f"{'':<10} order: full permutation each epoch: {sem.full_permutation_each_epoch}; global "
                   f"batch = global shuffle's: {sem.global_batch_is_global_shuffle}; order changes: "
                   f"{sem.order_changes}")
        if verbose:
            for row in describe_fields(st.Options):
                unit = f" [{row['unit']}]" if row["unit"] else ""
                bounds = ", ".join(f"{k} {row[k]}" for k in ("min", "max") if row[k] is not None)
                click.echo(f"{'':<12}{row['flag']:<24} {row['type']:<6} default "
                           f"{row['default']!s:<8} {row['help']}{unit}" + (f" ({bounds})" if bounds else ""))


@list_group.command("workloads")
def list_workloads():
    """The packaged workloads (name, layout, real sample count, bytes per sample)."""
    from ..workload import builtin_names, load_spec, resolve

    click.echo(f"{'workload':<10} {'layout':<16} {'samples':>10} {'sample':>10} {'dataset':>10}  description")
    for name in builtin_names():
        spec, path = load_spec(name)
        w = resolve(spec, scale="full", spec_path=path)
        click.echo(f"{name:<10} {w.layout:<16} {w.samples:>10,} {format_bytes(w.sample_nbytes):>10} "
                   f"{format_bytes(w.dataset_nbytes):>10}  {spec.description}")


@click.command()
@click.argument("workload_name", metavar="WORKLOAD")
@options.scale(help="tiny, small or full (default: all presets)")
@options.samples(help="number of samples")
def show(workload_name, scale, samples):
    """A workload's arrays, layout, sizes per preset, compute profiles and model."""
    from ..workload import load_spec, resolve

    spec, path = load_spec(workload_name)
    scales = [scale] if scale or samples else [s for s in ("tiny", "small", "full")
                                               if s in spec.presets or s == "full"]
    resolved = [resolve(spec, scale=sc, samples=samples, spec_path=path) for sc in scales]  # errors first
    click.echo(f"{spec.name}: {spec.description}")
    click.echo(f"  file: {path}")
    click.echo(f"  layout: {spec.layout}")
    for w in resolved:
        click.echo(f"  [{w.scale}] {w.samples:,} samples, {w.files:,} files, "
                   f"{format_bytes(w.sample_nbytes)} per sample ({w.sample_nbytes:,} B"
                   f"{' mean' if w.format.driver().size_distribution(w) or w.record_size else ''}), dataset "
                   f"{format_bytes(w.dataset_nbytes)}, local batch {w.batch_size}"
                   + (f", {w.samples_per_file} samples per file" if w.format.samples_per_file == "block" else "")
                   + (f", {w.classes} classes" if w.classes else ""))
        for a in w.arrays:
            click.echo(f"      {a.name}: {list(a.shape)} {a.dtype} ({a.role}, {a.nbytes:,} B)")
        if w.record_size is not None:
            sz = w.record_size
            click.echo(f"      record_size: {sz.kind}, data array mean {sz.mean_bytes:,.0f} B sd {sz.std_bytes:,.0f} B, "
                       f"clipped to [{sz.min_bytes:,.0f}, {sz.max_bytes:,.0f}] B, drawn per file")
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
    for m in spec.measured:
        click.echo(f"    {m.accelerator} measured{' (model ' + m.model + ')' if m.model else ''}: {m.step_time_s} s "
                   f"at batch {m.batch_size} ({m.source})")
    if spec.model is not None:
        click.echo(f"  model: {spec.model.name} ({spec.model.source})")
        try:
            from ..compute.models import model_name_for, parameter_count

            for w in resolved:
                click.echo(f"    [{w.scale}] {model_name_for(w)}: {parameter_count(w):,} parameters "
                           f"(counted from dlbench's torch model)")
        except ImportError:
            click.echo(f"    {spec.model.parameters:,} parameters (from the workload file; torch not installed)")
    for src in spec.sources:
        click.echo(f"  source: {src}")
