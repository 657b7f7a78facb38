"""``dlbench verify``: check a data directory against its manifest.

Structure (always): the manifest is complete; every file is present with the size the manifest gives;
the format module's ``check_file`` passes (HDF5 files open and hold every array with the expected shape and
dtype, JPEG files start with SOI and end with EOI, ...). ``checksum=True`` also reads
every file whole and compares its ``sum64`` (``storage.checksum.file_checksum``) with the one the manifest recorded
at generation (files without a record are skipped): flipped bytes anywhere in a file, HDF5 metadata
included. ``content=True`` reads every sample through the layout's reader and compares its bytes with
``content.expected_row``, and checks the checksums too (a file whose checksum differs is reported once: by
its differing samples, or, when every sample matches, by its checksum). A dataset whose manifest records another
content version than this dlbench writes (``manifest.content_version``: JPEGs before the size-class pool) gets one
line saying so instead of the sample comparison.

Cost (benchmarks/verify_checksum.py, loaded 2-core machine): the checksum reads every byte of the dataset,
as an epoch does, where the structure check reads a few KiB of metadata per file. CosmoFlow small, 24 files,
403 MB: structure 14-15 ms; + checksum 48-49 ms with the page cache warm (3.3x), 232 ms from the local disk
(16x); tiny (8.5 MB): 1.2x warm, 2-3.5x cold. It grows with the dataset's bytes, not its files, so it is
``dlbench verify --checksum`` (and part of ``--content``, which reads every sample anyway), not the default.
Under MPI, file f is checked by rank ``f % size``; every rank gets the full list of problems.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..workload import Workload
from .manifest import Manifest

MAX_LISTED = 50


def verify(data_dir: str | Path, workload: Workload | None = None, *, content: bool = False, comm=None,
           manifest: Manifest | None = None, checksum: bool = False, storage=None) -> list[str]:
    """Problems found in ``data_dir`` (an empty list when all is well). ``workload`` defaults to the
    manifest's workload at the manifest's scale and sample count. ``checksum`` (implied by ``content``):
    compare each file's sum64 with the manifest's. ``storage``: the backend holding the data files (default:
    POSIX files in ``data_dir``; the manifest is read from ``data_dir``); the format module checks a file's
    bytes (``check_file(..., image=)``)."""
    from ..comm import SerialComm
    from ..storage.checksum import SUM_BLOCK, file_checksum
    from . import content as content_mod
    from .formats import aligned_empty, open_reader

    comm = comm or SerialComm()
    d = Path(data_dir)
    m = manifest or Manifest.load(d)
    if workload is None:
        workload = workload_of(m)
    problems: list[str] = []
    readable: list[int] = []
    sums = m.sum64 if (checksum or content) and m.sum64 is not None else None
    sum_buf = bytearray(SUM_BLOCK) if sums is not None else None
    bad_sum: dict[int, str] = {}
    drv = workload.format.driver()
    if storage is not None and not drv.STORAGE:
        from ..errors import ConfigError

        raise ConfigError(f"storage backend {storage.name}: layout {workload.layout}'s files are checked as POSIX "
                          f"files only")
    deep = drv.check_records if checksum or content else None   # tfrecord: every record's CRCs
    for f in range(comm.rank, len(m.paths), comm.size):
        p = d / m.paths[f]
        if storage is not None:   # a backend's file: its size, then its bytes
            try:
                size = storage.size(m.paths[f])
            except FileNotFoundError:
                problems.append(f"{p}: missing")
                continue
            if size != m.nbytes[f]:
                problems.append(f"{p}: {size} B, the manifest says {int(m.nbytes[f])} B (truncated or corrupt)")
                continue
            img = storage.file_image(m.paths[f])
            bad = drv.check_file(p, workload, m.seed, m, f, image=img, storage=storage)
            if not bad and deep is not None:
                bad = deep(p, workload, m.seed, m, f, image=img, storage=storage)
            problems += bad
            if not bad:
                readable.append(f)
                want = sums[f] if sums is not None else None
                if want is not None:
                    got = storage.checksum(m.paths[f])
                    if got != want:
                        bad_sum[f] = (f"{p}: checksum {got:#018x}, the manifest recorded {int(want):#018x} at "
                                      f"generation (bytes changed since)")
            continue
        try:
            st = p.stat()
        except FileNotFoundError:
            problems.append(f"{p}: missing")
            continue
        except OSError as e:
            problems.append(_stat_problem(p, e))
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(_kind_problem(p, st.st_mode))
            continue
        size = st.st_size
        if size != m.nbytes[f]:
            problems.append(f"{p}: {size} B, the manifest says {int(m.nbytes[f])} B (truncated or corrupt)")
            continue
        bad = drv.check_file(p, workload, m.seed, m, f)   # the format module checks its own files
        if not bad and deep is not None:
            bad = deep(p, workload, m.seed, m, f)
        problems += bad
        if not bad:
            readable.append(f)
            want = sums[f] if sums is not None else None
            if want is not None:
                got = file_checksum(p, sum_buf)
                if got != want:
                    bad_sum[f] = (f"{p}: checksum {got:#018x}, the manifest recorded {int(want):#018x} at "
                                  f"generation (bytes changed since)")
    from .manifest import content_version

    cur = content_version(m.layout)
    if content and m.content != cur:   # bytes this dlbench cannot recompute: one line, not one per sample
        problems += bad_sum.values()
        if comm.rank == 0:
            by = m.provenance.get("dlbench")
            problems.append(f"{d}: content {m.content!r} was written by {'dlbench ' + str(by) if by else 'another dlbench'}"
                            f"; this one writes {cur!r} and cannot recompute it for --content (its structure and "
                            f"checksums were checked); regenerate it with `dlbench generate --force`")
        content = False
    elif not content:
        problems += bad_sum.values()
    if content and readable:
        reader = open_reader(d, m, workload, storage=storage)
        try:
            out = aligned_empty(reader.max_row_nbytes)
            for f in readable:
                for i in range(int(m.first[f]), int(m.first[f] + m.count[f])):
                    try:
                        n = reader.read_into(i, out)
                    except DataError as e:   # the reader's own check (npz: np.load's CRC-32): one problem
                        problems.append(str(e))
                        bad_sum.pop(f, None)
                        break
                    exp = content_mod.expected_row(workload, m.seed, i)
                    if n != exp.size or not np.array_equal(out[:n], exp):
                        where = m.paths[f] if m.count[f] == 1 else f"{m.paths[f]} row {i - int(m.first[f])}"
                        diff = int(np.count_nonzero(out[:min(n, exp.size)] != exp[:min(n, exp.size)]))
                        problems.append(f"{d / where}: sample {i} differs from the expected content "
                                        f"({diff} of {exp.size} bytes)")
                        bad_sum.pop(f, None)  # the damage is reported by its samples
        finally:
            reader.close()
        problems += bad_sum.values()
    allp = comm.allgather(problems)
    return [p for part in allp for p in part]


def workload_of(m: Manifest, source: str | None = None) -> Workload:
    """The resolved workload a manifest was generated from. ``source`` is the name or YAML path the user
    gave (default: the manifest's workload name). When the workload file cannot be loaded (a user's YAML
    that moved) or no longer matches, the data-defining part is rebuilt from the manifest's spec (step
    times and model then come from the file when it loads, else are empty)."""
    from .. import workload as wl
    from ..errors import ConfigError
    from .manifest import spec_of

    scale = m.scale.split("+")[0] if m.scale else None
    try:
        w = wl.load(source or m.workload, scale=scale if scale in wl.SCALES else None, samples=m.samples)
    except ConfigError:
        w = None
    if w is None or spec_of(w) != m.spec or w.samples != m.samples:
        w = _workload_from_spec(m, w)
    return w


def _workload_from_spec(m: Manifest, like: Workload | None) -> Workload:
    """Rebuild the resolved workload from the manifest's spec (a workload YAML that changed or moved)."""
    import dataclasses

    from ..workload import ArraySpec, JpegSpec, SizeDistribution

    s = m.spec
    rs = SizeDistribution(**s["record_size"]) if s.get("record_size") else None
    arrays = tuple(ArraySpec(name=a["name"], shape=tuple(a["shape"]), dtype=a["dtype"], role=a["role"])
                   for a in s["arrays"])
    jpeg = None
    if s.get("jpeg"):
        jpeg = JpegSpec(size=SizeDistribution(**s["jpeg"]["size"]), decoded_shape=tuple(s["jpeg"]["decoded_shape"]))
    if like is None:
        return Workload(name=s["name"], layout=s["layout"], arrays=arrays, samples=int(s["samples"]),
                        batch_size=1, samples_per_file=int(s["samples_per_file"]), shared_file=s["shared_file"],
                        classes=int(s["classes"]), jpeg=jpeg, compute={}, model=None, scale=m.scale or "",
                        spec_path="", record_size=rs)
    return dataclasses.replace(like, layout=s["layout"], arrays=arrays, samples=int(s["samples"]),
                               samples_per_file=int(s["samples_per_file"]), shared_file=s["shared_file"],
                               classes=int(s["classes"]), jpeg=jpeg, record_size=rs)


def _stat_problem(p: Path, e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return f"{p}: a symbolic link loop (too many levels of symbolic links); replace it with the data file"
    return f"{p}: cannot be read ({e.strerror or e})"


def _kind_problem(p: Path, mode: int) -> str:
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")
    return f"{p}: is {kind}, not a regular file; replace it with the data file (`dlbench generate` rewrites it)"


def check_regular_files(data_dir: str | Path, m: Manifest, comm=None) -> None:
    """Before a run opens the dataset: every file of the manifest is a regular file (one ``stat`` per file,
    once, shared out between the ranks; nothing on the read path). A FIFO made a run hang forever in
    ``open``, a symbolic link loop gave a traceback: both are one line (DataError, exit 3) naming the file.
    A missing or short file is left to the readers' own errors."""
    d = Path(data_dir)
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    bad = None
    for f in range(rank, len(m.paths), size):
        p = d / m.paths[f]
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            continue
        except OSError as e:
            bad = _stat_problem(p, e)
            break
        if not stat.S_ISREG(mode):
            bad = _kind_problem(p, mode)
            break
    if comm is not None and size > 1:
        found = [b for b in comm.allgather(bad) if b]
        bad = found[0] if found else None
    if bad:
        raise DataError(f"--data-dir {d}: {bad}; check it with `dlbench verify --data-dir {d}`")


def check(data_dir: str | Path, **kw) -> Manifest:
    """``verify`` that raises DataError (exit 3) listing the problems; returns the manifest when clean."""
    m = Manifest.load(data_dir)
    problems = verify(data_dir, manifest=m, **kw)
    if problems:
        shown = "; ".join(problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        raise DataError(f"--data-dir {data_dir}: {len(problems)} problem(s): {shown}{more}")
    return m


def verify_dataset(url: str, *, content: bool, checksum: bool, comm) -> tuple[Manifest, list[str], str]:
    """``dlbench verify``: check the dataset at ``url`` (a folder, or an s3:// prefix whose manifest is
    fetched into its control folder) against its manifest; returns the manifest, the problems (objects named
    by their URL) and what was checked (``files, sizes and shapes``, ...)."""
    storage = None
    data_dir = url
    if url.startswith("s3://"):   # objects in a bucket: the manifest fetched into its control folder
        from ..storage.s3 import S3Backend
        from .bucket import fetch_manifest

        data_dir = str(comm.bcast(fetch_manifest(url) if comm.rank == 0 else None))
        storage = S3Backend(url)
    m = Manifest.load(data_dir)
    problems = verify(data_dir, content=content, comm=comm, manifest=m, checksum=checksum, storage=storage)
    if storage is not None:   # name the objects, not the control folder
        problems = [p.replace(str(Path(data_dir)), url.rstrip("/"), 1) for p in problems]
    recorded = m.sum64 is not None and any(c is not None for c in m.sum64)
    what = "files, sizes" + (", shapes" if content or (checksum and recorded) else " and shapes")
    if content or checksum:
        what += (", checksums" if content else " and checksums") if recorded else ""
        what += " and content" if content else ""
        if not recorded:
            what += " (no checksums recorded by generate: not checked)"
    return m, problems, what
