"""The results commands: ``report``, ``compare``, ``plot`` and ``import darshan|timelogger|dftracer|dlio-config``
(a real application's log as a results folder)."""

from __future__ import annotations

import click

from ..errors import ConfigError, DlbenchError
from . import options


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False), required=False)
@click.option("--explain", is_flag=True, help="print what every summary number means (measured and simulated alike)")
def report_cmd(run_dir, explain):
    """Re-render a run's summary from its results folder (--explain: the glossary of its numbers)."""
    from .. import report, results
    from ..provenance import render

    if explain:
        from ..metrics import GLOSSARY

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


@click.command("compare")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def compare_cmd(run_dirs, fmt):
    """Put runs side by side: strategy, ranks, epoch time, exposed I/O share, read share, AU, MB/s.
    A folder without run.json (a results root) stands for every run below it."""
    from .. import report
    from ..results import find_run_dirs

    dirs = [str(d) for d in find_run_dirs(run_dirs, dedup=False)]
    click.echo(report.compare(dirs, fmt=fmt))
    from ..provenance import differences
    from ..results import read_run

    docs = []
    for d in dirs:
        try:
            docs.append(read_run(d))
        except DlbenchError:
            pass  # compare has already shown the unreadable run in its table
    for line in differences(docs):
        click.echo(line, err=True)


@click.command("plot")
@click.argument("run_dirs", metavar="RUN_DIR...", nargs=-1, required=True, type=click.Path(exists=True))
@options.out(default="plots", param="out_dir", type=click.Path(file_okay=False),
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
    from ..plots import make_plots

    if epoch is not None and epoch < 0:
        raise ConfigError(f"--epoch={epoch}: must be >= 0")
    files = make_plots(list(run_dirs), out_dir, kinds=kinds, epoch=epoch, x=x_axis,
                       echo=lambda m: click.echo(f"dlbench: {m}", err=True))
    for f in files:
        click.echo(str(f))


@click.group("import")
def import_group():
    """Turn a real application's log into a results folder that report/compare/plot read like a run."""


def _imported(doc, out):
    from .. import importers, report, results

    rd = importers.write_imported(doc, out)
    click.echo(report.render_summary(results.read_run(rd)))
    for w in doc.get("warnings") or ():
        click.echo(f"dlbench: warning: {w}", err=True)
    click.echo(f"results: {rd}")


@import_group.command("darshan")
@click.argument("log", metavar="LOG", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="application name for the folder [default: the log's executable]")
@options.out(help="results root: <out>/<name>/imported-darshan/<UTC stamp>/")
def import_darshan_cmd(log, name, out):
    """A Darshan log (PyDarshan): POSIX/H5D counters, read time and bytes, job run time."""
    from .. import importers

    _imported(importers.darshan_run(log, name=name), out)


@import_group.command("timelogger")
@click.argument("csv_path", metavar="CSV", type=click.Path(dir_okay=False))
@click.option("--name", default=None, help="application name for the folder [default: the file's name]")
@click.option("--nodes", type=int, default=None, help="divide sums by this many nodes [default: distinct ranks]")
@click.option("--fold-setup/--no-fold-setup", default=True, show_default=True,
              help="count epoch -1 (set-up) rows as epoch 0, as NERSC's analysis does")
@options.out(help="results root: <out>/<name>/imported-timelogger/<UTC stamp>/")
@click.option("--strict", is_flag=True,
              help="refuse the file at its first garbled row [default: skip and count them, with a warning]")
def import_timelogger_cmd(csv_path, name, nodes, fold_setup, out, strict):
    """A TimeLogger CSV (NERSC DL-Parallel-IO; plain or .gz): per-node phase sums, epoch times, exposed I/O."""
    from .. import importers

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
@options.out(help="results root: <out>/<name>/imported-dftracer/<UTC stamp>/")
def import_dftracer_cmd(traces, name, tiers, strict, hdf5_split, out):
    """dftracer traces (.pfw/.pfw.gz files, or folders of them): per-file, per-rank and per-class POSIX counters,
    bytes by tier, read intervals."""
    from .. import importers_dftracer as D
    from .. import report, results

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
@options.out(default=None, param="out_path", required=True, type=click.Path(dir_okay=False),
             help="the dlbench workload YAML to write")
@click.option("--name", default=None, help="workload name [default: the config's model.name]")
@click.option("--allow-unsupported", is_flag=True,
              help="write it anyway, listing the DLIO settings dlbench does not emulate in comments")
def import_dlio_cmd(config, overrides, out_path, name, allow_unsupported):
    """A DLIO workload YAML (with DLIO's Hydra overrides) as a dlbench workload YAML; the run flags that
    reproduce DLIO's run (epochs, compute time, loader) are in its header."""
    from .. import dlio

    t = dlio.load(config, overrides, allow_unsupported=allow_unsupported, name=name)
    if t.unsupported:
        click.echo(f"dlbench: warning: DLIO settings not emulated: {'; '.join(t.unsupported)}", err=True)
    dlio.write_text_atomic(out_path, dlio.workload_yaml(t))
    click.echo(f"workload: {out_path}")
    click.echo(f"run: dlbench run --workload {out_path} --scale full {' '.join(t.run_flags())}")
