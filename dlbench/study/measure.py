"""The measuring driver of studies: ``dlbench study FILE`` runs a measured study's entries on the same data and
system (``run_study``), or a scaling study's points of this launch's world size (``run_sweep``), serially or
under ``mpiexec`` (every rank runs every entry; rank 0 writes the results folders); ``--generate-only``
generates the sweep's datasets (``generate_sweep``). Each sweep point runs on its own dataset
(``<data root>/<workload>-<scale>-F<F>-seed<seed>``, generated if missing), all into one results root;
``dlbench compare``/``plot`` then read the root and ``dlbench jobscript`` writes a cluster's batch scripts."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError, DlbenchError
from .schema import Study, StudyRun, SweepPoint, points, sweep_sizes


def measure_study(st: Study, comm, *, echo, data_dir=None, local_dir=None, out=None, epochs=None,
                  generate_only: bool = False, fmt: str = "table") -> None:
    """``dlbench study FILE``: generate if missing, run every entry (a sweep: this launch's points) and print
    (rank 0, ``echo``) `dlbench compare`'s table and the traffic table; ``generate_only``: the sweep's
    datasets, one ``ready:`` line each."""
    if st.is_model:
        raise ConfigError(f"study {st.name}: a model study (nodes: {st.nodes}) is costed, not measured: "
                          f"dlbench study FILE --simulate (or dlbench simulate --study FILE)")
    say = echo if comm.rank == 0 else None
    if generate_only:
        if st.sweep is None:
            raise ConfigError(f"--generate-only: study {st.name} has no sweep: (its datasets are what it "
                              f"generates; see configs/studies/scaling-weak.yaml)")
        for d in generate_sweep(st, comm, data_root=data_dir, echo=say):
            if say:
                say(f"ready: {d}")
        return
    if st.sweep is not None:
        res = run_sweep(st, comm, data_root=data_dir, local_dir=local_dir, out=out, epochs=epochs, echo=say)
    else:
        res = run_study(st, comm, data_dir=data_dir, local_dir=local_dir, out=out, epochs=epochs, echo=say)
    if say:
        from ..report import compare
        from .table import traffic_table

        say(compare(res, fmt=fmt))
        if fmt == "table":
            say("")
            say(traffic_table(res))


def _is_s3(d) -> bool:
    return isinstance(d, str) and d.startswith("s3://")


def point_data_dir(st: Study, root: Path | str, p: SweepPoint, wl) -> Path | str:
    """``<root>/<workload>[-<tag>]-<scale>-F<F>-seed<seed>``: one dataset per workload and size (weak scaling
    needs one per world size; strong scaling shares one). ``wl``: the point's resolved workload; ``tag``
    (``run.setup.data_dir_tag``) tells a user's YAML apart from a built-in of the same name, as in run_study."""
    from ..run.setup import data_dir_tag

    tag = data_dir_tag(wl.spec_path, wl)
    name = f"{Path(p.workload).stem}{'-' + tag if tag else ''}-{st.scale or 'full'}-F{p.samples or 'preset'}-seed{st.seed}"
    if isinstance(root, str) and _is_s3(root):   # a bucket prefix: the point's dataset under it
        return f"{root.rstrip('/')}/{name}"
    return Path(root) / name


def default_sweep_data_root() -> Path:
    """``<data root>/sweeps`` (``host.data_root``: $DLBENCH_DATA_DIR, default ~/.cache/dlbench/data)."""
    from ..host import data_root

    return data_root() / "sweeps"


def _generate_if_missing(wl, d: Path | str, st: Study, comm, echo) -> None:
    from ..data.generate import generate
    from ..data.manifest import Manifest

    if isinstance(d, str):   # s3://bucket/prefix: the manifest object says whether it is there
        from ..data.bucket import generate_to
        from ..data.manifest import MANIFEST_NAME
        from ..storage.s3 import S3Backend

        if S3Backend(d).exists(MANIFEST_NAME):
            return
        if echo:
            echo(f"generating {wl.name} ({wl.samples} samples, {wl.dataset_nbytes / 1e6:.0f} MB) in {d}")
        generate_to(wl, d, seed=st.seed, comm=comm, progress=False)
        return
    if Manifest.exists(d):
        return
    if echo:
        echo(f"generating {wl.name} ({wl.samples} samples, {wl.dataset_nbytes / 1e6:.0f} MB) in {d}")
    if comm.rank == 0:
        d.parent.mkdir(parents=True, exist_ok=True)
    comm.barrier()
    generate(wl, d, seed=st.seed, comm=comm, progress=False)


def generate_sweep(st: Study, comm, *, data_root=None, echo=None, nodes_list=None) -> list[Path | str]:
    """Generate every dataset of the sweep (``dlbench study FILE --generate-only``, a cluster's first job)."""
    from .. import workload as wl_mod

    root = data_root if _is_s3(data_root) else Path(data_root) if data_root else default_sweep_data_root()
    out = []
    for key in dict.fromkeys((p.workload, p.samples) for p in points(st, nodes_list=nodes_list)):
        p = SweepPoint(key[0], 0, None, key[1])
        wl = wl_mod.load(p.workload, scale=st.scale, samples=p.samples)
        d = point_data_dir(st, root, p, wl)
        _generate_if_missing(wl, d, st, comm, echo)
        out.append(d)
    return out


def run_sweep(st: Study, comm, *, data_root=None, local_dir=None, out=None, epochs=None, echo=None) -> list[str]:
    """Run the sweep's points whose world size is this launch's (``comm.size``): every workload and run
    entry; returns the run folders (rank 0). A world size the sweep does not have is an error naming the
    sizes it has."""
    from .. import workload as wl_mod

    mine = [p for p in points(st) if p.ranks == comm.size]
    if not mine:
        sizes = ", ".join(map(str, sweep_sizes(st)))
        raise ConfigError(f"sweep of {st.name}: no point with {comm.size} rank(s) (this launch's world size); "
                          f"the sweep has {sizes}: launch with mpiexec -n <one of them>")
    root = data_root if _is_s3(data_root) else Path(data_root) if data_root else default_sweep_data_root()
    dirs = []
    k = 0
    total = len(mine) * len(st.runs)
    for p in mine:
        wl = wl_mod.load(p.workload, scale=st.scale, samples=p.samples)
        d = point_data_dir(st, root, p, wl)
        _generate_if_missing(wl, d, st, comm, echo)
        for r in st.runs:
            k += 1
            head = f"[{k}/{total}] {p.workload} F={wl.samples} on {comm.size} rank(s), {comm.nodes} node(s): "
            rd = _run_entry(st, r, p.workload, d, comm, out=out, epochs=epochs, local_dir=local_dir, echo=echo,
                            head=head)
            if rd is not None:   # rank 0
                dirs.append(rd)
    return dirs


def run_study(st: Study, comm, *, data_dir=None, local_dir=None, out=None, epochs=None, echo=None) -> list[str]:
    """Generate the data if missing, then every run; returns the run folders (rank 0; [] elsewhere)."""
    from .. import workload as wl_mod
    from ..run.setup import data_dir_tag, default_data_dir

    wl = wl_mod.load(str(st.workload), scale=st.scale, samples=st.samples)
    # an s3:// URL stays a string (Path would fold it into a local folder "s3:"): dlbench.storage.s3
    d = data_dir if _is_s3(data_dir) else \
        Path(data_dir) if data_dir else default_data_dir(wl.name, f"{st.scale or 'full'}-{wl.samples}", st.seed,
                                                         data_dir_tag(wl.spec_path, wl))
    check_entries(st, d, comm, epochs=epochs, local_dir=local_dir, out=out)
    _generate_if_missing(wl, d, st, comm, echo)
    dirs = []
    for i, r in enumerate(st.runs):
        rd = _run_entry(st, r, str(st.workload), d, comm, out=out, epochs=epochs, local_dir=local_dir, echo=echo,
                        head=f"[{i + 1}/{len(st.runs)}] ")
        if rd is not None:   # rank 0
            dirs.append(rd)
    return dirs


def check_entries(st: Study, data_dir: Path | str, comm, *, epochs=None, local_dir=None, out=None) -> None:
    """Every entry's plan-time checks (options, capacities, batch splits: a ``--dry-run`` of each, no I/O)
    before anything runs: a study used to run its entries in full up to the first bad one and end with no
    table. All bad entries are named in one error."""
    import dataclasses

    bad = []
    for i, r in enumerate(st.runs):
        cfg = dataclasses.replace(_entry_config(st, r, str(st.workload), data_dir, out=out, epochs=epochs,
                                                local_dir=local_dir), dry_run=True)
        from ..run.driver import run

        try:
            run(cfg, comm)
        except DlbenchError as e:
            bad.append(f"runs[{i}] {r.strategy}: {e}")
    if bad:
        raise ConfigError(f"study {st.name}: {len(bad)} of {len(st.runs)} entries cannot run, nothing was run: "
                          + "; ".join(bad))


def _entry_config(st: Study, r: StudyRun, workload: str, data_dir: Path | str, *, out, epochs, local_dir):
    from ..run.setup import RunConfig

    return RunConfig(workload=workload, strategy=r.strategy, options=dict(r.options), data_dir=str(data_dir),
                     epochs=epochs or st.epochs, batch_size=st.batch_size, seed=st.seed, out=out or st.out,
                     compute_time_s=st.compute_time_s, system=st.system, local_dir=local_dir, ranks_per_node=None)


def _run_entry(st: Study, r: StudyRun, workload: str, data_dir: Path | str, comm, *, out, epochs, local_dir, echo,
               head: str) -> str | None:
    """One run entry of a study (``run_study``) or a sweep point (``run_sweep``) on ``data_dir``: echoes
    ``head`` + the entry, runs it and returns its run folder (rank 0; None elsewhere). A run whose results
    could not be written (a full disk: ``write_error``) is an OutputError: the study cannot go on to its table."""
    from ..errors import OutputError
    from ..run.driver import run

    cfg = _entry_config(st, r, workload, data_dir, out=out, epochs=epochs, local_dir=local_dir)
    if echo:
        from ..strategies import option_args

        opts = " ".join(option_args(r.strategy, r.options))
        echo(f"{head}{r.strategy} {opts}".rstrip())
    res = run(cfg, comm)
    if comm.rank != 0:
        return None
    if res.get("write_error") or not res.get("run_dir"):
        raise OutputError(res.get("write_error") or f"{r.strategy}: the run wrote no results folder")
    return res["run_dir"]
