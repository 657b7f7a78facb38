"""``dlbench simulate``: parse the flags (or a --study file), build a validated ``SimulateConfig``, cost its
rows (``simulate.command.run``), print the comparison table and the N/A rows."""

from __future__ import annotations

import click

from ..errors import ConfigError
from . import options


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
               "batch_size", "local_batch", "accelerator", "compute_time", "pls_q")


@click.command("simulate")
@options.system(default=None, help="system profile: a name in configs/systems or a YAML path")
@options.workload(metavar="W", help="built-in workload name or YAML path (sample sizes and batch)")
@options.scale(default="full", help="workload preset: tiny, small, full")
@options.samples(help="override the number of samples F")
@click.option("--nodes", type=int, default=None, help="N: nodes")
@options.ranks_per_node(default=1, help="K: ranks per node")
@click.option("--strategies", default="naive,prefetch", show_default=True,
              help="comma-separated: lowerbound and any strategy of `dlbench list strategies`")
@options.epochs(default=1, help="E: epochs")
@options.batch_size(help="b: local batch per rank [default: the workload's]", deprecated_alias="--local-batch")
@click.option("--accelerator", default=None,
              help="the workload's step time on this accelerator (v100|a100|h100) [default: as `dlbench run`: a100 "
                   "where published, else a measured entry; a system profile that states compute_mb_per_s uses that rate]")
@click.option("--compute-time", type=float, default=None, help="seconds per step (as `dlbench run --compute-time`)")
@click.option("--loader-threads", type=int, default=None,
              help="p_0: loader I/O threads per node, the node's PFS clients [default: the profile's staging.threads]; "
                   "to compare with a real run, the ranks per node x DataLoader workers (naive: ranks per node)")
@options.seed(default=None, help="seed of permutations and sample sizes [default: the study's, else 0]")
@click.option("--pls-q", type=float, default=None, help="exchange fraction Q of pls [default: pls's, 0.1]")
@click.option("--option", "options", multiple=True, metavar="STRATEGY.KEY=VALUE",
              help="a strategy option as `dlbench run` takes it, e.g. staging.loader_threads=2 (repeatable)")
@click.option("--serial-write", is_flag=True, help="a loader thread copies into the buffer after (not while) fetching")
@click.option("--rules", default=None, metavar="PRESET",
              help="the model's rule set: default or thesis (the HDMLP thesis' reference simulator) [default: the "
                   "study's, else the system profile's]")
@click.option("--study", metavar="YAML", default=None, help="a study file (configs/studies/*.yaml) instead of the flags")
@options.out(help="results root")
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
def simulate_cmd(system, workload, scale, samples, nodes, ranks_per_node, strategies, epochs, batch_size,
                 accelerator, compute_time, loader_threads, seed, pls_q, options, serial_write, rules, study, out,
                 fmt, checkpoint_every=0, checkpoint_first=0, write_curve=None):
    """Cost strategies' plans with the HDMLP/NoPFS performance model (no I/O): exactly the plans `dlbench run`
    builds (Strategy.plan), one results folder per row (summary.simulated = true) and a comparison table."""
    from ..simulate.command import SimulateConfig, print_result
    from ..simulate.command import run as run_simulate

    opt_map = _parse_strategy_options(options)
    if study:
        from ..simulate.checkpoint import simulated_checkpoints

        simulated_checkpoints(checkpoint_every, write_curve, study=study, workload_args=None, profile=None, nodes=0,
                              ranks_per_node=1, first=checkpoint_first)   # --checkpoint-every: not with --study
        return _from_study(study, seed=seed, rules=rules, options=opt_map, serial_write=serial_write,
                           loader_threads=loader_threads, out=out, fmt=fmt)
    cfg = SimulateConfig.from_flags(system=system, workload=workload, scale=scale, samples=samples, nodes=nodes,
                                    ranks_per_node=ranks_per_node, strategies=strategies, epochs=epochs,
                                    batch_size=batch_size, accelerator=accelerator, compute_time=compute_time,
                                    seed=seed, rules=rules, options=opt_map, pls_q=pls_q,
                                    loader_threads=loader_threads, serial_write=serial_write, out=out,
                                    checkpoint_every=checkpoint_every, checkpoint_first=checkpoint_first,
                                    write_curve=write_curve)
    print_result(run_simulate(cfg), echo=click.echo, fmt=fmt, reference=cfg.reference)


def _from_study(study, *, out, **overrides):
    """``simulate --study FILE``: the study's one simulating driver (``study.simulate.simulate_study``, as
    ``dlbench study FILE --simulate``); a flag the study sets, given too, is an error."""
    from ..study.schema import load_study
    from ..study.simulate import simulate_study

    ctx = click.get_current_context()
    given = [f"--{name.replace('_', '-')}" for name in _STUDY_SETS if
             ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)]
    if given:
        raise ConfigError(f"--study {study}: {', '.join(given)} cannot be combined with --study (the study file "
                          f"sets {'it' if len(given) == 1 else 'them'}); edit the study, or drop --study and "
                          f"pass the flags")
    given_out = ctx.get_parameter_source("out") != click.core.ParameterSource.DEFAULT
    return simulate_study(load_study(study), study, echo=click.echo, out=out if given_out else None, **overrides)
