"""Format ``webdataset``: POSIX tar shards of ``{key}.{ext}`` members, as the ``webdataset`` package's
``TarWriter`` writes them and readable by ``webdataset.WebDataset`` (shard streaming, the pattern training on
object storage uses).

Layout. Shard f (``shard-<f>.tar``) holds samples ``first .. first+count-1`` (``samples_per_file`` per shard).
Sample i has key ``s<i:010d>`` and one member per array, ``<key>.<array name>.bin`` holding the array's bytes (the
``.bin`` extension: ``WebDataset(...).decode()`` hands such members over as bytes, where a name such as ``cls`` or
``json`` would be parsed by its default decoders), members in sorted name order (``TarWriter.write`` sorts a sample's keys). Each member is a 512-byte header as Python's
``tarfile`` writes it in ``TarWriter``'s stream (PAX format; plain ASCII names and integer times need no extended
header, so the header is ustar's), mode 0o444, user and group ``bigdata``, mtime ``MTIME`` (TarWriter's
``mtime=``: fixed so a shard is a function of (workload, seed)), then the data padded to 512 bytes; the archive
ends with two zero blocks, padded to tar's 10,240-byte record. The unit test compares a shard with
``TarWriter(mtime=MTIME)``'s bytes and reads it with ``webdataset.WebDataset``.

Read patterns (the workload's ``webdataset: {read, shuffle_buffer, initial, shard_shuffle}``):

- ``stream`` (default; naive and prefetch): webdataset's order (``dlbench.plan.shards``: shards split by rank and
  loader worker, a shard shuffle buffer, a sample shuffle buffer); the reader fetches a shard with ONE sequential
  read of the whole file the first time one of its samples is asked for (one GET on object storage) and serves
  its samples from that buffer, checking each member's header name; a shard is dropped once all its samples were
  served, and read again when a sample is asked for twice (the next epoch's stream). At most
  ``max_open_files`` shards are held (the oldest dropped first). Counters: one read per shard fetch.
- ``indexed`` (any strategy; webdataset's ``wids``): the sampler's order, one read per sample of the byte range
  from its first member's data to its last's (one ranged GET on object storage), the arrays copied out.

Through the storage backend (``STORAGE``): shards are written, checked and read with the backend's calls.
``--read-via``: auto (the workload's read pattern) or pread (the same); ``--cache direct`` is refused.
"""

from __future__ import annotations

import os
import tarfile
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from .format_base import FormatDriver
from .formats import SampleReader

MTIME = 946684800       # 2000-01-01T00:00:00Z, every member's mtime
BLOCK = 512
EXT = "bin"             # a member's last extension: webdataset's decoders (``.decode()``) leave ``.bin`` as bytes
RECORD = 20 * BLOCK     # tarfile.RECORDSIZE: an archive is padded to whole records
DIRECT_UNSUPPORTED = ("--cache direct: webdataset shards are read through buffered I/O (as webdataset reads them); "
                      "use --cache drop")


def options(workload):
    from ..workload import WebDatasetSpec

    return getattr(workload, "webdataset", None) or WebDatasetSpec()


def check_spec(spec, where: str) -> None:
    """Array names become member extensions: no dots or slashes."""
    for a in spec.arrays:
        if not a.name or any(c in a.name for c in "./ ") or not a.name.isascii():
            raise ConfigError(f"workload {spec.name} ({where}): array name {a.name!r}: webdataset member "
                              f"extensions are ASCII without '.', '/' or spaces")


# ---- layout (pure) ---------------------------------------------------------------------------------------------

def key(i: int) -> str:
    return f"s{i:010d}"


def shard_name(f: int) -> str:
    return f"shard-{f:06d}.tar"


def _pad(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _arrays(spec: dict) -> list[tuple[int, str, int]]:
    """(position in the row, member extension ``<array name>.bin``, bytes) of each array, in member (sorted
    extension) order."""
    pos, out = 0, []
    for a in spec["arrays"]:
        nb = int(np.prod(a["shape"], dtype=np.int64)) * np.dtype(a["dtype"]).itemsize
        out.append((pos, f"{a['name']}.{EXT}", nb))
        pos += nb
    return sorted(out, key=lambda t: t[1])


def _stride(spec: dict) -> int:
    return sum(BLOCK + _pad(nb) for _, _, nb in _arrays(spec))


def archive_nbytes(count: int, stride: int) -> int:
    return -(-(count * stride + 2 * BLOCK) // RECORD) * RECORD


def sample_nbytes(manifest) -> np.ndarray:
    row = sum(nb for _, _, nb in _arrays(manifest.spec))
    return np.full(int(manifest.count.sum()), row, dtype=np.int64)


def plan_files(workload, seed: int):
    from .manifest import spec_of

    spec = spec_of(workload)
    n, k = int(workload.samples), max(1, int(workload.samples_per_file))
    first = np.arange(0, n, k, dtype=np.int64)
    count = np.minimum(k, n - first)
    st = _stride(spec)
    return ([shard_name(f) for f in range(len(first))], first, count,
            np.asarray([archive_nbytes(c, st) for c in count.tolist()], dtype=np.int64))


@lru_cache(maxsize=4096)
def member_header(name: str, size: int) -> bytes:
    """The 512-byte header ``TarWriter`` (``tarfile`` stream, default PAX format) writes for a member."""
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.mode, ti.uname, ti.gname = size, MTIME, 0o444, "bigdata", "bigdata"
    return ti.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


# ---- content ---------------------------------------------------------------------------------------------------

def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample i's arrays' bytes in workload order (the row the trainer sees; the members hold the same bytes)."""
    from ..storage import aligned_empty
    from .content import fill_arrays

    sizes = [a.nbytes for a in workload.arrays]
    out = aligned_empty(sum(sizes), np.uint8)
    edges = np.cumsum([0, *sizes])
    fill_arrays(workload, seed, i, [out[edges[k]:edges[k + 1]] for k in range(len(sizes))])
    return out


# ---- writing ---------------------------------------------------------------------------------------------------

CHUNK_BYTES = 32 << 20


def write_file(fd, workload, seed: int, m, f: int) -> int:
    """Shard ``f``: each sample's members (header, data, padding), the end blocks, the record padding; staged
    ≈ 32 MiB at a time."""
    from .generate import write_all
    from .manifest import spec_of

    spec = spec_of(workload)
    arrays = _arrays(spec)
    stride = _stride(spec)
    first, count = int(m.first[f]), int(m.count[f])
    per = max(1, CHUNK_BYTES // stride)
    buf = np.zeros(min(per, max(1, count)) * stride, np.uint8)
    row = np.empty(sum(nb for _, _, nb in arrays), np.uint8)
    written = 0
    for s0 in range(first, first + count, per):
        b = min(per, first + count - s0)
        buf[:b * stride] = 0
        for r in range(b):
            i = s0 + r
            row[:] = expected_row(workload, seed, i)
            p = r * stride
            for pos, name, nb in arrays:
                buf[p:p + BLOCK] = np.frombuffer(member_header(f"{key(i)}.{name}", nb), np.uint8)
                buf[p + BLOCK:p + BLOCK + nb] = row[pos:pos + nb]
                p += BLOCK + _pad(nb)
        written += write_all(fd, buf[:b * stride], (s0 - first) * stride)
    tail = int(m.nbytes[f]) - count * stride
    written += write_all(fd, np.zeros(tail, np.uint8), count * stride)
    if written != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {written} B, the plan says {int(m.nbytes[f])} B")
    return written


# ---- verification ----------------------------------------------------------------------------------------------

def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None, storage=None) -> list[str]:
    """Structure: ``tarfile`` lists the shard's members: ``<key>.<array>.bin`` of every sample in order, each of its
    array's size."""
    import io

    arrays = _arrays(m.spec)
    want = [(f"{key(i)}.{name}", nb) for i in range(int(m.first[f]), int(m.first[f] + m.count[f]))
            for _, name, nb in arrays]
    try:
        with tarfile.open(fileobj=io.BytesIO(image)) if image is not None else tarfile.open(path) as tf:
            got = [(ti.name, ti.size) for ti in tf]
    except (tarfile.TarError, OSError) as e:
        return [f"{path}: not a readable tar shard ({e})"]
    if got != want:
        bad = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        return [f"{path}: member {bad} is {got[bad] if bad < len(got) else 'missing'}, expected "
                f"{want[bad] if bad < len(want) else 'the end'} (name, bytes)"]
    return []


# ---- the read order --------------------------------------------------------------------------------------------

def shared_read_plan(name: str, ctx, *, meta, streams: int, drop_last_batch: bool, sampler_order):
    """Read pattern ``stream``: webdataset's order (``dlbench.plan.shards``); ``indexed``: the sampler's."""
    wl = ctx.workload
    opts = options(wl)
    spf = getattr(wl, "samples_per_file", None)
    if opts.read == "indexed":
        return sampler_order(meta).replace(read_pattern="indexed",
                                           order="global shuffle (DistributedSampler); webdataset read pattern "
                                                 "indexed (one range read per sample, wids)")
    if spf is None:   # the simulator's workload carries no shard size: its plan is the sampler's, said so
        return sampler_order(meta).replace(read_pattern="webdataset-simulated-as-sampler",
                                           order="simulated as the sampler's global shuffle (the simulator's "
                                                 "workload has no shard size); bytes and requests per sample are "
                                                 "the same")
    from ..plan import SHARED
    from ..plan.shards import shard_stream_plan

    spf = max(1, int(spf))
    first = np.arange(0, ctx.n_samples, spf, dtype=np.int64)
    if len(first) < ctx.world_size:
        raise ConfigError(f"webdataset.read=stream: {len(first)} shards for {ctx.world_size} ranks; every rank "
                          f"needs a shard (split_by_node): use at least {ctx.world_size} shards (samples_per_file "
                          f"<= {ctx.n_samples // ctx.world_size}) or webdataset.read: indexed")
    return shard_stream_plan(strategy=name, first=first, count=np.minimum(spf, ctx.n_samples - first),
                             n_samples=ctx.n_samples, world_size=ctx.world_size, node_map=ctx.node_map,
                             epochs=ctx.epochs, local_batch=ctx.local_batch, seed=ctx.seed, streams=streams,
                             shuffle_buffer=opts.shuffle_buffer, initial=opts.initial,
                             shard_shuffle=opts.shard_shuffle, tier=SHARED, meta=meta, drop_last_batch=drop_last_batch)


def check_plan(workload, plan, strategy: str) -> None:
    if options(workload).read == "stream" and plan.read_pattern != "webdataset":
        raise ConfigError(f"--strategy={strategy}: the webdataset read pattern stream (shards streamed per rank "
                          f"and loader worker) is planned by the naive and prefetch strategies only; use one of "
                          f"them, or webdataset.read: indexed in the workload")


def summary_keys(workload) -> dict:
    return {"webdataset_read": options(workload).read}


# ---- readers ---------------------------------------------------------------------------------------------------

def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None):
    if via not in ("auto", "pread"):
        raise ConfigError(f"--read-via={via}: layout webdataset is read with auto or pread (the workload's "
                          f"webdataset.read picks the pattern)")
    if direct:
        raise ConfigError(DIRECT_UNSUPPORTED)
    from ..storage.backend import PosixBackend

    st = storage if storage is not None else PosixBackend(d)
    cls = StreamReader if options(workload).read == "stream" else IndexedReader
    return cls(manifest, workload, counters, st, max_open_files)


class _Base(SampleReader):
    def __init__(self, manifest, workload, counters, st, max_open_files: int):
        self._rel = list(manifest.paths)
        self._keys = st.keys(manifest.paths)
        self._open_read, self._preadv, self._close = st.open_read, st.preadv, st.close
        self._spf = max(1, int(workload.samples_per_file))
        self._first = manifest.first
        self._count = manifest.count
        self._nbytes = manifest.nbytes
        self._arrays = _arrays(manifest.spec)
        self._stride = _stride(manifest.spec)
        self.max_row_nbytes = self.decoded_nbytes = sum(nb for _, _, nb in self._arrays)
        self.counters = counters
        self._max = max(1, int(max_open_files))

    def _bad(self, f: int, i: int, what: str) -> DataError:
        return DataError(f"{self._rel[f]}: sample {i}: {what}; check the dataset with `dlbench verify`")


class StreamReader(_Base):
    """A shard fetched whole with one read, its samples served from the buffer (module docstring)."""

    def __init__(self, *a):
        super().__init__(*a)
        self._shards: OrderedDict[int, tuple[np.ndarray, memoryview, set]] = OrderedDict()
        self.shard_reads = 0
        self._first_l, self._count_l = self._first.tolist(), self._count.tolist()
        # (row position, b".<name>\0" (the header's name field after the key), bytes, header + padded data)
        self._members = [(pos, f".{name}\0".encode(), nb, BLOCK + _pad(nb)) for pos, name, nb in self._arrays]

    def _fetch(self, f: int) -> np.ndarray:
        n = int(self._nbytes[f])
        buf = np.empty(n, np.uint8)
        h = self._open_read(self._keys[f], os.O_RDONLY)
        try:
            t0 = perf_counter_ns()
            got = self._preadv(h, [buf], 0)
            dt = perf_counter_ns() - t0
        finally:
            self._close(h)
        if self.counters is not None:
            self.counters.open_read(f, 0, got, dt)
        if got != n:
            raise DataError(f"{self._rel[f]}: short read of the shard ({got} of {n} B): truncated; check the "
                            f"dataset with `dlbench verify`")
        self.shard_reads += 1
        return buf

    def read_into(self, i: int, out: np.ndarray) -> int:
        f = i // self._spf
        ent = self._shards.get(f)
        if ent is None or i in ent[2]:     # not held, or asked again: the next pass over the shard
            buf = self._fetch(f)
            ent = self._shards[f] = (buf, memoryview(buf), set())  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
            self._shards.move_to_end(f)
            if len(self._shards) > self._max:
                self._shards.popitem(last=False)
        buf, mv, served = ent
        p = (i - self._first_l[f]) * self._stride
        kb = b"s%010d" % i
        for pos, suffix, nb, step in self._members:
            k = len(kb)
            if mv[p:p + k] != kb or mv[p + k:p + k + len(suffix)] != suffix:
                raise self._bad(f, i, f"the member header at byte {p} is not {kb.decode()}{suffix[:-1].decode()}")
            out[pos:pos + nb] = buf[p + BLOCK:p + BLOCK + nb]
            p += step
        served.add(i)
        if len(served) == self._count_l[f]:
            del self._shards[f]
        return self.max_row_nbytes

    def close(self) -> None:
        self._shards.clear()


class IndexedReader(_Base):
    """One read per sample of its members' span (webdataset's wids), the arrays copied out."""

    def __init__(self, *a):
        super().__init__(*a)
        self._fds: OrderedDict[int, object] = OrderedDict()
        span = self._stride - BLOCK - (_pad(self._arrays[-1][2]) - self._arrays[-1][2])
        self._span = span
        self._one = len(self._arrays) == 1
        self._scratch = np.empty(span, np.uint8)

    def _fd(self, f: int):
        h = self._fds.get(f)
        if h is None:
            h = self._fds[f] = self._open_read(self._keys[f], os.O_RDONLY)
            if self.counters is not None:
                self.counters.open()
            if len(self._fds) > self._max:
                self._close(self._fds.popitem(last=False)[1])
        return h

    def read_into(self, i: int, out: np.ndarray) -> int:
        f = i // self._spf
        h = self._fd(f)
        off = (i - int(self._first[f])) * self._stride + BLOCK
        dest = out[:self._span] if self._one else self._scratch
        t0 = perf_counter_ns()
        got = self._preadv(h, [dest], off)
        if self.counters is not None:
            self.counters.read(f, off, got, perf_counter_ns() - t0)
        if got != self._span:
            raise self._bad(f, i, f"short read ({got} of {self._span} B): the shard is truncated")
        if not self._one:
            p = 0
            for pos, _, nb in self._arrays:
                out[pos:pos + nb] = dest[p:p + nb]
                p += nb + (_pad(nb) - nb) + BLOCK
        return self.max_row_nbytes

    def close(self) -> None:
        while self._fds:
            self._close(self._fds.popitem()[1])


class WebDatasetFormat(FormatDriver):
    """The format driver of webdataset: this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True
    SECTION = "webdataset"
    DIRECT_UNSUPPORTED = DIRECT_UNSUPPORTED

    check_file = staticmethod(check_file)
    check_plan = staticmethod(check_plan)
    check_spec = staticmethod(check_spec)
    expected_row = staticmethod(expected_row)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    sample_nbytes = staticmethod(sample_nbytes)
    shared_read_plan = staticmethod(shared_read_plan)
    summary_keys = staticmethod(summary_keys)
    write_file = staticmethod(write_file)
