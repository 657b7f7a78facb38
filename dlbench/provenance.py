"""What a reviewer needs to trust or reproduce a number, recorded once per run in run.json's ``provenance``:
dlbench's version and source hash, a hash of the workload spec, library versions (numpy, h5py + HDF5, mpi4py
+ the MPI library, torch + CUDA/cuDNN), the hosts of all ranks, CPU model, RAM, the file system (type, mount
options, statfs) of the data, local and results directories, the launcher and what the scheduler allocated
(job id, node list, tasks per node).

Also the scheduler side of a launch: ``allocation(env)`` reads Slurm / PBS / Flux variables, and
``ranks_per_node_from_allocation`` derives ``--ranks-per-node`` from the allocation when it is not given.
Everything here is done once per run (no per-sample work); nothing heavy is imported that the run has not
imported already (mpi4py.MPI would initialise MPI in a serial run; torch takes seconds)."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from .host import meminfo
from .units import format_bytes

SCHEMA = "dlbench.provenance/1"
# fields that differ from run to run by nature: recorded and shown, never warned about by compare
PER_RUN = ("scheduler.job_id", "scheduler.nodes", "scheduler.tasks_per_node", "scheduler.ntasks", "hosts",
           "ranks_per_host", "statfs")


# ---- scheduler allocation ------------------------------------------------------------------------
def parse_slurm_tasks_per_node(text: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` → tasks per node, one entry per node: ``"2(x3),1"`` → [2, 2, 2, 1].
    ValueError for anything else."""
    out: list[int] = []
    for part in str(text).strip().split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r}: expected entries like 2 or 2(x3), comma-separated")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def expand_slurm_nodelist(text: str) -> list[str]:
    """``SLURM_JOB_NODELIST`` → host names: ``"n[1-2],gpu[08-10,12]"`` → n1, n2, gpu08, gpu09, gpu10, gpu12
    (zero padding kept). ValueError for an unbalanced bracket."""
    names: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]*)\])?([^,\[]*)(?:,|$)", str(text).strip()):
        prefix, ranges, suffix = m.group(1), m.group(2), m.group(3)
        if not prefix and not ranges:
            continue
        if ranges is None:
            names.append(prefix + suffix)
            continue
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"SLURM_JOB_NODELIST={text!r}: bad range {r!r}")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}{suffix}")
    if text.count("[") != text.count("]"):
        raise ValueError(f"SLURM_JOB_NODELIST={text!r}: unbalanced brackets")
    return names


def _pbs_nodefile(path: str) -> list[str]:
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip()]


def allocation(env=None) -> dict:
    """What the scheduler gave this job: ``{"name": slurm|pbs|flux|None, "job_id", "nodes" (host names, in
    order), "tasks_per_node" (one per node), "ntasks", "source" (the variables read), "error"}``. A
    variable that does not parse is named in ``error`` (the rest is still recorded)."""
    env = os.environ if env is None else env
    out: dict = {"name": None, "job_id": None, "nodes": None, "tasks_per_node": None, "ntasks": None,
                 "source": None, "error": None}
    if env.get("SLURM_JOB_ID"):
        out.update(name="slurm", job_id=env["SLURM_JOB_ID"])
        # a process srun started belongs to its step's layout; mpiexec (Hydra) inside an allocation starts its
        # proxies with an srun step of one task per node, so its ranks follow the job's layout
        step = launcher(env) == "srun" and env.get("SLURM_STEP_TASKS_PER_NODE")
        tpn_var = "SLURM_STEP_TASKS_PER_NODE" if step else "SLURM_TASKS_PER_NODE"
        nl_var = "SLURM_STEP_NODELIST" if step and env.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
        out["source"] = [v for v in ("SLURM_JOB_ID", nl_var, tpn_var, "SLURM_NTASKS") if env.get(v)]
        errs = []
        try:
            if env.get(nl_var):
                out["nodes"] = expand_slurm_nodelist(env[nl_var])
            if env.get(tpn_var):
                out["tasks_per_node"] = parse_slurm_tasks_per_node(env[tpn_var])
        except ValueError as e:
            errs.append(str(e))
        nt = env.get("SLURM_STEP_NUM_TASKS" if step else "SLURM_NTASKS", "").strip()
        out["ntasks"] = int(nt) if nt.isdigit() else (sum(out["tasks_per_node"]) if out["tasks_per_node"] else None)
        out["error"] = "; ".join(errs) or None
    elif env.get("PBS_JOBID"):
        out.update(name="pbs", job_id=env["PBS_JOBID"], source=["PBS_JOBID"])
        nf = env.get("PBS_NODEFILE")
        if nf:
            out["source"].append("PBS_NODEFILE")
            try:
                hosts = _pbs_nodefile(nf)
                counts = Counter(hosts)
                out["nodes"] = list(dict.fromkeys(hosts))
                out["tasks_per_node"] = [counts[h] for h in out["nodes"]]
                out["ntasks"] = len(hosts)
            except OSError as e:
                out["error"] = f"PBS_NODEFILE={nf}: {e.strerror or e}"
    elif env.get("FLUX_JOB_ID"):
        out.update(name="flux", job_id=env["FLUX_JOB_ID"], source=["FLUX_JOB_ID"])
        n = env.get("FLUX_JOB_SIZE", "").strip()
        if n.isdigit():
            out["ntasks"] = int(n)
            out["source"].append("FLUX_JOB_SIZE")
    return out


def ranks_per_node_from_allocation(world_size: int | None, env=None) -> tuple[int | None, str]:
    """``(K, source)``: the ranks per node the allocation says, when it says one K for every node and its
    task count is this launch's ``world_size`` (None: not known, not checked); else ``(None, why not)``
    and the caller uses MPI's shared-memory split."""
    a = allocation(env)
    if a["name"] is None:
        return None, "MPI shared-memory split (no scheduler allocation in the environment)"
    tpn = a["tasks_per_node"]
    var = next((v for v in (a["source"] or []) if "TASKS_PER_NODE" in v or v == "PBS_NODEFILE"), None)
    if not tpn or var is None:
        return None, f"MPI shared-memory split ({a['name']} job {a['job_id']}: tasks per node not in the environment)"
    if len(set(tpn)) != 1:
        return None, f"MPI shared-memory split ({var}: uneven tasks per node {tpn})"
    if world_size is not None and sum(tpn) != world_size:
        return None, (f"MPI shared-memory split ({var}: {sum(tpn)} tasks in the allocation, this launch has "
                      f"{world_size})")
    return tpn[0], var


def launcher(env=None) -> str:
    """Who started this process: ``mpiexec`` (MPICH Hydra / Open MPI), ``srun``, ``flux`` or ``none``."""
    env = os.environ if env is None else env
    if "MPI_LOCALNRANKS" in env or any(k.startswith(("HYDRA_", "HYDI_")) for k in env) or \
            "OMPI_COMM_WORLD_SIZE" in env:
        return "mpiexec"
    if env.get("SLURM_STEP_ID", "").strip().isdigit() and env.get("SLURM_STEP_NUM_TASKS"):
        return "srun"
    if "FLUX_TASK_RANK" in env:
        return "flux"
    if "PMI_SIZE" in env or "PMIX_RANK" in env:
        return "mpiexec"
    return "none"


# ---- dlbench's own source ------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def source() -> dict:
    """dlbench's version, and its source: git commit + dirty flag when the package is in a git checkout,
    else a sha256 over the installed package's .py files (path-sorted)."""
    pkg = Path(__file__).resolve().parent
    try:
        version = importlib.metadata.version("dlbench")
    except Exception:  # noqa: BLE001 - not installed (PYTHONPATH checkout)
        version = None
    out: dict[str, str | bool | None] = {"version": version, "git_commit": None, "git_dirty": None,
                                         "files_sha256": None}

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=pkg.parent, capture_output=True, text=True, timeout=5)

    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode == 0 and (Path(top.stdout.strip()) / "dlbench" / "provenance.py").resolve() == \
                Path(__file__).resolve():
            r = git("rev-parse", "HEAD")
            d = git("status", "--porcelain", "--untracked-files=no", "--", ".")
            if r.returncode == 0:
                out["git_commit"] = r.stdout.strip()
                out["git_dirty"] = bool(d.stdout.strip()) if d.returncode == 0 else None
                return out
    except (OSError, subprocess.SubprocessError):
        pass
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(str(f.relative_to(pkg)).encode() + b"\0")
        h.update(f.read_bytes())
    out["files_sha256"] = h.hexdigest()
    return out


def spec_sha256(spec) -> str | None:
    """sha256 of the workload spec as canonical JSON (sorted keys, no spaces): same spec, same hash."""
    if spec is None:
        return None
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# ---- libraries -----------------------------------------------------------------------------------
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except Exception:  # noqa: BLE001
        return None


def _torch_build() -> dict:
    """torch's version and the CUDA it was built for, from torch/version.py without importing torch;
    cuDNN only when torch is already imported (asking needs the library loaded)."""
    out = {"torch": _version("torch"), "torch_cuda": None}
    t = sys.modules.get("torch")
    if t is not None:
        out["torch_cuda"] = getattr(t.version, "cuda", None)
        try:
            out["cudnn"] = t.backends.cudnn.version() if t.backends.cudnn.is_available() else None
        except Exception:  # noqa: BLE001
            out["cudnn"] = None
        return out
    try:
        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            ns: dict = {}
            exec(compile((Path(spec.origin).parent / "version.py").read_text(), "torch/version.py", "exec"), ns)
            out["torch_cuda"] = ns.get("cuda")
    except Exception:  # noqa: BLE001 - torch absent or unusual: its version (or None) is still recorded
        pass
    return out


def libraries() -> dict:
    import numpy

    out = {"python": sys.version.split()[0], "numpy": numpy.__version__, "h5py": _version("h5py"), "hdf5": None,
           "mpi4py": _version("mpi4py"), "mpi_library": None}
    if out["h5py"]:
        try:
            import h5py

            out["hdf5"] = h5py.version.hdf5_version
        except Exception:  # noqa: BLE001
            pass
    mpi = sys.modules.get("mpi4py.MPI")  # importing it would initialise MPI in a serial run
    if mpi is not None:
        try:
            out["mpi_library"] = " ".join(mpi.Get_library_version().strip().splitlines()[0].split())
        except Exception:  # noqa: BLE001
            pass
    out.update(_torch_build())
    return out


# Libraries that, loaded into a benchmark's process, make its I/O figures lie: fsync/fdatasync/sync_file_range
# turned into no-ops (libeatmydata, nosync) or the page-cache hints dropped. Matched on the file name.
DEFEATING_LIBRARIES = {
    "libeatmydata": "makes fsync/fdatasync/msync no-ops (durability not measured)",
    "eatmydata": "makes fsync/fdatasync/msync no-ops (durability not measured)",
    "libnosync": "makes fsync no-ops (durability not measured)",
    "nosync": "makes fsync no-ops (durability not measured)",
    "libfakefsync": "makes fsync no-ops (durability not measured)",
    "libnocache": "changes page-cache behaviour (posix_fadvise/open intercepted)",
    "nocache": "changes page-cache behaviour (posix_fadvise/open intercepted)",
}


def preloaded_libraries(environ=None, maps: str | None = None) -> dict:
    """What is loaded into this process that a benchmark must know of: ``ld_preload`` (``$LD_PRELOAD``'s
    entries), ``ld_so_preload`` (``/etc/ld.so.preload``'s), and ``defeating``: every mapped shared object
    (``/proc/self/maps``) or preload whose name matches ``DEFEATING_LIBRARIES``, as ``{path: why}``. ``maps``
    (the text of a maps file) and ``environ`` are for tests."""
    env = os.environ if environ is None else environ
    pre = [x for x in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")) if x]
    try:
        etc = [x for x in Path("/etc/ld.so.preload").read_text().split() if x] if environ is None else []
    except OSError:
        etc = []
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            maps = ""
    objs = set(pre) | set(etc)
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and ".so" in parts[5]:
            objs.add(parts[5].strip())
    defeating = {}
    for obj in sorted(objs):
        base = os.path.basename(obj).split(".so")[0]
        why = DEFEATING_LIBRARIES.get(base)
        if why:
            defeating[obj] = why
    return {"ld_preload": pre, "ld_so_preload": etc, "defeating": defeating}


def defeating_warning(pre: dict | None) -> str | None:
    """One line for the summary when a cache- or fsync-defeating library is loaded, else None."""
    if not pre or not pre.get("defeating"):
        return None
    return "loaded into the process: " + "; ".join(f"{p} ({why})" for p, why in pre["defeating"].items())


# ---- machine and file systems --------------------------------------------------------------------
def cpu_model(path="/proc/cpuinfo") -> str | None:
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k.strip() in ("model name", "Model", "cpu model"):
                    return v.strip()
    except OSError:
        pass
    import platform

    return platform.processor() or None


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def parse_mountinfo(text: str) -> list[dict]:
    """/proc/self/mountinfo lines → ``{"mount_point", "fstype", "source", "options"}`` (per-mount options,
    then the super block's, comma-joined)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        a, b = left.split(), right.split()
        if len(a) < 6 or len(b) < 2:
            continue
        mounts.append({"mount_point": _unescape(a[4]), "fstype": b[0], "source": _unescape(b[1]),
                       # per-mount options then the super block's, each once (both carry rw/ro)
                       "options": ",".join(dict.fromkeys((a[5] + ("," + b[2] if len(b) > 2 else "")).split(",")))})
    return mounts


def mount_of(path, mounts: list[dict]) -> dict | None:
    """The mount holding ``path`` (the longest mount point that is a prefix of its resolved path; the last
    one mounted there wins)."""
    p = os.path.realpath(path)
    best = None
    for m in mounts:
        mp = m["mount_point"]
        if p == mp or p.startswith(mp.rstrip("/") + "/") or mp == "/":
            if best is None or len(mp) >= len(best["mount_point"]):
                best = m
    return best


def filesystem(path, mounts: list[dict] | None = None) -> dict:
    """File system type, mount point, source and options of ``path`` (its nearest existing parent), and
    statfs's block size, size and free bytes."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    if mounts is None:
        try:
            mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        except OSError:
            mounts = []
    m = mount_of(p, mounts) or {}
    out = {"path": str(path), "fstype": m.get("fstype"), "mount_point": m.get("mount_point"),
           "source": m.get("source"), "options": m.get("options"), "statfs": None}
    try:
        st = os.statvfs(p)
        out["statfs"] = {"block_size_bytes": st.f_bsize, "size_bytes": st.f_blocks * st.f_frsize,
                         "free_bytes": st.f_bavail * st.f_frsize}
    except OSError:
        pass
    return out


# ---- the record ----------------------------------------------------------------------------------
def collect(config: dict | None) -> dict:
    """The provenance block of a run.json from its config echo (``data_dir``, ``local_dir``, ``out``,
    ``workload_spec``, ``hosts``: one host name per rank, gathered by the runner)."""
    config = config or {}
    try:
        mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:
        mounts = []
    dirs = {}
    for key, name in (("data_dir", "data"), ("local_dir", "local"), ("out", "results")):
        if config.get(key):
            dirs[name] = filesystem(config[key], mounts)
    hosts = config.get("hosts")
    if not hosts:
        import socket

        hosts = [socket.gethostname()]
    return {
        "schema": SCHEMA, "dlbench": source(), "workload_sha256": spec_sha256(config.get("workload_spec")),
        "libraries": libraries(), "hosts": sorted(set(hosts)), "ranks_per_host": dict(Counter(hosts)),
        "cpu_model": cpu_model(), "mem_total_bytes": meminfo("MemTotal") or None,
        "filesystems": dirs, "launcher": launcher(), "scheduler": allocation(),
        "ranks_per_node_source": config.get("ranks_per_node_source"),
        "preloaded": preloaded_libraries(),
    }


def _flatten(d, prefix="") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if any(key == p or key.endswith("." + p) or key.startswith(p + ".") for p in PER_RUN):
            continue
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = json.dumps(v, sort_keys=True) if isinstance(v, list) else v
    return out


def differences(runs: list[dict]) -> list[str]:
    """One line per provenance field whose value differs among ``runs`` (``read_run`` dicts), naming each
    value and the runs that hold it. Per-run fields (job id, node list, hosts, free space) are left out;
    fields a run did not record (an older run.json, cuDNN when torch was not loaded) are not compared."""
    # a simulated run's provenance is the machine that modelled it, not a measurement's: left out, as are
    # fields a run recorded as null (not known there), so they do not show as "X vs None"
    flat = [(str(r.get("run_dir", "?")), _flatten(r.get("provenance") or {})) for r in runs
            if not (r.get("simulated") or (r.get("summary") or {}).get("simulated"))]
    flat = [(n, {k: v for k, v in f.items() if v is not None}) for n, f in flat]
    flat = [(n, f) for n, f in flat if f]
    if len(flat) < 2:
        return []
    lines = []
    keys = sorted(set().union(*(f.keys() for _, f in flat)) - {"schema", "filesystems.data.path",
                                                                 "filesystems.local.path",
                                                                 "filesystems.results.path"})
    for k in keys:
        vals: dict = {}
        for name, f in flat:
            if k in f:
                v = f[k]
                if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{40,64}", v):
                    v = v[:12]  # a hash: its head is enough to tell them apart
                vals.setdefault(repr(v), []).append(name)
        if len(vals) > 1:
            parts = [f"{v} ({len(ns)} run{'s' if len(ns) > 1 else ''}, e.g. {ns[0]})" for v, ns in vals.items()]
            lines.append(f"warning: runs differ in provenance {k}: " + " vs ".join(parts))
    return lines


def render(prov: dict | None) -> str:
    """A short provenance block for ``dlbench report``."""
    if not prov:
        return "provenance: not recorded (an imported record, or a run.json older than provenance)"
    src = prov.get("dlbench") or {}
    code = (f"git {str(src.get('git_commit'))[:12]}{' (dirty)' if src.get('git_dirty') else ''}"
            if src.get("git_commit") else f"files sha256 {str(src.get('files_sha256'))[:12]}")
    lib = prov.get("libraries") or {}
    libs = ", ".join(f"{k} {v}" for k, v in lib.items() if v is not None and k != "mpi_library")
    sch = prov.get("scheduler") or {}
    mem = prov.get("mem_total_bytes")
    lines = ["provenance:",
             f"  dlbench {src.get('version') or '?'} ({code}); workload sha256 "
             f"{str(prov.get('workload_sha256'))[:12]}",
             f"  libraries: {libs}",
             f"  MPI: {lib.get('mpi_library') or 'not initialised (serial run)'}; launcher: {prov.get('launcher')}",
             f"  hosts: {', '.join(prov.get('hosts') or [])}; CPU: {prov.get('cpu_model')}; RAM: "
             f"{format_bytes(mem, 'GiB')}" if mem else "  hosts: ?"]
    if sch.get("name"):
        lines.append(f"  scheduler: {sch['name']} job {sch.get('job_id')}, nodes {sch.get('nodes')}, tasks per "
                     f"node {sch.get('tasks_per_node')}; ranks per node from {prov.get('ranks_per_node_source')}")
    for name, fs in (prov.get("filesystems") or {}).items():
        lines.append(f"  {name}: {fs.get('path')} on {fs.get('fstype')} ({fs.get('mount_point')}, "
                     f"{fs.get('options')})")
    return "\n".join(lines)
