"""Format ``jpeg_folders``: one JPEG per sample in class folders (ImageNet's ImageFolder), one module for
everything the layout does (issue 16's format registry).

Layout. Sample i is ``n<c>/n<c>_<i>.JPEG`` with class ``c = i % classes``; a row is the file's bytes
(``decodes``: the trainer sees the decoded image, ``jpeg.decoded_shape`` uint8).

Content (manifest content ``dlbench.jpeg/2``). File sizes and bytes come from ``content.jpeg_sizes`` /
``content.jpeg_bytes`` (a counter-based size per sample, images from a per-(workload, seed) size-class pool;
see dlbench.data.content). The generator writes class folder after class folder (``file_order``: file
creations stay local in the file system, 20 % faster here; the bytes do not depend on it).

Reader. ``os.open`` + ``os.preadv`` of the whole file into ``out`` + close; ``decode_into`` decodes with
Pillow and resizes (bilinear) to ``jpeg.decoded_shape``. ``--cache direct``: the file's aligned span through
a bounce buffer (``pagecache.pread_direct``). Thread-safe (no state per call).
"""

from __future__ import annotations

import os
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from ..storage.backend import PosixBackend
from ..workload import Workload
from .format_base import FormatDriver
from .formats import SampleReader

# jpeg_folders files since the size-class pool (content.jpeg_bytes); "dlbench.content/1" JPEGs were encoded one
# by one and cannot be recomputed any more (verify --content says so instead of reporting every sample)
CONTENT_VERSION = "dlbench.jpeg/2"


# ---- planning and content (pure) ----------------------------------------------------------------------

def check_spec(spec, where: str) -> None:
    """A 'jpeg' section (size distribution, decoded shape) and at least one class folder."""
    if spec.jpeg is None:
        raise ConfigError(f"workload {spec.name} ({where}): layout jpeg_folders needs a 'jpeg' section")
    if spec.classes < 1:
        raise ConfigError(f"workload {spec.name} ({where}): classes={spec.classes}: jpeg_folders needs >= 1")


def mean_sample_nbytes(workload) -> int:
    """Workload.sample_nbytes: the mean file size."""
    return int(workload.jpeg.size.mean_bytes)


def size_distribution(workload) -> tuple[str, float, float, float, float]:
    """The files' size distribution (kind, mean, std, min, max bytes) for ``dlbench simulate``."""
    d = workload.jpeg.size
    return d.kind, d.mean_bytes, d.std_bytes, d.min_bytes, d.max_bytes


def decoded_row_nbytes(workload) -> int:
    """Workload.decoded_nbytes: the decoded image (``jpeg.decoded_shape`` uint8)."""
    return int(np.prod(workload.jpeg.decoded_shape))


def row_arrays(workload) -> tuple:
    """The arrays of a delivered row (docs/architecture.md contract 1): the decoded image alone, uint8 (its label
    is ``i % classes``): ((name, shape, dtype, role), ...)."""
    return (("image", tuple(workload.jpeg.decoded_shape), np.dtype(np.uint8), "data"),)


def file_name(workload, f: int) -> str:
    """Relative path of file ``f`` (= sample f)."""
    c = f % workload.classes
    return f"n{c:08d}/n{c:08d}_{f:08d}.JPEG"


def plan_files(workload, seed: int):
    """(paths, first, count, file bytes): one file per sample, its size drawn by ``content.jpeg_sizes``."""
    from .content import jpeg_sizes

    n = workload.samples
    paths = [file_name(workload, f) for f in range(n)]
    return paths, np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64), jpeg_sizes(workload, seed)


def sample_nbytes(manifest) -> np.ndarray:
    """Stored bytes per sample: the file sizes."""
    return manifest.nbytes.copy()


def sample_sizes(workload, seed: int, n: int) -> np.ndarray:
    """The stored bytes of samples 0..n-1 (without a manifest: MemoryReader)."""
    from .content import jpeg_sizes

    return jpeg_sizes(workload, seed, np.arange(n))


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    from .content import jpeg_bytes

    return np.frombuffer(jpeg_bytes(workload, seed, i), dtype=np.uint8).copy()


def fill_row(workload, seed: int, i: int, out: np.ndarray) -> int:
    from .content import jpeg_bytes

    data = jpeg_bytes(workload, seed, i)
    out[:len(data)] = np.frombuffer(data, dtype=np.uint8)
    return len(data)


# ---- writing ------------------------------------------------------------------------------------------

def prepare(workload, data_dir: Path, m, storage) -> None:
    """Rank 0, before any file is written: the class folders."""
    for c in range(min(workload.classes, workload.samples)):
        storage.mkdir(str(Path(m.paths[c]).parent))


def file_order(workload, mine: list[int]) -> list[int]:
    """This rank's files, one class folder after another."""
    own = np.asarray(mine, dtype=np.int64)
    return own[np.argsort(own % workload.classes, kind="stable")].tolist()


def write_file(fd: int, workload, seed: int, m, f: int) -> int:
    from .content import jpeg_bytes
    from .generate import write_all

    data = jpeg_bytes(workload, seed, f, target=int(m.nbytes[f]))
    return write_all(fd, np.frombuffer(data, dtype=np.uint8), 0)


# ---- verify -------------------------------------------------------------------------------------------

def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
               storage=None) -> list[str]:
    """Structure: the file starts with SOI and ends with EOI. ``image``: the file's bytes (a storage
    backend's file; ``path`` then only names it)."""
    if image is not None:
        head, tail = image[:2], image[-2:]
    else:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(-2, os.SEEK_END)
            tail = fh.read(2)
    if head != b"\xff\xd8" or tail != b"\xff\xd9":
        return [f"{path}: not a complete JPEG (SOI/EOI markers missing)"]
    return []


# ---- reader and decode --------------------------------------------------------------------------------


def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None) -> SampleReader:
    """``via``: auto or pread (the whole file with one pread); ``library`` is refused."""
    if via == "library":
        raise ConfigError(f"--read-via={via}: layout {workload.layout} is read whole with pread; use auto")
    return JpegReader(d, manifest, workload, counters, direct=direct, storage=storage)


def decoder(workload):
    """``decode(raw, nbytes, out)`` of this workload (the decoded shape bound)."""
    shape = tuple(workload.jpeg.decoded_shape)

    def decode(raw: np.ndarray, nbytes: int, out: np.ndarray) -> None:
        decode_jpeg_into(raw, nbytes, out, shape)
    return decode


class JpegReader(SampleReader):
    """jpeg_folders: the file's bytes with one ``preadv``; ``decode_into`` for the decoded sample."""

    def __init__(self, data_dir: Path, manifest, workload: Workload, counters=None, direct: bool = False,
                 storage=None):
        storage = storage or PosixBackend(data_dir)
        # the backend's calls, bound once (POSIX: os.open, the read call, os.close themselves)
        self._open, self._preadv, self._close = storage.open_read, storage.preadv, storage.close
        self._paths = storage.keys(manifest.paths)
        self._sizes = manifest.nbytes
        self.counters = counters
        self.max_row_nbytes = int(self._sizes.max()) if len(self._sizes) else 0
        self.decoded_shape = tuple(workload.jpeg.decoded_shape)  # type: ignore[union-attr]
        self.decoded_nbytes = int(np.prod(self.decoded_shape))
        if direct:
            from ..storage.pagecache import DirectBuffer

            self._bounce = DirectBuffer(self.max_row_nbytes)
            self.read_into = self._read_into_direct  # type: ignore[method-assign]  # the buffered read_into stays free of any mode test

    def _read_into_direct(self, i: int, out: np.ndarray) -> int:
        """``read_into`` through O_DIRECT (the file's aligned span into the bounce buffer, then copied)."""
        from ..storage.pagecache import open_direct, pread_direct

        n = int(self._sizes[i])
        fd = open_direct(self._paths[i])
        try:
            t0 = perf_counter_ns()
            got = pread_direct(fd, out[:n], n, 0, self._bounce)
            if self.counters is not None:
                self.counters.open_read(i, 0, got, perf_counter_ns() - t0)
        finally:
            os.close(fd)
        if got != n:
            raise DataError(f"{os.fsdecode(self._paths[i])}: read {got} B, the manifest says {n} B")
        return n

    def read_into(self, i: int, out: np.ndarray) -> int:
        n = int(self._sizes[i])
        fd = self._open(self._paths[i], os.O_RDONLY)
        try:
            cnt = self.counters
            if cnt is None:
                got = self._preadv(fd, [out[:n]], 0)
            else:
                t0 = perf_counter_ns()
                got = self._preadv(fd, [out[:n]], 0)
                cnt.open_read(i, 0, got, perf_counter_ns() - t0)
        finally:
            self._close(fd)
        if got != n:
            raise DataError(f"{os.fsdecode(self._paths[i])}: read {got} B, the manifest says {n} B")
        return n

    def decode_into(self, raw: np.ndarray, nbytes: int, out: np.ndarray) -> None:
        decode_jpeg_into(raw, nbytes, out, self.decoded_shape)


def decode_jpeg_into(raw: np.ndarray, nbytes: int, out: np.ndarray, decoded_shape) -> None:
    """Decode a JPEG (``raw[:nbytes]``) with Pillow, convert to RGB, resize (bilinear) to
    ``decoded_shape`` (H, W, C) and write it into ``out`` (uint8, at least H*W*C bytes)."""
    import io

    from PIL import Image

    h, w = int(decoded_shape[0]), int(decoded_shape[1])
    with Image.open(io.BytesIO(memoryview(raw)[:nbytes])) as img:  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
        img = img.convert("RGB")
        if img.size != (w, h):
            img = img.resize((w, h), Image.Resampling.BILINEAR)
        arr = np.asarray(img)
    out.reshape(-1)[:arr.size] = arr.reshape(-1)


class JpegFormat(FormatDriver):
    """The format driver of jpeg_folders: this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True   # the reader reads through a storage backend (open_reader's ``storage``)
    HAS_ARRAYS = False   # a sample is the file's bytes, not workload arrays
    CONTENT_VERSION = CONTENT_VERSION

    check_file = staticmethod(check_file)
    check_spec = staticmethod(check_spec)
    decoded_row_nbytes = staticmethod(decoded_row_nbytes)
    decoder = staticmethod(decoder)
    expected_row = staticmethod(expected_row)
    file_order = staticmethod(file_order)
    fill_row = staticmethod(fill_row)
    mean_sample_nbytes = staticmethod(mean_sample_nbytes)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    prepare = staticmethod(prepare)
    row_arrays = staticmethod(row_arrays)
    sample_nbytes = staticmethod(sample_nbytes)
    sample_sizes = staticmethod(sample_sizes)
    size_distribution = staticmethod(size_distribution)
    write_file = staticmethod(write_file)
