"""Batch scripts for a scaling study on a cluster: ``dlbench jobscript STUDY --scheduler slurm|pbs|flux``.

Writes into one folder:

- ``study.yaml``          the study with its sweep set to the points written here (nodes x ranks per node),
                          so every job runs exactly its own point (``dlbench study`` runs the points whose
                          world size is the launch's);
- ``generate.<ext>``      a first job that generates every dataset of the sweep in the shared data dir
                          (``dlbench study --generate-only``; generation is resumable and atomic);
- ``point-N<n>.<ext>``    one job per node count (``point-R<W>`` per world size for a ranks sweep): the scheduler header (nodes, tasks per node, time, and
                          account / partition lines, commented out unless given), a user-editable line at
                          the top that loads the environment, and the launch line (``srun -N n -n W``,
                          ``mpiexec -n W -ppn K`` under PBS, ``flux run -N n -n W``) of ``dlbench study``
                          with the shared ``--data-dir`` and the one results root;
- ``submit-all.sh``       submits the generate job, then every point with a dependency on it.

Then ``dlbench compare RESULTS`` and ``dlbench plot RESULTS --kind scaling`` read the root.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import MAX_NODES, MAX_RANKS_PER_NODE, check_counts  # far above any machine: a typo, not a job
from .errors import ConfigError

SCHEDULERS = ("slurm", "pbs", "flux")
EXT = {"slurm": "sbatch", "pbs": "pbs", "flux": "flux"}

# account / partition / queue / bank: what schedulers accept as such names (Slurm allows a comma-separated
# partition list, PBS a queue@server); nothing that a shell or a directive line would read as more
_SCHED_NAME = r"[A-Za-z0-9][A-Za-z0-9_.+,@-]{0,99}"


def check_study_name(name: object, where: str) -> str:
    """The study name goes into job names, comments and directive lines: the plain-name rule of workloads
    (letters, digits, ``_ . + -``), so no newline, quote or ``$`` can become a line of a batch script."""
    from .workload import NAME_PATTERN

    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or ".." in name:
        raise ConfigError(f"study name={name!r} ({where}): must be 1-100 characters of letters, digits, '_', "
                          f"'.', '+', '-', start with a letter or digit and hold no '..' (it names the jobs of "
                          f"the batch scripts)")
    return name


def check_sched_name(flag: str, value: str | None) -> str | None:
    """``--account`` / ``--partition``: a scheduler name (letters, digits, ``_ . + , @ -``) or None."""
    if value is None:
        return None
    if not isinstance(value, str) or not re.fullmatch(_SCHED_NAME, value):
        raise ConfigError(f"{flag}={value!r}: must be 1-100 characters of letters, digits, '_', '.', '+', ',', "
                          f"'@', '-', starting with a letter or digit (it is written into the batch scripts)")
    return value


def _one_line(flag: str, value: str | None) -> str | None:
    """A value written as one line of shell (``--env``, ``--dlbench``) must be one line: a newline or other
    control character would start a line of its own in every script."""
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(f"{flag}={value!r}: must be one line without control characters (newline, tab, ...)")
    return value


def dlbench_words(cmd: str) -> str:
    """``--dlbench``, the command that starts dlbench (``dlbench``, ``python -m dlbench.cli``, a path with
    spaces in quotes): split as a shell would, every word re-quoted, so ``$(...)``, backticks or ``;`` in it
    stay literal text of an argument."""
    _one_line("--dlbench", cmd)
    try:
        words = shlex.split(cmd)
    except ValueError as exc:
        raise ConfigError(f"--dlbench={cmd!r}: not a command line ({exc})") from None
    if not words:
        raise ConfigError(f"--dlbench={cmd!r}: empty; give the command that starts dlbench, e.g. dlbench")
    return shlex.join(words)


@dataclass(frozen=True)
class JobOptions:
    scheduler: str
    nodes_list: tuple[int, ...]
    ranks_per_node: int
    data_dir: Path | str    # str: an s3://bucket/prefix (dlbench.storage.s3)
    results: Path
    time: str = "01:00:00"
    account: str | None = None
    partition: str | None = None
    env_line: str | None = None
    dlbench: str = "dlbench"
    generate_nodes: int = 1


def default_env_line() -> str:
    """Activate this Python's virtual environment when it is one, else a comment to edit."""
    act = Path(sys.prefix) / "bin" / "activate"
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix) and act.is_file():
        return f"source {shlex.quote(str(act))}"
    return "# module load python; source /path/to/venv/bin/activate   # edit: the environment with dlbench"


def parse_nodes_list(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` → (1, 2, 4); one line naming the flag for anything else."""
    try:
        vals = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--nodes-list={text!r}: expected comma-separated node counts, e.g. 1,2,4,8") from None
    if not vals:
        raise ConfigError(f"--nodes-list={text!r}: expected node counts >= 1, e.g. 1,2,4,8")
    check_counts(*(("--nodes-list", v, 1, MAX_NODES) for v in (min(vals), max(vals))))
    return tuple(sorted(set(vals)))


def _seconds(time: str) -> int:
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{2}):(\d{2})", time.strip())
    if not m:
        raise ConfigError(f"--time={time!r}: expected HH:MM:SS or D-HH:MM:SS, e.g. 01:00:00")
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    if mi >= 60 or s >= 60:
        raise ConfigError(f"--time={time!r}: minutes and seconds must be < 60")
    return ((d * 24 + h) * 60 + mi) * 60 + s


def _hms(sec: int) -> str:
    return f"{sec // 3600:02d}:{sec % 3600 // 60:02d}:{sec % 60:02d}"


def header(opt: JobOptions, *, name: str, nodes: int, tasks: int, k: int) -> list[str]:
    """The scheduler directives of one job: ``nodes`` nodes, ``k`` tasks per node, ``tasks`` in all."""
    sec = _seconds(opt.time)
    acc, part = check_sched_name("--account", opt.account), check_sched_name("--partition", opt.partition)
    check_study_name(name.removeprefix("dlbench-"), "job name")
    if opt.scheduler == "slurm":
        return [f"#SBATCH --job-name={name}", f"#SBATCH --nodes={nodes}", f"#SBATCH --ntasks-per-node={k}",
                f"#SBATCH --time={_hms(sec)}", "#SBATCH --output=logs/%x-%j.out",
                f"#SBATCH --account={acc}" if acc else "##SBATCH --account=ACCOUNT      # or: dlbench jobscript --account",
                f"#SBATCH --partition={part}" if part else "##SBATCH --partition=PARTITION  # or: dlbench jobscript --partition"]
    if opt.scheduler == "pbs":
        return [f"#PBS -N {name}", f"#PBS -l select={nodes}:ncpus={k}:mpiprocs={k}", "#PBS -l place=scatter",
                f"#PBS -l walltime={_hms(sec)}", "#PBS -j oe", "#PBS -o logs/",
                f"#PBS -A {acc}" if acc else "##PBS -A ACCOUNT      # or: dlbench jobscript --account",
                f"#PBS -q {part}" if part else "##PBS -q QUEUE        # or: dlbench jobscript --partition"]
    if opt.scheduler == "flux":
        return [f"#flux: --job-name={name}", f"#flux: -N {nodes}", f"#flux: -n {tasks}", f"#flux: -t {sec}s",
                "#flux: --output=logs/{{name}}-{{id}}.out",
                f"#flux: --bank={acc}" if acc else "##flux: --bank=BANK     # or: dlbench jobscript --account",
                f"#flux: -q {part}" if part else "##flux: -q QUEUE        # or: dlbench jobscript --partition"]
    from .errors import unknown_choice

    raise unknown_choice("scheduler", opt.scheduler, SCHEDULERS)


def launch(opt: JobOptions, nodes: int, w: int, k: int, command: str) -> str:
    """The parallel launch of ``command``: ``w`` ranks on ``nodes`` nodes, ``k`` per node."""
    if opt.scheduler == "slurm":
        return f"srun -N {nodes} -n {w} --ntasks-per-node={k} {command}"
    if opt.scheduler == "pbs":
        return f"mpiexec -n {w} -ppn {k} {command}"
    return f"flux run -N {nodes} -n {w} {command}"


def script(opt: JobOptions, *, name: str, nodes: int, tasks: int, k: int, what: str, command: str,
           study: Path) -> str:
    lines = ["#!/bin/bash", *header(opt, name=name, nodes=nodes, tasks=tasks, k=k),
             f"# {what}",
             "# ---- edit this line: modules and the Python environment that has dlbench ----",
             opt.env_line if opt.env_line is not None else default_env_line(),
             "set -euo pipefail"]
    if opt.scheduler == "pbs":
        lines.append('cd "${PBS_O_WORKDIR:-.}"')
    here = shlex.quote(str(opt.data_dir))
    lines += [f"DATA_DIR={here}", f"RESULTS={shlex.quote(str(opt.results))}",
              f"STUDY={shlex.quote(str(study))}",  # absolute: a scheduler may run a spooled copy of this file
              launch(opt, nodes, tasks, k, command), ""]
    return "\n".join(lines)


def submit_all(opt: JobOptions, gen: str, points: list[str]) -> str:
    if opt.scheduler == "slurm":
        first, dep = "sbatch --parsable", "sbatch --parsable --dependency=afterok:$gen"
    elif opt.scheduler == "pbs":
        first, dep = "qsub", "qsub -W depend=afterok:$gen"
    else:
        first, dep = "flux batch", "flux batch --dependency=afterok:$gen"
    lines = ["#!/bin/bash", "# Submit the dataset generation, then every point of the sweep after it.",
             "set -euo pipefail", 'cd "$(dirname "$0")"', "mkdir -p logs",
             f"gen=$({first} {shlex.quote(gen)})", 'echo "generate: $gen"']
    for p in points:
        lines.append(f'echo {shlex.quote(p + ":")} "$({dep} {shlex.quote(p)})"')
    res = shlex.quote(str(opt.results))
    lines += ["echo " + shlex.quote(f"when they are done: dlbench compare {res} && dlbench plot {res} --kind scaling"),
              ""]
    return "\n".join(lines)


def _write(path: Path, text: str, mode: int = 0o755) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)   # a full disk: no .NAME.<pid>.tmp left
        raise


def write_jobscripts(study_path, out_dir, *, scheduler: str, nodes_list=None, ranks_per_node: int | None = None,
                     data_dir=None, results=None, time: str = "01:00:00", account=None, partition=None,
                     env_line=None, dlbench: str = "dlbench", generate_nodes: int = 1) -> list[Path]:
    """Write the study copy, the generate job, one job per node count and submit-all.sh; returns the paths."""
    import yaml

    from .config import load_yaml
    from .study.measure import default_sweep_data_root
    from .study.schema import load_study

    if scheduler not in SCHEDULERS:
        from .errors import unknown_choice

        raise unknown_choice("scheduler", scheduler, SCHEDULERS)
    st = load_study(study_path)
    if st.is_model:
        raise ConfigError(f"study {st.name}: a model study (nodes: {st.nodes}) is costed, not run: nothing to schedule "
                          f"(dlbench simulate --study {study_path})")
    check_study_name(st.name, f"{study_path} name")
    account, partition = check_sched_name("--account", account), check_sched_name("--partition", partition)
    _one_line("--env", env_line)
    dlbench = dlbench_words(dlbench)
    sw = st.sweep
    k = int(ranks_per_node if ranks_per_node is not None else (sw.ranks_per_node if sw is not None else 1))
    if nodes_list is not None and not nodes_list:
        raise ConfigError("--nodes-list=: expected node counts >= 1, e.g. 1,2,4,8")
    check_counts(("--ranks-per-node", k, 1, MAX_RANKS_PER_NODE), ("--generate-nodes", generate_nodes, 1, MAX_NODES),
                 *([("--nodes-list", min(nodes_list), 1, MAX_NODES), ("--nodes-list", max(nodes_list), 1, MAX_NODES)]
                   if nodes_list else []))
    # jobs: (file tag, nodes, ranks, ranks per node); a ranks sweep puts W ranks on ceil(W / k) nodes
    given_nodes = nodes_list or (sw.nodes if sw is not None else None)
    if given_nodes:
        nodes = tuple(given_nodes)
        jobs = [(f"N{n}", n, n * k, k) for n in nodes]
    elif sw is not None:
        nodes = ()
        jobs = [(f"R{w}", -(-w // k), w, min(k, w)) for w in sorted(set(sw.ranks))]
    else:
        raise ConfigError(f"study {st.name}: no sweep: section and no --nodes-list: nothing to schedule")
    _seconds(time)
    _check_feeds(st, jobs, "--nodes-list" if nodes_list else f"{study_path} sweep", k)
    opt = JobOptions(scheduler=scheduler, nodes_list=nodes, ranks_per_node=k,
                     data_dir=(str(data_dir) if str(data_dir or "").startswith("s3://")
                               else Path(data_dir or default_sweep_data_root()).absolute()),
                     results=Path(results or st.out).absolute(), time=time, account=account, partition=partition,
                     env_line=env_line, dlbench=dlbench, generate_nodes=generate_nodes)
    out = Path(out_dir)
    created: list[Path] = []
    written: list[Path] = []
    try:
        for q in (*reversed(out.absolute().parents), out.absolute(), out.absolute() / "logs"):
            if not q.exists():
                created.append(q)
        out.mkdir(parents=True, exist_ok=True)
        (out / "logs").mkdir(exist_ok=True)
        raw = load_yaml(Path(study_path) if Path(study_path).is_file() else _study_file(study_path), "study")
        sweep = dict(raw.get("sweep") or {})
        if nodes:
            sweep.pop("ranks", None)
            sweep.update({"nodes": list(nodes), "ranks_per_node": k})
        raw["sweep"] = sweep
        raw["out"] = str(opt.results)
        st_path = out / "study.yaml"
        _write(st_path, f"# written by dlbench jobscript from {study_path}: the sweep holds the points scripted here\n"
                        + yaml.safe_dump(raw, sort_keys=False), 0o644)
        load_study(str(st_path))  # what the jobs will load must load
        written.append(st_path)
        ext = EXT[scheduler]
        cmd = f'{dlbench} study "$STUDY" --data-dir "$DATA_DIR" --out "$RESULTS"'
        gn = min(generate_nodes, max(j[1] for j in jobs))
        gen = f"generate.{ext}"
        _write(out / gen, script(opt, name=f"dlbench-{st.name}-generate", nodes=gn, tasks=gn * k, k=k,
                                 what=f"dlbench study {st.name}: generate every dataset of the sweep in $DATA_DIR",
                                 command=f"{cmd} --generate-only", study=st_path.absolute()))
        written.append(out / gen)
        names = []
        for tag, n, w, kk in jobs:
            f = f"point-{tag}.{ext}"
            scaling = sw.scaling if sw is not None else "strong"
            _write(out / f, script(opt, name=f"dlbench-{st.name}-{tag}", nodes=n, tasks=w, k=kk,
                                   what=f"dlbench study {st.name}: {w} ranks on {n} node(s), up to {kk} per node "
                                        f"({scaling} scaling), every run entry, results under $RESULTS",
                                   command=cmd, study=st_path.absolute()))
            written.append(out / f)
            names.append(f)
        _write(out / "submit-all.sh", submit_all(opt, gen, names))
        written.append(out / "submit-all.sh")
        return written
    except OSError as e:   # a full disk, a name too long: one line, nothing of this call left behind
        from .errors import OutputError
        from .results import output_error_line

        for made in written:
            made.unlink(missing_ok=True)
        for q in reversed(created):
            try:
                q.rmdir()
            except OSError:
                pass
        raise OutputError(output_error_line("--out", out_dir, e)) from None


def _check_feeds(st, jobs, flag: str, k: int) -> None:
    """Every job's world must get at least one local batch per rank from its dataset (``dlbench run`` and the
    study would stop there anyway, after the job waited in the queue): one line naming the node count and the
    largest world the dataset feeds."""
    from .study.schema import samples_for
    from .workload import load as load_workload

    wls = list(st.sweep.workloads) if st.sweep is not None and st.sweep.workloads else [st.workload]
    for _tag, n, w, _kk in jobs:
        for wname in wls:
            base = load_workload(wname, scale=st.scale, samples=samples_for(st, w))
            b = base.local_batch(st.batch_size)
            if base.samples < w * b:
                most = base.samples // b
                raise ConfigError(
                    f"{flag}={n}: {w:,} ranks ({k} per node) get fewer than one local batch of {b} each from study "
                    f"{st.name}'s {base.samples:,} {wname} samples; allowed: at most {most:,} ranks "
                    f"({max(most // k, 0):,} nodes of {k})")


def _study_file(name: str) -> Path:
    from .config import resource_dir

    return resource_dir("configs") / "studies" / f"{name}.yaml"
