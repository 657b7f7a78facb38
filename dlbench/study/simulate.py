"""The simulating driver of studies: ``dlbench study FILE --simulate`` and ``dlbench simulate --study FILE`` both
call ``simulate_study`` with the same parsed ``Study`` (``study.schema``), so they print and write the same.
A model study (``nodes: N``) is one world of rows (a ``simulate.command.SimulateConfig``, costed and printed as
`dlbench simulate`'s flags are);
a measured study's ``simulate:`` part is every node count x workload x strategy (``run_simulate``). Every row
goes through the performance model (``dlbench.simulate.simulate``) into a results folder marked simulated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import from_mapping, to_dict
from ..errors import CapacityError, ConfigError
from ..report import run_label
from ..simulate.command import check_overrides
from ..simulate.core import SimWorkload
from .schema import InlineWorkload, Study, samples_for, simulate_strategies

Echo = Callable[..., Any]   # click.echo: (line, err=False)


def simulate_study(st: Study, where: str, *, echo: Echo, out: str | Path | None = None, fmt: str = "table",
                   epochs: int | None = None, seed: int | None = None, rules=None, options: dict | None = None,
                   serial_write: bool = False, loader_threads: int | None = None) -> None:
    """Cost the study ``where`` names and print its table (``echo``): a model study's rows, or a measured
    study's simulate part. ``out`` [default: the study's results root], ``epochs``, ``seed``, ``rules``,
    ``options`` ({strategy: {key: value}}), ``serial_write`` and ``loader_threads`` override the study's.
    Rows the model cannot cost are named and end in a CapacityError (the others are written)."""
    if st.is_model:
        from ..simulate import load_profile
        from ..simulate.command import SimulateConfig, print_result
        from ..simulate.command import run as run_world

        cfg = SimulateConfig(names=st.entries(), profile=load_profile(st.system), wl=workload_of(st, where=where),
                             nodes=int(st.nodes or 0), ranks_per_node=st.ranks_per_node, epochs=epochs or st.epochs,
                             seed=st.seed if seed is None else seed, options=dict(options or {}),
                             loader_threads=loader_threads, serial_write=serial_write,
                             rules=st.rules if rules is None else rules, out=str(out or st.out), study=where,
                             reference=dict(st.published_runtime_s) or None,
                             extra={"study": where, "study_config": st.as_config()})
        print_result(run_world(cfg), echo=echo, fmt=fmt, reference=cfg.reference)
        return
    if st.sweep is None and st.simulate is None:
        raise ConfigError(f"--simulate: study {st.name} has no sweep: or simulate: part (see "
                          f"configs/studies/scaling-weak.yaml)")
    from ..report import compare

    left: list[str] = []
    res = run_simulate(st, out=out, epochs=epochs, echo=echo, left_out=left, seed=seed, rules=rules,
                       options=options, serial_write=serial_write, loader_threads=loader_threads)
    if res:
        echo(compare(res, fmt=fmt))
    if left:   # like simulate's N/A rows: the table holds what could be costed, the exit code says the rest
        raise CapacityError(f"study {st.name} --simulate: {len(left)} point(s) could not be costed (left out "
                            f"above); " + ("the others are in the table" if res else "nothing was costed"))


def workload_of(st: Study, where: str = "") -> SimWorkload:
    """A model study's workload: inline (``InlineWorkload``) or ``{builtin: NAME, ...}``."""
    from ..simulate.core import from_workload

    if not isinstance(st.workload, dict):
        raise ConfigError(f"workload={st.workload!r} (in {where}): a model study's workload is a mapping")
    w = dict(st.workload)
    W = int(st.nodes or 1) * st.ranks_per_node
    if "builtin" in w:
        from ..workload import load as load_workload

        extra = set(w) - {"builtin", "scale", "accelerator", "local_batch"}
        if extra:
            raise ConfigError(f"workload.{sorted(extra)[0]} (in {where}): allowed with builtin: scale, accelerator, local_batch")
        wl = load_workload(str(w["builtin"]), scale=w.get("scale", "full"))
        return from_workload(wl, accelerator=w.get("accelerator"), local_batch=w.get("local_batch"))
    iw = from_mapping(InlineWorkload, w, where=where, prefix="workload.")
    if (iw.global_batch is None) == (iw.local_batch is None):
        raise ConfigError(f"workload (in {where}): give exactly one of global_batch, local_batch")
    if iw.global_batch is not None:
        if iw.global_batch % W:
            raise ConfigError(f"workload.global_batch={iw.global_batch} (in {where}): must be a multiple of "
                              f"the {W} ranks")
        b = iw.global_batch // W
    else:
        b = int(iw.local_batch or 0)
    d = iw.size
    return SimWorkload(iw.name, iw.samples, b, d.kind, d.mean_bytes, d.std_bytes, d.min_bytes, d.max_bytes)


def simulate_rows(st: Study, pls_q: float) -> list[tuple[str, str, dict]]:
    """(label, strategy, options) a measured study's simulate part costs: its strategies with their defaults,
    else every measured run with its own options (the same plans the runs executed). Labels are
    ``report.run_label``'s, as the measured rows' (``pls Q=0.3``), so compare and plot pair them up."""
    sp = st.simulate
    if sp is not None and sp.strategies:
        from ..simulate.core import shorthand_options

        short = shorthand_options({"pls_q": pls_q}, sp.strategies)
        entries = [(s, short.get(s, {})) for s in sp.strategies]
    else:
        entries = [(r.strategy, dict(r.options)) for r in st.runs]
    rows, seen = [], set()
    for strat, opts in entries:
        label = run_label({"config": {"strategy": strat, "options": opts}})
        if label not in seen:
            seen.add(label)
            rows.append((label, strat, opts))
    return rows


def _pls_q(st: Study) -> float:
    sp = st.simulate
    if sp is not None and sp.pls_q is not None:
        return sp.pls_q
    from .. import strategies

    q = [r.options.get(strategies.get(r.strategy).shorthands["pls_q"]) for r in st.runs
         if r.strategy in strategies.names() and "pls_q" in strategies.get(r.strategy).shorthands]
    return float(q[0]) if q and q[0] is not None else 0.1


def run_simulate(st: Study, *, out=None, epochs=None, echo=None, left_out: list | None = None, seed=None,
                 rules=None, options: dict | None = None, serial_write: bool = False,
                 loader_threads: int | None = None) -> list[str]:
    """A measured study's ``simulate`` part: every node count x workload x strategy through the performance
    model, one results folder each, marked simulated, in the study's results root. A point the model refuses
    (a strategy's data does not fit the node, F/W below the local batch) is named in one line and left out
    (and its line appended to ``left_out``). The keyword overrides are ``simulate_study``'s."""
    from ..simulate import from_workload, load_profile, simulate
    from ..simulate.core import check_size, prologue_rows
    from ..simulate.output import write_simulated_run
    from ..workload import load as load_workload

    sp = st.simulate
    if sp is None:
        raise ConfigError(f"study {st.name}: no simulate: part (add simulate: {{nodes: [1, 2, ..., 1024]}})")
    sw = st.sweep
    rpn = sp.ranks_per_node or (sw.ranks_per_node if sw is not None and sw.nodes else 1)
    profile = load_profile(sp.system or st.system)
    pls_q = _pls_q(st)
    rows = simulate_rows(st, pls_q)
    opt_map = dict(options or {})
    check_overrides({r[1] for r in rows}, opt_map, None, loader_threads)
    seed = st.seed if seed is None else seed
    wls = list(sw.workloads) if sw is not None and sw.workloads else [str(st.workload)]
    E = epochs or st.epochs
    for wname in wls:   # every world the model can cost here (its prologue included), before any row is written
        for n in sp.nodes:
            base = load_workload(wname, scale=st.scale, samples=samples_for(st, n * rpn))
            b = base.local_batch(st.batch_size)
            if base.samples >= n * rpn * b:
                swl = from_workload(base, local_batch=b, step_time_s=st.compute_time_s)
                check_size(swl, n, rpn, prologue=prologue_rows(rows, swl, n, rpn, opt_map or None))
    dirs = []
    for wname in wls:
        for n in sp.nodes:
            W = n * rpn
            base = load_workload(wname, scale=st.scale, samples=samples_for(st, W))
            b = base.local_batch(st.batch_size)
            if base.samples < W * b:
                _left(f"simulate {wname} on {n} node(s): left out, F={base.samples} samples give fewer than "
                      f"one local batch of {b} per rank on {W} ranks", echo, left_out)
                continue
            swl = from_workload(base, local_batch=b, step_time_s=st.compute_time_s)
            for label, strat, opts in rows:
                try:
                    res = simulate([(label, strat, opts)], wl=swl, profile=profile, nodes=n, ranks_per_node=rpn,
                                   epochs=E, seed=seed, rules=rules, options=opt_map, loader_threads=loader_threads,
                                   write_overlap=False if serial_write else None)
                except CapacityError as exc:
                    _left(f"simulate {wname} {label} on {n} node(s): left out: {exc}", echo, left_out)
                    continue
                config = {"command": "simulate", "study": st.name, "system": to_dict(profile), "workload": to_dict(swl),
                          "strategy": strat, "label": label, "options": opts, "nodes": n, "ranks_per_node": rpn,
                          "epochs": E, "seed": seed, "rules": res[label]["model_rules"],
                          "write_overlap": res[label]["model_rules"]["write"] == "overlap",
                          "scaling": sw.scaling if sw is not None else None}
                dirs.append(str(write_simulated_run(out or st.out, config=config, summary=res[label])))
        if echo:
            echo(f"simulated {wname}: {len(sp.nodes)} node counts x {len(simulate_strategies(st))} strategies")
    return dirs


def _left(why: str, echo, left_out: list | None) -> None:
    if echo:
        echo(why)
    if left_out is not None:
        left_out.append(why)
