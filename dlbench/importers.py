"""Imports of a real application's records into a dlbench results folder.

- ``import_timelogger(path)``: per-description sums of a TimeLogger CSV (NERSC DL-Parallel-IO; dlbench's
  own ``timelogger.csv`` too).
- ``import_darshan(path)``: per-module counters of a Darshan log (PyDarshan).
- ``timelogger_run`` / ``darshan_run``: those turned into a run.json document like a run's (summary keys
  filled where they have a meaning, ``import_notes`` saying what a log cannot give), and
  ``write_imported`` writes it to ``<out>/<app>/imported-<kind>/<UTC stamp>/`` so ``dlbench report``,
  ``compare`` and ``plot`` read it like a run. The record is parsed completely before any folder is made:
  a bad input leaves nothing behind.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import re
import struct
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import counters as C
from .config import MAX_NODES, check_counts
from .errors import ConfigError, DataError

# ---- TimeLogger -------------------------------------------------------------------------------------------
TL_COLUMNS = ("Epoch", "Rank", "Action Description", "Time Taken")


def import_timelogger(path, *, nodes: int | None = None, fold_setup: bool = True, strict: bool = False) -> dict:
    """Per-description sums of ``Time Taken`` from a TimeLogger CSV (plain or .gz; dlbench's own
    timelogger.csv too). Returns ``{"nodes", "ranks", "epochs", "rows", "descriptions": {desc: {"count",
    "sum_s", "per_node_s", "per_epoch_s": {epoch: Σ/nodes}}}, "per_rank": {desc: {rank: Σ}}}``. ``nodes``
    defaults to the number of distinct ranks ≥ 0 (the NERSC analysis divides by nodes, one rank per node);
    ``fold_setup`` counts epoch −1 (set-up) as epoch 0, as the original analysis does. Descriptions are
    stripped of the leading space TimeLogger writes. Sums use math.fsum. A file that is not such a CSV
    raises DataError naming the file and the line.

    Garbled rows -- another column count than the header's, or an Epoch, Rank or Time Taken that is not a
    number (many ranks appending to one file interleave their lines) -- are skipped and counted with their
    line numbers in ``"skipped": {"count", "lines"}``; ``strict`` refuses the first one instead. A negative
    or non-finite Time Taken is refused in any case (a time cannot be negative: the file is wrong, not
    garbled)."""
    p = Path(path)
    _regular(p, "CSV")
    check_counts(("--nodes", nodes, 1, MAX_NODES))
    opener = gzip.open if p.suffix == ".gz" else open
    sums: dict[str, list[float]] = defaultdict(list)
    per_epoch: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_rank: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    ranks: set[int] = set()
    epochs: set[int] = set()
    n = 0
    line = 1
    skipped: list[int] = []
    try:
        with opener(p, "rt", newline="") as f:
            rd = csv.reader(f)
            header = [h.strip() for h in next(rd, [])]
            missing = [c for c in TL_COLUMNS if c not in header]
            if missing:
                raise DataError(f"CSV={p}: not a TimeLogger CSV: the header lacks {', '.join(missing)} "
                                f"(expected columns {', '.join(TL_COLUMNS)}, ...)")
            ie, ir, idsc, itk = (header.index(c) for c in TL_COLUMNS)
            for row in rd:
                line = rd.line_num
                if not row or not any(c.strip() for c in row):
                    continue
                try:
                    if len(row) != len(header):
                        raise ValueError(f"{len(row)} columns, the header has {len(header)}")
                    ef, rf = float(row[ie]), float(row[ir])
                    if not (ef.is_integer() and rf.is_integer()):
                        raise ValueError("Epoch and Rank must be whole numbers")
                    e, r = int(ef), int(rf)
                    desc = row[idsc].strip()
                    t = float(row[itk])
                except (ValueError, IndexError, OverflowError) as exc:
                    if strict:
                        raise DataError(f"CSV={p}: line {line}: not a TimeLogger row ({exc}; Epoch, Rank, Time "
                                        f"Taken must be numbers): {','.join(row)[:80]!r} (--strict; without it "
                                        f"garbled rows are skipped and counted)") from None
                    skipped.append(line)
                    continue
                if not math.isfinite(t):
                    raise DataError(f"CSV={p}: line {line}: column 'Time Taken'={row[itk]!r} is not a finite "
                                    f"number")
                if t < 0:
                    raise DataError(f"CSV={p}: line {line}: column 'Time Taken'={row[itk].strip()!r} is negative "
                                    f"(a duration must be >= 0; rank {r}, epoch {e}, '{desc}')")
                n += 1
                ranks.add(r)
                if fold_setup and e < 0:
                    e = 0
                epochs.add(e)
                sums[desc].append(t)
                per_epoch[desc][e].append(t)
                per_rank[desc][r].append(t)
    except (OSError, UnicodeDecodeError, EOFError, csv.Error) as exc:
        raise DataError(f"CSV={p}: not a readable TimeLogger CSV ({type(exc).__name__}: {exc})") from None
    if n == 0 and skipped:
        raise DataError(f"CSV={p}: no readable TimeLogger row: all {len(skipped)} rows are garbled (first at line "
                        f"{skipped[0]}; Epoch, Rank, Time Taken must be numbers, one value per header column)")
    if n == 0:
        raise DataError(f"CSV={p}: a TimeLogger header but no rows")
    nn = nodes if nodes else max(1, len([r for r in ranks if r >= 0]))
    out = {}
    for desc, vals in sums.items():
        s = math.fsum(vals)
        out[desc] = {"count": len(vals), "sum_s": s, "per_node_s": s / nn,
                     "per_epoch_s": {e: math.fsum(v) / nn for e, v in sorted(per_epoch[desc].items())}}
    return {"nodes": nn, "ranks": sorted(r for r in ranks if r >= 0), "epochs": sorted(epochs), "rows": n,
            "skipped": {"count": len(skipped), "lines": skipped[:1000]}, "descriptions": out,
            "per_rank": {d: {r: math.fsum(v) for r, v in sorted(rv.items())} for d, rv in per_rank.items()}}


def _regular(p: Path, what: str) -> None:
    """A regular file, or one line: no such file, or what it is instead (a FIFO would block the read)."""
    import stat

    try:
        st = p.stat()
    except FileNotFoundError:
        raise DataError(f"{what}={p}: no such file") from None
    except OSError as exc:
        raise DataError(f"{what}={p}: cannot read it ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise DataError(f"{what}={p}: {kind}, not a regular file; pass the log file itself")


# which TimeLogger descriptions mean what (NERSC DL-Parallel-IO's HEP-CNN names, and dlbench's own)
TL_EPOCH = ("Training Iteration", "Epoch")  # per step (NERSC) or per epoch (dlbench): summed per epoch = epoch time
TL_READ = ("HDF5 File Read", "Read From Storage")
TL_LOAD = ("Load File",)                     # includes the read: load - read = decode/convert
TL_STALL = ("Call to Next Batch", "Wait For Next Batch")
TL_COMPUTE = ("Compute Step",)
TL_TOTAL = ("Global Total Time",)


def _first(descs: dict, names) -> dict | None:
    for n in names:
        if n in descs:
            return descs[n]
    return None


def timelogger_run(path, *, name: str | None = None, nodes: int | None = None, fold_setup: bool = True,
                   strict: bool = False) -> dict:
    """A run.json document (``config``, ``summary``, ``imported``) for a TimeLogger CSV. Filled where the
    CSV gives it (per node = Σ Time Taken / nodes, NERSC's analysis): ``epoch_time_s`` (Σ "Training
    Iteration" per epoch), ``phase_time_s`` read (Σ "HDF5 File Read"), decode (Σ "Load File" − read),
    stall (Σ "Call to Next Batch"), compute (Σ "Training Iteration" − Σ "Load File", NERSC's Training),
    ``exposed_io_share`` = stall / Σ epoch times, ``read_share``, ``au``, ``total_time_s`` (Σ "Global Total
    Time"). Left out (and said so in ``import_notes``): bytes, samples/s, I/O counters."""
    t = import_timelogger(path, nodes=nodes, fold_setup=fold_setup, strict=strict)
    d = t["descriptions"]
    app = name or _stem(path)
    summary: dict = {"workload": app, "strategy": "imported-timelogger", "ranks": len(t["ranks"]) or None,
                     "nodes": t["nodes"], "imported": True}
    notes = ["TimeLogger import: times are per node (sum of Time Taken / nodes, as NERSC's analysis)",
             "a TimeLogger CSV has no bytes, operation counts or sample counts: read MB, bandwidth, samples/s "
             "and I/O counters are left out"]
    ep = _first(d, TL_EPOCH)
    read, load, stall = _first(d, TL_READ), _first(d, TL_LOAD), _first(d, TL_STALL)
    comp = _first(d, TL_COMPUTE)
    if ep is not None:
        summary["epochs"] = len(ep["per_epoch_s"])
        summary["epoch_time_s"] = [ep["per_epoch_s"][e] for e in sorted(ep["per_epoch_s"])]
        epoch_total = ep["per_node_s"]
    else:
        epoch_total = None
        notes.append("no 'Training Iteration' (or dlbench's 'Epoch') rows: epoch time, shares and AU are left out")
    phases: dict = {}
    if read is not None:
        phases["read"] = read["per_node_s"]
    if load is not None and read is not None:
        phases["decode"] = max(0.0, load["per_node_s"] - read["per_node_s"])
    if stall is not None:
        phases["stall"] = stall["per_node_s"]
    if comp is not None:
        phases["compute"] = comp["per_node_s"]
    elif ep is not None and load is not None:
        phases["compute"] = max(0.0, ep["per_node_s"] - load["per_node_s"])
        notes.append("compute = Training Iteration - Load File (NERSC's 'Training'; checkpoints not separated)")
    summary["phase_time_s"] = phases
    if epoch_total:
        summary["phase_share"] = {k: v / epoch_total for k, v in phases.items()}
        if "stall" in phases:
            summary["exposed_io_share"] = phases["stall"] / epoch_total
        if "read" in phases:
            summary["read_share"] = phases["read"] / epoch_total
        if "compute" in phases:
            summary["au"] = phases["compute"] / epoch_total
    tot = _first(d, TL_TOTAL)
    if tot is not None:
        summary["total_time_s"] = tot["per_node_s"]
    elif epoch_total is not None:
        summary["total_time_s"] = epoch_total
    if read is not None:
        pr = t["per_rank"].get(next(n for n in TL_READ if n in d), {})
        pr = {r: v for r, v in pr.items() if r >= 0}
        if pr:
            vals = list(pr.values())
            mean = math.fsum(vals) / len(vals)
            summary["spread"] = {"read_s": {"min": min(vals), "mean": mean, "max": max(vals)}}
    warnings = []
    sk = t["skipped"]
    if sk["count"]:
        shown = ", ".join(map(str, sk["lines"][:10])) + (", ..." if sk["count"] > 10 else "")
        msg = (f"CSV={path}: skipped {sk['count']} garbled row{'s' if sk['count'] != 1 else ''} of "
               f"{sk['count'] + t['rows']} (line{'s' if sk['count'] != 1 else ''} {shown}; interleaved writes of several ranks?): the sums leave "
               f"them out; --strict refuses such a file")
        notes.append(msg)
        warnings.append(msg)
    summary["import_notes"] = notes
    imported = {"kind": "timelogger", "source": str(Path(path).resolve()), "rows": t["rows"], "nodes": t["nodes"],
                "skipped_rows": sk,
                "epochs": t["epochs"], "fold_setup": fold_setup,
                "descriptions": {k: {"count": v["count"], "sum_s": v["sum_s"], "per_node_s": v["per_node_s"],
                                     "per_epoch_s": {str(e): x for e, x in v["per_epoch_s"].items()}}
                                 for k, v in d.items()}}
    doc: dict[str, dict | list] = {"config": {"workload": app, "strategy": "imported-timelogger", "source": str(path), "nodes": nodes,
                      "fold_setup": fold_setup, "strict": strict},
           "summary": summary, "imported": imported}
    if warnings:
        doc["warnings"] = warnings
    return doc


# ---- Darshan ----------------------------------------------------------------------------------------------
DARSHAN_MAGIC = 6567223  # DARSHAN_MAGIC_NR, the int64 after the 8-byte version string of every log
_HIST = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M", "1M_4M", "4M_10M", "10M_100M", "100M_1G", "1G_PLUS")


# the header of a format-3 log (darshan-log-format.h): version string[8], magic int64, comp_type uint8 (+3 pad),
# partial_flag uint32, name_map {off, len uint64}, mod_map[16] {off, len}, mod_ver[16] uint32
_HDR_MAPS_AT, _MAX_MODS, _HDR_SIZE = 24, 16, 360
# module ids of the log's own layout (they moved between format versions)
_MOD_NAMES = {
    "3.0": ("NULL", "POSIX", "MPI-IO", "HDF5", "PNETCDF", "BG/Q", "LUSTRE", "STDIO", "DXT_POSIX", "DXT_MPIIO"),
    "3.1": ("NULL", "POSIX", "MPI-IO", "HDF5", "PNETCDF", "BG/Q", "LUSTRE", "STDIO", "DXT_POSIX", "DXT_MPIIO",
            "MDHIM"),
    "3.2": ("NULL", "POSIX", "MPI-IO", "H5F", "H5D", "PNETCDF", "BG/Q", "LUSTRE", "STDIO", "DXT_POSIX", "DXT_MPIIO",
            "MDHIM", "APXC", "APMPI"),
    "3.4": ("NULL", "POSIX", "MPI-IO", "H5F", "H5D", "PNETCDF_FILE", "PNETCDF_VAR", "BG/Q", "LUSTRE", "STDIO",
            "DXT_POSIX", "DXT_MPIIO", "MDHIM", "APXC", "APMPI", "HEATMAP"),
}


def _module_name(version: str, idx: int) -> str:
    names = _MOD_NAMES.get(version[:3])
    return names[idx] if names is not None and idx < len(names) else f"module #{idx}"


def _check_darshan_file(p: Path) -> dict:
    """Validate a log before PyDarshan's C parser sees it: the header (version, magic) and every region the
    header maps (the name table and each module's records) lying inside the file. A truncated log is
    refused naming what is cut off (PyDarshan segfaults, aborts or silently reads fewer records on one).
    Returns ``{"version", "size", "partial": [module names Darshan flagged partial]}``."""
    _regular(p, "LOG")
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            head = f.read(_HDR_SIZE)
    except OSError as exc:
        raise DataError(f"LOG={p}: cannot read it ({exc.strerror})") from None
    endian = None
    if len(head) >= 16:
        for e in ("<", ">"):
            if struct.unpack(e + "q", head[8:16])[0] == DARSHAN_MAGIC:
                endian = e
    if endian is None:
        raise DataError(f"LOG={p}: not a Darshan log (no Darshan header); pass a .darshan file written by the "
                        f"Darshan runtime")
    version = head[:8].rstrip(bytes(1)).decode(errors="replace")
    if not head[:2] == b"3.":
        raise DataError(f"LOG={p}: Darshan log format {version!r}: PyDarshan reads format 3.x logs only")
    hdr = _HDR_SIZE if version >= "3.10" else _HDR_SIZE - 4 * _MAX_MODS  # 3.0x logs: no module versions
    if len(head) < hdr:
        raise DataError(f"LOG={p}: truncated Darshan log: {size} bytes, shorter than its {hdr}-byte header "
                        f"(copy the whole log again)")
    partial_flag = struct.unpack(endian + "I", head[20:24])[0]
    maps = [struct.unpack(endian + "QQ", head[_HDR_MAPS_AT + 16 * i:_HDR_MAPS_AT + 16 * (i + 1)])
            for i in range(1 + _MAX_MODS)]
    regions = [("job record", hdr, maps[0][0] - hdr if maps[0][0] >= hdr else 0), ("name table", *maps[0])]
    regions += [(f"{_module_name(version, i)} records", off, ln) for i, (off, ln) in enumerate(maps[1:]) if ln]
    cut = [(name, off, ln) for name, off, ln in regions if off + ln > size or (ln and off < hdr)]
    if cut:
        what = ", ".join(f"{n} (bytes {o:,}..{o + ln:,})" for n, o, ln in cut[:4])
        more = f" and {len(cut) - 4} more" if len(cut) > 4 else ""
        raise DataError(f"LOG={p}: truncated or damaged Darshan log: {size:,} bytes, but its header maps "
                        f"{what}{more} past the end of the file (copy the whole log again)")
    partial = [_module_name(version, i) for i in range(_MAX_MODS) if partial_flag & (1 << i)]
    return {"version": version, "size": size, "partial": partial}


@contextmanager
def _quiet_stderr():
    """libdarshan-util prints its own errors on fd 2; keep them off the user's terminal (the error is
    raised as one line instead)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
            try:
                yield
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _report(path):
    try:
        import darshan
    except ImportError:
        raise ConfigError("importing a Darshan log needs PyDarshan: pip install 'dlbench[darshan]'") from None
    p = Path(path)
    _check_darshan_file(p)
    import gc

    with _quiet_stderr():
        try:
            return darshan.DarshanReport(str(p), read_all=True)
        except Exception as exc:  # noqa: BLE001 - PyDarshan raises RuntimeError/ValueError for broken logs
            err = f"{type(exc).__name__}: {exc}"
        gc.collect()  # the half-made report's destructor prints too: let it run while fd 2 is quiet
    raise DataError(f"LOG={p}: PyDarshan cannot read it ({err})")


def _check_parsed(p: Path, rep) -> None:
    """What PyDarshan read must be what the header promised: libdarshan reports a damaged compressed region
    on stderr only and hands back a report without its records (counts silently 0)."""
    job = rep.metadata.get("job") or {}
    if not int(job.get("nprocs") or 0) > 0:
        raise DataError(f"LOG={p}: damaged Darshan log: its job record reads as {job.get('nprocs')!r} processes "
                        f"(the compressed job record could not be read)")
    empty = [m for m, info in rep.modules.items()
             if int(info.get("len") or 0) > 0 and m in rep.records and len(rep.records[m]) == 0]
    if empty:
        raise DataError(f"LOG={p}: damaged Darshan log: the header maps records of {', '.join(empty)} but none "
                        f"could be read (a corrupt compressed region)")
    if any(len(rep.records[m]) for m in rep.records) and not (getattr(rep, "name_records", None) or {}):
        raise DataError(f"LOG={p}: damaged Darshan log: records but no file names (the name table could not be "
                        f"read)")


def _frames(rep, mod):
    try:
        df = rep.records[mod].to_df()
    except Exception:  # noqa: BLE001 - modules without a DataFrame form (DXT, HEATMAP) are skipped
        return None, None
    if not isinstance(df, dict):
        return None, None
    return df.get("counters"), df.get("fcounters")


def import_darshan(path, rep=None) -> dict:
    """Per-module counters of a Darshan log via PyDarshan: ``{"modules": [...], "job": {...},
    "posix": {counter: total over records, "files", "read_size_histogram": {bucket: count},
    "write_size_histogram": {...}, "read_time_s", ...}, "mpiio": {...}, "stdio": {...},
    "per_module": {module: {"records": n}}}``. Needs the ``darshan`` package (dlbench[darshan])."""
    rep = rep if rep is not None else _report(path)
    out: dict = {"modules": sorted(rep.modules), "job": {}, "per_module": {}}
    try:
        job = rep.metadata.get("job", {})
        out["job"] = {"nprocs": job.get("nprocs"), "run_time_s": job.get("run_time"),
                      "start_time": job.get("start_time_sec"), "end_time": job.get("end_time_sec"),
                      "exe": rep.metadata.get("exe")}
    except Exception:  # noqa: BLE001
        pass
    for mod in rep.records:
        c, fc = _frames(rep, mod)
        if c is None and fc is None:
            continue
        d: dict = {"records": int(len(c)) if c is not None else 0}
        if c is not None:
            d["files"] = int(c["id"].nunique()) if "id" in c else None
            d["ranks"] = int(c["rank"].nunique()) if "rank" in c else None
            for col in c.columns:
                if col.endswith(("_OPENS", "_READS", "_WRITES", "_BYTES_READ", "_BYTES_WRITTEN", "_SEEKS",
                                 "_STATS", "_INDEP_READS", "_COLL_READS", "_INDEP_WRITES", "_COLL_WRITES",
                                 "_INDEP_OPENS", "_COLL_OPENS")):
                    d[col] = int(c[col].clip(lower=0).sum())
            for rw in ("READ", "WRITE"):
                hist = {}
                for b in _HIST:
                    col = f"{mod}_SIZE_{rw}_{b}" if mod != "MPI-IO" else f"MPIIO_SIZE_{rw}_AGG_{b}"
                    if col in c:
                        hist[b] = int(c[col].clip(lower=0).sum())
                if hist:
                    d[f"{rw.lower()}_size_histogram"] = hist
        if fc is not None:
            for col in fc.columns:
                if col.endswith(("_READ_TIME", "_WRITE_TIME", "_META_TIME")) and "_MAX_" not in col:
                    d[col] = float(fc[col].clip(lower=0).sum())
        key = {"POSIX": "posix", "MPI-IO": "mpiio", "STDIO": "stdio", "H5F": "h5f", "H5D": "h5d"}.get(mod, mod.lower())
        out[key] = d
        out["per_module"][mod] = {"records": d["records"]}
    return out


# file-system types (as Darshan's mount table names them) by where the bytes live: a parallel / network file
# system shared by the nodes, a node's own block device, or its memory. Anything else is "unclassified"
# (reported apart, never counted as a node's own tier).
SHARED_FS = ("lustre", "gpfs", "mmfs", "nfs", "nfs4", "beegfs", "fhgfs", "cephfs", "ceph", "fuse.ceph", "dvs",
             "pvfs2", "orangefs", "panfs", "glusterfs", "fuse.glusterfs", "wekafs", "fuse.wekafs", "daos",
             "fuse.daos", "cifs", "smb3", "smbfs", "afs", "hdfs", "fuse.hdfs", "quobyte", "fuse.quobyte", "vast",
             "ifs", "fuse.sshfs", "9p", "virtiofs", "scality")
LOCAL_FS = ("ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "vfat", "exfat", "ntfs",
            "squashfs", "overlay", "iso9660", "erofs")
MEMORY_FS = ("tmpfs", "ramfs", "devtmpfs", "hugetlbfs")


def fs_tier(fstype: str | None) -> str:
    """``shared`` / ``local`` / ``memory`` / ``unclassified`` for a file-system type from a mount table
    (``lustre`` → shared, ``xfs`` → local, ``tmpfs`` → memory; case and a ``fuse.`` prefix tolerated)."""
    t = str(fstype or "").strip().lower()
    if not t:
        return "unclassified"
    for name in (t, t.removeprefix("fuse.")):
        if name in SHARED_FS:
            return "shared"
        if name in LOCAL_FS:
            return "local"
        if name in MEMORY_FS:
            return "memory"
    return "unclassified"


def _mount_of(name: str, mounts: list[str]) -> str:
    for m in mounts:  # longest first
        if name == m or name.startswith(m.rstrip("/") + "/"):
            return m
    return "other"


def darshan_counters(rep) -> tuple[dict, list]:
    """``summary["io_counters"]`` from a report's POSIX and H5D records, classes = mount points (the
    longest mount point holding the file), plus notes. Records of rank −1 (files shared by all ranks, which
    Darshan reduces into one record) count in by_class but cannot be split per rank."""
    notes = []
    try:
        fs_of = {str(m): str(fs) for m, fs in rep.mounts}
    except Exception:  # noqa: BLE001 - a log without a mount table
        fs_of = {}
    mounts = sorted(fs_of, key=len, reverse=True)
    names = getattr(rep, "name_records", {}) or {}
    nprocs = int((rep.metadata.get("job") or {}).get("nprocs") or 0)
    per_rank: list[dict] = [{} for _ in range(nprocs)]
    by_class: dict[str, list] = {}
    shared_slowest = None
    for mod in ("POSIX", "H5D"):
        if mod not in rep.records:
            continue
        c, fc = _frames(rep, mod)
        if c is None:
            continue
        if fc is not None and not (len(fc) == len(c) and (fc["id"].to_numpy() == c["id"].to_numpy()).all()
                                   and (fc["rank"].to_numpy() == c["rank"].to_numpy()).all()):
            fc = c[["id", "rank"]].merge(fc, on=["id", "rank"], how="left").fillna(0)
        # columns as arrays once (a log may hold 10^5 records); Darshan writes -1 for "not known": clipped
        cols = {k: np.clip(c[k].to_numpy(dtype=float), 0, None) for k in C.COUNTERS if k in c.columns}
        if fc is not None:
            cols.update({k: np.clip(fc[k].to_numpy(dtype=float), 0, None) for k in C.COUNTERS if k in fc.columns})
        ids, ranks = c["id"].to_numpy(), c["rank"].to_numpy()
        slow_r = c["POSIX_SLOWEST_RANK"].to_numpy() if "POSIX_SLOWEST_RANK" in c.columns else None
        slow_t = fc["POSIX_F_SLOWEST_RANK_TIME"].to_numpy() \
            if fc is not None and "POSIX_F_SLOWEST_RANK_TIME" in fc.columns else None
        cls_of: dict = {}
        for k in range(len(c)):
            vec = C.from_named({key: arr[k] for key, arr in cols.items()})
            rid = int(ids[k])
            cls = cls_of.get(rid)
            if cls is None:
                name = str(names.get(rid, ""))
                if mod == "H5D":
                    name = name.split(":", 1)[0]  # "file.h5:/dataset"
                cls = cls_of[rid] = _mount_of(name, mounts) if mounts else "all"
            by_class.setdefault(cls, []).append(vec)
            rank = int(ranks[k])
            if 0 <= rank < nprocs:
                per_rank[rank].setdefault(cls, []).append(vec)
            elif mod == "POSIX" and slow_r is not None and slow_t is not None:
                t = float(slow_t[k])
                if shared_slowest is None or t > shared_slowest[1]:
                    shared_slowest = (int(slow_r[k]), t)
    ioc = C.summarize([{cls: C.combine(v) for cls, v in r.items()} for r in per_rank])
    ioc["by_class"] = {cls: C.to_named(C.combine(v)) for cls, v in by_class.items()}
    ioc["class_fs"] = {cls: fs_of.get(cls) for cls in by_class}
    ioc["class_tier"] = {cls: fs_tier(fs_of.get(cls)) for cls in by_class}
    rank_resolved = any(r["POSIX_F_READ_TIME"] > 0 for r in ioc["by_rank"])
    if not rank_resolved:
        ioc["slowest_rank"] = None
    if shared_slowest is not None:
        r, t = shared_slowest
        if not rank_resolved:
            ioc["slowest_rank"] = {"rank": r, "POSIX_F_READ_TIME": None, "POSIX_F_SLOWEST_RANK_TIME": t}
        notes.append(f"files shared by all ranks are reduced by Darshan into one record (rank -1): their counters "
                     f"are in by_class, not by_rank; Darshan names rank {r} the slowest on them "
                     f"(POSIX_F_SLOWEST_RANK_TIME {t:.4g} s: its read+write+metadata time)")
    ioc["note"] = ("Imported from a Darshan log: POSIX and H5D counters as Darshan recorded them, summed over "
                   "records (maxima for MAX counters); file classes are the mount points holding the files, "
                   "class_fs their file-system types and class_tier where the bytes live (shared: a parallel "
                   "or network file system; local; memory; unclassified). Times in seconds.")
    return ioc, notes


def darshan_run(path, *, name: str | None = None, isolate: bool = True) -> dict:
    """``darshan_doc`` of the log, parsed in a child process (``isolate``): PyDarshan's C parser can crash
    the process (SIGSEGV, abort) on a damaged log; here that is one DataError naming the log and the signal.
    The log is validated first (``_check_darshan_file``): a truncated one never reaches the parser. Logs that
    Darshan itself flagged partial are imported with a note and ``doc["warnings"]`` naming the modules."""
    p = Path(path)
    info = _check_darshan_file(p)
    doc = _darshan_in_child(p, name) if isolate else darshan_doc(p, name=name)
    if info["partial"]:
        msg = (f"LOG={p}: Darshan flagged the records of {', '.join(info['partial'])} partial (the runtime ran out "
               f"of record memory): files past that point are missing, so their counts are lower bounds")
        doc["summary"].setdefault("import_notes", []).append(msg)
        doc["imported"]["partial_modules"] = info["partial"]
        doc.setdefault("warnings", []).append(msg)
    return doc


def _darshan_child(path: str, name, conn, err_path: str) -> None:
    """Child side of ``_darshan_in_child``: libdarshan's own messages go to ``err_path``; the document or
    the one-line error goes back through ``conn``."""
    from .errors import DlbenchError

    try:
        fd = os.open(err_path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(fd, 2)
        os.close(fd)
    except OSError:
        pass
    try:
        conn.send(("ok", darshan_doc(path, name=name)))
    except DlbenchError as exc:
        conn.send(("err", type(exc).__name__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - whatever PyDarshan raised, as one line in the parent
        conn.send(("err", "DataError", f"LOG={path}: PyDarshan cannot read it ({type(exc).__name__}: {exc})"))
    finally:
        conn.close()


def _darshan_in_child(p: Path, name) -> dict:
    import multiprocessing
    import signal
    import tempfile

    from . import errors

    ctx = multiprocessing.get_context("spawn")  # no fork of a process that may hold MPI or threads
    fd, err_path = tempfile.mkstemp(prefix="dlbench-darshan-", suffix=".err")
    os.close(fd)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_darshan_child, args=(str(p), name, send, err_path), daemon=True)
    try:
        proc.start()
        send.close()
        try:
            msg = recv.recv()
        except EOFError:
            msg = None
        proc.join()
        if msg is None:
            code = proc.exitcode
            how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 and
                   -code in signal.Signals._value2member_map_ else f"exit status {code}")
            said = _libdarshan_said(err_path, errors_only=False)
            tail = f"; libdarshan said: {said[-1][:160]}" if said else ""
            raise DataError(f"LOG={p}: PyDarshan's parser crashed on it ({how}): the log is damaged{tail}")
        said = _libdarshan_said(err_path)
        if msg[0] == "ok" and (proc.exitcode != 0 or said):
            how = f"exit status {proc.exitcode}" if proc.exitcode != 0 else "errors while reading"
            raise DataError(f"LOG={p}: damaged Darshan log: PyDarshan's parser reported {how}"
                            + (f"; libdarshan said: {said[0][:160]}" if said else ""))
        if msg[0] == "ok":
            return msg[1]
        cls = getattr(errors, msg[1], DataError)
        raise (cls if isinstance(cls, type) and issubclass(cls, errors.DlbenchError) else DataError)(msg[2])
    finally:
        recv.close()
        if proc.is_alive():
            proc.terminate()
            proc.join()
        try:
            os.unlink(err_path)
        except OSError:
            pass


def _libdarshan_said(err_path: str, errors_only: bool = True) -> list[str]:
    """The lines libdarshan wrote to the child's stderr (only its ``Error:`` lines by default)."""
    try:
        lines = [ln.strip() for ln in Path(err_path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return [ln for ln in lines if ln.lower().startswith("error")] if errors_only else lines


def darshan_doc(path, *, name: str | None = None) -> dict:
    """A run.json document for a Darshan log (parsed in this process): ``total_time_s`` (the job's run time), ``ranks`` (nprocs),
    ``read_bytes``, ``phase_time_s["read"]`` (Σ POSIX_F_READ_TIME / nprocs: the mean cumulative read time
    of a rank), ``read_share``, ``read_bandwidth_bytes_per_s`` (bytes / Σ read time), ``io_counters``.
    Left out (``import_notes``): epochs, stall and so exposed I/O share, compute, samples/s."""
    rep = _report(path)
    _check_parsed(Path(path), rep)
    detail = import_darshan(path, rep)
    job = detail.get("job") or {}
    exe = str(job.get("exe") or "")
    app = name or (Path(exe.split()[0]).name if exe.split() else _stem(path))
    nprocs = int(job.get("nprocs") or 0) or None
    run_time = job.get("run_time_s")
    ioc, notes = darshan_counters(rep)
    posix = detail.get("posix") or {}
    summary: dict = {"workload": app, "strategy": "imported-darshan", "ranks": nprocs, "imported": True}
    if run_time:
        summary["total_time_s"] = float(run_time)
    rb = posix.get("POSIX_BYTES_READ")
    rt = posix.get("POSIX_F_READ_TIME")
    if rb is not None:
        summary["read_bytes"] = int(rb)
        # by where the bytes live (the mount's file-system type), not by mount point: a Lustre scratch is
        # the shared file system, not one of a node's own tiers
        bt: dict = {}
        for cls, c in ioc["by_class"].items():
            tier = ioc["class_tier"].get(cls, "unclassified")
            bt[tier] = bt.get(tier, 0) + int(c["POSIX_BYTES_READ"])
        summary["bytes_by_tier"] = bt
        if bt.get("unclassified"):
            unk = sorted(f"{cls} ({ioc['class_fs'].get(cls) or 'no mount entry'})"
                         for cls, t in ioc["class_tier"].items() if t == "unclassified"
                         and ioc["by_class"][cls].get("POSIX_BYTES_READ"))
            notes.append(f"bytes read on file systems of unknown kind are reported as 'unclassified', not as a "
                         f"tier: {', '.join(unk)}")
    if rt is not None and nprocs:
        summary["phase_time_s"] = {"read": rt / nprocs}
        if run_time:
            summary["read_share"] = rt / nprocs / float(run_time)
        if rb and rt > 0:
            summary["read_bandwidth_bytes_per_s"] = rb / rt
    summary["io_counters"] = ioc
    notes = ["Darshan import: a Darshan log has no epochs, steps or stall: epoch time, exposed I/O share, AU and "
             "samples/s are left out",
             "read time per rank = the log's cumulative POSIX read time / nprocs (a sum of call times, not a "
             "union of intervals); read share = that / the job's run time"] + notes
    if not posix:
        notes.append("the log has no POSIX module: no read figures")
    summary["import_notes"] = notes
    imported = {"kind": "darshan", "source": str(Path(path).resolve()), **detail}
    return {"config": {"workload": app, "strategy": "imported-darshan", "source": str(path), "exe": exe},
            "summary": summary, "imported": imported}


# ---- writing the folder -----------------------------------------------------------------------------------
def _stem(path) -> str:
    n = Path(path).name
    for suf in (".gz", ".csv", ".darshan"):
        if n.endswith(suf):
            n = n[: -len(suf)]
    return n or "imported"


def _safe(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("._") or "imported"
    return s[:80]


def write_imported(doc: dict, out) -> Path:
    """Write ``doc`` (from ``timelogger_run``/``darshan_run``) as ``<out>/<app>/imported-<kind>/<stamp>/
    run.json``; returns the folder. A failure while writing removes the folder."""

    from . import results

    kind = doc["imported"]["kind"]
    run_dir = results.new_run_dir(Path(out), _safe(doc["summary"]["workload"]), f"imported-{kind}")
    try:
        results.write_run(run_dir, config=doc["config"], summary=doc["summary"], error=None,
                          extra={"imported": doc["imported"]})
    except BaseException as e:
        results.remove_run_dir(run_dir)
        if isinstance(e, OSError):   # a full disk: one line, nothing kept
            from .errors import OutputError
            from .results import output_error_line

            raise OutputError(output_error_line("--out", out, e)) from None
        raise
    return run_dir
