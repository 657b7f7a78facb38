"""``dlbench checkpoint``: large-model training checkpoints written and restored as every rank would (or,
``--simulate``, costed against a write curve)."""

from __future__ import annotations

import click
from click.core import ParameterSource

from . import options
from .group import sigterm_as_interrupt


@click.command("checkpoint")
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
@options.ranks_per_node(help="cross-node restore: rank r reads rank r+K's files")
@click.option("--no-fsync", is_flag=True, help="skip every fsync (not durable: for comparison only)")
@click.option("--keep", is_flag=True, help="keep the checkpoint files")
@options.seed()
@options.out(help="results root: <out>/checkpoint/<name>/")
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
@options.system(default=None, help="--simulate: a calibrate-storage profile: its measured write side gives --link-gbps and --file-s")
def checkpoint_cmd(model_name, layers, hidden, ffn, vocab, heads, kv_heads, tp, pp, dp, zero, scale, subset, layout,
                   mode, checkpoints, steps, compute_time, restore, reshard, warm, ranks_per_node, no_fsync, keep,
                   seed, out, mtbf_hours, simulate, nodes, write_curve, link_gbps, file_s, system):
    """Write checkpoints of a large model as every rank would (durable, timed), then restore them."""
    from ..checkpoint.bench import Config, parse_reshard, render
    from ..checkpoint.bench import run as run_checkpoint
    from ..checkpoint.models import get_model
    from ..comm import get_comm

    m = get_model(model_name, layers=layers, hidden=hidden, ffn=ffn, vocab=vocab, heads=heads, kv_heads=kv_heads,
                  tp=tp, pp=pp, dp=dp, zero=zero, scale=scale)
    rs = parse_reshard(reshard)
    if simulate:
        from ..simulate.checkpoint import simulate_checkpoint

        link_given = click.get_current_context().get_parameter_source("link_gbps")
        for line in simulate_checkpoint(m, nodes=nodes, ranks_per_node=ranks_per_node, write_curve=write_curve,
                                        link_gbps=link_gbps, link_given=link_given not in (None, ParameterSource.DEFAULT),
                                        file_s=file_s, system=system, layout=layout, mtbf_hours=mtbf_hours):
            click.echo(line)
        return
    cfg = Config(m, layout=layout, mode=mode, checkpoints=checkpoints, steps=steps, compute_time=compute_time,
                 out=out, subset=subset, fsync=not no_fsync, seed=seed,
                 restore=tuple(x for x in restore.split(",") if x), reshard=rs, cold=not warm,
                 ranks_per_node=ranks_per_node, keep=keep)
    comm = get_comm(ranks_per_node)
    with sigterm_as_interrupt():
        res = run_checkpoint(cfg, comm)
    if res is not None:
        if mtbf_hours is not None:
            from ..simulate.checkpoint import young_daly_line

            click.echo(young_daly_line(res, mtbf_hours, m.world))
        click.echo(render(res))
