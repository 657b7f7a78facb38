"""Format ``npy``: NumPy ``.npy`` files as ``np.save`` writes them, one module for everything the format
does (issue 16's format registry: adding a format is this module plus one ``register`` line).

Layout. File f (``data-<f>.npy``) holds the workload's one array for samples ``first .. first+count-1``:
shape ``(count, *sample_shape)``, or the sample's own shape when ``samples_per_file`` is 1 (a file per
sample, DLIO's unet3d). Samples lie along axis 0, so a sample is one contiguous byte range (DLIO's
generator puts them on the last axis, ``(d1, d2, N)``; the bytes per file and per sample are the same).
The bytes are exactly ``np.save``'s: the version 1.0 header that ``np.lib.format`` writes (magic,
header length, the dict padded to a multiple of 64 bytes), then the C-order data.

Record sizes. With the workload's ``record_size`` (DLIO's record_length ± record_length_stdev) the data
array is 1-D and its byte length is drawn per file (as DLIO draws one shape per file) from a counter-based
hash of (workload, seed, file index): normal, lognormal or fixed, clipped to [min_bytes, max_bytes], then
rounded down to whole elements (at least one). With one sample per file this is a size per sample.
``row_nbytes(spec, seed)`` gives every file's per-sample bytes; the manifest's ``sample_nbytes()`` and
therefore every plan, counter and summary use these exact sizes.

Content. Sample i's array a is filled from its own generator ``content.sample_rng(workload, seed, i,
3 + a)`` with the HDF5 rows' rule (``content._fill_one``: a random block tiled, floats in [0, 1),
integers in [0, 1024), labels in {0, 1}); a sample's row is the concatenation of its arrays' bytes.

Readers. ``--read-via auto`` / ``library`` (default, what a PyTorch ``Dataset`` does): ``np.load`` per sample
(one sample per file: the whole file; several: ``np.load(mmap_mode="r")`` and a copy of the row).
``--read-via pread``: the header is parsed once per opened file (``np.lib.format``), then the row is one
``preadv`` at ``data_offset + j * row_bytes`` straight into the batch row (an LRU of open files); a file per
sample is ``open + preadv + close``, the one ``preadv`` taking the header into a small buffer (then compared
with ``np.save``'s for the shape: another header is parsed and the row read again). Header
bytes are not counted as reads (as HDF5 metadata); O_DIRECT is not implemented (``--cache direct`` falls
back to buffered reads with eviction).
"""

from __future__ import annotations

import functools
import io
import os
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from .format_base import FormatDriver
from .formats import SampleReader

SUFFIX = ".npy"
DIRECT_UNSUPPORTED = ("--cache direct: layouts npy/npz are read through np.load or buffered pread, not O_DIRECT; "
                      "these reads stay buffered, with the dataset evicted from the page cache before every epoch "
                      "(as --cache drop)")
VIAS = ("auto", "library", "pread")   # --read-via: auto = library (np.load)
STREAM0 = 3   # content.sample_rng streams 0-2 are the HDF5 rows and JPEG images


# ---- the workload's checks and sizes (pure) ----------------------------------------------------------

def check_spec(spec, where: str) -> None:
    """npy holds one array per file."""
    if len(spec.arrays) != 1:
        raise ConfigError(f"workload {spec.name} ({where}): layout npy holds one array per file; arrays has "
                          f"{len(spec.arrays)} ({', '.join(a.name for a in spec.arrays) or 'none'})")


def record_nbytes(spec: dict, seed: int, n_files: int) -> np.ndarray | None:
    """Per file, the bytes of one sample's data array drawn from ``spec["record_size"]`` (None: fixed
    shapes). Whole elements, at least one; a pure function of (workload name, seed, file index)."""
    from ..workload import workload_id

    rs = spec.get("record_size")
    if not rs:
        return None
    data = next(a for a in spec["arrays"] if a["role"] == "data")
    # drawn once per (workload, seed, files): every per-sample shape lookup (readers' file opens, expected
    # rows) goes through here, and the draw is O(files)
    return _record_nbytes(workload_id(spec["name"]), rs["kind"], float(rs["mean_bytes"]), float(rs["std_bytes"]),
                          float(rs["min_bytes"]), float(rs["max_bytes"]), np.dtype(data["dtype"]).itemsize,
                          int(seed), int(n_files))


@lru_cache(maxsize=16)
def _record_nbytes(wid: int, kind: str, mean: float, std: float, lo: float, hi: float, item: int, seed: int,
                   n_files: int) -> np.ndarray:
    from .content import size_draw

    sizes = size_draw(wid, seed, np.arange(n_files, dtype=np.int64), kind, mean, std, (11, 12))
    out = np.maximum(1, np.floor(np.clip(sizes, lo, hi) / item)).astype(np.int64) * item
    out.flags.writeable = False     # shared by every caller (cached)
    return out


def n_files(spec: dict) -> int:
    return -(-int(spec["samples"]) // int(spec["samples_per_file"]))


def sample_shapes(spec: dict, seed: int, f: int, rec: np.ndarray | None = None) -> list[tuple[int, ...]]:
    """The shape of each array of one sample of file ``f``."""
    if rec is None and spec.get("record_size"):
        rec = record_nbytes(spec, seed, n_files(spec))
    out: list[tuple[int, ...]] = []
    for a in spec["arrays"]:
        if rec is not None and a["role"] == "data":
            out.append((int(rec[f]) // np.dtype(a["dtype"]).itemsize,))
        else:
            out.append(tuple(int(d) for d in a["shape"]))
    return out


def file_shape(spec: dict, sample_shape: tuple[int, ...], count: int) -> tuple[int, ...]:
    """A file's array shape: the sample's own with one sample per file, else (count, *sample_shape)."""
    return tuple(sample_shape) if int(spec["samples_per_file"]) == 1 else (int(count), *sample_shape)


def row_nbytes(spec: dict, seed: int) -> np.ndarray:
    """Per file, the bytes of one sample's row (every array)."""
    nf = n_files(spec)
    rec = record_nbytes(spec, seed, nf)
    fixed = sum(int(np.prod(a["shape"], dtype=np.int64)) * np.dtype(a["dtype"]).itemsize
                for a in spec["arrays"] if rec is None or a["role"] != "data")
    return np.full(nf, fixed, dtype=np.int64) if rec is None else rec + fixed


def sample_nbytes(manifest) -> np.ndarray:
    """Per sample, its stored bytes (the manifest's ``sample_nbytes()``)."""
    return np.repeat(row_nbytes(manifest.spec, manifest.seed), manifest.count)


def npy_header(dtype, shape) -> bytes:
    """The header ``np.save`` writes for a C-order array of ``dtype`` and ``shape`` (format 1.0)."""
    from numpy.lib import format as npf

    bio = io.BytesIO()
    npf.write_array_header_1_0(bio, {"descr": npf.dtype_to_descr(np.dtype(dtype)), "fortran_order": False,
                                     "shape": tuple(int(d) for d in shape)})
    return bio.getvalue()


def layout_files(workload, seed: int, name: str = "data-{f:08d}" + SUFFIX):
    """(paths, first, count) of the files of a npy/npz dataset."""
    n, k = workload.samples, workload.samples_per_file
    first = np.arange(0, n, k, dtype=np.int64)
    count = np.minimum(k, n - first)
    return [name.format(f=f) for f in range(len(first))], first, count


def plan_files(workload, seed: int):
    """(paths, first, count, file bytes) before any byte is written: header + data per file."""
    from .manifest import spec_of

    spec = spec_of(workload)
    paths, first, count = layout_files(workload, seed)
    rec = record_nbytes(spec, seed, len(paths))
    a = spec["arrays"][0]
    nbytes = np.empty(len(paths), dtype=np.int64)
    for f, c in enumerate(count.tolist()):
        sh = file_shape(spec, sample_shapes(spec, seed, f, rec)[0], c)
        nbytes[f] = len(npy_header(a["dtype"], sh)) + int(np.prod(sh, dtype=np.int64)) * np.dtype(a["dtype"]).itemsize
    return paths, first, count, nbytes


# ---- content ------------------------------------------------------------------------------------------

def fill_array(workload, seed: int, i: int, a: int, out: np.ndarray) -> None:
    """Sample ``i``'s array number ``a`` into ``out`` (uint8, exactly its bytes, aligned to its dtype)."""
    from .content import _fill_one, sample_rng

    spec = workload.arrays[a]
    _fill_one(sample_rng(workload, seed, i, STREAM0 + a), out.view(spec.dtype), spec.role)


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample ``i``'s row as written (its arrays' bytes, in order; uint8, a fresh array)."""
    from .manifest import spec_of

    spec = spec_of(workload)
    f = i // workload.samples_per_file
    shapes = sample_shapes(spec, seed, f)
    sizes = [int(np.prod(sh, dtype=np.int64)) * np.dtype(a.dtype).itemsize for sh, a in zip(shapes, workload.arrays)]
    from ..storage import aligned_empty

    out = aligned_empty(sum(sizes), np.uint8)
    pos = 0
    for a, n in enumerate(sizes):
        fill_array(workload, seed, i, a, out[pos:pos + n])
        pos += n
    return out


def array_rows(workload, seed: int, first: int, count: int, a: int, row_bytes: int, buf: np.ndarray):
    """Yield (j, bytes of sample first+j's array a), filled into ``buf`` (reused)."""
    for j in range(count):
        view = buf[:row_bytes]
        fill_array(workload, seed, first + j, a, view)
        yield j, view


# ---- writing ------------------------------------------------------------------------------------------

def write_file(fd: int, workload, seed: int, m, f: int) -> int:
    """Write file ``f`` of manifest ``m`` into the open (empty) ``fd``; returns the bytes written, which
    must equal the planned size."""
    from ..storage import aligned_empty
    from .generate import write_all
    from .manifest import spec_of

    spec = spec_of(workload)
    first, count = int(m.first[f]), int(m.count[f])
    a = workload.arrays[0]
    sh = sample_shapes(spec, seed, f)[0]
    row = int(np.prod(sh, dtype=np.int64)) * np.dtype(a.dtype).itemsize
    head = npy_header(a.dtype, file_shape(spec, sh, count))
    n = write_all(fd, np.frombuffer(head, dtype=np.uint8), 0)
    buf = aligned_empty(row, np.uint8)
    for j, view in array_rows(workload, seed, first, count, 0, row, buf):
        n += write_all(fd, view, len(head) + j * row)
    if n != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {n} B, the plan says {int(m.nbytes[f])} B")
    return n


# ---- verify -------------------------------------------------------------------------------------------

def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
               storage=None) -> list[str]:
    """Structure: ``np.load`` opens it (memory-mapped) with the planned dtype and shape. ``image``: the file's
    bytes (a storage backend's file; ``path`` then only names it)."""
    from .manifest import spec_of

    spec = spec_of(workload)
    a = workload.arrays[0]
    want = file_shape(spec, sample_shapes(spec, seed, f)[0], int(m.count[f]))
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False) if image is None else \
            np.load(io.BytesIO(image), allow_pickle=False)
    except (OSError, ValueError) as e:
        return [f"{path}: not a readable .npy file ({' '.join(str(e).split())[:120]})"]
    if arr.shape != want or arr.dtype != np.dtype(a.dtype):
        return [f"{path}: array is {arr.shape} {arr.dtype}, expected {want} {a.dtype}"]
    return []


# ---- readers ------------------------------------------------------------------------------------------

def check_via(via: str, workload, direct: bool) -> None:
    """The npy/npz readers' choice: ``--read-via`` one of VIAS, no O_DIRECT (one-line errors)."""
    if via not in VIAS:
        raise ConfigError(f"--read-via={via}: layout {workload.layout} is read with {', '.join(VIAS)} "
                          f"(auto = library: np.load)")
    if direct:
        raise ConfigError(DIRECT_UNSUPPORTED)


def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None):
    check_via(via, workload, direct)
    if via == "pread":
        return NpyPreadReader(d, manifest, workload, counters, max_open_files=max_open_files, storage=storage)
    return NpyLoadReader(d, manifest, workload, counters, storage=storage)


def _image_loader(storage):
    """``np.load`` of a backend's file (its bytes; no memory map)."""
    def load(key, mmap_mode=None, allow_pickle=False):
        return np.load(io.BytesIO(storage.file_image(key)), allow_pickle=allow_pickle)
    return load


class _Base(SampleReader):
    def _init(self, d: Path, manifest, workload, counters, storage=None):
        from ..storage.backend import PosixBackend

        self._storage = storage = storage or PosixBackend(d)
        # np.load of a path (POSIX), or of the file's bytes (a backend without paths)
        self._np_load = np.load if storage.paths else _image_loader(storage)
        self._paths = storage.keys(manifest.paths)
        self._spf = int(workload.samples_per_file)
        self._rows = row_nbytes(manifest.spec, manifest.seed)
        self.max_row_nbytes = self.decoded_nbytes = int(self._rows.max()) if len(self._rows) else 0
        self.counters = counters


class NpyLoadReader(_Base):
    """``np.load`` per sample, as a PyTorch Dataset over .npy files does."""

    def __init__(self, d: Path, manifest, workload, counters=None, storage=None):
        self._init(d, manifest, workload, counters, storage)

    def read_into(self, i: int, out: np.ndarray) -> int:
        f, j = divmod(i, self._spf)
        n = int(self._rows[f])
        t0 = perf_counter_ns()
        try:
            if self._spf == 1:
                arr = self._np_load(self._paths[f], allow_pickle=False)
            else:
                arr = self._np_load(self._paths[f], mmap_mode="r", allow_pickle=False)[j]
            if arr.nbytes != n:
                raise ValueError(f"sample has {arr.nbytes} B, the manifest says {n} B")
            out[:n] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        except (OSError, ValueError, IndexError) as e:
            raise DataError(f"{os.fsdecode(self._paths[f])}: cannot read sample {i}: {e}; check the dataset with "
                            f"`dlbench verify`") from None
        if self.counters is not None:
            self.counters.open_read(f, j * n, n, perf_counter_ns() - t0)
        return n

    def close(self) -> None:
        pass


class NpyPreadReader(_Base):
    """Header parsed once per opened file, then one ``preadv`` per sample (an LRU of open files). A file per
    sample: ``open + preadv + close``, the one ``preadv`` reading the header into a small buffer and the data
    straight into the row; the header is then compared with the one ``np.save`` writes for that shape (any
    other: the general path, which parses it and reads again)."""

    def __init__(self, d: Path, manifest, workload, counters=None, max_open_files: int = 64, storage=None):
        self._init(d, manifest, workload, counters, storage)
        st = self._storage
        self._open_read, self._preadv, self._close, self._pread = st.open_read, st.preadv, st.close, st.pread
        self._spec, self._seed, self._count = manifest.spec, manifest.seed, manifest.count
        self._dtype = np.dtype(workload.arrays[0].dtype)
        self._open: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._max_open = max(1, int(max_open_files))
        if self._spf == 1:
            self.read_into = self._read_whole  # type: ignore[method-assign]  # a file per sample
            self._rec = rec = record_nbytes(self._spec, self._seed, len(self._rows))
            self._fixed = b"" if rec is not None else _expected_header(
                self._dtype.str, file_shape(self._spec, sample_shapes(self._spec, self._seed, 0)[0], 1))
            self._heads: dict[int, bytearray] = {}     # header length -> the reader's buffer for it

    def _header(self, f: int) -> bytes:
        rec = self._rec
        if rec is None:
            return self._fixed
        return _expected_header(self._dtype.str, (int(rec[f]) // self._dtype.itemsize,))

    def _read_whole(self, i: int, out: np.ndarray) -> int:
        n = int(self._rows[i])
        want = self._header(i)
        buf = self._heads.get(len(want))
        if buf is None:
            buf = self._heads[len(want)] = bytearray(len(want))
        path = self._paths[i]
        fd = self._open_read(path, os.O_RDONLY)
        try:
            t0 = perf_counter_ns()
            got = self._preadv(fd, [buf, out[:n]], 0) - len(want)
            dt = perf_counter_ns() - t0
            off = len(want)
            if buf != want:   # another writer's header (or none): parse it, then read the row again
                off = data_offset(fd, path, 0, self._dtype, file_shape(self._spec, sample_shapes(
                    self._spec, self._seed, i, self._rec)[0], 1), pread=self._pread)
                t0 = perf_counter_ns()
                got = self._preadv(fd, [out[:n]], off)
                dt = perf_counter_ns() - t0
        finally:
            self._close(fd)
        if self.counters is not None:
            self.counters.open_read(i, off, max(got, 0), dt)
        if got != n:
            raise DataError(f"{os.fsdecode(path)}: short read of sample {i}: the file is truncated "
                            f"(check the dataset with `dlbench verify`)")
        return n

    def _get(self, f: int) -> tuple[int, int]:
        h = self._open.get(f)
        if h is not None:
            return h
        fd = self._open_read(self._paths[f], os.O_RDONLY)
        try:
            off = data_offset(fd, self._paths[f], 0, self._dtype,
                              file_shape(self._spec, sample_shapes(self._spec, self._seed, f)[0], int(self._count[f])),
                              pread=self._pread)
        except BaseException:
            self._close(fd)
            raise
        if self.counters is not None:
            self.counters.open()
        h = self._open[f] = (fd, off)
        if len(self._open) > self._max_open:
            self._close(self._open.popitem(last=False)[1][0])
        return h

    def read_into(self, i: int, out: np.ndarray) -> int:
        f, j = divmod(i, self._spf)
        n = int(self._rows[f])
        fd, off = self._get(f)
        t0 = perf_counter_ns()
        got = self._preadv(fd, [out[:n]], off + j * n)
        if self.counters is not None:
            self.counters.read(f, off + j * n, got, perf_counter_ns() - t0)
        if got != n:
            raise DataError(f"{os.fsdecode(self._paths[f])}: short read of sample {i}: the file is truncated "
                            f"(check the dataset with `dlbench verify`)")
        if self._spf == 1:
            self._close(self._open.pop(f)[0])   # a file per sample: nothing more to read from it
        return n

    def close(self) -> None:
        while self._open:
            self._close(self._open.popitem()[1][0])


@functools.lru_cache(maxsize=4096)
def _expected_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    return npy_header(dtype, shape)


def data_offset(fd: int, path: bytes, at: int, dtype: np.dtype, shape: tuple[int, ...], head: bytes | None = None,
                pread=os.pread) -> int:
    """Where the data of the .npy array whose header starts at byte ``at`` of ``fd`` begins; DataError unless it
    is a C-order array of ``dtype`` and ``shape``. ``head``: bytes already read from ``at`` (else one pread).
    Fast path: the header is byte for byte the one ``np.save`` writes for that array (cached per shape, ~1 µs);
    otherwise it is parsed with ``np.lib.format`` (~60 µs: version 2.0 headers, other writers)."""
    from numpy.lib import format as npf

    want = _expected_header(dtype.str, tuple(int(d) for d in shape))
    if head is None or len(head) < len(want):
        head = pread(fd, max(4096, len(want)), at)
    if head[:len(want)] == want:
        return at + len(want)
    try:
        bio = io.BytesIO(head)
        major, minor = npf.read_magic(bio)
        if (major, minor) == (1, 0):
            shape_got, fortran, dt = npf.read_array_header_1_0(bio)
        else:
            shape_got, fortran, dt = npf.read_array_header_2_0(bio)
    except (ValueError, EOFError) as e:
        raise DataError(f"{os.fsdecode(path)}: not a readable .npy header at byte {at} ({e}); check the dataset "
                        f"with `dlbench verify`") from None
    if tuple(shape_got) != tuple(shape) or dt != dtype or fortran:
        raise DataError(f"{os.fsdecode(path)}: array is {tuple(shape_got)} {dt}{' (Fortran order)' if fortran else ''}, "
                        f"expected {tuple(shape)} {dtype}; check the dataset with `dlbench verify`")
    return at + bio.tell()


class NpyFormat(FormatDriver):
    """The format driver of npy: this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True   # written, checked and read through a storage backend (``storage=``)
    DIRECT_UNSUPPORTED = DIRECT_UNSUPPORTED

    check_file = staticmethod(check_file)
    check_spec = staticmethod(check_spec)
    expected_row = staticmethod(expected_row)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    row_nbytes = staticmethod(row_nbytes)
    sample_nbytes = staticmethod(sample_nbytes)
    write_file = staticmethod(write_file)
