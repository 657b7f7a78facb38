"""The calibration commands: ``calibrate`` (the training step's time with torch: a compute profile) and
``calibrate-storage`` (the tiers, memory copies and network: a system profile)."""

from __future__ import annotations

import click

from ..config import MAX_BATCH, MAX_THREADS, check_counts
from ..errors import ConfigError
from ..stop import interrupted
from . import options
from .group import sigterm_as_interrupt


@click.command()
@options.workload(required=True, param="workload_name", help="built-in workload name or a workload YAML path")
@options.scale(default="full", type=click.Choice(["tiny", "small", "full"]),
               help="sample shapes to measure at (full: the real sample)")
@options.batch_size(help="local batch size [default: the workload's]")
@click.option("--steps", type=int, default=10, show_default=True, help="measured steps")
@click.option("--warmup", type=int, default=2, show_default=True, help="warm-up steps (not measured)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
              help="auto: CUDA when available, else CPU")
@click.option("--model", default=None, help="model variant (e.g. deepcam_resnet50) [default: the workload's]")
@click.option("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="fp32; bf16 (autocast, CPU or CUDA); fp16 (CUDA: autocast + gradient scaler)")
@options.out(default=None, type=click.Path(dir_okay=False),
             help="profile file [default: results/calibrate/<workload>[-<scale>]-<device>-b<B>[-<precision>]"
                  ".compute.yaml]")
def calibrate(workload_name, scale, batch_size, steps, warmup, device, model, threads, precision, out):
    """Measure the real training-step time (torch) on this machine and write a compute profile YAML
    (use it with --compute-profile FILE, or merge it into the workload file)."""
    from ..calibrate.compute import calibrate as run_calibrate
    from ..calibrate.compute import (
        check_batch_fits,
        check_profile_path,
        default_profile_path,
        format_profile,
        write_profile,
    )
    from ..workload import load

    check_counts(("--steps", steps, 1, 100_000), ("--warmup", warmup, 0, 100_000), ("--threads", threads, 1, MAX_THREADS),
                 ("--batch-size", batch_size, 1, MAX_BATCH))
    wl = load(workload_name, scale=scale)
    check_profile_path(out)  # before the measurement, not after it
    check_batch_fits(wl, batch_size)
    try:
        with sigterm_as_interrupt():
            prof = run_calibrate(wl, batch_size=batch_size, steps=steps, warmup=warmup, device=device, model=model,
                                 threads=threads, precision=precision)
    except KeyboardInterrupt as e:
        raise interrupted(e, "during the calibration: nothing measured was kept, no profile written") from None
    click.echo(format_profile(prof))
    path = out or default_profile_path(prof)
    try:
        path = write_profile(prof, path)
    except OSError as e:
        raise ConfigError(f"--out {path}: cannot write the profile ({e.strerror or e}); the figures above are "
                          f"not saved") from None
    click.echo(f"  wrote {path}")


@click.command("calibrate-storage")
@options.data_dir(required=True,
                  help="the shared tier to measure: a dataset folder (its files are read at random offsets), or an "
                       "S3 endpoint's s3://bucket/prefix (probe objects are written there, read, then deleted)")
@click.option("--local-dir", type=click.Path(file_okay=False), default=None,
              help="node-local storage to measure (files are written and removed there)")
@options.out(default=None, required=True, type=click.Path(dir_okay=False), help="the system profile YAML to write")
@click.option("--request-bytes", type=click.IntRange(4096, 1 << 30), default=None,
              help="read request size [default: the median file size, at most 1 MiB]")
@click.option("--max-threads", type=click.IntRange(1, 64), default=8, show_default=True,
              help="reader threads per rank: 1, 2, 4, ... up to this")
@click.option("--budget-s", type=click.FloatRange(1, 86400), default=60.0, show_default=True,
              help="time budget, split over the measured points")
@click.option("--repeat", type=click.IntRange(1, 20), default=3, show_default=True, help="repeats of each point")
@click.option("--cache", type=click.Choice(["direct", "drop", "keep"]), default="direct", show_default=True,
              help="direct: O_DIRECT reads (the device's figures); drop: evict the files from the page cache before "
                   "each point; keep: as they are (page cache included)")
@click.option("--name", default=None, help="profile name [default: calibrated-<host>]")
def calibrate_storage_cmd(data_dir, local_dir, out, request_bytes, max_threads, budget_s, repeat, cache, name):
    """Measure the shared tier's t(γ) and latency, the local tier, memory copies and (under MPI) the network,
    and write a system profile for `run --system` and `simulate --system`."""
    from ..calibrate.storage import calibrate_storage, check_paths, write_system_profile
    from ..comm import get_comm

    check_paths(data_dir, out)
    comm = get_comm()
    with sigterm_as_interrupt():
        prof = calibrate_storage(data_dir, comm=comm, local_dir=local_dir, request_bytes=request_bytes,
                                 max_threads=max_threads, budget_s=budget_s, repeat=repeat, cache=cache, name=name,
                                 echo=click.echo)
    if comm.rank == 0:
        outp = write_system_profile(prof, out)
        click.echo(f"  wrote {outp} ({prof['calibration']['elapsed_s']:.1f} s of measurement); use it with "
                   f"--system {outp}")
