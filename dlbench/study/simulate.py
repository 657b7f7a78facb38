"""The simulating driver of studies: ``dlbench study FILE --simulate`` and ``dlbench simulate --study FILE`` both
call ``simulate_study`` with the same parsed ``Study`` (``study.schema``), so they print and write the same.
A model study (``nodes: N``) is one world of rows (``cost_world``, which `dlbench simulate`'s flags use too);
a measured study's ``simulate:`` part is every node count x workload x strategy (``run_simulate``). Every row
goes through the performance model (``dlbench.simulate.simulate``) into a results folder marked simulated."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import from_mapping, to_dict
from ..errors import CapacityError, ConfigError, DlbenchError, Interrupted
from ..report import run_label
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

        reference = dict(st.published_runtime_s) or None
        cost_world(st.entries(), workload_of(st, where=where), load_profile(st.system), nodes=int(st.nodes or 0),
                   ranks_per_node=st.ranks_per_node, epochs=epochs or st.epochs,
                   seed=st.seed if seed is None else seed, out=out or st.out, fmt=fmt, echo=echo,
                   options=options, serial_write=serial_write, loader_threads=loader_threads,
                   rules=st.rules if rules is None else rules, reference=reference,
                   config_extra={"study": where, "study_config": st.as_config()})
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


def check_overrides(rows: set[str], options: dict, pls_q: float | None, loader_threads: int | None) -> None:
    """simulate's ``--option``, ``--pls-q`` and ``--loader-threads`` against the rows costed here."""
    for s in options:
        if s not in rows:
            raise ConfigError(f"--option {s}.…: strategy {s} is not simulated here (rows: {', '.join(sorted(rows))}); "
                              f"add it to --strategies or drop the option")
    if pls_q is not None:
        import math

        if not math.isfinite(pls_q) or not 0 <= pls_q <= 1:
            raise ConfigError(f"--pls-q={pls_q}: must be from 0 to 1")
        from .. import strategies as _st

        owners = [n for n in _st.names() if "pls_q" in _st.get(n).shorthands]
        if not rows & set(owners):
            raise ConfigError(f"--pls-q={pls_q}: {' or '.join(owners)} is not simulated here; add {' or '.join(owners)} "
                              f"to --strategies or drop --pls-q")
    if loader_threads is not None and not 1 <= loader_threads <= 1024:
        raise ConfigError(f"--loader-threads={loader_threads}: must be from 1 to 1024")


def cost_world(names: list, wl: SimWorkload, profile, *, nodes: int, ranks_per_node: int, epochs: int, seed: int,
               out: str | Path, fmt: str, echo: Echo, pls_q: float | None = None, serial_write: bool = False,
               options: dict | None = None, loader_threads: int | None = None, rules=None,
               checkpoint: Callable[[Any], Any] | None = None,
               reference: dict | None = None, config_extra: dict | None = None) -> list[Path]:
    """Cost one world's rows (``names``: strategy names or (label, strategy, options, model) rows), write one
    results folder per row (each whole or not at all; a full disk part-way removes them all), print the
    comparison table, the plans' warnings and the N/A rows; N/A rows end in a CapacityError. Returns the
    folders. ``checkpoint(profile)``: simulate --checkpoint-every's schedule costing (after the size check). SIGINT/SIGTERM end it with an ``Interrupted`` that says what was kept."""
    import dataclasses

    from ..results import remove_run_dir
    from ..simulate import simulate
    from ..simulate.core import check_size, prologue_rows
    from ..simulate.output import compare_table, write_simulated_run
    from ..stop import StopSignals, deferred

    opt_map = dict(options or {})
    check_overrides({x if isinstance(x, str) else x[1] for x in names}, opt_map, pls_q, loader_threads)
    if loader_threads is not None:
        profile = dataclasses.replace(profile, staging=dataclasses.replace(profile.staging, threads=loader_threads))
    check_size(wl, nodes, ranks_per_node, prologue=prologue_rows(names, wl, nodes, ranks_per_node, opt_map,
                                                                profile=profile, seed=seed))
    ckpt = checkpoint(profile) if checkpoint is not None else None
    dirs: list[Path] = []
    results: dict = {}
    na: dict = {}
    try:
        with StopSignals():
            results = simulate(names, wl=wl, profile=profile, nodes=nodes, ranks_per_node=ranks_per_node,
                               epochs=epochs, seed=seed, pls_q=pls_q, write_overlap=False if serial_write else None,
                               options=opt_map, loader_threads=loader_threads, rules=rules, na_rows=True,
                               checkpoint=ckpt)
            na = {k: v for k, v in results.items() if "not_applicable" in v}
            for label, summary in results.items():
                if label in na:
                    continue
                config = {"command": "simulate", "system": to_dict(profile), "workload": to_dict(wl),
                          "strategy": summary["strategy"], "label": label, "options": summary.get("options", {}),
                          "nodes": nodes, "ranks_per_node": ranks_per_node, "epochs": epochs, "seed": seed,
                          "loader_threads": loader_threads, "rules": summary["model_rules"],
                          "write_overlap": summary["model_rules"]["write"] == "overlap", **(config_extra or {})}
                with deferred():  # a folder is written whole or not at all
                    dirs.append(write_simulated_run(out, config=config, summary=summary))
    except DlbenchError as e:   # a full disk part-way: the folders written before it go too (nothing partial)
        from ..errors import OutputError

        if isinstance(e, OutputError):
            for d in dirs:
                remove_run_dir(d)
        raise
    except KeyboardInterrupt as e:
        kept = f"{len(dirs)} of {len(results)} result folders written under {out} (each complete)" if results \
            else "nothing written (the model had not finished)"
        sig = getattr(e, "signal_name", "SIGINT")
        raise Interrupted(f"interrupted by {sig} during simulate: {kept}",
                          exit_code=143 if sig == "SIGTERM" else 130) from None
    if dirs:
        echo(compare_table(dirs, fmt=fmt, reference_s=reference))
    for label, v in results.items():   # what a plan changed about the run (e.g. staging beyond capacity)
        if v.get("plan_warning"):
            echo(f"dlbench: warning: {label}: {v['plan_warning']}", err=True)
    for label, v in na.items():
        echo(f"{label}: N/A ({v['not_applicable']})")
    if na:
        raise CapacityError(f"{len(na)} of {len(results)} rows could not be costed (N/A above; the others are "
                            f"complete)")
    return dirs


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
            b = st.batch_size or base.batch_size
            if base.samples >= n * rpn * b:
                swl = from_workload(base, local_batch=b, step_time_s=st.compute_time_s)
                check_size(swl, n, rpn, prologue=prologue_rows(rows, swl, n, rpn, opt_map or None))
    dirs = []
    for wname in wls:
        for n in sp.nodes:
            W = n * rpn
            base = load_workload(wname, scale=st.scale, samples=samples_for(st, W))
            b = st.batch_size or base.batch_size
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
