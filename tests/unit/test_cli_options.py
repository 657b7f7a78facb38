"""The CLI's shared options are one option each (dlbench/cli/options.py): the same flag, short flag and
parameter name on every command that takes it, and one batch option whose default is resolved in one place."""

import click


def _commands():
    from dlbench.cli import main

    def walk(group, prefix):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from walk(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd

    return dict(walk(main, ""))


def test_one_batch_option_on_every_command():
    """Every command with a batch option takes it as --batch-size/-b (parameter batch_size); simulate's
    --local-batch is only a hidden alias."""
    seen = {}
    for name, cmd in _commands().items():
        for p in cmd.params:
            if isinstance(p, click.Option) and any(o.endswith(("batch-size", "local-batch", "-batch")) and
                                                   "last" not in o for o in p.opts):
                if p.hidden:
                    assert (name, p.opts) == ("simulate", ["--local-batch"]), (name, p.opts)
                    continue
                assert p.name == "batch_size" and sorted(p.opts) == ["--batch-size", "-b"], (name, p.opts)
                seen[name] = p
    assert {"run", "simulate", "calibrate"} <= set(seen), sorted(seen)


def test_shared_options_have_one_spelling():
    """A shared option has the same flags and parameter name wherever it appears."""
    spelling = {"--workload": (["--workload", "-w"], None), "--epochs": (["--epochs", "-e"], "epochs"),
                "--seed": (["--seed"], "seed"), "--ranks-per-node": (["--ranks-per-node"], "ranks_per_node"),
                "--system": (["--system"], "system"), "--samples": (["--samples"], "samples"),
                "--scale": (["--scale"], "scale"), "--data-dir": (["--data-dir"], None), "--out": (["--out", "-o"], None)}
    count = {}
    for name, cmd in _commands().items():
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            for flag, (opts, param) in spelling.items():
                if flag in p.opts:
                    assert sorted(p.opts) == sorted(opts), (name, flag, p.opts)
                    assert param is None or p.name == param, (name, flag, p.name)
                    count[flag] = count.get(flag, 0) + 1
    assert all(count.get(f, 0) >= 2 for f in spelling), count


def test_the_local_batch_default_is_the_workload_s():
    from dlbench.simulate import from_workload
    from dlbench.workload import load

    wl = load("cosmoflow", scale="tiny")
    assert wl.local_batch() == wl.local_batch(None) == wl.batch_size and wl.local_batch(3) == 3
    assert from_workload(wl).local_batch == wl.batch_size and from_workload(wl, local_batch=3).local_batch == 3
