"""``dlbench generate``: write a workload's dataset, serially or across MPI ranks.

- Format-neutral: what a file holds is the layout's format module's (``Format.driver()``: ``plan_files``,
  ``write_file`` or a ``writer``, optional ``prepare``/``file_order``/``write_dataset``/``finish``/
  ``write_extra``; docs/formats.md); this module plans, schedules, checksums, renames and resumes.
- Deterministic: sample bytes come from ``content`` (a function of workload, seed, index); HDF5 files
  are a fixed skeleton (``fmt_hdf5.H5Template``) plus those bytes, so a run on any number of ranks writes
  the same bytes and the same manifest (outside its ``provenance`` block).
- Parallel: file f is written by rank ``f % size``; the one file of ``hdf5_shared`` is created by rank 0
  (skeleton, contiguous datasets) and its sample range is cut into chunks of ≈ 32 MiB, chunk c written by
  rank ``c % size`` with ``os.pwrite`` at the datasets' byte offsets (no parallel HDF5 needed).
  Memory: one staging buffer of ≈ 32 MiB per rank, reused; no dataset is ever held in memory.
- Atomic and resumable: every file is written to ``<name>.part`` and renamed when complete; the shared
  file is ``<name>.part`` until all chunks are done, and the chunks done are recorded in
  ``.dlbench-tmp/<name>.done`` (one byte per chunk) so an interrupted run resumes. A re-run skips a file
  only when it has its final name, the planned size **and** the checksum recorded when it was written (of
  the bytes written, where the format wrote every byte of the file once through ``write_all``; else read
  back from the page cache right after the write; appended to ``.dlbench-tmp/sum-<rank>``, flushed at least
  every ``REC_FLUSH_S``, kept in the manifest's ``sum64`` list at the end): a file with flipped bytes, or
  one with no record (also one whose record a killed process had not flushed), is written again; with no
  record at all (a new dataset) no file is looked up. The manifest is written first with ``complete: false`` and rewritten with ``complete: true`` at
  the end.
- Disk full (or any OSError while writing): the rank removes its temporary file, every rank stops, the
  manifest stays ``complete: false`` (with the checksums of the files completed so far in ``sum64``), and
  the error names the file; a re-run resumes, writing only the files still missing.
- Progress: every rank writes its counters to ``.dlbench-tmp/progress-<rank>``; rank 0 shows one rich
  progress bar over all ranks (on a terminal only) and returns the totals.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..errors import CapacityError, ConfigError, DataError, DlbenchError
from ..storage.backend import PosixBackend
from ..storage.checksum import SUM_BLOCK, piece_words, pieces_sum
from ..units import format_bytes
from ..workload import Workload
from .manifest import MANIFEST_NAME, Manifest, plan_manifest

TMP_DIR = ".dlbench-tmp"
LOCK_NAME = ".dlbench-generate.lock"   # held (flock) by the generation writing the directory; removed at its end
READERS_DIR = ".dlbench-readers"       # one record per process of a run reading the dataset (ReadLock)
CHUNK_BYTES = 32 << 20       # staging / shared-file chunk size
MAX_FILES = 20_000_000       # beyond this the manifest alone would be gigabytes: refuse as absurd
_pwrite = os.pwrite          # the one write call (tests monkeypatch it to simulate a full disk)


@dataclass
class GenerateResult:
    files_written: int
    files_skipped: int
    bytes_written: int
    seconds: float
    ranks: int
    manifest: Manifest

    @property
    def mb_per_s(self) -> float:
        return self.bytes_written / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return (f"generated {self.manifest.workload} ({self.manifest.scale}, seed {self.manifest.seed}): "
                f"{self.files_written} files, {format_bytes(self.bytes_written, 'MiB')} in {self.seconds:.2f} s, "
                f"{format_bytes(self.bytes_written / self.seconds if self.seconds > 0 else 0.0, 'MiB', digits=0)}/s "
                f"({self.files_skipped} files already complete, {self.ranks} ranks)")   # binary, as `show`'s


def _versions() -> dict:
    import h5py
    import PIL

    return {"dlbench": __version__, "numpy": np.__version__, "h5py": h5py.version.version,
            "hdf5": h5py.version.hdf5_version, "pillow": PIL.__version__}


REC_FLUSH_S = 0.5     # the done records of an interrupted generation reach the file at least this often
_PIECES: dict = {}    # write handle -> [(offset, length, words)] of what ``write_all`` wrote to it


def _recorded_sums(data_dir: Path, m: Manifest) -> dict[int, int]:
    """Checksums known for this dataset's files: the manifest's ``sum64`` (a finished generation) and the
    done records of an interrupted one (``.dlbench-tmp/sum-<rank>``: lines ``file_index checksum``)."""
    out: dict[int, int] = {}
    if m.sum64 is not None:
        out.update({i: c for i, c in enumerate(m.sum64) if c is not None})
    for rec in sorted((data_dir / TMP_DIR).glob("sum-*")):
        try:
            for line in rec.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    out[int(parts[0])] = int(parts[1])
        except OSError:
            continue
    return out


# ---- rank 0: checks and set-up ------------------------------------------------------------------------

def _check_dir(data_dir: Path) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigError(f"--data-dir {data_dir}: exists and is not a directory")
    if not data_dir.exists():
        parent = data_dir.parent
        if not parent.is_dir():
            raise ConfigError(f"--data-dir {data_dir}: parent directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"--data-dir {data_dir}: parent directory {parent} is not writable")
        data_dir.mkdir()
    if not os.access(data_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"--data-dir {data_dir}: not writable")


def _remove_dataset(data_dir: Path, old: Manifest | None, storage=None) -> None:
    if old is not None:
        storage = storage or PosixBackend(data_dir)
        for p in old.paths:
            for q in (p, p + ".part"):
                storage.remove(q)
        from .registry import FORMATS

        fmt = FORMATS.get(old.layout)
        if fmt is not None:   # a format's files beside the data (tfrecord: index files)
            fmt.driver().remove_extra(data_dir, old, storage)
    (data_dir / MANIFEST_NAME).unlink(missing_ok=True)
    shutil.rmtree(data_dir / TMP_DIR, ignore_errors=True)


def _prepare(workload: Workload, data_dir: Path, seed: int, force: bool, storage=None) -> Manifest:
    """Rank 0: validate, plan, write the skeletons and the (incomplete) manifest."""
    from .manifest import content_version, spec_of

    storage = storage or PosixBackend(data_dir)

    if workload.files > MAX_FILES:
        raise ConfigError(f"--samples={workload.samples}: {workload.files} files is more than dlbench "
                          f"generates ({MAX_FILES}); choose fewer samples")
    _check_dir(data_dir)
    old = None
    if Manifest.exists(data_dir):
        try:
            old = Manifest.load(data_dir, require_complete=False)
        except DataError:
            if not force:
                raise DataError(f"--data-dir {data_dir}: holds an unreadable {MANIFEST_NAME}; "
                                "pass --force to replace the dataset") from None
            _remove_dataset(data_dir, None)
        if old is not None and not (old.workload == workload.name and old.seed == seed
                                    and old.spec == spec_of(workload)
                                    and old.content == content_version(workload.layout)):
            if not force:
                what = "another seed of this workload" if old.workload == workload.name and old.seed != seed \
                    else "another dataset"
                if old.workload == workload.name and old.seed == seed and old.spec == spec_of(workload):
                    raise DataError(f"--data-dir {data_dir}: holds {old.describe()} with content {old.content!r}, "
                                    f"written by an older dlbench; this one writes "
                                    f"{content_version(workload.layout)!r}; pass --force to regenerate it")
                raise DataError(f"--data-dir {data_dir}: holds {old.describe()} ({what}), not workload "
                                f"{workload.name} (seed {seed}, {workload.samples} samples); refusing to "
                                "overwrite it; pass --force to replace it")
            _remove_dataset(data_dir, old, storage)
            old = None
    else:
        stray = [p.name for p in data_dir.iterdir() if p.name not in (TMP_DIR, LOCK_NAME, READERS_DIR)]
        if stray and not force:
            raise DataError(f"--data-dir {data_dir}: not empty and holds no dlbench dataset "
                            f"({len(stray)} entries, e.g. {sorted(stray)[0]}); choose an empty directory "
                            "or pass --force to write into it")
    tmp = data_dir / TMP_DIR
    tmp.mkdir(exist_ok=True)
    for f in tmp.glob("progress-*"):
        f.unlink()

    drv = workload.format.driver()
    # HDF5: file sizes from skeletons written into tmp (others: None, plan_files knows its sizes)
    new = plan_manifest(workload, seed, hdf5_file_nbytes=drv.file_nbytes_planner(workload, tmp))
    # free space: what is not written yet must fit
    have = 0
    if len(new.paths) <= 200_000:
        for p, b in zip(new.paths, new.nbytes):
            if storage.exists(p) and storage.size(p) == b:
                have += int(b)
    need = new.dataset_nbytes - have
    free = storage.free_bytes()
    if need > free:
        raise CapacityError(f"--data-dir {data_dir}: the dataset needs {need / 1e9:.2f} GB more, "
                            f"{free / 1e9:.2f} GB free; choose fewer --samples or a smaller --scale")
    if old is not None and old.sum64 is not None and old.paths == new.paths and list(old.nbytes) == list(new.nbytes):
        new.sum64 = old.sum64  # the checksums of a finished generation: what a re-run checks skipped files against
    drv.prepare(workload, data_dir, new, storage)   # the format's set-up (jpeg: class folders; hdf5_shared: skeleton)
    new.complete = False
    new.provenance = {"status": "generating", **_versions()}
    new.save(data_dir)
    return new


class GenerateLock:
    """An exclusive ``flock`` on ``<data-dir>/.dlbench-generate.lock`` for the whole generation (under MPI
    rank 0 holds it for all ranks), with the holder's pid, host and start time written in it. A second
    generation of the same directory fails at once, naming the holder, instead of both writing the same
    files and failing with a misleading "free space" advice. The lock goes away with the process that held
    it (a killed generation does not block the next one)."""

    def __init__(self, data_dir: Path):
        import fcntl
        import socket

        self.path = Path(data_dir) / LOCK_NAME
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                try:
                    holder = os.read(fd, 300).decode(errors="replace").strip() or "another process"
                finally:
                    os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    readers = live_readers(data_dir)
                    if readers:   # runs hold the lock shared (ReadLock): replacing files under them broke them
                        more = f"; {len(readers) - 1} more process(es) of it or other runs" if len(readers) > 1 else ""
                        raise DataError(f"--data-dir {data_dir}: a `dlbench run` is reading this dataset "
                                        f"({readers[0]}{more}); generate would replace the files it reads; wait "
                                        f"for it to finish or stop it, then re-run") from None
                    raise DataError(f"--data-dir {data_dir}: another `dlbench generate` is writing this dataset "
                                    f"({holder}; lock {self.path}); wait for it to finish or stop it, then "
                                    f"re-run") from None
                raise
            try:  # the holder before us may have removed the file it locked: lock the one at the path
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self.fd: int | None = fd
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {stamp}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            try:
                self.path.unlink(missing_ok=True)   # while still held: nobody can lock a file being removed
            finally:
                os.close(self.fd)
                self.fd = None


def _lock_path_fd(path: Path, how: int) -> int | None:
    """A descriptor of the file at ``path`` locked with ``how`` (non-blocking), or None when another process
    holds a conflicting lock. Retries when the file was removed and re-created by a previous holder."""
    import fcntl

    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def live_readers(data_dir: Path) -> list[str]:
    """The records of the run processes reading ``data_dir`` (``ReadLock``), oldest first; a record of a
    process of this host that no longer exists (killed: no clean-up) is left out."""
    import socket

    d = Path(data_dir) / READERS_DIR
    host = socket.gethostname()
    out: list[str] = []
    try:
        entries = sorted(d.iterdir(), key=lambda p: p.stat().st_mtime)
    except OSError:
        return out
    for p in entries:
        h, _, pid = p.name.rpartition(".")
        if h == host and pid.isdigit():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
        try:
            out.append(p.read_text(errors="replace").strip() or p.name)
        except OSError:
            continue
    return out


class ReadLock:
    """A shared ``flock`` on the dataset's generate lock file, held by every process of a run for the run's
    life: ``dlbench generate`` (which takes it exclusively) refuses while a run reads the dataset, naming the
    run (pid, host, command: a record in ``<data-dir>/.dlbench-readers/<host>.<pid>``), instead of deleting
    the files under it (the run died with "damaged or truncated"). A run started while a generation writes
    the directory stops at once, naming the generation. Released by ``release()`` or when the process ends
    (a killed run leaves a record that ``live_readers`` skips)."""

    def __init__(self, data_dir: Path):
        import fcntl
        import socket

        data_dir = Path(data_dir)
        self.fd: int | None = None
        self.record: Path | None = None
        self.path = data_dir / LOCK_NAME
        try:
            fd = _lock_path_fd(self.path, fcntl.LOCK_SH)
        except OSError:   # a read-only dataset (no lock file can be made): nothing can generate there either
            return
        if fd is None:
            try:
                holder = (data_dir / LOCK_NAME).read_text(errors="replace").strip() or "another process"
            except OSError:
                holder = "another process"
            raise DataError(f"--data-dir {data_dir}: a `dlbench generate` is writing this dataset ({holder}); wait "
                            f"for it to finish, then run")
        self.fd = fd
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cmd = " ".join(["dlbench", *sys.argv[1:]])
        cmd = cmd if len(cmd) <= 200 else cmd[:197] + "..."
        host = socket.gethostname()
        rec = data_dir / READERS_DIR / f"{host}.{os.getpid()}"
        try:
            rec.parent.mkdir(exist_ok=True)
            rec.write_text(f"pid {os.getpid()} on {host}, since {stamp}: {cmd}\n")
            self.record = rec
        except OSError:   # a read-only dataset: the lock still holds, generate names no run
            self.record = None
        import atexit

        atexit.register(self.release)

    def release(self) -> None:
        if self.record is not None:
            try:
                self.record.unlink(missing_ok=True)
                self.record.parent.rmdir()   # the last reader's: the folder goes too
            except OSError:
                pass
            self.record = None
        if self.fd is not None:
            import fcntl

            try:   # the last holder removes the lock file (as GenerateLock does): no file left in the dataset
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                    self.path.unlink()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


# ---- every rank: writing ------------------------------------------------------------------------------

class _Progress:
    """This rank's counters in a small file rank 0 polls (works with any launcher, costs no collective)."""

    def __init__(self, data_dir: Path, rank: int):
        self.path = data_dir / TMP_DIR / f"progress-{rank}"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.files = self.bytes = self.skipped_files = self.skipped_bytes = 0
        self.state = 0  # 0 running, 1 done, 2 failed
        self._next = 0.0
        self.flush(force=True)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now >= self._next:
            a = np.asarray([self.files, self.bytes, self.skipped_files, self.skipped_bytes, self.state],
                           dtype=np.int64)
            os.pwrite(self.fd, a.tobytes(), 0)
            self._next = now + 0.2

    def close(self) -> None:
        self.flush(force=True)
        os.close(self.fd)

    @staticmethod
    def read_all(data_dir: Path, size: int) -> np.ndarray:
        out = np.zeros((size, 5), dtype=np.int64)
        for r in range(size):
            try:
                b = (data_dir / TMP_DIR / f"progress-{r}").read_bytes()
                if len(b) == 40:
                    out[r] = np.frombuffer(b, dtype=np.int64)
            except OSError:
                pass
        return out


class _Writer:
    """This rank's writer: each file to its ``.part`` name through the format module (its ``writer``
    object, or its ``write_file`` function), checksummed, its extra files written, then renamed."""

    def __init__(self, workload: Workload, seed: int, data_dir: Path, m: Manifest, fsync: bool, storage=None):
        self.w, self.seed, self.d, self.m, self.fsync = workload, seed, data_dir, m, fsync
        self.storage = storage or PosixBackend(data_dir)
        self.drv = workload.format.driver()
        self.files: Any = None   # the format's file writer of this rank (``start``)
        self.write_extra = self.drv.write_extra   # tfrecord: the index file (default: nothing)
        self.sum_buf = bytearray(SUM_BLOCK)

    def start(self, files: list[int]) -> None:
        """Before the first ``write_file``: ``files`` are the files this rank will write, in order."""
        self.files = self.drv.writer(self.w, self.seed, self.d, self.m, files)   # default: write_file per file

    def close(self) -> None:
        if self.files is not None:
            self.files.close()

    def write_file(self, f: int) -> int:
        """Write file ``f`` (not shared) to its .part name, then rename. Returns bytes written."""
        st = self.storage
        rel = self.m.paths[f]
        part = rel + ".part"
        fd = st.open(part, write=True)
        pieces = _PIECES[fd] = []
        try:
            n = self.files.write_file(fd, f)
            if self.fsync and isinstance(fd, int):
                os.fsync(fd)
        except BaseException:
            st.close(fd)
            st.remove(part)
            raise
        finally:
            del _PIECES[fd]
        st.close(fd)
        # the checksum of the bytes written, where the format wrote the whole file through write_all (each byte
        # once); else read back
        s = pieces_sum(pieces, int(self.m.nbytes[f]))
        self.last_sum = s if s is not None else st.checksum(part, self.sum_buf)
        try:   # files beside it, in place before the data file takes its final name
            self.write_extra(self.d, self.m, f, st)
        except BaseException:
            st.remove(part)
            raise
        st.rename(part, rel)
        return n


def write_all(fd, buf: np.ndarray, offset: int) -> int:
    """``buf`` at ``offset`` of ``fd``: a descriptor, or a storage backend's write handle (its ``pwrite``). The
    public writer of format drivers' ``write_file``/``writer`` (bytes written through it are checksummed in
    memory, no read-back)."""
    mv = memoryview(buf).cast("B")  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
    total = len(mv)
    done = 0
    pwrite = (lambda b, off: _pwrite(fd, b, off)) if isinstance(fd, int) else fd.pwrite
    while done < total:
        n = pwrite(mv[done:], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        done += n
    pieces = _PIECES.get(fd) if _PIECES else None
    if pieces is not None:
        pieces.append((offset, total, piece_words(mv, offset)))
    return total


def _rank_work(writer: _Writer, m: Manifest, comm, prog: _Progress) -> None:
    w, d, drv, st = writer.w, writer.d, writer.drv, writer.storage
    if drv.write_dataset(writer, m, comm, prog):   # a format that writes its dataset its own way (hdf5_shared)
        return
    mine = drv.file_order(w, list(range(comm.rank, len(m.paths), comm.size)))   # jpeg: class folder by folder
    extra_ok = drv.extra_ok   # tfrecord: the file's index is right too
    complete = {}
    sums = _recorded_sums(d, m)
    for f in mine:
        if not sums:    # nothing recorded (a new dataset): every file is written, none looked up
            complete[f] = False
            continue
        try:
            complete[f] = st.size(m.paths[f]) == m.nbytes[f]
        except FileNotFoundError:
            complete[f] = False
        # the right size is not enough: the bytes must be those written (flipped bytes, or no record: rewrite)
        if complete[f]:
            want = sums.get(f)
            complete[f] = want is not None and st.checksum(m.paths[f], writer.sum_buf) == want
        if complete[f]:
            complete[f] = extra_ok(d, m, f, st)
    rec = open(d / TMP_DIR / f"sum-{comm.rank}", "a")
    flushed = time.monotonic()
    try:
        writer.start([f for f in mine if not complete[f]])
        for f in mine:
            if complete[f]:
                prog.skipped_files += 1
                prog.skipped_bytes += int(m.nbytes[f])
            else:
                prog.bytes += writer.write_file(f)
                prog.files += 1
                rec.write(f"{f} {writer.last_sum}\n")
                now = time.monotonic()
                if now - flushed >= REC_FLUSH_S:     # a record lost in a crash only costs its file's rewrite
                    rec.flush()
                    flushed = now
            prog.flush()
    finally:
        rec.close()
        writer.close()


def _show_progress(data_dir: Path, comm, total_bytes: int, show: bool, own_done) -> None:
    """Rank 0: poll the ranks' counters until all are done or failed (rich bar on a terminal)."""
    if comm.size == 1 and not show:
        return
    bar = None
    if show:
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

        bar = Progress("generating", BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                       transient=False)
        bar.start()
        task = bar.add_task("generate", total=total_bytes)
    try:
        while True:
            a = _Progress.read_all(data_dir, comm.size)
            if bar is not None:
                bar.update(task, completed=int(a[:, 1].sum() + a[:, 3].sum()))
            if own_done() and (a[:, 4] > 0).all():
                break
            time.sleep(0.1)
    finally:
        if bar is not None:
            bar.stop()


def generate(workload: Workload, data_dir: str | Path, *, seed: int = 0, force: bool = False, comm=None,
             fsync: bool = False, progress: bool | None = None, storage=None) -> GenerateResult:
    """Generate ``workload``'s dataset in ``data_dir`` (see the module docstring). Every rank of ``comm``
    calls it; returns the same totals on every rank. ``storage``: the backend the data files go to
    (``dlbench.storage.backend``; default POSIX files in ``data_dir``); the manifest, lock, progress and
    checksum records stay in ``data_dir``. Formats whose module writes through a backend only (``STORAGE``)."""
    from ..comm import SerialComm

    comm = comm or SerialComm()
    data_dir = Path(data_dir).absolute()
    if storage is not None and not workload.format.driver().STORAGE:
        raise ConfigError(f"storage backend {storage.name}: layout {workload.layout} is written to POSIX files "
                          f"only")
    if seed < 0 or seed >= 1 << 63:
        raise ConfigError(f"--seed={seed}: must be an integer from 0 to 2**63-1")
    t0 = time.perf_counter()
    prep: tuple[str, str, Any] | None = None   # ("ok", manifest, complete) | ("error", class, message)
    lock = None
    if comm.rank == 0:
        try:
            _check_dir(data_dir)
            lock = GenerateLock(data_dir)
            m = _prepare(workload, data_dir, seed, force, storage)
            prep = ("ok", m.to_json(), m.complete)
        except DlbenchError as e:
            prep = ("error", type(e).__name__, str(e))
        except OSError as e:
            prep = ("error", "DataError", f"--data-dir {data_dir}: {e.strerror or e}")
        except BaseException:
            if lock is not None:
                lock.release()
            raise
    try:
        prep = comm.bcast(prep)
        if prep[0] == "error":
            cls = {"ConfigError": ConfigError, "CapacityError": CapacityError}.get(prep[1], DataError)
            raise cls(prep[2])
        return _generate(workload, data_dir, seed, comm, fsync, progress, prep, t0, storage)
    finally:
        if lock is not None:
            lock.release()


def _generate(workload: Workload, data_dir: Path, seed: int, comm, fsync: bool, progress, prep, t0: float,
              storage=None):
    import json
    import threading

    m = Manifest.from_dict(json.loads(prep[1]))
    if comm.rank == 0 and progress is None:
        progress = sys.stderr.isatty()
    writer = _Writer(workload, seed, data_dir, m, fsync, storage)
    prog = _Progress(data_dir, comm.rank)
    err = None
    finished = threading.Event()
    watcher = None
    if comm.rank == 0 and (progress or comm.size > 1):
        watcher = threading.Thread(target=_show_progress, daemon=True,
                                   args=(data_dir, comm, m.dataset_nbytes, bool(progress), finished.is_set))
        watcher.start()
    try:
        _rank_work(writer, m, comm, prog)
        prog.state = 1
    except OSError as e:
        prog.state = 2
        what = "disk full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else (e.strerror or str(e))
        err = f"rank {comm.rank}: {what} while writing {e.filename or data_dir}" if e.filename else \
            f"rank {comm.rank}: {what} while writing in {data_dir}"
    except DlbenchError as e:
        prog.state = 2
        err = f"rank {comm.rank}: {e}"
    except KeyboardInterrupt as e:   # SIGINT / SIGTERM: this rank's temporary file is already removed
        prog.state = 2
        prog.close()
        sig = getattr(e, "signal_name", "SIGINT")
        done = prog.files + prog.skipped_files
        what = (f"rank {comm.rank}: {done} of its {len(mine_of(m, comm))} files" if comm.size > 1
                else f"{done} of {len(m.paths)} files")
        msg = (f"interrupted by {sig} while generating {m.describe()} in {data_dir}: {what} complete, no "
               f"partial file kept (manifest complete: false); re-run the same command to resume")
        if comm.size > 1:   # the other ranks would wait in the next collective: end the job
            comm.abort(f"dlbench: {msg}", 143 if sig == "SIGTERM" else 130)
        from ..errors import Interrupted

        raise Interrupted(msg, exit_code=143 if sig == "SIGTERM" else 130) from None
    except BaseException:
        prog.state = 2
        prog.close()
        raise
    prog.close()
    finished.set()
    if watcher is not None:
        watcher.join()
    errors = [e for e in comm.allgather(err) if e]
    counts = comm.allreduce(np.asarray([prog.files, prog.bytes, prog.skipped_files], dtype=np.int64))
    if comm.rank == 0:
        if errors:
            _cleanup_failed(data_dir, m, workload, writer.storage)
        else:
            _finish(data_dir, m, workload, comm.size, time.perf_counter() - t0, writer.storage)
    comm.barrier()
    if errors:
        done = int(counts[0] + counts[2])
        raise DataError(f"generation of {m.describe()} in {data_dir} failed: {errors[0]}; "
                        f"{done} of {len(m.paths)} files complete; free space and re-run to resume")
    m.complete = True
    return GenerateResult(files_written=int(counts[0]), files_skipped=int(counts[2]),
                          bytes_written=int(counts[1]), seconds=time.perf_counter() - t0, ranks=comm.size,
                          manifest=m)


def mine_of(m: Manifest, comm) -> list[int]:
    """The files a rank writes (file f: rank f % size; the one shared file counts once, on rank 0)."""
    if len(m.paths) == 1:
        return [0] if comm.rank == 0 else []
    return list(range(comm.rank, len(m.paths), comm.size))


def _cleanup_failed(data_dir: Path, m: Manifest, workload: Workload, storage=None) -> None:
    """After a failure: no temporary file stays behind (the manifest stays ``complete: false``). The
    checksums of the files completed so far (the ranks' ``sum-<rank>`` records) move into the incomplete
    manifest's ``sum64`` first, so a re-run skips those files instead of writing them again."""
    storage = storage or PosixBackend(data_dir)
    for p in m.paths:
        storage.remove(p + ".part")
    sums = _recorded_sums(data_dir, m)
    if sums:
        m.sum64 = [sums.get(i) for i in range(len(m.paths))]
        m.complete = False
        try:
            m.save(data_dir)
        except OSError:  # the disk is full: the re-run rewrites those files, nothing half-written stays
            (data_dir / (MANIFEST_NAME + ".part")).unlink(missing_ok=True)
    shutil.rmtree(data_dir / TMP_DIR, ignore_errors=True)


def _finish(data_dir: Path, m: Manifest, workload: Workload, ranks: int, seconds: float, storage=None) -> None:
    sums = _recorded_sums(data_dir, m)
    # hdf5_shared: the .part renamed, its checksum (default: nothing)
    workload.format.driver().finish(data_dir, m, sums, storage or PosixBackend(data_dir))
    m.sum64 = [sums.get(i) for i in range(len(m.paths))]
    shutil.rmtree(data_dir / TMP_DIR, ignore_errors=True)
    m.complete = True
    m.provenance = {"status": "complete", "ranks": ranks, "seconds": round(seconds, 3), **_versions()}
    m.save(data_dir)
