"""dftracer traces (``.pfw`` / ``.pfw.gz``) as a dlbench results folder: ``dlbench import dftracer TRACE...``.

dftracer (LLNL; what DLIO's users trace with) writes one trace per process: JSON lines, Chrome trace
events. Metadata events (``cat: "dftracer"``, ``ph: 4``) name things by hash: ``FH`` maps a file hash to its
path, ``HH`` a host hash to its name, ``SH`` a string (the command line) to its hash, ``CM`` says the time
unit (``time_metric``: ``US`` by default); a ``start`` event gives the process's ``ppid``. Call events
(``cat: "POSIX"`` or ``"STDIO"``) carry ``name`` (``open64``, ``read``, ``pread64``, ``readv``, ...),
``pid``, ``tid``, ``ts`` and ``dur`` (wall clock, in that unit) and ``args`` with ``fhash`` (or ``fname`` in
older versions), ``ret`` (bytes for reads and writes; the new offset for ``lseek``), ``offset`` and
``count``. Older traces wrap the lines in ``[`` ... ``]`` with a ``,`` after each event: both are read.

What is made of it (``parse_traces`` → ``dftracer_run``):

- Darshan-style counters (``dlbench.counters``) per file, per process and per *file class*, the same
  vector dlbench's own runs record: opens (``open``/``open64``/``openat``/``creat``/``fopen`` ...), read
  calls and bytes (``read``, ``pread``/``pread64``, ``readv``, ``preadv``/``preadv64``/``preadv2``,
  ``fread``; bytes = ``ret``), the access-size histogram, sequential/consecutive reads (Darshan's rules,
  the offset of ``read``/``readv``/``fread`` tracked from opens, ``lseek`` returns and earlier reads of the
  process), read time (Σ ``dur``), writes. A call that failed (``ret`` < 0) is not counted as a read or
  write; failures are counted apart (``failed_calls``), and so are calls without a return value
  (``calls_without_ret``: a trace recorded without ``DFTRACER_INC_METADATA=1``, which also drops file names;
  ``summary.import_warning`` then says the byte figures miss them, or are all 0). ``imported.files`` holds per-file opens, reads,
  bytes and writes (per pid too) of the ``MAX_FILES_KEPT`` files with the most bytes (``files_total``: all).
- File classes: ``--tier PREFIX=NAME`` names the files under a path prefix (longest prefix wins:
  ``--tier /lustre/ds=shared --tier /tmp/loc=local``); other files are classed by the mount point that
  holds their path on *this* machine (``/proc/self/mounts``, ``"<mount point> (<fs type>)"``), since a
  dftracer trace carries no mount table (Darshan's logs do): import on the machine that ran the job, or
  name the classes.
- Ranks: dftracer does not record MPI ranks. Every traced process whose parent is not itself traced is a
  rank (DataLoader workers, children of a traced process, count with it); ranks are numbered by
  (host, first event time, pid).
- Read phase: every read call becomes a ``read`` interval of its rank, so ``dlbench plot --kind
  timeline`` draws the trace, ``report`` and ``compare`` read the summary: ``total_time_s`` = first to
  last event of the trace, ``phase_time_s.read`` = the mean over ranks of the union of the rank's read
  intervals (overlapping threads not double counted), ``read_share``, ``read_bandwidth_bytes_per_s``
  (bytes / Σ ranks' union read time), ``bytes_by_tier``. A POSIX trace has no epochs, steps or stall:
  epoch time, exposed I/O share, AU and samples/s are left out and said so.
- Robustness: a line that is not a JSON object (a trace cut short by a killed process, garbled bytes) is
  skipped, counted and reported with its file and line number (``bad_lines``); ``strict=True`` refuses the
  trace instead (DataError naming the first bad line). Everything is parsed before any folder is made.
"""

from __future__ import annotations

import json
import os
import zlib
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Any

import numpy as np

from . import counters as C
from .errors import ConfigError, DataError
from .storage.counters import IOCounters

OPEN_CALLS = frozenset(("open", "open64", "openat", "openat64", "__open_2", "__open64_2", "creat", "creat64",
                        "fopen", "fopen64", "freopen", "freopen64", "fdopen"))
READ_AT_CALLS = frozenset(("pread", "pread64", "preadv", "preadv64", "preadv2", "preadv64v2"))
READ_POS_CALLS = frozenset(("read", "readv", "fread", "__read_chk"))
WRITE_AT_CALLS = frozenset(("pwrite", "pwrite64", "pwritev", "pwritev64", "pwritev2", "pwritev64v2"))
WRITE_POS_CALLS = frozenset(("write", "writev", "fwrite"))
SEEK_CALLS = frozenset(("lseek", "lseek64", "fseek", "fseeko", "fseeko64"))
IO_CATS = frozenset(("POSIX", "STDIO"))
TIME_UNITS_NS = {"US": 1000, "NS": 1, "MS": 1_000_000, "S": 1_000_000_000}
MAX_BAD_LINES_KEPT = 50
MAX_FILES_KEPT = 2000      # per-file counters written to run.json (the files with the most bytes)
TRACE_SUFFIXES = (".pfw", ".pfw.gz")


# ---- finding and reading the files --------------------------------------------------------------------------
def trace_files(paths) -> list[Path]:
    """The trace files named by ``paths`` (files, or folders searched recursively for ``*.pfw`` and
    ``*.pfw.gz``), sorted. DataError for a missing path or a folder without traces."""
    out: list[Path] = []
    if not paths:
        raise ConfigError("TRACE: no trace given; pass .pfw/.pfw.gz files or a folder holding them")
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and q.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise DataError(f"TRACE={p}: a folder without dftracer traces (*.pfw, *.pfw.gz)")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise DataError(f"TRACE={p}: no such file or folder")
    seen, uniq = set(), []
    for p in out:
        k = p.resolve()
        if k not in seen:
            seen.add(k)
            uniq.append(p)
    return uniq


def _gz_chunks(path: Path, bad: list):
    """Decompressed chunks of a (multi-member) gzip file; a stream cut short or damaged ends with a bad-line
    entry, after everything before the damage has been yielded (what a killed process leaves is kept)."""
    d, fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    try:
        with open(path, "rb") as fh:
            while True:
                raw = fh.read(1 << 20)
                if not raw:
                    break
                while raw:
                    fed = True
                    yield d.decompress(raw)
                    raw = b""
                    if d.eof:  # a member ended: what follows is the next member
                        raw = d.unused_data
                        d, fed = zlib.decompressobj(16 + zlib.MAX_WBITS), False
        yield d.flush()
    except zlib.error as e:
        bad.append((str(path), 0, f"compressed stream damaged ({e})"))
        return
    except OSError as e:
        bad.append((str(path), 0, f"cannot read it ({e.strerror or e})"))
        return
    if fed and not d.eof:
        bad.append((str(path), 0, "compressed stream cut short (the process was killed, or the copy is incomplete)"))


def _lines(path: Path, bad: list):
    """(line number, text) of a trace file (.pfw, or .pfw.gz read incrementally so a cut stream keeps its
    complete lines)."""
    if not path.name.endswith(".gz"):
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                yield from enumerate(fh, 1)
        except OSError as e:
            bad.append((str(path), 0, f"cannot read it ({e.strerror or e})"))
        return
    n, rest = 0, b""
    damage: list = []
    for chunk in _gz_chunks(path, damage):
        buf = rest + chunk
        parts = buf.split(b"\n")
        rest = parts.pop()
        for line in parts:
            n += 1
            yield n, line.decode("utf-8", errors="replace")
    for f, _ln, why in damage:  # the stream's damage: after its last line (a cut line included)
        bad.append((f, n + 1 + (1 if rest else 0), why))
    if rest:
        n += 1
        yield n, rest.decode("utf-8", errors="replace")


# ---- the parse ----------------------------------------------------------------------------------------------
class _Proc:
    """One traced process: its parent, its span, its read calls (as int64 arrays: a trace may hold 10^7 reads)
    and its counters per class."""

    __slots__ = ("pid", "host", "ppid", "first_ns", "last_ns", "reads", "by_class")

    def __init__(self, pid: int, host: str):
        self.pid, self.host, self.ppid = pid, host, None
        self.first_ns = self.last_ns = None
        # start_ns, end_ns, nbytes, tid, class number: one array each
        self.reads = tuple(array("q") for _ in range(5))
        self.by_class: dict[str, IOCounters] = {}


class ReadRecords:
    """(offset, bytes, pid) of a file's reads in three int64 arrays (24 B a read); iterates as tuples."""

    __slots__ = ("off", "n", "pid")

    def __init__(self):
        self.off, self.n, self.pid = array("q"), array("q"), array("q")

    def add(self, off: int, n: int, pid: int) -> None:
        self.off.append(off)
        self.n.append(n)
        self.pid.append(pid)

    def __len__(self) -> int:
        return len(self.off)

    def __iter__(self):
        return zip(self.off, self.n, self.pid)


class Classifier:
    """Path → file class: the longest ``--tier`` prefix, else the mount point holding the path here."""

    def __init__(self, tiers: dict | None = None, mounts: list[tuple[str, str]] | None = None):
        self.tiers = sorted(((os.path.normpath(str(k)), str(v)) for k, v in (tiers or {}).items()),
                            key=lambda kv: len(kv[0]), reverse=True)
        self.mounts = sorted(mounts if mounts is not None else read_mounts(), key=lambda m: len(m[0]),
                             reverse=True)
        self._cache: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        c = self._cache.get(path)
        if c is None:
            c = self._cache[path] = self._classify(path)
        return c

    def _classify(self, path: str) -> str:
        for pre, name in self.tiers:
            if path == pre or path.startswith(pre.rstrip("/") + "/"):
                return name
        for mnt, fs in self.mounts:
            if path == mnt or path.startswith(mnt.rstrip("/") + "/"):
                return f"{mnt} ({fs})"
        return "other"


def read_mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of this machine (``/proc/self/mounts``; empty where there is none)."""
    out = []
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3:
                    out.append((parts[1].replace("\\040", " "), parts[2]))
    except OSError:
        pass
    return out


def parse_tier_args(items) -> dict:
    """``["PREFIX=NAME", ...]`` → {prefix: name}; ConfigError for a malformed item."""
    out = {}
    for it in items or ():
        pre, sep, name = str(it).partition("=")
        if not sep or not pre or not name:
            raise ConfigError(f"--tier {it!r}: expected PREFIX=NAME, e.g. --tier /lustre/data=shared")
        out[pre] = name
    return out


_INT_LIMIT = 1 << 62   # a field past this is garbage (and would not fit the int64 records)


def _int(v, default=None):
    """``int(v)``, or ``default`` for a missing, non-numeric, infinite or absurdly large value."""
    try:
        i = int(v)
    except (TypeError, ValueError, OverflowError):
        return default
    return i if -_INT_LIMIT < i < _INT_LIMIT else default


def parse_traces(paths, *, tiers: dict | None = None, strict: bool = False, mounts=None) -> dict:
    """Parse dftracer traces (see the module docstring). Returns ``{"files", "procs": {(host, pid): _Proc},
    "files_by_class", "per_file", "bad_lines", "bad_line_count", "failed_calls", "other_calls", "events",
    "time_unit"}``. ``per_file``: {path: {"class", "opens", "reads", "bytes_read", "writes",
    "bytes_written", "reads_by_pid": {pid: n}, "bytes_by_pid", "opens_by_pid", "read_offsets": [...]}}
    (``read_offsets``: ``ReadRecords``, (offset, bytes, pid) of every read, kept for comparisons); ``classes``:
    the class names by number (``_Proc.reads[4]``)."""
    files = trace_files(paths)
    classify = Classifier(tiers, mounts)
    bad: list = []
    fnames: dict[str, str] = {}
    hosts: dict[str, str] = {}
    procs: dict[tuple, _Proc] = {}
    unit_ns = 1000
    unit = "US"
    pos: dict[tuple, int] = {}
    file_no: dict[str, int] = {}
    per_file: dict[str, dict] = {}
    failed: dict[str, int] = {}
    no_ret: dict[str, int] = {}     # read/write calls on a named file without a return value (no metadata)
    other: dict[str, int] = {}
    events = 0
    class_no: dict[str, int] = {}
    pending: list = []   # call events whose fhash had no FH yet (FH lines may follow in a merged trace)

    def fstat(path):
        d = per_file.get(path)
        if d is None:
            d = per_file[path] = {"class": classify(path), "opens": 0, "reads": 0, "bytes_read": 0, "writes": 0,
                                  "bytes_written": 0, "opens_by_pid": {}, "reads_by_pid": {}, "bytes_by_pid": {},
                                  "read_offsets": ReadRecords()}
            file_no[path] = len(file_no)
        return d

    def handle(e, path):
        nonlocal events
        name = e.get("name")
        a = e.get("args") or {}
        pid = _int(e.get("pid"), 0)
        host = hosts.get(str(a.get("hhash", "")), str(a.get("hhash", "")))
        pr = procs.get((host, pid))
        if pr is None:
            pr = procs[(host, pid)] = _Proc(pid, host)
        ts = _int(e.get("ts"), 0) * unit_ns
        dur = max(0, _int(e.get("dur"), 0) or 0) * unit_ns
        pr.first_ns = ts if pr.first_ns is None else min(pr.first_ns, ts)
        pr.last_ns = ts + dur if pr.last_ns is None else max(pr.last_ns, ts + dur)
        events += 1
        if path is None:
            other[name] = other.get(name, 0) + 1
            return
        ret = _int(a.get("ret"))
        tid = _int(e.get("tid"), pid)
        # the file offset of read/readv per thread: a trace names files, not descriptors, and threads that read
        # one file each hold their own descriptor (a process-wide key mixes their seeks up)
        key = (host, pid, tid, path)
        if name in OPEN_CALLS:
            if ret is not None and ret < 0:
                failed[name] = failed.get(name, 0) + 1
                return
            d = fstat(path)
            cls = d["class"]
            c = pr.by_class.get(cls) or pr.by_class.setdefault(cls, IOCounters(cls))
            c.open()
            d["opens"] += 1
            d["opens_by_pid"][pid] = d["opens_by_pid"].get(pid, 0) + 1
            pos[key] = 0
            return
        if name in SEEK_CALLS:
            if ret is not None and ret >= 0 and name.startswith("lseek"):
                pos[key] = ret
            return
        is_read_at, is_read_pos = name in READ_AT_CALLS, name in READ_POS_CALLS
        if is_read_at or is_read_pos:
            if "ret" not in a:   # recorded without DFTRACER_INC_METADATA=1: no return value, so no byte count
                no_ret[name] = no_ret.get(name, 0) + 1
                return
            if ret is None or ret < 0:   # failed, or a value that is no byte count
                failed[name] = failed.get(name, 0) + 1
                return
            nbytes = ret
            if name == "fread":
                nbytes = ret * (_int(a.get("size"), 1) or 1)
            if is_read_at:
                off = _int(a.get("offset"), 0) or 0
            else:
                off = pos.get(key, 0)
                pos[key] = off + nbytes
            d = fstat(path)
            cls = d["class"]
            c = pr.by_class.get(cls) or pr.by_class.setdefault(cls, IOCounters(cls))
            c.read(file_no[path], off, nbytes, dur)
            d["reads"] += 1
            d["bytes_read"] += nbytes
            d["reads_by_pid"][pid] = d["reads_by_pid"].get(pid, 0) + 1
            d["bytes_by_pid"][pid] = d["bytes_by_pid"].get(pid, 0) + nbytes
            d["read_offsets"].add(off, nbytes, pid)
            rs = pr.reads
            rs[0].append(ts)
            rs[1].append(ts + dur)
            rs[2].append(nbytes)
            rs[3].append(tid)
            rs[4].append(class_no.setdefault(cls, len(class_no)))
            return
        if name in WRITE_AT_CALLS or name in WRITE_POS_CALLS:
            if "ret" not in a:
                no_ret[name] = no_ret.get(name, 0) + 1
                return
            if ret is None or ret < 0:
                failed[name] = failed.get(name, 0) + 1
                return
            nbytes = ret * ((_int(a.get("size"), 1) or 1) if name == "fwrite" else 1)
            if name in WRITE_POS_CALLS:
                pos[key] = pos.get(key, 0) + nbytes
            d = fstat(path)
            cls = d["class"]
            c = pr.by_class.get(cls) or pr.by_class.setdefault(cls, IOCounters(cls))
            c.write(nbytes, dur)
            d["writes"] += 1
            d["bytes_written"] += nbytes
            return
        other[name] = other.get(name, 0) + 1

    for f in files:
        for lineno, line in _lines(f, bad):
            s = line.strip()
            if not s or s in ("[", "]"):
                continue
            if s.endswith(","):
                s = s[:-1]
            try:
                e = json.loads(s)
            except json.JSONDecodeError as exc:
                bad.append((str(f), lineno, f"not JSON ({exc.msg})"))
                continue
            if not isinstance(e, dict) or not isinstance(e.get("name"), str):
                bad.append((str(f), lineno, "not a trace event (a JSON object with a name)"))
                continue
            cat, name = e.get("cat"), e.get("name")
            args = e.get("args")
            a: dict = args if isinstance(args, dict) else {}
            if cat == "dftracer" or e.get("ph") in (4, "M"):
                if name == "FH" and "value" in a:
                    fnames[str(a["value"])] = str(a.get("name", ""))
                elif name == "HH" and "value" in a:
                    hosts[str(a["value"])] = str(a.get("name", ""))
                elif name == "CM" and a.get("name") == "time_metric":
                    unit = str(a.get("value", "US")).upper()
                    unit_ns = TIME_UNITS_NS.get(unit, 1000)
                elif name == "start":
                    pid = _int(e.get("pid"), 0)
                    host = hosts.get(str(a.get("hhash", "")), str(a.get("hhash", "")))
                    pr = procs.get((host, pid)) or procs.setdefault((host, pid), _Proc(pid, host))
                    pr.ppid = _int(a.get("ppid"))
                    ts = _int(e.get("ts"))
                    if ts is not None:
                        ts *= unit_ns
                        pr.first_ns = ts if pr.first_ns is None else min(pr.first_ns, ts)
                        pr.last_ns = ts if pr.last_ns is None else max(pr.last_ns, ts)
                continue
            if cat not in IO_CATS:
                other[f"{cat}:{name}"] = other.get(f"{cat}:{name}", 0) + 1
                continue
            if not isinstance(e.get("args"), dict):
                e["args"] = a
            fh = a.get("fhash")
            path = a.get("fname")
            if path is None and fh is not None:
                path = fnames.get(str(fh))
                if path is None:
                    pending.append((e, str(fh), str(f), lineno))
                    continue
            handle(e, None if path is None else str(path))
        # a file's FH lines precede its calls within one process's trace; across files they may not
        still = []
        for e, fh, src, ln in pending:
            p = fnames.get(fh)
            if p is None:
                still.append((e, fh, src, ln))
            else:
                handle(e, p)
        pending = still
    for e, fh, src, ln in pending:
        bad.append((src, ln, f"file hash {fh} never named (no FH event): the call is not attributed to a file"))
        handle(e, None)
    order = {str(f): k for k, f in enumerate(files)}
    bad.sort(key=lambda b: (order.get(b[0], len(order)), b[1]))
    if strict and bad:
        f, ln, why = bad[0]
        raise DataError(f"TRACE={f}: line {ln}: {why} ({len(bad)} bad line(s) in all); drop --strict to skip "
                        f"and count them")
    if not procs:
        raise DataError(f"TRACE={files[0]}{' ...' if len(files) > 1 else ''}: no dftracer events found")
    return {"files": [str(p) for p in files], "procs": procs, "per_file": per_file, "bad_lines": bad[:MAX_BAD_LINES_KEPT],
            "bad_line_count": len(bad), "failed_calls": failed, "calls_without_ret": no_ret,
            "other_calls": other, "events": events,
            "time_unit": unit, "classes": sorted(class_no, key=lambda c: class_no[c])}


def ranks_of(procs: dict) -> tuple[list[tuple], dict]:
    """(root process keys in rank order, {process key: rank}): a process whose parent is traced (on the same
    host) belongs to its parent's rank; the others are ranks, numbered by (host, first event, pid)."""
    by_host_pid = {k: p for k, p in procs.items()}
    roots = [k for k, p in procs.items() if p.ppid is None or (k[0], p.ppid) not in by_host_pid]
    roots.sort(key=lambda k: (k[0], procs[k].first_ns or 0, k[1]))
    rank_of = {k: r for r, k in enumerate(roots)}
    for k in procs:
        seen, cur = set(), k
        while cur not in rank_of and cur not in seen:
            seen.add(cur)
            cur = (cur[0], procs[cur].ppid)
        if cur in rank_of:
            rank_of[k] = rank_of[cur]
    return roots, rank_of


def tier_of_class(cls: str) -> str:
    """A class's tier: a tier name given with ``--tier``, else the file-system type of its mount
    (``importers.fs_tier``: lustre, gpfs, nfs, ... = shared; xfs, ext4 = local; tmpfs = memory), as Darshan's."""
    from .importers import fs_tier
    from .storage.tiers import TIER_NAMES

    if cls in TIER_NAMES:
        return cls
    if cls.endswith(")") and " (" in cls:
        return fs_tier(cls.rsplit(" (", 1)[1][:-1])
    return "unclassified"


def _tier_code(cls: str) -> int:
    from .storage.tiers import TIER_NAMES

    t = tier_of_class(cls)
    return TIER_NAMES.index(t) if t in TIER_NAMES else 0


def _bytes_by_tier(ioc: dict) -> dict:
    out: dict = {}
    for cls, c in ioc["by_class"].items():
        t = tier_of_class(cls)
        out[t] = out.get(t, 0) + int(c["POSIX_BYTES_READ"])
    return out


def dftracer_run(paths, *, name: str | None = None, tiers: dict | None = None, strict: bool = False,
                 mounts=None, hdf5_split: bool = True) -> tuple[dict, list[dict]]:
    """(run.json document, per-rank interval arrays) of dftracer traces: see the module docstring.
    ``hdf5_split``: split the reads of HDF5 files that are readable here into data and libhdf5's metadata
    (``summary.hdf5_metadata``; opens each such file once with h5py)."""
    from .metrics import union_length
    from .timeline import FIELDS, PHASE_ID

    t = parse_traces(paths, tiers=tiers, strict=strict, mounts=mounts)
    procs = t["procs"]
    roots, rank_of = ranks_of(procs)
    W = len(roots)
    per_rank: list[dict] = [{} for _ in range(W)]
    for k, p in procs.items():
        r = rank_of[k]
        for cls, c in p.by_class.items():
            per_rank[r].setdefault(cls, []).append(c.c)
    ioc = C.summarize([{cls: C.combine(v) for cls, v in r.items()} for r in per_rank])
    firsts = [p.first_ns for p in procs.values() if p.first_ns is not None]
    lasts = [p.last_ns for p in procs.values() if p.last_ns is not None]
    total_s = (max(lasts) - min(firsts)) / 1e9 if firsts else None
    intervals, read_union_s, rank_bytes = [], [], []
    tier_of = np.array([_tier_code(c) for c in t["classes"]] or [0], dtype=np.uint8)
    for r, root in enumerate(roots):
        mine = [p for k, p in procs.items() if rank_of.get(k) == r]
        cols = [np.concatenate([np.frombuffer(p.reads[j], dtype=np.int64) for p in mine]) if mine
                else np.zeros(0, np.int64) for j in range(5)]
        order = np.argsort(cols[0], kind="stable")
        cols = [c[order] for c in cols]
        n = len(cols[0])
        arr: dict[str, Any] = {f: np.zeros(n, dtype=dt) for f, dt in FIELDS}   # the columns, then rank/pid ints
        arr["start_ns"], arr["end_ns"], arr["nbytes"] = cols[0], cols[1], cols[2]
        arr["tier"] = tier_of[cols[4]] if n else np.zeros(0, np.uint8)
        arr["phase"][:] = PHASE_ID["read"]
        # threads numbered per rank (pid, tid) in order of first read
        _u, first, inv = np.unique(cols[3], return_index=True, return_inverse=True)
        rank_of_first = np.argsort(np.argsort(first))
        arr["thread"] = rank_of_first[inv].astype(np.int32) if n else np.zeros(0, np.int32)
        p = procs[root]
        lo = min((procs[k].first_ns for k in procs if rank_of.get(k) == r and procs[k].first_ns is not None),
                 default=0)
        hi = max((procs[k].last_ns for k in procs if rank_of.get(k) == r and procs[k].last_ns is not None),
                 default=lo)
        arr.update(epochs=np.array([0], np.int32), epoch_start_ns=np.array([lo], np.int64),
                   epoch_end_ns=np.array([hi], np.int64), epoch_samples=np.array([0], np.int64),
                   rank=r, pid=p.pid, wall_offset_ns=0)
        intervals.append(arr)
        read_union_s.append(float(union_length(arr["start_ns"], arr["end_ns"])) / 1e9 if n else 0.0)
        rank_bytes.append(int(arr["nbytes"].sum()))
    read_bytes = sum(rank_bytes)
    app = name or _app_name(t["files"])
    summary: dict = {"workload": app, "strategy": "imported-dftracer", "ranks": W, "imported": True,
                     "read_bytes": int(read_bytes),
                     "bytes_by_tier": _bytes_by_tier(ioc),
                     "io_counters": ioc, "per_rank": {"read_bytes": rank_bytes, "read_time_s": read_union_s}}
    if any(len(a["start_ns"]) for a in intervals):
        # per read call, per tier and rank: the same P50/P95/P99/max as a measured run (metrics.read_latency_rank)
        from . import metrics

        summary["read_latency"] = metrics.merge_read_latency([metrics.read_latency_rank(a) for a in intervals])
    if total_s is not None:
        summary["total_time_s"] = total_s
    if W:
        mean_read = sum(read_union_s) / W
        summary["phase_time_s"] = {"read": mean_read}
        if total_s:
            summary["read_share"] = mean_read / total_s
            summary["phase_share"] = {"read": mean_read / total_s}
        if sum(read_union_s) > 0:
            summary["read_bandwidth_bytes_per_s"] = read_bytes / sum(read_union_s)
        vals = read_union_s
        summary["spread"] = {"read_s": {"min": min(vals), "mean": sum(vals) / W, "max": max(vals)}}
    notes = ["dftracer import: a POSIX trace has no epochs, steps or stall: epoch time, exposed I/O share, AU and "
             "samples/s are left out",
             "ranks = traced processes whose parent is not traced (children such as DataLoader workers count with "
             "their parent), numbered by (host, first event, pid): dftracer records no MPI rank",
             "read time per rank = the union of the rank's read-call intervals; read share = that / the trace's "
             "span (first to last event)"]
    if not tiers:
        notes.append("file classes = the mount point holding each path on the importing machine (a dftracer trace "
                     "has no mount table); name them with --tier PREFIX=NAME")
    if t["bad_line_count"]:
        f, ln, why = t["bad_lines"][0]
        notes.append(f"{t['bad_line_count']} bad line(s) skipped (first: {f} line {ln}: {why}); see "
                     f"imported.bad_lines")
    if t["failed_calls"]:
        notes.append("failed calls (ret < 0) not counted: " + ", ".join(f"{k} {v}" for k, v in
                                                                         sorted(t["failed_calls"].items())))
    warn = no_byte_counts(t, read_bytes + sum(d["bytes_written"] for d in t["per_file"].values()))
    summary["import_warning"] = warn
    if warn:
        notes.insert(0, warn)
    if hdf5_split:
        h5 = hdf5_metadata(t["per_file"])
        if h5["files_split"] or h5["files_not_split"]:
            summary["hdf5_metadata"] = ioc["hdf5_metadata"] = h5
            if h5["files_not_split"]:
                notes.append(f"hdf5 metadata: {h5['files_not_split']:,} HDF5 file(s) not readable here: their reads "
                             f"are not split into data and metadata")
    summary["import_notes"] = notes
    ioc["note"] = ("Imported from dftracer traces: POSIX/STDIO calls counted Darshan-style per file class and per "
                   "rank (bytes = the calls' return values; offsets of read/readv tracked from opens and lseek); "
                   "read times = Σ call durations, in seconds.")
    # per file in run.json: the MAX_FILES_KEPT files with the most bytes moved (a trace may name 10^6 files)
    kept = sorted(t["per_file"], key=lambda p: -(t["per_file"][p]["bytes_read"] + t["per_file"][p]["bytes_written"]))
    kept = kept[:MAX_FILES_KEPT]
    per_file = {p: {k: v for k, v in t["per_file"][p].items() if k not in ("read_offsets",)} for p in kept}
    for d in per_file.values():
        for k in ("opens_by_pid", "reads_by_pid", "bytes_by_pid"):
            d[k] = {str(pid): v for pid, v in d[k].items()}
    imported = {"kind": "dftracer", "source": str(Path(t["files"][0]).resolve()) if len(t["files"]) == 1 else
                str(Path(os.path.commonpath([str(Path(f).resolve()) for f in t["files"]]))),
                "trace_files": t["files"], "events": t["events"], "time_unit": t["time_unit"],
                "bad_line_count": t["bad_line_count"], "bad_lines": [list(b) for b in t["bad_lines"]],
                "failed_calls": t["failed_calls"], "calls_without_ret": t["calls_without_ret"],
                "other_calls": t["other_calls"],
                "processes": [{"host": k[0], "pid": k[1], "ppid": procs[k].ppid, "rank": rank_of.get(k)}
                              for k in sorted(procs, key=lambda k: (rank_of.get(k, -1), k))],
                "files": per_file, "files_total": len(t["per_file"]), "tiers": dict(tiers or {})}
    doc = {"config": {"workload": app, "strategy": "imported-dftracer", "source": imported["source"],
                      "tiers": dict(tiers or {})},
           "summary": summary, "imported": imported}
    return doc, intervals


IO_CALLS = READ_AT_CALLS | READ_POS_CALLS | WRITE_AT_CALLS | WRITE_POS_CALLS


def no_byte_counts(t: dict, nbytes: int) -> str | None:
    """The warning for a trace whose read/write calls carry no byte counts: dftracer writes a call's file
    (``fhash``/``fname``), return value and offset only with ``DFTRACER_INC_METADATA=1``; without it every
    call is there, its bytes are not, and the import would report 0 bytes as if nothing was read."""
    unnamed = sum(v for k, v in t["other_calls"].items() if k in IO_CALLS)   # POSIX/STDIO calls with no file
    no_ret = sum(t["calls_without_ret"].values())
    missing = unnamed + no_ret
    if not missing:
        return None
    what = (f"{missing:,} read/write call(s) carry no byte count ({unnamed:,} without a file name, {no_ret:,} "
            f"without a return value)")
    if nbytes == 0:
        return (f"no byte counts: {what}, so every byte figure of this import is 0; the trace was recorded "
                f"without DFTRACER_INC_METADATA=1: trace again with it set")
    return (f"incomplete byte counts: {what}; they are not in the byte figures (were some processes traced "
            f"without DFTRACER_INC_METADATA=1?)")


def _app_name(files) -> str:
    n = Path(files[0]).name
    for suf in (".pfw.gz", ".pfw"):
        if n.endswith(suf):
            n = n[: -len(suf)]
    # dftracer names files <log file>-<hash>-<app>.pfw: keep the log file's stem
    parts = n.split("-")
    if len(parts) >= 3 and len(parts[-2]) == 16:
        n = "-".join(parts[:-2])
    return n or "imported"


def write_dftracer(doc: dict, intervals: list[dict], out) -> Path:
    """Write ``doc`` and its read intervals as ``<out>/<app>/imported-dftracer/<stamp>/`` (run.json,
    intervals.npz, trace.json, timelogger.csv); a failure while writing removes the folder."""
    import shutil

    from . import results
    from .importers import _safe

    run_dir = results.new_run_dir(Path(out), _safe(doc["summary"]["workload"]), "imported-dftracer")
    try:
        results.write_run(run_dir, config=doc["config"], summary=doc["summary"], intervals=intervals, error=None,
                          extra={"imported": doc["imported"]})
    except BaseException:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise
    return run_dir


def data_regions(path) -> list[tuple[int, int]] | None:
    """[(offset, nbytes)] of the contiguous datasets' data in an HDF5 file (None: not HDF5 or not readable):
    reads inside them are data, the others HDF5's metadata (superblock, object headers, heaps)."""
    try:
        import h5py
    except ImportError:
        return None
    regions: list[tuple[int, int]] = []
    try:
        with h5py.File(path, "r") as f:
            def visit(_name, obj):
                if isinstance(obj, h5py.Dataset):
                    off = obj.id.get_offset()
                    if off is not None:
                        regions.append((int(off), int(obj.id.get_storage_size())))
            f.visititems(visit)
    except (OSError, ValueError):
        return None
    return sorted(regions)


HDF5_SUFFIXES = (".h5", ".hdf5", ".he5", ".hdf", ".nc4")


def hdf5_metadata(per_file: dict) -> dict:
    """The reads of the traced HDF5 files (by suffix) split into data and libhdf5's metadata, over all files and
    per class: ``{"data_reads", "data_bytes", "metadata_reads", "metadata_bytes", "files_split",
    "files_not_split", "by_class": {class: {...}}}``. A file not readable here (another machine's) is not split."""
    keys = ("data_reads", "data_bytes", "metadata_reads", "metadata_bytes")
    out: dict = {k: 0 for k in keys}
    out.update(files_split=0, files_not_split=0, by_class={})
    for path, d in per_file.items():
        if not path.lower().endswith(HDF5_SUFFIXES) or not d["read_offsets"]:
            continue
        regions = data_regions(path) if os.path.isfile(path) else None
        if regions is None:
            out["files_not_split"] += 1
            continue
        sp = split_data_metadata(d["read_offsets"], regions)
        out["files_split"] += 1
        cls = out["by_class"].setdefault(d["class"], {k: 0 for k in keys})
        for k in keys:
            out[k] += sp[k]
            cls[k] += sp[k]
    return out


def split_data_metadata(read_offsets, regions) -> dict:
    """Reads of one file (``(offset, bytes, ...)``) split into data (inside a data region) and metadata
    (anywhere else): ``{"data_reads",
    "data_bytes", "metadata_reads", "metadata_bytes"}``."""
    starts = [o for o, _ in regions]
    out = {"data_reads": 0, "data_bytes": 0, "metadata_reads": 0, "metadata_bytes": 0}
    for off, n, *_pid in read_offsets:
        k = bisect_left(starts, off + 1) - 1
        inside = k >= 0 and off + max(n, 1) <= regions[k][0] + regions[k][1]
        if inside:
            out["data_reads"] += 1
            out["data_bytes"] += n
        else:
            out["metadata_reads"] += 1
            out["metadata_bytes"] += n
    return out
