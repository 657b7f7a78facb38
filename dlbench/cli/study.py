"""The study commands: ``sustain`` (MLPerf Storage's most accelerators at AU >= the threshold), ``study`` (a
run or scaling study, measured or ``--simulate``d) and ``jobscript`` (a scaling study's batch scripts)."""

from __future__ import annotations

import click

from ..config import MAX_EPOCHS, MAX_NODES, MAX_RANKS_PER_NODE, MAX_SEED, check_counts
from . import options


@click.command("sustain")
@options.workload(required=True, help="workload name or YAML (its au_threshold is the rule)")
@click.option("--accelerator", required=True, help="whose step time the emulated accelerators take: v100|a100|h100")
@click.option("--strategy", "-s", "strategies", multiple=True, default=("naive",), show_default=True,
              help="loading strategy (repeatable: one answer per strategy)")
@options.system(help="system profile of the measured runs; its shared tier is what the model fits to them")
@click.option("--measure-ranks", type=int, default=2, show_default=True,
              help="measure 1..K ranks on this machine (mpiexec -n k)")
@options.scale(help="preset of the measured runs' dataset [default: the workload's tiny]")
@click.option("--model-scale", default="full", show_default=True, help="preset the modelled worlds use")
@options.epochs(default=2)
@options.ranks_per_node(help="accelerators per node of the modelled worlds "
                                                                 "[default: --measure-ranks]")
@click.option("--max-accelerators", type=int, default=4096, show_default=True)
@options.data_dir(help="dataset of the measured runs")
@options.seed(bounded=False)
@options.out(help="results root of the measured runs")
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

    from .. import strategies as registry
    from .. import sustain

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
                           checkpoint=sustain.checkpoint_arg(checkpoint_mtbf_hours, checkpoint_gbps))
    click.echo(json.dumps(rows, indent=1) if as_json else sustain.render(rows))



@click.command("study")
@click.argument("study_file", metavar="STUDY", type=click.Path(dir_okay=False))
@options.data_dir(help="the dataset (generated there if missing) [default: $DLBENCH_DATA_DIR/<workload>-study-seed<seed>]")
@click.option("--local-dir", type=click.Path(file_okay=False), default=None, help="node-local storage root")
@options.out(default=None, help="results root [default: the study's, else results]")
@options.ranks_per_node(help="emulate nodes of K ranks on one machine")
@options.epochs(default=None, help="override the study's epochs")
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
    from ..comm import get_comm
    from ..study.schema import load_study

    st = load_study(study_file)
    check_counts(("--epochs", epochs, 1, MAX_EPOCHS), ("--ranks-per-node", ranks_per_node, 1, MAX_RANKS_PER_NODE))
    if simulate_part:
        from ..study.simulate import simulate_study

        return simulate_study(st, study_file, out=out, epochs=epochs, fmt=fmt, echo=click.echo)
    from ..study.measure import measure_study

    measure_study(st, get_comm(ranks_per_node=ranks_per_node), data_dir=data_dir, local_dir=local_dir, out=out,
                  epochs=epochs, generate_only=generate_only, fmt=fmt, echo=click.echo)


@click.command("jobscript")
@click.argument("study_file", metavar="STUDY", type=click.Path(dir_okay=False))
@click.option("--scheduler", required=True, type=click.Choice(["slurm", "pbs", "flux"]), help="batch system")
@click.option("--nodes-list", default=None, help="node counts, comma-separated [default: the study's sweep]")
@options.ranks_per_node(help="tasks per node [default: the sweep's, else 1]")
@options.data_dir(help="shared dataset root on the cluster's file system [default: $DLBENCH_DATA_DIR/sweeps]")
@click.option("--results", type=click.Path(file_okay=False), default=None,
              help="the one results root every job writes into [default: the study's out]")
@click.option("--time", "walltime", default="01:00:00", show_default=True, help="wall time per job (HH:MM:SS)")
@click.option("--account", default=None, help="account / project / bank (a commented line when not given)")
@click.option("--partition", default=None, help="partition / queue (a commented line when not given)")
@click.option("--env", "env_line", default=None,
              help="the line that loads the environment [default: activate this Python's venv]")
@click.option("--dlbench", "dlbench_cmd", default="dlbench", show_default=True, help="how the jobs call dlbench")
@click.option("--generate-nodes", type=int, default=1, show_default=True, help="nodes of the generate job")
@options.out(default="jobs", param="out_dir", type=click.Path(file_okay=False),
             help="folder for the scripts")
def jobscript_cmd(study_file, scheduler, nodes_list, ranks_per_node, data_dir, results, walltime, account, partition,
                  env_line, dlbench_cmd, generate_nodes, out_dir):
    """Batch scripts for a scaling study: one job per node count (srun / mpiexec -ppn / flux run), a
    generate job, and submit-all.sh; every job shares --data-dir and writes into one results root."""
    from ..jobscript import parse_nodes_list, write_jobscripts

    files = write_jobscripts(study_file, out_dir, scheduler=scheduler,
                             nodes_list=parse_nodes_list(nodes_list) if nodes_list else None,
                             ranks_per_node=ranks_per_node, data_dir=data_dir, results=results, time=walltime,
                             account=account, partition=partition, env_line=env_line, dlbench=dlbench_cmd,
                             generate_nodes=generate_nodes)
    for f in files:
        click.echo(str(f))
    click.echo(f"submit: {files[-1]}")
