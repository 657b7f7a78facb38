"""dftracer as an independent witness of dlbench's Darshan-style counters (helpers of test_tracer_witness.py).

``run_traced`` runs ``mpiexec -n 2 python -m dlbench.cli run ...`` with dftracer's preload library
(``LD_PRELOAD=libdftracer_preload.so``, ``DFTRACER_INIT=PRELOAD``) tracing the dataset and local
directories, and ``DLBENCH_READ_CALL=readv``: CPython's ``os.preadv`` calls glibc's ``preadv64v2``, which
dftracer 2.2 does not intercept, so with the default read call dftracer would see none of dlbench's data
reads (found by this witness; Darshan does wrap the v2 calls). ``compare`` puts the run's
``summary.io_counters`` next to the trace's calls on the same files (``dlbench.importers_dftracer``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def preload_library() -> Path | None:
    """``libdftracer_preload.so`` of the installed dftracer wheel, or None."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("dftracer")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        for sub in ("lib64", "lib"):
            p = Path(base) / sub / "libdftracer_preload.so"
            if p.is_file():
                return p
    return None


def run_traced(mpiexec: str, lib: Path, args, trace_dir: Path, traced_dirs, cwd: Path, n: int = 2, timeout=240,
               read_call: str = "readv"):
    trace_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("DLBENCH_NO_MPI", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    trc = {"LD_PRELOAD": str(lib), "DFTRACER_ENABLE": "1", "DFTRACER_INIT": "PRELOAD",
           "DFTRACER_LOG_FILE": str(trace_dir / "trace"), "DFTRACER_DATA_DIR": ":".join(map(str, traced_dirs)),
           "DFTRACER_INC_METADATA": "1", "DFTRACER_TRACE_COMPRESSION": "1", "DLBENCH_READ_CALL": read_call}
    # the preload library goes to the Python processes only (mpiexec and its proxies stay untraced)
    cmd = [mpiexec, "-n", str(n), "env", *(f"{k}={v}" for k, v in trc.items()), sys.executable, "-m", "dlbench.cli",
           *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)


def rank_pids(run_dir: Path) -> dict[int, int]:
    """{pid: rank} of the run's trainer processes (its interval files' sidecars)."""
    out = {}
    for p in run_dir.glob("intervals-rank*.json"):
        meta = json.loads(p.read_text())
        out[int(meta["pid"])] = int(meta["rank"])
    return out


def compare(run_dir: Path, trace_dir: Path, data_dir: Path, local_dir: Path | None) -> dict:
    """dlbench's counters and the trace's, per file class (``shared``: the manifest's dataset files;
    ``local``: local-tier row files under ``local_dir``) and per rank. The trace's reads of HDF5 files are
    split into data (inside a dataset's data region) and HDF5 metadata (the library's own reads)."""
    from dlbench import importers_dftracer as D
    from dlbench.data.manifest import Manifest

    run = json.loads((run_dir / "run.json").read_text())
    ioc = run["summary"]["io_counters"]
    tiers = {str(data_dir): "shared"}
    if local_dir is not None:
        tiers[str(local_dir)] = "local"
    t = D.parse_traces([trace_dir], tiers=tiers)
    _roots, rank_of = D.ranks_of(t["procs"])
    pid_rank = rank_pids(run_dir)
    # a traced process's rank: its own (a trainer) or its traced ancestor's (a DataLoader worker)
    root_rank = {}
    for k, r in rank_of.items():
        if k[1] in pid_rank:
            root_rank[r] = pid_rank[k[1]]
    proc_rank = {k[1]: root_rank.get(r) for k, r in rank_of.items()}
    man = Manifest.load(data_dir)
    dataset = {os.path.normpath(str(data_dir / p)) for p in man.paths}
    W = len(ioc["by_rank"])

    def blank():
        return {"opens": 0, "reads": 0, "bytes": 0, "data_reads": 0, "data_bytes": 0, "metadata_reads": 0,
                "metadata_bytes": 0, "writes": 0, "bytes_written": 0}

    tr = {"shared": blank(), "local": blank()}
    tr_rank = [{"shared": blank(), "local": blank()} for _ in range(W)]
    unattributed = []
    meta_per_open_file: list[int] = []   # libhdf5's metadata reads of each (process, HDF5 file it opened)
    for path, d in t["per_file"].items():
        path = os.path.normpath(path)
        if path in dataset:
            cls = "shared"
        elif local_dir is not None and d["class"] == "local" and (path.endswith(".row") or ".tmp" in path):
            cls = "local"
        else:
            continue
        regions = D.data_regions(path) if cls == "shared" and path.endswith(".h5") else None
        by_pid: dict = {}
        for rec in d["read_offsets"]:
            by_pid.setdefault(rec[2], []).append(rec)
        pids = set(by_pid) | set(d["opens_by_pid"])
        for pid in pids:
            offs = by_pid.get(pid, [])
            split = D.split_data_metadata(offs, regions) if regions else {
                "data_reads": len(offs), "data_bytes": sum(n for _, n, _p in offs), "metadata_reads": 0,
                "metadata_bytes": 0}
            row = {"opens": d["opens_by_pid"].get(pid, 0), "reads": len(offs), "bytes": sum(n for _, n, _p in offs),
                   **split}
            if regions and row["opens"]:
                meta_per_open_file.append(split["metadata_reads"])
            r = proc_rank.get(pid)
            targets = [tr[cls]]
            if r is None:
                unattributed.append((path, pid))
            else:
                targets.append(tr_rank[r][cls])
            for tgt in targets:
                for k, v in row.items():
                    tgt[k] += v
        tr[cls]["writes"] += d["writes"]
        tr[cls]["bytes_written"] += d["bytes_written"]
    return {"dlbench": ioc, "trace": tr, "trace_by_rank": tr_rank, "unattributed": unattributed,
            "metadata_per_open_file": meta_per_open_file,
            "bad_lines": t["bad_line_count"], "read_call": ioc.get("read_call")}


def table_rows(strategy: str, cmp: dict) -> list[str]:
    """Lines of the comparison table for one strategy (per class: dlbench vs tracer)."""
    out = []
    for cls in ("shared", "local"):
        d = cmp["dlbench"]["by_class"].get(cls)
        t = cmp["trace"][cls]
        if d is None and not t["reads"] and not t["opens"]:
            continue
        d = d or {}
        out.append(f"| {strategy} | {cls} | {d.get('POSIX_OPENS', 0)} / {t['opens']} | "
                   f"{d.get('POSIX_READS', 0)} / {t['data_reads']} | {d.get('POSIX_BYTES_READ', 0)} / {t['data_bytes']} | "
                   f"{t['metadata_reads']} reads, {t['metadata_bytes']} B | "
                   f"{d.get('H5F_OPENS', 0) if cls == 'shared' else '-'} | {d.get('POSIX_WRITES', 0)} / {t['writes']} |")
    return out
