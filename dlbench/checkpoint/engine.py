"""The checkpoint engine: each process writes (and restores) the files of the model rank it emulates.

Durability, as a real engine must do it: every file is written into ``<name>.incomplete/`` and fsync'd
(each fsync's latency kept), the directory is fsync'd, rank 0 writes ``manifest.json`` (every file's bytes
and CRC-32) and publishes by renaming to ``<name>`` and fsyncing the parent. A failure on any rank (disk
full, a signal) removes the ``.incomplete`` folder: nothing partial is ever published.

Modes: ``sync`` (the training stalls until the checkpoint is durable) and ``async`` (the stall is the
snapshot: a copy of the state into a staging buffer, as a GPU->host copy; a background thread writes and
fsyncs while training goes on; the checkpoint is published at the next step boundary after every rank's
writer is done). Layouts: ``stream`` and ``shards`` write raw tensor bytes with ``os.pwrite`` in
``CHUNK``-byte requests; ``dcp`` is real ``torch.distributed.checkpoint.save`` / ``async_save``
of tensors of their real shapes (``models.slice_shape``: a TP shard of a [hidden, ffn] weight is [hidden,
ffn / TP]) (``FileSystemWriter``, one file per rank), its files fsync'd by the engine after the save."""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DataError, OutputError
from ..units import format_bytes
from . import content
from .models import Model, Tensor, rank_files

CHUNK = 16 << 20
MANIFEST = "manifest.json"


@dataclass
class FileSpec:
    name: str
    offset: int                         # first byte in the rank's state buffer
    nbytes: int
    tensors: list[tuple[Tensor, int]]   # (tensor, offset in the file)


def file_specs(m: Model, rank: int, layout: str) -> list[FileSpec]:
    out, pos = [], 0
    for name, ts in rank_files(m, rank, layout):
        placed, off = [], 0
        for t in ts:
            placed.append((t, off))
            off += t.nbytes
        out.append(FileSpec(name, pos, off, placed))
        pos += off
    return out


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _fsync_dir(path) -> float:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def write_file(path: str, buf: memoryview, fsync: bool = True, chunk: int = CHUNK) -> tuple[float, float]:
    """``buf`` into a new file by pwrite requests of ``chunk`` bytes, then fsync: (write s, fsync s)."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        n, pos = len(buf), 0
        while pos < n:
            pos += os.pwrite(fd, buf[pos:pos + chunk], pos)
        t1 = time.perf_counter()
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return t1 - t0, time.perf_counter() - t1


def _quiet():
    """torch's warning that a process without a process group saves alone: that is what no_dist asks for."""
    import warnings

    cm = warnings.catch_warnings()
    cm.__enter__()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    return _Exit(cm)


class _Exit:
    def __init__(self, cm):
        self.cm = cm

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return self.cm.__exit__(*a)


def failure_line(e: BaseException, where: str) -> str:
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        what = {errno.ENOSPC: "disk full", errno.EDQUOT: "quota exceeded", errno.EFBIG: "file too large"}[e.errno]
        try:
            free = f"{format_bytes(shutil.disk_usage(where).free, 'MiB', group=True)} free"
        except OSError:
            free = "free space unknown"
        try:
            free = f"{format_bytes(shutil.disk_usage(os.path.dirname(where)).free, 'MiB', group=True)} free"
        except OSError:
            pass
        return f"{what} writing {getattr(e, 'filename', None) or where} ({free})"
    return f"{type(e).__name__}: {e}"


def _shaped(raw: np.ndarray, t: Tensor) -> np.ndarray:
    """``t``'s bytes in the state buffer as the tensor itself: its dtype and its real shape (a view)."""
    return raw.view(np.float16 if t.itemsize == 2 else np.float32).reshape(t.dims)


class Saver:
    """One process's side of checkpointing: the state of model rank ``rank`` (its files, its buffer)."""

    def __init__(self, comm, model: Model | None, rank: int, layout: str, root: Path, *, mode: str = "sync",
                 fsync: bool = True, seed: int = 0, chunk: int = CHUNK, files: list[FileSpec] | None = None):
        """``files``: this rank's files instead of the model's (``run --checkpoint-every``'s one file)."""
        self.comm, self.model, self.rank, self.layout = comm, model, rank, layout
        self.root, self.mode, self.fsync, self.seed, self.chunk = Path(root), mode, fsync, seed, chunk
        if files is None:
            assert model is not None
            files = file_specs(model, rank, "shards" if layout == "dcp" else layout)
        self.files = files
        self.nbytes = sum(f.nbytes for f in self.files)
        need = self.nbytes * (2 if mode == "async" else 1)
        avail = _mem_available()
        if avail is not None and need > 0.8 * avail:
            from ..errors import ConfigError

            what = f"--scale={model.scale:g}" if model is not None else "checkpoint"
            raise ConfigError(f"{what}: rank {rank}'s checkpoint content is {format_bytes(self.nbytes, 'GiB', digits=2, group=True)} "
                              f"({'twice, for async' if mode == 'async' else 'held in memory'}) but "
                              f"{format_bytes(avail, 'GiB', group=True)} of memory are available"
                              + ("; pass a smaller --scale" if model is not None else ""))
        self.state = content.page_aligned(self.nbytes)
        self.staging = content.page_aligned(self.nbytes) if mode == "async" else None
        self.crcs: dict[str, int] = {}
        self._thread: threading.Thread | None = None
        self._future: Future | None = None
        self._pending: dict | None = None
        self._pg: bool | None = None
        self._last_k = 0
        self._durable = threading.Event()   # dcp: set when this rank's files are fsync'd
        if layout == "dcp":     # imported before any timed region
            import torch.distributed.checkpoint as dcp

            if not hasattr(dcp, "async_save"):
                import torch

                from ..errors import ConfigError

                raise ConfigError(f"--layout dcp: torch {torch.__version__} has no "
                                  f"torch.distributed.checkpoint.async_save (torch >= 2.4 has it); use "
                                  f"--layout stream or shards")

    # ---- generation (before the timed region) ----
    def generate(self, k: int) -> float:
        s = content.fill(self.state, self.seed, self.rank, k)
        if self.layout != "dcp":
            self.crcs = {f.name: content.crc32(self.state[f.offset:f.offset + f.nbytes]) for f in self.files}
        return s

    # ---- save ----
    def name(self, k: int) -> str:
        return f"ckpt_{k:04d}"

    def begin(self, k: int, clock) -> dict:
        """Start checkpoint ``k``: returns its record (stall ends when this returns)."""
        inc = self.root / (self.name(k) + ".incomplete")
        if self.comm.rank == 0:
            if inc.exists():
                shutil.rmtree(inc)
            inc.mkdir(parents=True)
        self.comm.barrier()
        rec: dict = {"checkpoint": k, "rank": self.rank, "bytes": self.nbytes, "files": 0, "fsync_s": [],
                     "write_s": 0.0, "error": None, "t_start": clock(),
                     "fsync_after_write_bytes": []}
        src = self.state
        if self.mode == "async":
            assert self.staging is not None
            np.copyto(self.staging, self.state)     # the snapshot: the stall of an async save
            src = self.staging
        rec["t_snapshot"] = clock()
        if self.layout == "dcp":
            self._dcp_save(inc, src, rec, clock)
        elif self.mode == "async":
            self._thread = threading.Thread(target=self._write_all, args=(inc, src, rec, clock),
                                            name="dlbench-ckpt-writer", daemon=True)
            self._thread.start()
        else:
            self._write_all(inc, src, rec, clock)
        self._pending = rec
        return rec

    def _write_all(self, inc: Path, src: np.ndarray, rec: dict, clock) -> None:
        path = inc
        try:
            mv = src.data
            for f in self.files:
                path = inc / f.name
                w, s = write_file(str(path), mv[f.offset:f.offset + f.nbytes], self.fsync, self.chunk)
                rec["write_s"] += w + s
                rec["fsync_s"].append(s)
                rec["fsync_after_write_bytes"].append(f.nbytes)   # an fsync right after its file's writes
                rec["files"] += 1
        except BaseException as e:  # noqa: BLE001 - reported by every rank at publish, never swallowed
            rec["error"] = failure_line(e, str(path))
        rec["t_local_durable"] = clock()

    def done(self) -> bool:
        if self._thread is not None:
            return not self._thread.is_alive()
        if self._future is not None:   # the future is done before its callback (our fsyncs) has run
            return self._durable.is_set()
        return True

    def finish(self, clock) -> dict | None:
        """Wait for the pending checkpoint's writes, then publish it (collective). Returns its record."""
        rec = self._pending
        if rec is None:
            return None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._future is not None:
            try:
                self._future.result()
            except BaseException as e:  # noqa: BLE001
                rec["error"] = rec["error"] or failure_line(e, str(self.root))
            self._durable.wait()           # the callback's fsyncs, then publish
            self._future = None
        self._pending = None
        k = rec["checkpoint"]
        inc = self.root / (self.name(k) + ".incomplete")
        t_pub = clock()
        if rec["error"] is None and self.fsync and self.layout != "dcp":
            try:
                rec["fsync_s"].append(_fsync_dir(inc))
            except OSError as e:
                rec["error"] = failure_line(e, str(inc))
        entries = {f.name: [f.nbytes, self.crcs.get(f.name), self.rank] for f in self.files} \
            if self.layout != "dcp" else {}
        every = self.comm.allgather((rec["error"], entries))
        errors = [e for e, _ in every if e]
        if self.comm.rank == 0:
            if errors:
                shutil.rmtree(inc, ignore_errors=True)
            else:
                try:
                    man = {"schema": "dlbench.checkpoint/1", "model": getattr(self.model, "name", None),
                           "layout": self.layout,
                           "files": {n: v for _, d in every for n, v in d.items()}}
                    p = inc / MANIFEST
                    with open(p, "w") as fh:
                        json.dump(man, fh)
                        fh.flush()
                        if self.fsync:
                            os.fsync(fh.fileno())
                    if self.fsync:
                        _fsync_dir(inc)
                    final = self.root / self.name(k)
                    if final.exists():
                        shutil.rmtree(final)
                    os.rename(inc, final)
                    if self.fsync:
                        _fsync_dir(self.root)
                except OSError as e:
                    shutil.rmtree(inc, ignore_errors=True)
                    errors.append(failure_line(e, str(inc)))
        errors = self.comm.bcast(errors, root=0)
        if errors:
            raise OutputError(f"checkpoint {k}: {errors[0]}; nothing was published "
                              f"({self.name(k)}.incomplete removed)")
        rec["publish_s"] = (clock() - t_pub) / 1e9
        rec["t_durable"] = rec.get("t_local_durable", t_pub) + (clock() - t_pub)
        return rec

    def abandon(self) -> None:
        """On an interrupt: wait for the writer, remove every unpublished ``.incomplete`` folder (rank 0)."""
        if self._thread is not None:
            self._thread.join()
        if self._future is not None:
            try:
                self._future.result()
            except BaseException:  # noqa: BLE001 - the interrupt is what is reported
                pass
            self._durable.wait(60)
        for p in self.root.glob("*.incomplete"):
            shutil.rmtree(p, ignore_errors=True)

    # ---- dcp ----
    def _state_dict(self, src: np.ndarray) -> dict:
        import torch

        sd = {}
        for f in self.files:
            for t, off in f.tensors:
                sd[f"{f.name}/{t.name}"] = torch.from_numpy(_shaped(src[f.offset + off:f.offset + off + t.nbytes], t))
        return sd

    def process_group(self):
        if self._pg is None and self.comm.size > 1:
            import tempfile

            import torch.distributed as dist

            path = self.comm.bcast(tempfile.mktemp(prefix="dlbench-dcp-store-", dir=str(self.root)), root=0)
            if not dist.is_initialized():
                dist.init_process_group("gloo", store=dist.FileStore(path, self.comm.size),
                                        rank=self.comm.rank, world_size=self.comm.size)
            self._pg = True
            self._store = path
        return self._pg

    def _dcp_save(self, inc: Path, src: np.ndarray, rec: dict, clock) -> None:
        import torch.distributed.checkpoint as dcp

        self.process_group()
        sd = self._state_dict(src)
        writer = dcp.FileSystemWriter(str(inc), single_file_per_rank=True, sync_files=False, thread_count=1)
        no_dist = self.comm.size == 1

        self._durable.clear()

        def durable(_fut=None):
            try:
                mine = sorted(p for p in inc.iterdir() if p.name.startswith(f"__{self.comm.rank}_"))
                if self.comm.rank == 0:
                    mine += [inc / ".metadata"]
                for p in mine:
                    t0 = time.perf_counter()
                    fd = os.open(p, os.O_RDONLY)
                    try:
                        if self.fsync:
                            os.fsync(fd)
                    finally:
                        os.close(fd)
                    rec["fsync_s"].append(time.perf_counter() - t0)
                    rec["files"] += 1
                if self.fsync:
                    rec["fsync_s"].append(_fsync_dir(inc))
            except BaseException as e:  # noqa: BLE001 - reported at publish
                rec["error"] = failure_line(e, str(inc))
            rec["t_local_durable"] = clock()
            rec["write_s"] = (rec["t_local_durable"] - rec["t_snapshot"]) / 1e9
            self._durable.set()

        try:
            if self.mode == "async":
                with _quiet():
                    fut = dcp.async_save(sd, storage_writer=writer, no_dist=no_dist)
                assert isinstance(fut, Future)     # the thread checkpointer's answer
                fut.add_done_callback(durable)
                self._future = fut
            else:
                with _quiet():
                    dcp.save(sd, storage_writer=writer, no_dist=no_dist)
                durable()
        except BaseException as e:  # noqa: BLE001
            rec["error"] = failure_line(e, str(inc))
            rec["t_local_durable"] = clock()
            self._durable.set()

    def close(self) -> None:
        if self._pg:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self._pg = None


# ---- restore ---------------------------------------------------------------------------------------------

@dataclass
class ReadPlan:
    ranges: dict[str, list[tuple[int, int]]] = field(default_factory=dict)   # path -> [(offset, nbytes)]
    needed: int = 0
    missing: int = 0

    @property
    def nbytes(self) -> int:
        return sum(n for rs in self.ranges.values() for _, n in rs)


def placement(m: Model, ranks: list[int], layout: str, folder: Path) -> dict[str, list]:
    """Where every logical tensor's elements lie in a written checkpoint: logical -> sorted
    [(first element, count, itemsize, path, file offset)]."""
    out: dict[str, list] = {}
    for r in ranks:
        for f in file_specs(m, r, layout):
            for t, off in f.tensors:
                out.setdefault(t.logical, []).append((t.offset, t.count, t.itemsize, str(folder / f.name), off))
    for v in out.values():
        v.sort()
    return out


def needs(m: Model, rank: int) -> list[Tensor]:
    """What ``rank`` of ``m`` loads on a restore: its model states (every rank, ZeRO-1's too) and optimizer."""
    from .models import layer_tensors, optim_tensors, stage_layers

    _, pp_rank, _ = m.coords(rank)
    ts = [t for i in stage_layers(m, pp_rank) for t in layer_tensors(m, rank, i)]
    return ts + optim_tensors(m, rank)


def read_plan(place: dict[str, list], tensors: list[Tensor]) -> ReadPlan:
    """The byte ranges to read for ``tensors`` from a checkpoint laid out as ``place``: each element from the
    first file holding it; adjacent ranges of a file merged (one request)."""
    import bisect

    rp = ReadPlan()
    for t in tensors:
        rp.needed += t.nbytes
        segs = place.get(t.logical, [])
        pos, end = t.offset, t.offset + t.count
        i = max(0, bisect.bisect_right(segs, (pos, float("inf"))) - 1)
        got = 0
        while pos < end and i < len(segs):
            first, count, isz, path, foff = segs[i]
            i += 1
            if first + count <= pos:
                continue
            if first > pos:
                break
            upto = min(end, first + count)
            rp.ranges.setdefault(path, []).append((foff + (pos - first) * isz, (upto - pos) * isz))
            got += (upto - pos) * isz
            pos = upto
        rp.missing += t.nbytes - got
    for path, rs in rp.ranges.items():
        rs.sort()
        merged: list[tuple[int, int]] = []
        for off, n in rs:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((off, n))
        rp.ranges[path] = merged
    return rp


def execute(rp: ReadPlan, *, cold: bool, verify: dict | None = None, into: np.ndarray | None = None) -> dict:
    """Read ``rp`` (preadv into ``into``, the model's state, or a new page-aligned buffer); ``cold``: evict
    the files first (fadvise) and check residency with mincore. ``verify``: {path: (bytes, crc)} of the
    manifest, checked for files read whole."""
    from ..storage import pagecache

    paths = sorted(rp.ranges)
    rec: dict = {"bytes": rp.nbytes, "needed_bytes": rp.needed, "missing_bytes": rp.missing,
                 "files": len(paths), "requests": sum(len(v) for v in rp.ranges.values())}
    if cold:
        pagecache.evict(paths)
        rec["resident_before_bytes"] = pagecache.resident_bytes(paths)[0]
    buf = into[:rp.nbytes] if into is not None and into.nbytes >= rp.nbytes else content.page_aligned(rp.nbytes)
    mv = buf.data
    io0 = pagecache.proc_io().get("read_bytes")
    t0 = time.perf_counter()
    pos = 0
    spans = {}
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            start = pos
            for off, n in rp.ranges[p]:
                got = 0
                while got < n:      # one request per range; the kernel returns at most ~2 GiB per call
                    k = os.preadv(fd, [mv[pos + got:pos + n]], off + got)
                    if k <= 0:
                        raise DataError(f"checkpoint file {p}: {got} bytes at offset {off}, expected {n} "
                                        f"(truncated or damaged)")
                    got += k
                pos += n
            spans[p] = (start, pos)
        finally:
            os.close(fd)
    rec["read_s"] = time.perf_counter() - t0
    io1 = pagecache.proc_io().get("read_bytes")
    rec["device_bytes"] = None if io0 is None or io1 is None else io1 - io0
    if verify:
        for p, (a, b) in spans.items():
            want = verify.get(os.path.basename(p))
            if want and want[1] is not None and rp.ranges[p] == [(0, want[0])]:
                if content.crc32(buf[a:b]) != want[1]:
                    raise DataError(f"checkpoint file {p}: CRC-32 mismatch (the manifest's "
                                    f"{want[1]:#010x}): the file is damaged")
    return rec


def load_manifest(folder: Path) -> dict:
    p = Path(folder) / MANIFEST
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise DataError(f"checkpoint {folder}: no {MANIFEST} (not a published dlbench checkpoint)") from None
    except ValueError as e:
        raise DataError(f"checkpoint {p}: damaged manifest ({e})") from None


def dcp_restore(saver: Saver, folder: Path, as_rank: int, cold: bool) -> dict:
    """Real ``torch.distributed.checkpoint.load`` of model rank ``as_rank``'s tensors from ``folder``."""

    from ..storage import pagecache

    saver.process_group()
    assert saver.model is not None
    files = file_specs(saver.model, as_rank, "shards")
    buf = content.page_aligned(sum(f.nbytes for f in files))
    import torch

    sd = {}
    for f in files:
        for t, off in f.tensors:
            sd[f"{f.name}/{t.name}"] = torch.from_numpy(_shaped(buf[f.offset + off:f.offset + off + t.nbytes], t))
    paths = [str(p) for p in Path(folder).iterdir() if p.is_file()]
    rec: dict = {"bytes": int(buf.nbytes), "needed_bytes": int(buf.nbytes), "missing_bytes": 0, "files": None}
    if cold:
        if saver.comm.rank == 0:
            pagecache.evict(paths)
        saver.comm.barrier()
        rec["resident_before_bytes"] = pagecache.resident_bytes(paths)[0]
    _timed_dcp_load(saver, folder, sd, rec)
    # the content: what model rank as_rank wrote
    want = content.page_aligned(buf.nbytes)
    content.fill(want, saver.seed, as_rank, saver._last_k)
    if not np.array_equal(buf, want):
        raise DataError(f"checkpoint {folder}: dcp.load of rank {as_rank}'s tensors returned other bytes "
                        f"than were saved (damaged .distcp file)")
    return rec


def _timed_dcp_load(saver: Saver, folder: Path, sd: dict, rec: dict) -> None:
    """``torch.distributed.checkpoint.load`` of ``sd`` from ``folder``, timed (``rec["read_s"]``) with the bytes
    this process read from the device meanwhile (``rec["device_bytes"]``, /proc/self/io; None where unknown)."""
    import torch.distributed.checkpoint as dcp

    from ..storage import pagecache

    io0 = pagecache.proc_io().get("read_bytes")
    t0 = time.perf_counter()
    kw = {"no_dist": True} if saver.comm.size == 1 else {}
    with _quiet():
        dcp.load(sd, storage_reader=dcp.FileSystemReader(str(folder)), **kw)
    rec["read_s"] = time.perf_counter() - t0
    io1 = pagecache.proc_io().get("read_bytes")
    rec["device_bytes"] = None if io0 is None or io1 is None else io1 - io0


def dcp_reshard_restore(saver: Saver, folder: Path, written_ranks: list[int], tensors: list[Tensor],
                        cold: bool) -> dict:
    """A resharded restore of a ``dcp`` checkpoint: the old shards (keys) that hold any element of
    ``tensors`` are loaded by real ``torch.distributed.checkpoint.load`` (which reads each key's byte range of
    its ``.distcp`` file); ``bytes`` is what those keys hold, ``needed_bytes`` what the new rank needs."""
    import bisect

    import torch

    from ..storage import pagecache

    assert saver.model is not None
    keys: dict[str, Tensor] = {}
    by_logical: dict[str, list] = {}
    for r in written_ranks:
        for f in file_specs(saver.model, r, "shards"):
            for t, _ in f.tensors:
                by_logical.setdefault(t.logical, []).append((t.offset, t.count, f"{f.name}/{t.name}", t))
    for v in by_logical.values():
        v.sort(key=lambda x: x[:2])
    needed = missing = 0
    for t in tensors:
        needed += t.nbytes
        segs = by_logical.get(t.logical, [])
        pos, end = t.offset, t.offset + t.count
        i = max(0, bisect.bisect_right([s[0] for s in segs], pos) - 1)
        while pos < end and i < len(segs):
            first, count, key, old = segs[i]
            i += 1
            if first + count <= pos:
                continue
            if first > pos:
                break
            keys[key] = old
            pos = min(end, first + count)
        missing += (end - pos) * t.itemsize
    sd = {}
    nbytes = 0
    for key, t in keys.items():
        buf = content.page_aligned(t.nbytes)
        sd[key] = torch.from_numpy(_shaped(buf, t))
        nbytes += t.nbytes
    paths = [str(p) for p in Path(folder).iterdir() if p.is_file()]
    rec: dict = {"bytes": nbytes, "needed_bytes": needed, "missing_bytes": missing, "files": None,
                 "keys": len(sd)}
    if cold:
        rec["resident_before_bytes"] = pagecache.resident_bytes(paths)[0]
    _timed_dcp_load(saver, folder, sd, rec)
    return rec
