"""The ``dlbench`` command line: click commands, option parsing, mapping errors to exit codes.

No logic lives here, and nothing heavy (mpi4py, h5py, torch) is imported at import time: each command
imports what it needs when it runs. A ``DlbenchError`` becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import errno
import os
import sys

import click

from . import __version__
from .config import MAX_BATCH, MAX_EPOCHS, MAX_NODES, MAX_RANKS_PER_NODE, MAX_SEED, MAX_THREADS, check_counts
from .data.registry import read_via_help
from .errors import ConfigError, DlbenchError, Interrupted


def _launcher_rank() -> int:
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if k in os.environ:
            try:
                return int(os.environ[k])
            except ValueError:
                pass
    return 0


def _stdout_broken(e: OSError) -> bool:
    """True when ``e`` came from writing standard output (a full device, a closed pipe: a ``click.echo`` to
    stdout, or a flush of it that fails too); standard output is then pointed at /dev/null so the exit's own
    flush does not print a second error."""
    broken = False
    tb = e.__traceback__
    while tb is not None:
        f = tb.tb_frame
        if f.f_code.co_name == "echo" and f.f_code.co_filename.replace(os.sep, "/").endswith("click/utils.py"):
            target = f.f_locals.get("file")
            try:
                broken = target is None or target.fileno() == 1
            except (OSError, ValueError, AttributeError):
                broken = target is sys.stdout
        tb = tb.tb_next
    if not broken:
        try:
            sys.stdout.flush()
        except OSError:
            broken = True
    if broken:
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
        except OSError:
            pass
    return broken


def _os_error_line(e: OSError) -> str:
    """One line for an OSError no command turned into a DlbenchError: standard output that cannot be
    written, or the file and the reason (a name too long, a full disk)."""
    why = e.strerror or str(e)
    if _stdout_broken(e):
        return f"cannot write to standard output: {why} (errno {errno.errorcode.get(e.errno or 0, e.errno)})"
    where = f"{e.filename}: " if e.filename else ""
    hint = {errno.ENAMETOOLONG: "; use shorter names (at most 255 bytes per path component)",
            errno.ENOSPC: "; free space or choose another folder",
            errno.EDQUOT: "; free space or choose another folder"}.get(e.errno or 0, "")
    return f"{where}{why}{hint}"


_MPI_COMMANDS = ("run", "generate", "verify", "study", "calibrate-storage")   # the commands that start MPI


class DlbenchGroup(click.Group):
    """Turns DlbenchError into one line and an exit code; usage errors keep click's format."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:   # a bad flag on one rank only: the others must not wait in MPI for it
            if ctx.invoked_subcommand in _MPI_COMMANDS:
                from .comm import fail_together

                try:
                    fail_together(ConfigError(e.format_message()))
                except DlbenchError:
                    pass   # every rank stops; this one says why with click's usage line
            raise
        except OSError as e:   # an output the command could not write (stdout on a full device, a full disk)
            msg = _os_error_line(e)
            click.echo(f"dlbench: error: {msg}", err=True)
            ctx.exit(6 if e.errno != errno.EPIPE else 1)
        except DlbenchError as e:
            if ctx.invoked_subcommand in _MPI_COMMANDS:   # stopped before MPI started: the other ranks must not wait
                from .comm import fail_together

                try:
                    fail_together(e)
                except DlbenchError as agreed:
                    e = agreed
            # a config error is the same on every rank: say it once (so is one the ranks agreed on: ``once``)
            if not ((isinstance(e, ConfigError) or getattr(e, "once", False)) and _launcher_rank() != 0):
                kind = "" if isinstance(e, Interrupted) else "error: "
                click.echo(f"dlbench: {kind}{e}", err=True)
            sys.stdout.flush()
            ctx.exit(e.exit_code)
        except KeyboardInterrupt as e:
            sig = getattr(e, "signal_name", "SIGINT")
            if _launcher_rank() == 0:  # every rank gets Ctrl-C: say it once
                click.echo(f"dlbench: interrupted by {sig}", err=True)
            ctx.exit(143 if sig == "SIGTERM" else 130)

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
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="content seed: same seed, same bytes")
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
    with _sigterm_as_interrupt():
        if data_dir.startswith("s3://"):   # objects in a bucket (dlbench.storage.s3)
            from .storage.s3 import generate_to as run_generate  # noqa: F811
        res = run_generate(wl, data_dir, seed=seed, force=force, comm=comm, fsync=fsync,
                           progress=progress if comm.rank == 0 else False)
    if comm.rank == 0:
        click.echo(res.line())


@main.command()
@click.option("--data-dir", required=True, type=click.Path(file_okay=False), help="the dataset to check")
@click.option("--content", "check_content", is_flag=True,
              help="also recompute every sample and compare bytes (checks the checksums too)")
@click.option("--checksum", "check_sum", is_flag=True,
              help="also read every file whole and compare its checksum with the one generate recorded: catches "
                   "flipped bytes; reads the whole dataset, as an epoch does (the default check reads metadata only)")
def verify(data_dir, check_content, check_sum):
    """Check a dataset against its manifest: files present, sizes, HDF5 shapes (checksums with --checksum,
    every sample's bytes with --content)."""
    from .comm import get_comm
    from .data.manifest import Manifest
    from .data.verify import verify as run_verify
    from .errors import DataError

    comm = get_comm()
    storage = None
    url = data_dir
    if url.startswith("s3://"):   # objects in a bucket: the manifest fetched into its control folder
        from pathlib import Path

        from .storage.s3 import S3Backend, fetch_manifest

        data_dir = str(comm.bcast(fetch_manifest(url) if comm.rank == 0 else None))
        storage = S3Backend(url)
    m = Manifest.load(data_dir)
    problems = run_verify(data_dir, content=check_content, comm=comm, manifest=m, checksum=check_sum,
                          storage=storage)
    if storage is not None:   # name the objects, not the control folder
        problems = [p.replace(str(Path(data_dir)), url.rstrip("/"), 1) for p in problems]
    if problems:
        if comm.rank == 0:
            for p in problems:
                click.echo(p)
        raise DataError(f"--data-dir {url}: {len(problems)} problem(s) in {m.describe()}")
    if comm.rank == 0:
        recorded = m.sum64 is not None and any(c is not None for c in m.sum64)
        what = "files, sizes" + (", shapes" if check_content or (check_sum and recorded) else " and shapes")
        if check_content or check_sum:
            what += (", checksums" if check_content else " and checksums") if recorded else ""
            what += " and content" if check_content else ""
            if not recorded:
                what += " (no checksums recorded by generate: not checked)"
        click.echo(f"ok: {m.describe()}, {_human_bytes(m.dataset_nbytes)}: {what} match the manifest")


@main.group("list")
def list_group():
    """List what dlbench knows: workloads, strategies."""


@list_group.command("strategies")
@click.option("--verbose", "-v", is_flag=True, help="each strategy's options with defaults, units and help")
def list_strategies(verbose):
    """The loading strategies: name, what it does, its sample-order semantics (and options with -v)."""
    from . import strategies
    from .config import describe_fields

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
                   f"{' mean' if w.format.driver().size_distribution(w) or w.record_size else ''}), dataset "
                   f"{_human_bytes(w.dataset_nbytes)}, local batch {w.batch_size}"
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
            from .compute.models import model_name_for, parameter_count

            for w in resolved:
                click.echo(f"    [{w.scale}] {model_name_for(w)}: {parameter_count(w):,} parameters "
                           f"(counted from dlbench's torch model)")
        except ImportError:
            click.echo(f"    {spec.model.parameters:,} parameters (from the workload file; torch not installed)")
    for src in spec.sources:
        click.echo(f"  source: {src}")



# ===== run commands: run, report, compare ===================================================================


def _strategy_option_fields() -> dict:
    """Every strategy-option flag of ``run``, by its click parameter name: {param: {"flag", "field", "owners",
    "rows" (each owner's describe_fields row), "defaults", "helps", "alias"}}.

    A field declared with its own flag (``opt(flag="--lbann-mode")``: a name that strategies use with
    different meanings) is that strategy's alone; ``--<name>`` stays as an alias (``alias``: {owner: its own
    flag}) that sets the selected strategy's field, so existing command lines keep working. A plain flag
    several strategies share must mean one thing to all of them: one type and one set of choices (a
    developer error otherwise, raised when the CLI is built)."""
    from . import strategies
    from .config import describe_fields, flag_name

    out: dict = {}

    def entry(param, flag, field, alias):
        ent = out.setdefault(param, {"flag": flag, "field": field, "owners": [], "rows": {}, "defaults": {},
                                     "helps": {}, "alias": alias})
        if ent["field"] != field or (ent["alias"] is None) != (alias is None):
            raise RuntimeError(f"strategy option flag {flag}: declared by fields of different names, or as its own "
                               f"flag by one strategy and shared by another; give each meaning its own flag "
                               f"(opt(flag=...))")
        return ent

    for name in strategies.names():
        for row in describe_fields(strategies.get(name).Options):
            own, plain = row["flag"], flag_name(row["name"])
            ents = [entry(own[2:].replace("-", "_"), own, row["name"], None)]
            if own != plain:
                alias = entry(row["name"], plain, row["name"], {})
                alias["alias"][name] = own
                ents.append(alias)
            for ent in ents:
                ent["owners"].append(name)
                ent["rows"][name] = row
                ent["defaults"][name] = row["default"]
                ent["helps"].setdefault(row["help"], []).append(name)
    for ent in out.values():
        kinds = {(r["type"], tuple(r["choices"] or ())) for r in ent["rows"].values()}
        if ent["alias"] is None and len(kinds) > 1:
            raise RuntimeError(f"strategy option {ent['flag']} of {', '.join(ent['owners'])}: different types or "
                               f"choices; give each strategy's its own flag (opt(flag=...))")
    return out


def _route_strategy_options(strategy: str, values: dict) -> dict:
    """``run``'s strategy-option flags (click parameter -> value, None where not given) as the selected
    strategy's options {field: value}: a flag of another strategy, an alias (``--mode``) given a value the
    strategy's own flag does not take, or one option given twice with different values is a one-line
    ConfigError."""
    fields = _strategy_option_fields()
    out: dict = {}
    via: dict = {}
    for param, v in values.items():
        if v is None:
            continue
        ent = fields.get(param)
        if ent is None:         # a key from a DLIO translation that is no flag: the options' check names it
            out[param], via[param] = v, f"--{param.replace('_', '-')}"
            continue
        flag, field = ent["flag"], ent["field"]
        if strategy not in ent["owners"]:
            raise ConfigError(f"{flag} is an option of {', '.join(ent['owners'])}, not of strategy {strategy}")
        if ent["alias"] is not None:
            own = ent["alias"][strategy]
            choices = ent["rows"][strategy]["choices"]
            if choices and str(v) not in map(str, choices):
                others = [f"{o}'s {f}" for o, f in ent["alias"].items()
                          if o != strategy and str(v) in map(str, ent["rows"][o]["choices"] or ())]
                raise ConfigError(f"{flag}={v}: strategy {strategy}'s {flag[2:]} ({own}) is one of "
                                  f"{', '.join(map(str, choices))}"
                                  + (f"; {v} is {' and '.join(others)}" if others else ""))
        if field in out and out[field] != v:
            raise ConfigError(f"{via[field]}={out[field]} and {flag}={v}: the same option of {strategy}; give one")
        out[field], via[field] = v, flag
    return out


def _defaults_text(defaults: dict) -> str:
    """``default X``, or per strategy where the owners' defaults differ: ``default 2 (clairvoyant), 0 (lbann, ...)``."""
    groups: dict = {}
    for owner, d in defaults.items():
        groups.setdefault(repr(d), (d, []))[1].append(owner)
    if len(groups) == 1:
        return f"default {next(iter(groups.values()))[0]}"
    return "default " + ", ".join(f"{d} ({', '.join(owners)})" for d, owners in groups.values())


def _strategy_params() -> list[click.Option]:
    """One flag per strategy option (from the strategies' own Options dataclasses), sorted by name: a
    strategy's own flag says only its meaning; an alias (``--mode``) names the flags it stands for."""
    out = []
    for param, ent in sorted(_strategy_option_fields().items()):
        row = next(iter(ent["rows"].values()))
        flag = ent["flag"]
        unit = f" [{row['unit']}]" if row["unit"] else ""
        if ent["alias"] is not None:
            own = ", ".join(f"{fl} ({o})" for o, fl in sorted(ent["alias"].items()))
            helptext = (f"the selected --strategy's own flag of this name: {own}; kept for existing command lines, "
                        f"a value that strategy's flag does not take is an error")
        elif len(ent["helps"]) == 1:
            helptext = f"({', '.join(ent['owners'])}) {row['help']}{unit}; {_defaults_text(ent['defaults'])}"
        else:   # one meaning, worded per owner (e.g. --loader-threads of the cache family and of local copies)
            helptext = ("; ".join(f"({', '.join(o)}) {h}" for h, o in ent["helps"].items())
                        + f"{unit}; {_defaults_text(ent['defaults'])}")
        if row["type"] == "bool":
            out.append(click.Option([f"{flag}/--no-{flag[2:]}", param], default=None, help=helptext))
        else:
            out.append(click.Option([flag, param], default=None, help=helptext, metavar=row["type"].upper()))
    return out


class StrategyFlagsCommand(click.Command):
    """``run``: its own options, then one flag per option of every registered strategy, also of one
    registered after this module was imported (``dlbench.strategies.register`` from a plugin or a test):
    the flags follow the registry whenever the command parses or shows help."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._own = list(self.params)
        self._names: tuple = ()
        self._sync()

    def _sync(self) -> None:
        from . import strategies

        names = tuple(strategies.names())
        if names != self._names:
            self.params = [*self._own, *_strategy_params()]
            self._names = names

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        self._sync()
        return super().get_params(ctx)


@main.command(cls=StrategyFlagsCommand)
@click.option("--workload", "-w", default="cosmoflow", show_default=True,
              help="built-in workload name or the path of your own workload YAML")
@click.option("--strategy", "-s", default="naive", show_default=True, help="loading strategy (dlbench list strategies)")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="dataset dir from `dlbench generate`; default: $DLBENCH_DATA_DIR (~/.cache/dlbench/data)/"
                   "<workload>-tiny-seed<seed>, generated on first use")
@click.option("--scale", default=None, help="preset for the default data dir's dataset: tiny|small|full")
@click.option("--epochs", "-e", type=int, default=3, show_default=True)
@click.option("--batch-size", "-b", type=int, default=None, help="local batch per rank [default: the workload's]")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True, help="seed of the dataset and the shuffle")
@click.option("--out", "-o", default="results", show_default=True, help="results root: <out>/<workload>/<strategy>/<UTC stamp>/")
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
@click.option("--ranks-per-node", type=int, default=None, help="emulate nodes of K ranks on one machine [default: MPI's shared-memory split]")
@click.option("--verify", is_flag=True, help="check every delivered sample's bytes and order against the generator and the plan")
@click.option("--dry-run", is_flag=True, help="print the plan, bytes per tier and checks; touch nothing")
@click.option("--progress/--no-progress", default=None,
              help="live line on rank 0: epoch, step, exposed I/O so far, samples/s (default: on a terminal)")
@click.option("--system", "system", default="local", show_default=True, metavar="PROFILE",
              help="system profile (configs/systems name or YAML path); one with a pfs section throttles every "
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

    from . import report, strategies
    from .comm import get_comm
    from .errors import unknown_choice
    from .run.driver import run as do_run
    from .run.setup import ACCELERATORS, RunConfig, check_seconds

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
    given = _route_strategy_options(strategy, strategy_opts)
    if accelerator is not None and accelerator not in ACCELERATORS:
        raise unknown_choice("accelerator", accelerator, ACCELERATORS)
    check_counts(("--epochs", epochs, 1, MAX_EPOCHS), ("--batch-size", batch_size, 1, MAX_BATCH),
                 ("--checkpoint-every", checkpoint_every, 0, 2**62), ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE))
    for name, val in (("--compute-time", compute_time), ("--compute-stdev", compute_stdev)):
        if val is not None:
            check_seconds(name, val)  # inf, nan, 1e308, < 0: one line
    cfg = RunConfig(workload=workload, scale=scale, strategy=strategy, options=given, data_dir=data_dir,
                    epochs=epochs, batch_size=batch_size, seed=seed, out=out, compute=compute,
                    accelerator=accelerator, compute_time_s=compute_time, compute_stdev_s=compute_stdev,
                    compute_profile=compute_profile, device=device, precision=precision, model=model, barrier=barrier,
                    checkpoint_every=checkpoint_every, verify=verify, ranks_per_node=ranks_per_node,
                    dry_run=dry_run, system=system, local_dir=local_dir, inject=tuple(inject), cache=cache,
                    read_via=read_via, overlap=overlap, ceiling_steps=ceiling_steps,
                    eval=dlio_t.run.get("eval") if dlio_t is not None else None,
                    generate_s3=bool(dlio_t is not None and dlio_t.run.get("data_dir")
                                     and data_dir == dlio_t.run["data_dir"]))
    from .storage.inject import parse as parse_injection

    parse_injection(inject)  # a bad --inject: one line before any MPI work
    from .system import load as load_profile

    load_profile(system)  # a bad profile: one line before any MPI work
    comm = get_comm(ranks_per_node=ranks_per_node)
    if dlio_t is not None and dlio_t.run["checkpoint_every_epochs"] and checkpoint_every == 0:
        from .dlio import steps_per_epoch

        spe = max(1, steps_per_epoch(
            dlio_t.workload["samples"], comm.size, cfg.batch_size or dlio_t.run["batch_size"],
            bool(given.get("drop_last_batch"))))
        cfg.checkpoint_every = dlio_t.run["checkpoint_every_epochs"] * spe
        cfg.checkpoint_first = dlio_t.run.get("checkpoint_after_epochs", 0) * spe   # DLIO's checkpoint_after_epoch
    if dlio_t is not None and dlio_t.run.get("checkpoint_every_steps") and checkpoint_every == 0:
        cfg.checkpoint_every = dlio_t.run["checkpoint_every_steps"]                # DLIO's steps_between_checkpoints
    if dlio_t is not None and cfg.checkpoint_every and dlio_t.run.get("checkpoint_model"):
        cfg.checkpoint_model = dlio_t.run["checkpoint_model"]                      # every rank writes its shards
    from .progress import StepProgress, wanted

    # rank 0's own figures (its stall, its samples); under MPI the line says so
    hook = StepProgress(epochs, force_terminal=True if progress else None,
                        label=f"rank 0 of {comm.size}: " if comm.size > 1 else "") if (
        comm.rank == 0 and not dry_run and wanted(progress)) else None
    try:
        with _sigterm_as_interrupt():
            res = do_run(cfg, comm, progress=hook)
    finally:
        if hook is not None:
            hook.close()
    if comm.rank != 0:
        return
    if dry_run:
        click.echo(json.dumps(res["dry_run"], indent=2, default=str))
        return
    try:
        click.echo(report.render_summary(res["run"]))
    except OSError as e:   # stdout on a full device: the run is recorded all the same; say where
        from .errors import OutputError

        if not _stdout_broken(e):
            raise
        raise OutputError(f"cannot write to standard output: {e.strerror or e}; the run finished and its results "
                          f"are in {res['run_dir']} (dlbench report {res['run_dir']})") from None
    warn = (res["run"].get("summary", {}).get("page_cache") or {}).get("warning")
    if warn:
        click.echo(f"dlbench: warning: {warn}", err=True)
    for w in ((res["run"].get("summary", {}).get("ceiling") or {}).get("warning"),
              (res["run"].get("summary", {}).get("cache") or {}).get("residency_warning"),
              res["run"].get("summary", {}).get("preloaded_warning")):
        if w:
            click.echo(f"dlbench: warning: {w}", err=True)
    inj = res["run"].get("summary", {}).get("injected")
    if inj:
        click.echo(f"dlbench: warning: faults injected (--inject): {inj}", err=True)
    plan_warn = res["run"].get("summary", {}).get("plan_warning")
    if plan_warn:
        click.echo(f"dlbench: warning: {plan_warn}", err=True)
    if res.get("write_error"):
        from .errors import OutputError

        raise OutputError(res["write_error"])
    click.echo(f"results: {res['run_dir']}")


def _from_dlio(path, overrides, allow_unsupported, given):
    """``run --dlio-config``: translate the DLIO config (dlbench.dlio), write its workload YAML under the data
    root, and return the run settings, where a flag typed on the command line wins over the config's."""
    from . import dlio
    from .host import data_root

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
    wl_path = dlio.write_workload_file(t, data_root() / "dlio-workloads")
    r = t.run
    strategy = given["strategy"] if typed("strategy") else r["strategy"]
    opts = dict(given["strategy_opts"])
    if strategy == r["strategy"]:
        for k, v in r["options"].items():
            if opts.get(k) is None:
                opts[k] = v
    else:
        click.echo(f"dlbench: note: --strategy {strategy}: DLIO's reader settings (read_threads, prefetch_size, "
                   f"its dropped last batch) map onto {r['strategy']} only; {strategy} runs with its own options",
                   err=True)
    return (str(wl_path), strategy,
            given["epochs"] if typed("epochs") else r["epochs"],
            given["batch_size"] if typed("batch_size") else r["batch_size"],
            given["seed"] if typed("seed") else r["seed"],
            given["compute_time"] if typed("compute_time") else r["compute_time_s"],
            given["compute_stdev"] if typed("compute_stdev") else r["compute_stdev_s"],
            "full", opts, t)


def _interrupted(exc: BaseException, what: str):
    """``Interrupted`` for a command stopped by SIGINT (exit 130) or SIGTERM (143): one line saying what was
    kept or removed."""
    sig = getattr(exc, "signal_name", "SIGINT")
    return Interrupted(f"interrupted by {sig} {what}", exit_code=143 if sig == "SIGTERM" else 130)


def _sigterm_as_interrupt():
    """SIGINT and SIGTERM (a scheduler's cancel, `kill`) raised once as an interrupt in the main thread, so the
    command records itself and removes what it wrote; a second signal never cuts that clean-up short
    (``dlbench.stop``)."""
    from .stop import StopSignals

    return StopSignals()


@main.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False), required=False)
@click.option("--explain", is_flag=True, help="print what every summary number means (measured and simulated alike)")
def report_cmd(run_dir, explain):
    """Re-render a run's summary from its results folder (--explain: the glossary of its numbers)."""
    from . import report, results
    from .provenance import render

    if explain:
        from .metrics import GLOSSARY

        w = max(map(len, GLOSSARY))
        click.echo("\n".join(f"{k:<{w}}  {v}" for k, v in GLOSSARY.items()))
        if run_dir is None:
            return
        click.echo("")
    if run_dir is None:
        raise click.UsageError("give a RUN_DIR (a folder `dlbench run` or `simulate` wrote), or --explain")
    doc = results.read_run(run_dir)
    click.echo(report.render_summary(doc))
    click.echo(render(doc.get("provenance")))


@main.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def compare_cmd(run_dirs, fmt):
    """Put runs side by side: strategy, ranks, epoch time, exposed I/O share, read share, AU, MB/s.
    A folder without run.json (a results root) stands for every run below it."""
    from . import report
    from .results import find_run_dirs

    dirs = [str(d) for d in find_run_dirs(run_dirs, dedup=False)]
    click.echo(report.compare(dirs, fmt=fmt))
    from .provenance import differences
    from .results import read_run

    docs = []
    for d in dirs:
        try:
            docs.append(read_run(d))
        except DlbenchError:
            pass  # compare has already shown the unreadable run in its table
    for line in differences(docs):
        click.echo(line, err=True)


@main.command("plot")
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "-o", "out_dir", default="plots", show_default=True, type=click.Path(file_okay=False),
              help="folder for the figures (PNG and SVG)")
@click.option("--kind", "kinds", multiple=True, default=("all",), show_default=True,
              type=click.Choice(["bars", "timeline", "sizes", "scaling", "all"]),
              help="which figures (repeatable): stacked phase bars, per-rank timeline of one epoch, access-size "
                   "histogram, scaling over ranks/nodes")
@click.option("--epoch", type=int, default=None, help="timeline: the epoch to draw [default: 1, or 0 with one epoch]")
@click.option("--x", "x_axis", type=click.Choice(["ranks", "nodes"]), default="ranks", show_default=True,
              help="scaling: x axis")
def plot_cmd(run_dirs, out_dir, kinds, epoch, x_axis):
    """Figures from results folders (a run folder, or a results root searched for runs): matplotlib, PNG + SVG.
    Needs the plot extra: pip install 'dlbench[plot]'."""
    from .plots import make_plots

    if epoch is not None and epoch < 0:
        raise ConfigError(f"--epoch={epoch}: must be >= 0")
    files = make_plots(list(run_dirs), out_dir, kinds=kinds, epoch=epoch, x=x_axis,
                       echo=lambda m: click.echo(f"dlbench: {m}", err=True))
    for f in files:
        click.echo(str(f))


@main.group("import")
def import_group():
    """Turn a real application's log into a results folder that report/compare/plot read like a run."""


def _imported(doc, out):
    from . import importers, report, results

    rd = importers.write_imported(doc, out)
    click.echo(report.render_summary(results.read_run(rd)))
    for w in doc.get("warnings") or ():
        click.echo(f"dlbench: warning: {w}", err=True)
    click.echo(f"results: {rd}")


@import_group.command("darshan")
@click.argument("log", metavar="LOG", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="application name for the folder [default: the log's executable]")
@click.option("--out", "-o", default="results", show_default=True,
              help="results root: <out>/<name>/imported-darshan/<UTC stamp>/")
def import_darshan_cmd(log, name, out):
    """A Darshan log (PyDarshan): POSIX/H5D counters, read time and bytes, job run time."""
    from . import importers

    _imported(importers.darshan_run(log, name=name), out)


@import_group.command("timelogger")
@click.argument("csv_path", metavar="CSV", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="application name for the folder [default: the file's name]")
@click.option("--nodes", type=int, default=None, help="divide sums by this many nodes [default: distinct ranks]")
@click.option("--fold-setup/--no-fold-setup", default=True, show_default=True,
              help="count epoch -1 (set-up) rows as epoch 0, as NERSC's analysis does")
@click.option("--out", "-o", default="results", show_default=True,
              help="results root: <out>/<name>/imported-timelogger/<UTC stamp>/")
@click.option("--strict", is_flag=True,
              help="refuse the file at its first garbled row [default: skip and count them, with a warning]")
def import_timelogger_cmd(csv_path, name, nodes, fold_setup, out, strict):
    """A TimeLogger CSV (NERSC DL-Parallel-IO; plain or .gz): per-node phase sums, epoch times, exposed I/O."""
    from . import importers

    _imported(importers.timelogger_run(csv_path, name=name, nodes=nodes, fold_setup=fold_setup, strict=strict), out)


@import_group.command("dftracer")
@click.argument("traces", metavar="TRACE...", nargs=-1, required=True, type=click.Path())
@click.option("--name", default=None, help="application name for the folder [default: the trace's log-file name]")
@click.option("--tier", "tiers", multiple=True, metavar="PREFIX=NAME",
              help="file class of the files under PREFIX (repeatable; longest prefix wins) [default: the mount "
                   "point holding each path on this machine]")
@click.option("--strict", is_flag=True, default=False,
              help="refuse a trace with a bad line (default: skip, count and report them with line numbers)")
@click.option("--hdf5-split/--no-hdf5-split", default=True, show_default=True,
              help="split the reads of HDF5 files readable here into data and libhdf5's metadata (opens each once)")
@click.option("--out", "-o", default="results", show_default=True,
              help="results root: <out>/<name>/imported-dftracer/<UTC stamp>/")
def import_dftracer_cmd(traces, name, tiers, strict, hdf5_split, out):
    """dftracer traces (.pfw/.pfw.gz files, or folders of them): per-file, per-rank and per-class POSIX counters,
    bytes by tier, read intervals."""
    from . import importers_dftracer as D
    from . import report, results

    doc, intervals = D.dftracer_run(traces, name=name, tiers=D.parse_tier_args(tiers), strict=strict,
                                    hdf5_split=hdf5_split)
    rd = D.write_dftracer(doc, intervals, out)
    click.echo(report.render_summary(results.read_run(rd)))
    if doc["summary"].get("import_warning"):
        click.echo(f"dlbench: warning: {doc['summary']['import_warning']}", err=True)
    click.echo(f"results: {rd}")


@import_group.command("dlio-config")
@click.argument("config", metavar="FILE", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[++workload.KEY=VALUE]...")
@click.option("--out", "-o", "out_path", required=True, type=click.Path(dir_okay=False),
              help="the dlbench workload YAML to write")
@click.option("--name", default=None, help="workload name [default: the config's model.name]")
@click.option("--allow-unsupported", is_flag=True,
              help="write it anyway, listing the DLIO settings dlbench does not emulate in comments")
def import_dlio_cmd(config, overrides, out_path, name, allow_unsupported):
    """A DLIO workload YAML (with DLIO's Hydra overrides) as a dlbench workload YAML; the run flags that
    reproduce DLIO's run (epochs, compute time, loader) are in its header."""
    from . import dlio

    t = dlio.load(config, overrides, allow_unsupported=allow_unsupported, name=name)
    if t.unsupported:
        click.echo(f"dlbench: warning: DLIO settings not emulated: {'; '.join(t.unsupported)}", err=True)
    dlio.write_text_atomic(out_path, dlio.workload_yaml(t))
    click.echo(f"workload: {out_path}")
    click.echo(f"run: dlbench run --workload {out_path} --scale full {' '.join(t.run_flags())}")


def _sustain_checkpoint(mtbf_h, gbps):
    if mtbf_h is None and gbps is None:
        return None
    if mtbf_h is None or gbps is None or not (mtbf_h > 0 and gbps > 0):
        raise ConfigError(f"--checkpoint-mtbf-hours={mtbf_h} --checkpoint-gbps={gbps}: give both, each > 0")
    return (gbps, mtbf_h)


@main.command("sustain")
@click.option("--workload", "-w", required=True, help="workload name or YAML (its au_threshold is the rule)")
@click.option("--accelerator", required=True, help="whose step time the emulated accelerators take: v100|a100|h100")
@click.option("--strategy", "-s", "strategies", multiple=True, default=("naive",), show_default=True,
              help="loading strategy (repeatable: one answer per strategy)")
@click.option("--system", default="local", show_default=True, metavar="PROFILE",
              help="system profile of the measured runs; its shared tier is what the model fits to them")
@click.option("--measure-ranks", type=int, default=2, show_default=True,
              help="measure 1..K ranks on this machine (mpiexec -n k)")
@click.option("--scale", default=None, help="preset of the measured runs' dataset [default: the workload's tiny]")
@click.option("--model-scale", default="full", show_default=True, help="preset the modelled worlds use")
@click.option("--epochs", "-e", type=int, default=2, show_default=True)
@click.option("--ranks-per-node", type=int, default=None, help="accelerators per node of the modelled worlds "
                                                                 "[default: --measure-ranks]")
@click.option("--max-accelerators", type=int, default=4096, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False), default=None, help="dataset of the measured runs")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "-o", default="results", show_default=True, help="results root of the measured runs")
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON")
@click.option("--checkpoint-mtbf-hours", type=float, default=None,
              help="include checkpoints: MTBF of one accelerator [h]; every point's AU x the Young/Daly goodput of "
                   "the workload's checkpoint written at --checkpoint-gbps")
@click.option("--checkpoint-gbps", type=float, default=None, help="the checkpoint's write rate [GB/s]")
def sustain_cmd(workload, accelerator, strategies, system, measure_ranks, scale, model_scale, epochs, ranks_per_node,
                max_accelerators, data_dir, seed, out, as_json, checkpoint_mtbf_hours, checkpoint_gbps):
    """MLPerf Storage's question per strategy: the most emulated accelerators this storage keeps at AU >= the
    workload's threshold — measured at 1..K ranks here, modelled beyond (simulate, its shared tier fitted to
    the measured points); every figure labelled measured or modelled."""
    import json

    from . import strategies as registry
    from . import sustain

    for s in strategies:
        registry.get(s)
    check_counts(("--measure-ranks", measure_ranks, 1, MAX_RANKS_PER_NODE), ("--epochs", epochs, 1, MAX_EPOCHS),
                 ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE),
                 ("--max-accelerators", max_accelerators, 1, MAX_NODES * MAX_RANKS_PER_NODE),
                 ("--seed", seed, 0, MAX_SEED))
    rows = sustain.sustain(workload=workload, accelerator=accelerator, strategies=list(strategies), system=system,
                           measure_ranks=measure_ranks, epochs=epochs, scale=scale, model_scale=model_scale,
                           data_dir=data_dir, out=out, seed=seed, ranks_per_node=ranks_per_node,
                           max_accelerators=max_accelerators,
                           echo=lambda m: click.echo(f"dlbench: {m}", err=True),
                           checkpoint=_sustain_checkpoint(checkpoint_mtbf_hours, checkpoint_gbps))
    click.echo(json.dumps(rows, indent=1) if as_json else sustain.render(rows))




# ===== shuffle strategies: study ============================================================================


@main.command("study")
@click.argument("study_file", metavar="STUDY", type=click.Path(dir_okay=False))
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="the dataset (generated there if missing) [default: $DLBENCH_DATA_DIR/<workload>-study-seed<seed>]")
@click.option("--local-dir", type=click.Path(file_okay=False), default=None, help="node-local storage root")
@click.option("--out", "-o", default=None, help="results root [default: the study's, else results]")
@click.option("--ranks-per-node", type=int, default=None, help="emulate nodes of K ranks on one machine")
@click.option("--epochs", "-e", type=int, default=None, help="override the study's epochs")
@click.option("--simulate", "simulate_part", is_flag=True,
              help="scaling study: run its simulate: part (the model, no I/O) instead of the measured runs")
@click.option("--generate-only", is_flag=True,
              help="scaling study: generate every dataset of the sweep under --data-dir and stop")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def study_cmd(study_file, data_dir, local_dir, out, ranks_per_node, epochs, simulate_part, generate_only, fmt):
    """Run every entry of a run study (configs/studies/shuffle-comparison.yaml) on the same data and system,
    serially or under mpiexec, and print `dlbench compare`'s table plus the tier traffic and order table.

    A scaling study (a sweep: section, configs/studies/scaling-*.yaml) runs the points whose world size is
    this launch's, each on its own dataset under --data-dir (a root then); --simulate runs its modelled part."""
    from .comm import get_comm
    from .study.schema import load_study

    st = load_study(study_file)
    check_counts(("--epochs", epochs, 1, MAX_EPOCHS), ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE))
    if simulate_part:
        from .study.simulate import simulate_study

        return simulate_study(st, study_file, out=out, epochs=epochs, fmt=fmt, echo=click.echo)
    from .study.measure import measure_study

    measure_study(st, get_comm(ranks_per_node=ranks_per_node), data_dir=data_dir, local_dir=local_dir, out=out,
                  epochs=epochs, generate_only=generate_only, fmt=fmt, echo=click.echo)


@main.command("jobscript")
@click.argument("study_file", metavar="STUDY", type=click.Path(dir_okay=False))
@click.option("--scheduler", required=True, type=click.Choice(["slurm", "pbs", "flux"]), help="batch system")
@click.option("--nodes-list", default=None, help="node counts, comma-separated [default: the study's sweep]")
@click.option("--ranks-per-node", type=int, default=None, help="tasks per node [default: the sweep's, else 1]")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="shared dataset root on the cluster's file system [default: $DLBENCH_DATA_DIR/sweeps]")
@click.option("--results", type=click.Path(file_okay=False), default=None,
              help="the one results root every job writes into [default: the study's out]")
@click.option("--time", "walltime", default="01:00:00", show_default=True, help="wall time per job (HH:MM:SS)")
@click.option("--account", default=None, help="account / project / bank (a commented line when not given)")
@click.option("--partition", default=None, help="partition / queue (a commented line when not given)")
@click.option("--env", "env_line", default=None,
              help="the line that loads the environment [default: activate this Python's venv]")
@click.option("--dlbench", "dlbench_cmd", default="dlbench", show_default=True, help="how the jobs call dlbench")
@click.option("--generate-nodes", type=int, default=1, show_default=True, help="nodes of the generate job")
@click.option("--out", "-o", "out_dir", default="jobs", show_default=True, type=click.Path(file_okay=False),
              help="folder for the scripts")
def jobscript_cmd(study_file, scheduler, nodes_list, ranks_per_node, data_dir, results, walltime, account, partition,
                  env_line, dlbench_cmd, generate_nodes, out_dir):
    """Batch scripts for a scaling study: one job per node count (srun / mpiexec -ppn / flux run), a
    generate job, and submit-all.sh; every job shares --data-dir and writes into one results root."""
    from .jobscript import parse_nodes_list, write_jobscripts

    files = write_jobscripts(study_file, out_dir, scheduler=scheduler,
                             nodes_list=parse_nodes_list(nodes_list) if nodes_list else None,
                             ranks_per_node=ranks_per_node, data_dir=data_dir, results=results, time=walltime,
                             account=account, partition=partition, env_line=env_line, dlbench=dlbench_cmd,
                             generate_nodes=generate_nodes)
    for f in files:
        click.echo(str(f))
    click.echo(f"submit: {files[-1]}")


# ===== simulate =============================================================================================


def _parse_strategy_options(items) -> dict:
    """``STRATEGY.KEY=VALUE`` pairs into {strategy: {key: value}} (values read as YAML scalars)."""
    import yaml

    out: dict = {}
    for it in items:
        head, eq, val = it.partition("=")
        strat, dot, key = head.partition(".")
        if not (eq and dot and strat and key):
            raise ConfigError(f"--option {it!r}: expected STRATEGY.KEY=VALUE, e.g. staging.loader_threads=2")
        try:
            v = yaml.safe_load(val)
        except yaml.YAMLError:
            v = val
        out.setdefault(strat.strip(), {})[key.strip().replace("-", "_")] = v
    return out


# simulate's flags that a --study file sets (combining them with --study is an error, not silently ignored)
_STUDY_SETS = ("system", "workload", "scale", "samples", "nodes", "ranks_per_node", "strategies", "epochs",
               "local_batch", "accelerator", "compute_time", "pls_q")


@main.command("simulate")
@click.option("--system", "system", metavar="PROFILE", help="system profile: a name in configs/systems or a YAML path")
@click.option("--workload", metavar="W", help="built-in workload name or YAML path (sample sizes and batch)")
@click.option("--scale", default="full", show_default=True, help="workload preset: tiny, small, full")
@click.option("--samples", type=int, default=None, help="override the number of samples F")
@click.option("--nodes", type=int, default=None, help="N: nodes")
@click.option("--ranks-per-node", type=int, default=1, show_default=True, help="K: ranks per node")
@click.option("--strategies", default="naive,prefetch", show_default=True,
              help="comma-separated: lowerbound and any strategy of `dlbench list strategies`")
@click.option("--epochs", type=int, default=1, show_default=True, help="E: epochs")
@click.option("--local-batch", type=int, default=None, help="b: local batch (default: the workload's)")
@click.option("--accelerator", default=None,
              help="the workload's step time on this accelerator (v100|a100|h100) [default: as `dlbench run`: a100 "
                   "where published, else a measured entry; a system profile that states compute_mb_per_s uses that rate]")
@click.option("--compute-time", type=float, default=None, help="seconds per step (as `dlbench run --compute-time`)")
@click.option("--loader-threads", type=int, default=None,
              help="p_0: loader I/O threads per node, the node's PFS clients [default: the profile's staging.threads]; "
                   "to compare with a real run, the ranks per node x DataLoader workers (naive: ranks per node)")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=None, help="seed of permutations and sample sizes [default: the study's, else 0]")
@click.option("--pls-q", type=float, default=None, help="exchange fraction Q of pls [default: pls's, 0.1]")
@click.option("--option", "options", multiple=True, metavar="STRATEGY.KEY=VALUE",
              help="a strategy option as `dlbench run` takes it, e.g. staging.loader_threads=2 (repeatable)")
@click.option("--serial-write", is_flag=True, help="a loader thread copies into the buffer after (not while) fetching")
@click.option("--rules", default=None, metavar="PRESET",
              help="the model's rule set: default or thesis (the HDMLP thesis' reference simulator) [default: the "
                   "study's, else the system profile's]")
@click.option("--study", metavar="YAML", default=None, help="a study file (configs/studies/*.yaml) instead of the flags")
@click.option("--out", default="results", show_default=True, help="results root")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--checkpoint-every", type=int, default=0, show_default=True,
              help="cost `run --checkpoint-every N`'s checkpoints (the workload's model size, rank 0 writes) against "
                   "the profile's write side (calibration.shared_write): the `checkpoint` phase (0: none)")
@click.option("--checkpoint-first", type=int, default=0, show_default=True,
              help="with --checkpoint-every: the global step of the first checkpoint (0: N; a DLIO config's "
                   "checkpoint_after_epoch x steps per epoch)")
@click.option("--write-curve", default=None, metavar="CLIENTS:GB_PER_S,...",
              help="with --checkpoint-every: the shared file system's aggregate write bandwidth by writing nodes "
                   "[default: the calibration's measured rate, flat beyond its nodes]")
def simulate_cmd(system, workload, scale, samples, nodes, ranks_per_node, strategies, epochs, local_batch,
                 accelerator, compute_time, loader_threads, seed, pls_q, options, serial_write, rules, study, out,
                 fmt, checkpoint_every=0, checkpoint_first=0, write_curve=None):
    """Cost strategies' plans with the HDMLP/NoPFS performance model (no I/O): exactly the plans `dlbench run`
    builds (Strategy.plan), one results folder per row (summary.simulated = true) and a comparison table."""
    from .errors import unknown_choice
    from .simulate import load_profile, strategy_names

    opt_map = _parse_strategy_options(options)
    if study:
        ctx = click.get_current_context()
        given = [f"--{name.replace('_', '-')}" for name in _STUDY_SETS if
                 ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
        if given:
            raise ConfigError(f"--study {study}: {', '.join(given)} cannot be combined with --study (the study file "
                              f"sets {'it' if len(given) == 1 else 'them'}); edit the study, or drop --study and "
                              f"pass the flags")
        from .study.schema import load_study
        from .study.simulate import simulate_study

        _simulated_checkpoints(checkpoint_every, write_curve, study, workload, scale, samples, None, nodes,
                               ranks_per_node, checkpoint_first)   # --checkpoint-every: not with --study
        given_out = ctx.get_parameter_source("out") != click.core.ParameterSource.DEFAULT
        return simulate_study(load_study(study), study, echo=click.echo, out=out if given_out else None, fmt=fmt,
                              seed=seed, rules=rules, options=opt_map, serial_write=serial_write,
                              loader_threads=loader_threads)
    else:
        missing = [f for f, v in (("--system", system), ("--workload", workload), ("--nodes", nodes)) if v is None]
        if missing:
            raise ConfigError(f"simulate needs {', '.join(missing)} (or --study FILE)")
        from .run.setup import check_seconds
        from .simulate import from_workload
        from .workload import load as load_workload

        if compute_time is not None:
            check_seconds("--compute-time", compute_time)
        check_counts(("--nodes", nodes, 1, MAX_NODES), ("--epochs", epochs, 1, MAX_EPOCHS),
                     ("--local-batch", local_batch, 1, MAX_BATCH), ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE))
        names = [s.strip() for s in strategies.split(",") if s.strip()]
        if not names:
            raise ConfigError(f"--strategies={strategies!r}: name at least one of {', '.join(strategy_names())}")
        for s in names:
            if s not in strategy_names():
                raise unknown_choice("strategy for simulate", s, strategy_names())
        profile = load_profile(system)
        full_wl = load_workload(workload, scale=scale, samples=samples)
        # the same compute default as `dlbench run` (the workload's published a100 step time, else a measured
        # one) unless the profile states a compute throughput c (a paper's system) or a flag picks one
        wl = from_workload(full_wl, accelerator=accelerator, local_batch=local_batch, step_time_s=compute_time,
                           default_step=profile.compute_mb_per_s is None)
        per_step = wl.local_batch * nodes * ranks_per_node
        if per_step > wl.samples:
            raise ConfigError(f"--local-batch={wl.local_batch}: a global batch of {per_step:,} samples ({nodes} nodes x "
                              f"{ranks_per_node} ranks x {wl.local_batch}) is larger than the dataset ({wl.samples:,} "
                              f"samples); use a smaller batch or more samples")
        seed = 0 if seed is None else seed
    from .study.simulate import cost_world

    cost_world(names, wl, profile, nodes=nodes, ranks_per_node=ranks_per_node, epochs=epochs, seed=seed, out=out,
               fmt=fmt, echo=click.echo, pls_q=pls_q, serial_write=serial_write, options=opt_map,
               loader_threads=loader_threads, rules=rules,
               checkpoint=lambda prof: _simulated_checkpoints(checkpoint_every, write_curve, study, workload, scale,
                                                              samples, prof, nodes, ranks_per_node, checkpoint_first))


def _simulated_checkpoints(every, write_curve, study, workload, scale, samples, profile, nodes, ranks_per_node,
                           first=0):
    """simulate --checkpoint-every: steps per epoch -> the run's checkpoint schedule costed
    (``simulate.checkpoint.run_schedule``), or None."""
    if write_curve is not None and not every:
        raise ConfigError(f"--write-curve={write_curve}: only with --checkpoint-every N (N > 0)")
    if first and not every:
        raise ConfigError(f"--checkpoint-first={first}: only with --checkpoint-every N (N > 0)")
    if not every:
        return None
    check_counts(("--checkpoint-every", every, 1, 2**62), ("--checkpoint-first", first, 0, 2**62))
    if study:
        raise ConfigError(f"--checkpoint-every={every}: not with --study (pass --system/--workload/--nodes)")
    from .run.checkpoint import checkpoint_nbytes
    from .simulate.checkpoint import run_ranks, run_schedule, write_side
    from .workload import load as load_workload

    nbytes = checkpoint_nbytes(every, load_workload(workload, scale=scale, samples=samples))
    link, file_s, curve, what = write_side(profile, write_curve)
    per_rank, files = run_ranks(nbytes, nodes * ranks_per_node)

    def cost(steps_per_epoch):
        return run_schedule(per_rank, files, nodes=nodes, ranks_per_node=ranks_per_node,
                            steps_per_epoch=steps_per_epoch, every=every, first=first, curve=curve, link_gbps=link,
                            file_s=file_s, what=what)

    return cost


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
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="fp32; bf16 (autocast, CPU or CUDA); fp16 (CUDA: autocast + gradient scaler)")
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="profile file [default: results/calibrate/<workload>[-<scale>]-<device>-b<B>[-<precision>]"
                   ".compute.yaml]")
def calibrate(workload_name, scale, batch_size, steps, warmup, device, model, threads, precision, out):
    """Measure the real training-step time (torch) on this machine and write a compute profile YAML
    (use it with --compute-profile FILE, or merge it into the workload file)."""
    from .calibrate.compute import calibrate as run_calibrate
    from .calibrate.compute import check_profile_path, default_profile_path, format_profile, write_profile
    from .workload import load

    check_counts(("--steps", steps, 1, 100_000), ("--warmup", warmup, 0, 100_000), ("--threads", threads, 1, MAX_THREADS),
                 ("--batch-size", batch_size, 1, MAX_BATCH))
    wl = load(workload_name, scale=scale)
    check_profile_path(out)  # before the measurement, not after it
    if batch_size is not None:   # one synthetic batch must fit in memory (before torch starts)
        from .host import meminfo

        need, avail = batch_size * max(wl.sample_nbytes, wl.decoded_nbytes), meminfo("MemAvailable")
        if avail and need > avail // 2:
            raise ConfigError(f"--batch-size={batch_size}: one batch of {wl.name} at scale {wl.scale} is "
                              f"{need / 2**30:,.1f} GiB, over half the {avail / 2**30:,.1f} GiB available here; use at "
                              f"most {max(1, avail // 2 // max(wl.sample_nbytes, wl.decoded_nbytes)):,}")
    try:
        with _sigterm_as_interrupt():
            prof = run_calibrate(wl, batch_size=batch_size, steps=steps, warmup=warmup, device=device, model=model,
                                 threads=threads, precision=precision)
    except KeyboardInterrupt as e:
        raise _interrupted(e, "during the calibration: nothing measured was kept, no profile written") from None
    click.echo(format_profile(prof))
    path = out or default_profile_path(prof)
    try:
        path = write_profile(prof, path)
    except OSError as e:
        raise ConfigError(f"--out {path}: cannot write the profile ({e.strerror or e}); the figures above are "
                          f"not saved") from None
    click.echo(f"  wrote {path}")


@main.command("calibrate-storage")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="the shared tier to measure: a dataset folder (its files are read at random offsets), or an "
                   "S3 endpoint's s3://bucket/prefix (probe objects are written there, read, then deleted)")
@click.option("--local-dir", type=click.Path(file_okay=False), default=None,
              help="node-local storage to measure (files are written and removed there)")
@click.option("--out", "-o", required=True, type=click.Path(dir_okay=False), help="the system profile YAML to write")
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
    from pathlib import Path

    import yaml

    from .calibrate.storage import calibrate_storage
    from .comm import get_comm
    from .system import from_dict

    outp = Path(out)
    if not data_dir.startswith("s3://") and not Path(data_dir).is_dir():
        raise ConfigError(f"--data-dir {data_dir}: no such directory")
    if outp.exists() and outp.is_dir():
        raise ConfigError(f"--out {out}: is a folder; give a file path for the profile YAML")
    if not outp.parent.exists() or not os.access(outp.parent, os.W_OK):
        raise ConfigError(f"--out {out}: folder {outp.parent} does not exist or is not writable (checked before "
                          f"measuring)")
    comm = get_comm()
    with _sigterm_as_interrupt():
        prof = calibrate_storage(data_dir, comm=comm, local_dir=local_dir, request_bytes=request_bytes,
                                 max_threads=max_threads, budget_s=budget_s, repeat=repeat, cache=cache, name=name,
                                 echo=click.echo)
    if comm.rank == 0:
        from_dict(prof, where="calibrate-storage")      # the written profile loads
        tmp = outp.with_name(f".{outp.name}.tmp{os.getpid()}")
        try:
            tmp.write_text("# written by dlbench calibrate-storage; calibration: the raw figures\n"
                           + yaml.safe_dump(prof, sort_keys=False))
            os.replace(tmp, outp)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise ConfigError(f"--out {out}: cannot write the profile ({e.strerror or e})") from None
        click.echo(f"  wrote {outp} ({prof['calibration']['elapsed_s']:.1f} s of measurement); use it with "
                   f"--system {outp}")


# ===== checkpoint: large-model training checkpoints (issue 28) ================================================


@main.command("checkpoint")
@click.option("--model", "model_name", default=None, help="llama3-8b|llama3-70b|llama3-405b|llama3-1t (MLPerf Storage "
              "v3.0's sizes and parallelism), or none with --layers/--hidden/--ffn/--vocab/--heads")
@click.option("--layers", type=int, default=None)
@click.option("--hidden", type=int, default=None)
@click.option("--ffn", type=int, default=None)
@click.option("--vocab", type=int, default=None)
@click.option("--heads", type=int, default=None)
@click.option("--kv-heads", type=int, default=None)
@click.option("--tp", type=int, default=None, help="tensor parallelism [default: the model's]")
@click.option("--pp", type=int, default=None, help="pipeline parallelism [default: the model's]")
@click.option("--dp", type=int, default=None, help="data parallelism [default: the model's]")
@click.option("--zero", type=int, default=None, help="ZeRO stage 0-3 [default: the model's]")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="multiply every tensor's size (files and layout kept), e.g. 1e-4 for a laptop")
@click.option("--subset", is_flag=True, help="MLPerf's subset mode: these ranks write their share of the full job")
@click.option("--layout", type=click.Choice(["stream", "shards", "dcp"]), default="stream", show_default=True)
@click.option("--mode", type=click.Choice(["sync", "async"]), default="sync", show_default=True)
@click.option("--checkpoints", type=int, default=2, show_default=True)
@click.option("--steps", type=int, default=2, show_default=True, help="emulated compute steps before each checkpoint")
@click.option("--compute-time", type=float, default=0.05, show_default=True, help="seconds per emulated step")
@click.option("--restore", default="own,cross,reshard", show_default=True,
              help="restores of the last checkpoint, comma-separated (own, cross, reshard; '' for none)")
@click.option("--reshard", default=None, metavar="TP,PP,DP", help="the resharded restore's parallelism")
@click.option("--warm", is_flag=True, help="restore without evicting the files first (default: cold)")
@click.option("--ranks-per-node", type=int, default=None, help="cross-node restore: rank r reads rank r+K's files")
@click.option("--no-fsync", is_flag=True, help="skip every fsync (not durable: for comparison only)")
@click.option("--keep", is_flag=True, help="keep the checkpoint files")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--out", "-o", default="results", show_default=True, help="results root: <out>/checkpoint/<name>/")
@click.option("--mtbf-hours", type=float, default=None,
              help="MTBF of one accelerator [h]: adds the Young/Daly interval and goodput for the full job")
@click.option("--simulate", is_flag=True, help="no I/O: cost one checkpoint of the full job on --nodes nodes against "
              "--write-curve")
@click.option("--nodes", type=int, default=None, help="--simulate: nodes [default: ranks / --ranks-per-node]")
@click.option("--write-curve", default=None, metavar="CLIENTS:GB/S,...",
              help="--simulate: the shared file system's aggregate write bandwidth by writing nodes, e.g. 1:12,8:90,64:400")
@click.option("--link-gbps", type=float, default=25.0, show_default=True, help="--simulate: one node's link [GB/s]")
@click.option("--file-s", type=float, default=None, help="--simulate: per-file cost (create, fsync) on a rank [s] "
              "[default: 0, or the --system profile's]")
@click.option("--system", "system", default=None, metavar="PROFILE",
              help="--simulate: a calibrate-storage profile: its measured write side gives --link-gbps and --file-s")
def checkpoint_cmd(model_name, layers, hidden, ffn, vocab, heads, kv_heads, tp, pp, dp, zero, scale, subset, layout,
                   mode, checkpoints, steps, compute_time, restore, reshard, warm, ranks_per_node, no_fsync, keep,
                   seed, out, mtbf_hours, simulate, nodes, write_curve, link_gbps, file_s, system):
    """Write checkpoints of a large model as every rank would (durable, timed), then restore them."""
    from .checkpoint.bench import Config, render
    from .checkpoint.bench import run as run_checkpoint
    from .checkpoint.models import get_model
    from .comm import get_comm

    m = get_model(model_name, layers=layers, hidden=hidden, ffn=ffn, vocab=vocab, heads=heads, kv_heads=kv_heads,
                  tp=tp, pp=pp, dp=dp, zero=zero, scale=scale)
    rs = None
    if reshard:
        try:
            rs = tuple(int(x) for x in reshard.split(","))
            assert len(rs) == 3
        except (ValueError, AssertionError):
            raise ConfigError(f"--reshard={reshard!r}: give TP,PP,DP, e.g. 2,1,4") from None
    if simulate:
        from .simulate.checkpoint import cost, parse_curve, table, young_daly

        if not write_curve:
            raise ConfigError("--simulate needs --write-curve CLIENTS:GB/S,... (the shared file system's aggregate "
                              "write bandwidth by writing nodes)")
        rpn = ranks_per_node or 8
        if system:
            from .simulate.checkpoint import from_calibration
            from .system import load as load_profile

            link_cal, file_cal, what = from_calibration(load_profile(system))
            given = click.get_current_context().get_parameter_source("link_gbps")
            if given is None or given.name == "DEFAULT":
                link_gbps = link_cal
            file_s = file_cal if file_s is None else file_s
            click.echo(what)
        file_s = 0.0 if file_s is None else file_s
        row = cost(m, nodes or -(-m.world // rpn), rpn, parse_curve(write_curve), link_gbps, file_s,
                   "shards" if layout == "dcp" else layout)
        click.echo(table([row]))
        if mtbf_hours is not None:
            yd = young_daly(row["durable_s"], mtbf_hours, m.world)
            click.echo(f"Young/Daly (sync: stall = durable {row['durable_s']:.2f} s, job MTBF "
                       f"{yd['job_mtbf_s'] / 3600:.1f} h): interval {yd['interval_s'] / 60:.1f} min, goodput "
                       f"{yd['goodput']:.4f}")
        return
    cfg = Config(m, layout=layout, mode=mode, checkpoints=checkpoints, steps=steps, compute_time=compute_time,
                 out=out, subset=subset, fsync=not no_fsync, seed=seed,
                 restore=tuple(x for x in restore.split(",") if x), reshard=rs, cold=not warm,
                 ranks_per_node=ranks_per_node, keep=keep)
    comm = get_comm(ranks_per_node)
    with _sigterm_as_interrupt():
        res = run_checkpoint(cfg, comm)
    if res is not None:
        if mtbf_hours is not None:
            from .simulate.checkpoint import young_daly

            yd = young_daly(res["summary"]["stall_s"]["mean"], mtbf_hours, m.world)
            click.echo(f"Young/Daly for the full job ({m.world} accelerators, MTBF {mtbf_hours:g} h each; C = the "
                       f"measured mean stall {res['summary']['stall_s']['mean']:.4f} s): interval "
                       f"{yd['interval_s']:.1f} s, goodput {yd['goodput']:.4f}")
        click.echo(render(res))


if __name__ == "__main__":  # pragma: no cover
    main()
