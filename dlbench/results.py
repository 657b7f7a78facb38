"""The run folder: ``<out>/<workload>/<strategy>/<UTC stamp>/`` with

- ``run.json``      ``{"schema": "dlbench.run/1", config, environment, summary, per_epoch, error, ...}``
- ``intervals-rank<r>-p<pid>-t<thread>.rec`` + ``.json``: every timeline's raw records, written by its own
                    rank while it runs (bounded memory per rank; ``timeline.load_spilled`` reads them)
- ``intervals.npz`` every rank's raw ``Timeline.arrays()`` (keys ``r<rank>_<field>``), so every summary
                    can be recomputed from the folder: written by rank 0 from the per-rank files when the
                    run has at most ``NPZ_MAX_RECORDS`` records (``read_intervals`` reads either form)
- ``trace.json``    Chrome trace format (opens in Perfetto / chrome://tracing): one process per rank,
                    one track per thread, an ``X`` event per interval (``ts``/``dur`` in µs)
- ``summary.json``  DLIO's summary keys (``metric.train_au_percentage``, ...; ``dlio.dlio_summary``)
- ``timelogger.csv`` TimeLogger's columns plus ``Process ID, Current Thread`` (one row per record: left out,
                    with a note under ``skipped_files``, above ``NPZ_MAX_RECORDS`` records)

Only rank 0 calls ``write_run``. It is meant for a ``finally`` block: it writes what it can, never raises
over missing or partial intervals, and records artefacts that failed under ``write_errors``. No metric
arithmetic here (that is ``metrics.py``).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as _dt
import importlib.metadata
import json
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError, DataError
from .timeline import FIELDS, PHASES

SCHEMA = "dlbench.run/2"


def _from_v1(doc: dict) -> dict:
    """dlbench.run/1 → /2. Measured summaries keep their meaning. Simulated /1 summaries gave bytes per rank
    (mean) and divided the shares by epochs + prologue with exposed exchange in the exposed numerator; /2
    uses the measured definitions (``metrics.GLOSSARY``): bytes summed over ranks, shares over epoch time,
    the prologue in ``e2e_exposed_io_share``. Recomputed from the /1 summary's own phase times."""
    s = doc.get("summary")
    if isinstance(s, dict) and s.get("simulated"):
        s = dict(s)
        W = s.get("ranks") or 1
        ph = s.get("phase_time_s") or {}
        pro = float(ph.get("stage", 0.0) or 0.0)
        total = float(s.get("total_time_s") or 0.0)
        epochs_t = total - pro

        def div(a, b):
            return float(a) / b if b else 0.0

        for k in ("bytes_by_tier",):
            if isinstance(s.get(k), dict):
                s[k] = {n: float(v) * W for n, v in s[k].items()}
        if isinstance(s.get("read_bytes"), int | float):
            s["read_bytes"] = float(s["read_bytes"]) * W
        stall = float(ph.get("stall", 0.0) or 0.0)
        s["exposed_io_share"] = div(stall, epochs_t)
        if isinstance(s.get("samples_per_s"), int | float):   # /1: samples over the total time, staging included
            s["samples_per_s"] = div(float(s["samples_per_s"]) * total, epochs_t)
        s["e2e_exposed_io_share"] = div(stall + pro, total)
        s["au"] = div(ph.get("compute", 0.0), epochs_t)
        s["read_share"] = div(ph.get("read", 0.0), epochs_t)
        s["prologue_time_s"] = pro
        s["phase_time_s"] = {**ph, "stage": 0.0}
        s["prologue_phase_time_s"] = {"stage": pro}
        s["upgraded_from"] = "dlbench.run/1"
        doc = {**doc, "summary": s}
    return {**doc, "schema": SCHEMA}


# a loader per results schema version (pyperf's _JSON_MAP_VERSION): each returns the current layout
SCHEMA_LOADERS = {"dlbench.run/1": _from_v1, SCHEMA: lambda doc: doc}
TIMELOGGER_COLUMNS = ("Epoch", "Rank", "Action Name", "Action Description", "Start Time", "End Time",
                      "Time Taken", "Process ID", "Current Thread")
PHASE_DESCRIPTION = {
    "read": "Read From Storage", "decode": "Decode And Collate", "transfer": "Host To Device",
    "exchange": "Exchange Between Ranks", "stage": "Stage To Local Tier", "compute": "Compute Step",
    "checkpoint": "Checkpoint", "stall": "Wait For Next Batch", "barrier": "Barrier",
    "plan": "Build Epoch Plan", "verify": "Verify Batch", "evict": "Evict From Page Cache",
    "transfer_exposed": "Host To Device Waited For", "transfer_overlapped": "Host To Device Overlapped",
}
PACKAGES = ("dlbench", "numpy", "h5py", "torch", "mpi4py", "mpich", "click", "pyyaml", "pillow", "darshan")


def utc_stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def output_error_line(flag: str, where: Path | str, e: OSError) -> str:
    """``FLAG PATH: cannot write there: REASON (FILE); nothing was kept`` for an output that failed."""
    import errno

    why = e.strerror or str(e)
    what = f" ({e.filename})" if getattr(e, "filename", None) and str(e.filename) != str(where) else ""
    todo = {errno.ENAMETOOLONG: f"use names of at most 255 bytes per folder in {flag}",
            errno.ENOSPC: f"free space or pass {flag} elsewhere", errno.EDQUOT: f"free space or pass {flag} elsewhere",
            errno.EFBIG: f"free space or pass {flag} elsewhere"}.get(e.errno or 0, f"pass {flag} elsewhere")
    return f"{flag} {where}: cannot write there: {why}{what}; nothing was kept; {todo}"


def _out_error(out, e: OSError) -> ConfigError:
    why = e.strerror or str(e)
    if _exists(Path(out)) and not Path(out).is_dir():
        why = "it is a file, not a directory"
    where = f" ({e.filename})" if getattr(e, "filename", None) and str(e.filename) != str(out) else ""
    return ConfigError(f"--out {out}: cannot write results there: {why}{where}; pass --out DIR with a "
                       f"writable directory")


def _exists(p: Path) -> bool:
    """``p.exists()``, False where the name itself is refused (a component longer than 255 bytes raises
    ENAMETOOLONG from ``exists``); the mkdir that follows reports it in one line."""
    try:
        return p.exists()
    except OSError:
        return False


def check_out_dir(out) -> None:
    """``--out`` must be (or become) a writable directory: created if missing, then a file is written in it
    and removed. One-line ConfigError otherwise (a file path, no permission, a read-only or full file
    system)."""
    p = Path(out)
    created = []  # removed again: the check leaves nothing behind if the run stops before writing
    q = p
    while not _exists(q) and q != q.parent:
        created.append(q)
        q = q.parent
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".dlbench-write-test.{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(b"0")
        finally:
            probe.unlink(missing_ok=True)
    except OSError as e:
        raise _out_error(out, e) from None
    finally:
        for d in created:
            try:
                d.rmdir()
            except OSError:
                break


def new_run_dir(out, workload: str, strategy: str) -> Path:
    """Create and return a fresh ``<out>/<workload>/<strategy>/<UTC stamp>/`` (a suffix keeps it unique).
    ``workload`` and ``strategy`` must be plain folder names (no separator, no ``..``, not hidden): the run
    folder never lands outside ``out``. ConfigError (one line) when ``out`` cannot hold it."""
    for what, comp in (("workload", str(workload)), ("strategy", str(strategy))):
        if not comp or comp != Path(comp).name or comp.startswith(".") or "/" in comp or "\\" in comp:
            raise ConfigError(f"{what} name={comp!r}: not a plain folder name; the run folder "
                              f"<out>/<workload>/<strategy>/ must stay inside {out}")
    base = Path(out) / str(workload) / str(strategy)
    try:
        base.mkdir(parents=True, exist_ok=True)
        stamp = utc_stamp()
        for i in range(1000):
            d = base / (stamp if i == 0 else f"{stamp}-{i}")
            try:
                d.mkdir()
                return d
            except FileExistsError:
                continue
    except OSError as e:
        raise _out_error(out, e) from None
    raise ConfigError(f"--out {out}: could not create a unique run folder under {base}")


def remove_run_dir(run_dir) -> None:
    """Remove a run folder this run created (a run that stopped at an early check, or whose results could not
    be written), and its workload/strategy parents if that leaves them empty."""
    import shutil

    d = Path(run_dir)
    shutil.rmtree(d, ignore_errors=True)
    for parent in (d.parent, d.parent.parent):
        try:
            parent.rmdir()
        except OSError:
            break


# ---- environment ---------------------------------------------------------------------------------
def _git(repo: Path) -> dict:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5)
        if r.returncode != 0:
            return {"commit": None, "dirty": None}
        d = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                           text=True, timeout=5)
        return {"commit": r.stdout.strip(), "dirty": bool(d.stdout.strip()) if d.returncode == 0 else None}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def environment() -> dict:
    """Host, Python, package versions (from metadata: nothing heavy is imported), git commit + dirty."""
    versions: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            versions[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            versions[p] = None
        except Exception:  # noqa: BLE001 - broken metadata must not break a run's record
            versions[p] = None
    return {
        "host": socket.gethostname(), "platform": platform.platform(), "machine": platform.machine(),
        "python": sys.version.split()[0], "python_executable": sys.executable,
        "cpu_count": os.cpu_count(), "argv": list(sys.argv), "pid": os.getpid(),
        "packages": versions, "git": _git(Path(__file__).resolve().parent.parent),
        "utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
    }


def _jsonable(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return dataclasses.asdict(o)
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    if isinstance(o, BaseException):
        return f"{type(o).__name__}: {o}"
    return str(o)


def _tmp_for(path: Path, suffix: str = ".tmp") -> Path:
    """A temporary name private to this process: ranks that fail together may write the same run
    folder at once, and each file must still be whole (write to the private name, then rename)."""
    return path.with_name(f".{path.name}.{os.getpid()}{suffix}")


def _finite(o, path: str, bad: list):
    """``o`` with every NaN/±Infinity replaced by null (strict JSON: RFC 8259 has no such numbers); the key
    paths replaced are appended to ``bad``."""
    if isinstance(o, float | np.floating):
        if not math.isfinite(float(o)):
            bad.append(path)
            return None
        return float(o)
    if isinstance(o, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), bad) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_finite(v, f"{path}[{i}]", bad) for i, v in enumerate(o)]
    if isinstance(o, np.ndarray) and o.dtype.kind == "f":
        return _finite(o.tolist(), path, bad)
    return o


def _dump_json(path: Path, obj) -> None:
    """Strict JSON, atomically. A non-finite number becomes null, and its key path is listed under
    ``non_finite_as_null`` (top level of a mapping) so nothing is hidden."""
    bad: list = []
    obj = _finite(obj, "", bad)
    if bad and isinstance(obj, dict):
        obj["non_finite_as_null"] = bad[:100]
    tmp = _tmp_for(path)
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1, default=_jsonable, allow_nan=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # nothing half-written left (a full disk)
        raise


def _clean(intervals) -> list[dict]:
    """Keep the usable per-rank dicts (None or non-dicts dropped; missing fields become empty)."""
    out = []
    for i, a in enumerate(intervals or []):
        if not isinstance(a, dict):
            continue
        d = dict(a)
        n = min((len(np.asarray(d[f])) for f, _ in FIELDS if d.get(f) is not None), default=0)
        for f, dt in (*FIELDS, ("thread", np.int32)):
            v = d.get(f)
            d[f] = np.zeros(n, dtype=dt) if v is None else np.asarray(v, dtype=dt)[:n]
            if len(d[f]) < n:
                d[f] = np.zeros(n, dtype=dt)
        d.setdefault("rank", i)
        out.append(d)
    return out


# ---- artefacts -----------------------------------------------------------------------------------
NPZ_MAX_RECORDS = 4_000_000   # above this, the per-rank files are the only copy of the intervals


class SpilledIntervals:
    """The per-rank interval files of a run folder as a re-iterable sequence of per-rank arrays dicts,
    loaded one rank at a time (rank 0 never holds every rank's intervals at once)."""

    def __init__(self, folder):
        from .timeline import spilled_ranks

        self.folder = Path(folder)
        self.ranks = spilled_ranks(self.folder)

    def __len__(self) -> int:
        return len(self.ranks)

    def __iter__(self):
        from .timeline import load_spilled

        for r in self.ranks:
            yield from load_spilled(self.folder, r)

    def records(self) -> int:
        import json

        return sum(int(json.loads(p.read_text())["records"]) for p in self.folder.glob("intervals-rank*.json"))


def write_intervals(path: Path, intervals: list[dict]) -> None:
    arrs: dict[str, Any] = {}
    for a in intervals:
        r = int(a.get("rank", 0))
        for k, v in a.items():
            if v is None:
                continue
            arrs[f"r{r}_{k}"] = np.asarray(v)
    arrs["ranks"] = np.array([int(a.get("rank", 0)) for a in intervals], dtype=np.int64)
    tmp = _tmp_for(path, ".tmp.npz")
    try:
        np.savez_compressed(tmp, **arrs)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_intervals(path) -> list[dict]:
    """``intervals.npz`` (or, given a run folder, its ``intervals.npz`` or else its per-rank interval files)
    back into a list of per-rank arrays dicts (ordered by rank)."""
    p = Path(path)
    if p.is_dir():
        if (p / "intervals.npz").is_file():
            p = p / "intervals.npz"
        else:
            return list(SpilledIntervals(p))
    path = p
    out = []
    with np.load(path) as z:
        for r in z["ranks"].tolist():
            pre = f"r{r}_"
            d = {k[len(pre):]: z[k] for k in z.files if k.startswith(pre)}
            for k in ("rank", "pid", "wall_offset_ns"):
                if k in d:
                    d[k] = int(d[k])
            out.append(d)
    return out


def _wall0(intervals: list[dict]) -> int:
    """Earliest wall-clock ns over ranks (records are perf_counter_ns + the rank's wall offset)."""
    best = None
    for a in intervals:
        off = int(a.get("wall_offset_ns", 0))
        for k in ("start_ns", "epoch_start_ns"):
            v = np.asarray(a.get(k, ()))
            if v.size:
                m = int(v.min()) + off
                best = m if best is None else min(best, m)
    return best or 0


def trace_events(intervals: list[dict], max_events: int = 2_000_000) -> dict:
    """Chrome trace (``traceEvents``, ph "X", µs): pid = rank, tid = thread, name = phase; epochs on
    their own track (tid −1). Time 0 = the earliest event of the run; ranks aligned by wall clock."""
    t0 = _wall0(intervals)
    ev: list[dict] = []
    truncated = False
    for a in intervals:
        r = int(a.get("rank", 0))
        off = int(a.get("wall_offset_ns", 0)) - t0
        ev.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        ev.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
        ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": -1, "args": {"name": "epochs"}})
        for t in np.unique(a["thread"]).tolist():
            ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": int(t),
                       "args": {"name": "trainer" if t == 0 else f"thread {t}"}})
        for e, s, t in zip(a.get("epochs", ()), a.get("epoch_start_ns", ()), a.get("epoch_end_ns", ())):
            ev.append({"ph": "X", "name": f"epoch {int(e)}", "cat": "epoch", "pid": r, "tid": -1,
                       "ts": (int(s) + off) / 1e3, "dur": (int(t) - int(s)) / 1e3, "args": {"epoch": int(e)}})
        n = len(a["start_ns"])
        if len(ev) + n > max_events:
            n = max(0, max_events - len(ev))
            truncated = True
        s = a["start_ns"][:n].astype(np.int64)
        ts = ((s + off) / 1e3).tolist()
        dur = ((a["end_ns"][:n].astype(np.int64) - s) / 1e3).tolist()
        ph = a["phase"][:n].tolist()
        th = a["thread"][:n].tolist()
        epl = a["epoch"][:n].tolist()
        stl = a["step"][:n].tolist()
        nbl = a["nbytes"][:n].tolist()
        til = a["tier"][:n].tolist()
        for i in range(n):
            p = ph[i]
            ev.append({"ph": "X", "name": PHASES[p] if p < len(PHASES) else f"phase{p}", "cat": "dlbench",
                       "pid": r, "tid": th[i], "ts": ts[i], "dur": dur[i],
                       "args": {"bytes": nbl[i], "epoch": epl[i], "step": stl[i], "tier": til[i]}})
    return {"traceEvents": ev, "displayTimeUnit": "ms",
            "otherData": {"schema": "dlbench.trace/1", "t0_unix_ns": t0, "truncated": truncated}}


def write_timelogger_csv(path: Path, intervals: list[dict]) -> None:
    """TimeLogger CSV: header ``Epoch, Rank, Action Name, ...`` (", "-separated as TimeLogger writes it),
    times in Unix seconds, one row per interval, then one ``epoch`` row per marked epoch."""
    tmp = _tmp_for(path)
    try:
        _write_timelogger(tmp, intervals)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _write_timelogger(tmp: Path, intervals: list[dict]) -> None:
    with open(tmp, "w", newline="") as f:
        f.write(", ".join(TIMELOGGER_COLUMNS) + "\n")
        w = csv.writer(f, lineterminator="\n")
        for a in intervals:
            r = int(a.get("rank", 0))
            off = int(a.get("wall_offset_ns", 0))
            pid = int(a.get("pid", 0))
            s = (a["start_ns"].astype(np.int64) + off) / 1e9
            e = (a["end_ns"].astype(np.int64) + off) / 1e9
            d = (a["end_ns"].astype(np.int64) - a["start_ns"].astype(np.int64)) / 1e9
            for ep, ph, ss, ee, dd, th in zip(a["epoch"].tolist(), a["phase"].tolist(), s.tolist(), e.tolist(),
                                             d.tolist(), a["thread"].tolist()):
                name = PHASES[ph] if ph < len(PHASES) else f"phase{ph}"
                w.writerow([ep, r, f" {name}", f" {PHASE_DESCRIPTION.get(name, name)}", f"{ss:.6f}", f"{ee:.6f}",
                            f"{dd:.9f}", pid, th])
            for ep, ss, ee in zip(a.get("epochs", ()), a.get("epoch_start_ns", ()), a.get("epoch_end_ns", ())):
                w.writerow([int(ep), r, " epoch", " Epoch", f"{(int(ss) + off) / 1e9:.6f}",
                            f"{(int(ee) + off) / 1e9:.6f}", f"{(int(ee) - int(ss)) / 1e9:.9f}", pid, -1])


def write_run(run_dir, *, config, summary, per_epoch=None, intervals=None, error=None, simulated=False,
              extra=None, status: str | None = None) -> Path:
    """Write the run folder (see module docstring). ``intervals``: list of per-rank ``Timeline.arrays()``
    (None entries / missing fields tolerated). ``error``: an exception or message (the run failed).
    ``status`` overrides ok/failed (``interrupted``). Returns the path of run.json. Only an unwritable
    folder makes it raise (OSError: no space, no permission)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_errors: dict[str, str] = {}
    files: list[str] = []
    spilled = isinstance(intervals, SpilledIntervals)
    try:
        ivs = intervals if spilled else _clean(intervals)
    except Exception as exc:  # noqa: BLE001
        ivs = []
        write_errors["intervals"] = f"{type(exc).__name__}: {exc}"
    if spilled:
        files += sorted(p.name for p in run_dir.glob("intervals-rank*"))
    skipped: dict[str, str] = {}
    if ivs:
        n_rec = intervals.records() if spilled else sum(len(a["start_ns"]) for a in ivs)
        artefacts = [("intervals.npz", write_intervals),
                     ("trace.json", lambda p, iv: _dump_json(p, trace_events(iv))),
                     ("timelogger.csv", write_timelogger_csv)]
        if n_rec > NPZ_MAX_RECORDS:
            # one row per record of every rank: the csv (and, from per-rank files, the one npz holding every
            # rank at once) would be unbounded; the per-rank interval files are the raw data
            too_big = ("intervals.npz", "timelogger.csv") if spilled else ("timelogger.csv",)
            for name in too_big:
                skipped[name] = (f"not written: {n_rec:,} interval records, over the {NPZ_MAX_RECORDS:,} cap "
                                 f"(NPZ_MAX_RECORDS)")
            artefacts = [a for a in artefacts if a[0] not in too_big]
        for name, fn in artefacts:
            try:
                fn(run_dir / name, ivs)
                files.append(name)
            except Exception as exc:  # noqa: BLE001 - a broken artefact must not hide the run's record
                write_errors[name] = f"{type(exc).__name__}: {exc}"
    try:
        env = environment()
    except Exception as exc:  # noqa: BLE001
        env = {"error": str(exc)}
    if error is not None and not isinstance(error, str | dict):
        error = {"type": type(error).__name__, "message": str(error)}
    doc = {
        "schema": SCHEMA, "status": status or ("failed" if error is not None else "ok"),
        "simulated": bool(simulated),
        "config": config, "environment": env, "summary": summary, "per_epoch": per_epoch,
        "error": error, "files": files, "write_errors": write_errors or None,
    }
    if skipped:
        doc["skipped_files"] = skipped
    try:
        from .provenance import collect

        # an imported record ran elsewhere: this machine's facts would be false for it
        doc["provenance"] = None if (extra or {}).get("imported") else collect(
            config if isinstance(config, dict) else None)
    except Exception as exc:  # noqa: BLE001 - a broken probe must not hide the run's record
        write_errors["provenance"] = f"{type(exc).__name__}: {exc}"
        doc["write_errors"] = write_errors
    if extra:
        for k, v in dict(extra).items():
            doc.setdefault(k, v)
    try:  # DLIO's summary.json beside run.json (MLPerf Storage / DLIO post-processing)
        from .dlio import dlio_summary

        dsum = dlio_summary(doc)
        if dsum is not None:
            _dump_json(run_dir / "summary.json", dsum)
            files.append("summary.json")
    except Exception as exc:  # noqa: BLE001 - run.json is the record; say what failed there
        doc["write_errors"] = {**(doc["write_errors"] or {}), "summary.json": f"{type(exc).__name__}: {exc}"}
    path = run_dir / "run.json"
    _dump_json(path, doc)
    return path


def find_run_dirs(paths: Sequence, dedup: bool = True) -> list[Path]:
    """Run folders from the arguments: a folder holding ``run.json`` is a run; any other folder is
    searched for run folders below it (a results root). Sorted within each argument, order of the
    arguments kept, duplicates dropped unless ``dedup`` is false. A path with no run below it is an error."""
    out: list[Path] = []
    seen: set[Path] = set()
    for p in map(Path, paths):
        if p.is_file() and p.name == "run.json":
            found = [p.parent]
        elif (p / "run.json").is_file():
            found = [p]
        elif p.is_dir():
            found = sorted(f.parent for f in p.rglob("run.json"))
        else:
            raise DataError(f"RUN_DIR {p}: no such folder")
        if not found:
            raise DataError(f"RUN_DIR {p}: no run.json in it or below it (not a dlbench results folder)")
        for d in found:
            r = d.resolve()
            if r not in seen or not dedup:
                seen.add(r)
                out.append(d)
    return out


def read_run(run_dir) -> dict:
    """run.json of a run folder (or the file itself) as a dict, with ``run_dir`` added. DataError (one
    line) for a folder without run.json, an unreadable, empty, truncated or non-JSON file, or JSON that is
    not a dlbench run."""
    from .errors import DataError

    p = Path(run_dir)
    f = p if p.is_file() else p / "run.json"
    if not f.is_file():
        raise DataError(f"{run_dir}: not a dlbench run folder (no run.json); pass a folder that `dlbench run` "
                        f"or `dlbench simulate` wrote, e.g. results/<workload>/<strategy>/<stamp>")
    try:
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{f}: not a dlbench run.json (binary content)") from None
    except OSError as e:
        raise DataError(f"{f}: cannot be read ({e.strerror or e})") from None
    if not text.strip():
        raise DataError(f"{f}: empty; the run that wrote it did not finish writing (a full disk?)")
    try:
        doc = json.loads(text)
    except RecursionError:
        raise DataError(f"{f}: not a dlbench run.json (nested too deep to read: damaged or foreign)") from None
    except json.JSONDecodeError as e:
        raise DataError(f"{f}: not valid JSON ({e.msg}, line {e.lineno} column {e.colno}): truncated or "
                        f"corrupt") from None
    except ValueError as e:   # valid JSON Python will not read (an integer of over 4,300 digits)
        raise DataError(f"{f}: not a dlbench run.json ({e})") from None
    got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
    if not isinstance(doc, dict) or not (isinstance(got, str) and got.startswith("dlbench.run/")):
        raise DataError(f"{f}: not a dlbench run (schema {got!r}, expected {SCHEMA!r})")
    if got not in SCHEMA_LOADERS:
        from . import __version__

        raise DataError(f"{f}: results schema {got!r} is not one this dlbench ({__version__}) reads "
                        f"({', '.join(SCHEMA_LOADERS)}); it was written by a newer dlbench: upgrade to read it")
    for key in ("summary", "config"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise DataError(f"{f}: not a dlbench run ({key!r} is a {type(doc[key]).__name__}, not a mapping)")
    doc = SCHEMA_LOADERS[got](doc)
    doc["run_dir"] = str(f.parent)
    return doc
