"""Token datasets: Megatron-LM's indexed dataset (layout ``mmap_indexed_binary``) and DLIO's ``indexed_binary``,
one module for both (two ``register`` lines). Large-model pretraining reads its tokens from a few huge files.

Samples. The workload's one array is a sample's token sequence (1-D; DLIO configs: ``record_length`` bytes of
uint8; the built-in ``megatron`` workload: 1,024 uint16 tokens = 2,048 B). File f holds the sequences of samples
``first .. first+count-1`` back to back, no header (the ``.bin``); a sample is one byte range found through the
file's index. Each sequence is its own document (sample i is sequence i; Megatron's GPTDataset would cut
``seq_length + 1``-token samples across documents: not emulated, the sample is the stored sequence, as DLIO reads
it).

Index files, beside each data file (written through the storage backend, ``.part`` + rename, before the data file
takes its name; ``write_extra``):

- ``mmap_indexed_binary`` (``data-<f>.bin`` + ``data-<f>.idx``, Megatron's ``MMapIndexedDataset`` layout): the
  9-byte magic ``MMIDIDX\\x00\\x00``, version (uint64 = 1), dtype code (uint8: 1 uint8, 2 int8, 3 int16, 4 int32,
  5 int64, 6 float64, 7 float32, 8 uint16), sequence count (uint64), document count (uint64, sequences + 1), the
  sequence lengths (int32, in tokens), the sequence pointers (int64, byte offsets into the .bin) and the document
  indices (int64, 0..n: one sequence per document). All little-endian.
- ``indexed_binary`` (``data-<f>.indexed_binary`` + ``.off.idx`` + ``.sz.idx``, DLIO's generator): every
  sample's byte offset, then its byte size, as uint64.

Readers (``--read-via``): ``library`` = ``numpy.memmap`` of the data file (the index memory-mapped too, as
Megatron's ``_IndexReader``), a sample copied out of the map; ``pread`` = the index loaded once per opened file,
then one ``preadv`` of the sample at its pointer. ``auto``: library for mmap_indexed_binary, pread for
indexed_binary (the readers DLIO names them after). The memory-mapped reads bypass dlbench's read calls: each copy
out of the map is counted as ``MMAP_READS``/``MMAP_BYTES_READ`` with the minor and major page faults it took
(``getrusage`` around the copy: ``MMAP_MINOR_FAULTS``, ``MMAP_MAJOR_FAULTS``), and ``MMAP_DEVICE_BYTES_READ`` is
the growth of ``/proc/self/io`` ``read_bytes`` (bytes the process caused to be fetched from the block device)
while the reader was open, taken every 256 copies and at close. A map needs a file: a storage backend without
paths (memory, S3) is read with pread (``library`` on one is one error line). Index bytes are not counted as
reads (as npy headers). ``--cache direct``: refused (buffered reads only).
"""

from __future__ import annotations

import os
import resource
import struct
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from .formats import SampleReader

STORAGE = True   # data and index files written, checked and read through a storage backend (``storage=``)
MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
DTYPE_CODES: dict[np.dtype, int] = {np.dtype(np.uint8): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
               np.dtype(np.int64): 5, np.dtype(np.float64): 6, np.dtype(np.float32): 7, np.dtype(np.uint16): 8}
CODE_DTYPES: dict[int, np.dtype] = {c: d for d, c in DTYPE_CODES.items()}
MEGATRON, DLIO = "mmap_indexed_binary", "indexed_binary"
VIAS = ("auto", "library", "pread")
DIRECT_UNSUPPORTED = ("--cache direct: the indexed_binary layouts are read through numpy.memmap or buffered pread, "
                      "not O_DIRECT; use --cache drop")
IO_EVERY = 256   # /proc/self/io read every this many mmap copies (and at close)
_getrusage, _SELF = resource.getrusage, resource.RUSAGE_SELF


# ---- the workload's checks and sizes (pure) -----------------------------------------------------------------

def check_spec(spec, where: str) -> None:
    """One 1-D token array of a dtype Megatron's index can name."""
    arrays = spec.arrays
    if len(arrays) != 1 or len(arrays[0].shape) != 1:
        raise ConfigError(f"workload {spec.name} ({where}): layout {spec.layout} holds one 1-D token array per "
                          f"sample; arrays has {', '.join(f'{a.name}{list(a.shape)}' for a in arrays) or 'none'}")
    if np.dtype(arrays[0].dtype) not in DTYPE_CODES:
        raise ConfigError(f"workload {spec.name} ({where}): array {arrays[0].name} dtype {arrays[0].dtype}: the "
                          f"indexed dataset stores one of {', '.join(sorted(str(d) for d in DTYPE_CODES))}")


def _layout(workload_or_manifest) -> str:
    return str(getattr(workload_or_manifest, "layout", None) or workload_or_manifest.spec["layout"])


def data_name(layout: str, f: int) -> str:
    return f"data-{f:06d}." + ("bin" if layout == MEGATRON else "indexed_binary")


def index_names(layout: str, rel: str) -> list[str]:
    """The index file(s) beside data file ``rel``."""
    if layout == MEGATRON:
        return [rel[:-len(".bin")] + ".idx"]
    return [rel + ".off.idx", rel + ".sz.idx"]


def _row(manifest_or_workload) -> tuple[int, np.dtype]:
    """(bytes per sample, token dtype)."""
    a = manifest_or_workload.arrays[0]
    dt = np.dtype(a.dtype)
    return int(np.prod(a.shape, dtype=np.int64)) * dt.itemsize, dt


def sample_nbytes(manifest) -> np.ndarray:
    a = manifest.spec["arrays"][0]
    row = int(np.prod(a["shape"], dtype=np.int64)) * np.dtype(a["dtype"]).itemsize
    return np.full(int(manifest.count.sum()), row, dtype=np.int64)


def plan_files(workload, seed: int):
    """(paths, first, count, data-file bytes): ``samples_per_file`` sequences per file, back to back."""
    n, k = int(workload.samples), max(1, int(workload.samples_per_file))
    first = np.arange(0, n, k, dtype=np.int64)
    count = np.minimum(k, n - first)
    row, _ = _row(workload)
    return [data_name(workload.layout, f) for f in range(len(first))], first, count, count * row


def index_bytes(layout: str, count: int, row: int, dtype) -> list[bytes]:
    """The bytes of each index file of a data file of ``count`` sequences of ``row`` bytes."""
    ptr = np.arange(count, dtype=np.int64) * row
    if layout == MEGATRON:
        dt = np.dtype(dtype)
        lengths = np.full(count, row // dt.itemsize, dtype="<i4")
        head = MAGIC + struct.pack("<Q", VERSION) + struct.pack("<B", DTYPE_CODES[dt]) + struct.pack(
            "<Q", count) + struct.pack("<Q", count + 1)
        return [head + lengths.tobytes() + ptr.astype("<i8").tobytes() +
                np.arange(count + 1, dtype="<i8").tobytes()]
    return [ptr.astype("<u8").tobytes(), np.full(count, row, dtype="<u8").tobytes()]


def parse_index(layout: str, images: list, name: str) -> tuple[np.ndarray, np.ndarray, np.dtype | None]:
    """(pointers, byte sizes, token dtype or None) from the index files' bytes (buffers: bytes or memmaps);
    DataError naming ``name`` when they are not an index."""
    if layout == DLIO:
        off, sz = (np.frombuffer(b, dtype="<u8") if len(b) % 8 == 0 else None for b in images)
        if off is None or sz is None or len(off) != len(sz):
            raise DataError(f"{name}: .off.idx/.sz.idx are not two uint64 arrays of one length")
        return off.astype(np.int64), sz.astype(np.int64), None
    b = images[0]
    fixed = len(MAGIC) + 8 + 1 + 8 + 8
    if len(b) < fixed or bytes(b[:len(MAGIC)]) != MAGIC:
        raise DataError(f"{name}: not a Megatron index (no MMIDIDX magic)")
    version, = struct.unpack("<Q", bytes(b[9:17]))
    code = int(b[17])
    n, docs = struct.unpack("<QQ", bytes(b[18:34]))
    if version != VERSION or code not in CODE_DTYPES:
        raise DataError(f"{name}: index version {version}, dtype code {code}; dlbench reads version 1, codes 1-8")
    if len(b) != fixed + n * 4 + n * 8 + docs * 8:
        raise DataError(f"{name}: {len(b)} B, an index of {n} sequences and {docs} documents has "
                        f"{fixed + n * 12 + docs * 8} B")
    dt = CODE_DTYPES[code]
    lengths = np.frombuffer(b, dtype="<i4", count=n, offset=fixed)
    ptr = np.frombuffer(b, dtype="<i8", count=n, offset=fixed + 4 * n)
    return ptr.astype(np.int64), lengths.astype(np.int64) * dt.itemsize, dt


# ---- content ---------------------------------------------------------------------------------------------------

def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample i's tokens as stored (uint8, a fresh array): the standard array content (``content.fill_arrays``)."""
    from ..storage import aligned_empty
    from .content import fill_arrays

    out = aligned_empty(_row(workload)[0], np.uint8)
    fill_arrays(workload, seed, i, [out])
    return out


# ---- writing ---------------------------------------------------------------------------------------------------

CHUNK_BYTES = 32 << 20


def write_file(fd, workload, seed: int, m, f: int) -> int:
    """Data file ``f`` (the sequences back to back), staged ≈ 32 MiB at a time."""
    from ..storage import aligned_empty
    from .content import fill_arrays
    from .generate import _write_all

    first, count = int(m.first[f]), int(m.count[f])
    row, _ = _row(workload)
    per = max(1, CHUNK_BYTES // max(1, row))
    buf = aligned_empty(min(per, max(1, count)) * row, np.uint8)
    written = 0
    for s0 in range(first, first + count, per):
        b = min(per, first + count - s0)
        for r in range(b):
            fill_arrays(workload, seed, s0 + r, [buf[r * row:(r + 1) * row]])
        written += _write_all(fd, buf[:b * row], (s0 - first) * row)
    if written != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {written} B, the plan says {int(m.nbytes[f])} B")
    return written


def _storage(data_dir: Path, storage):
    from ..storage.backend import PosixBackend

    return storage if storage is not None else PosixBackend(data_dir)


def _want_index(m, f: int) -> list[bytes]:
    a = m.spec["arrays"][0]
    dt = np.dtype(a["dtype"])
    row = int(np.prod(a["shape"], dtype=np.int64)) * dt.itemsize
    return index_bytes(m.spec["layout"], int(m.count[f]), row, dt)


def write_extra(data_dir: Path, m, f: int, storage=None) -> None:
    """File f's index file(s), each atomically (``.part`` then rename), before the data file takes its name."""
    from .generate import _write_all

    st = _storage(data_dir, storage)
    for rel, data in zip(index_names(m.spec["layout"], m.paths[f]), _want_index(m, f)):
        part = rel + ".part"
        try:
            h = st.open(part, write=True)
            try:
                if data:
                    _write_all(h, np.frombuffer(data, dtype=np.uint8), 0)
            finally:
                st.close(h)
            st.rename(part, rel)
        except BaseException:
            st.remove(part)
            raise


def extra_ok(data_dir: Path, m, f: int, storage=None) -> bool:
    """File f's index files hold what ``write_extra`` writes."""
    st = _storage(data_dir, storage)
    try:
        return all(st.file_image(rel) == want
                   for rel, want in zip(index_names(m.spec["layout"], m.paths[f]), _want_index(m, f)))
    except OSError:
        return False


def remove_extra(data_dir: Path, m, storage=None) -> None:
    st = _storage(data_dir, storage)
    for p in m.paths:
        for rel in index_names(m.spec["layout"], p):
            st.remove(rel)
            st.remove(rel + ".part")


# ---- verification ----------------------------------------------------------------------------------------------

def _root(path: Path, m, f: int) -> Path:
    d = Path(path)
    for _ in Path(m.paths[f]).parts:
        d = d.parent
    return d


def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None, storage=None) -> list[str]:
    """Structure: the index files parse, name ``count`` sequences of the planned size and dtype lying inside the
    data file, and are byte for byte the ones generate writes."""
    layout = m.spec["layout"]
    st = _storage(_root(path, m, f), storage)
    names = index_names(layout, m.paths[f])
    try:
        images = [st.file_image(rel) for rel in names]
    except OSError:
        return [f"{_root(path, m, f) / names[0]}: missing (the index of {m.paths[f]}); regenerate with "
                f"`dlbench generate --force`"]
    try:
        ptr, nb, dt = parse_index(layout, images, str(_root(path, m, f) / names[0]))
    except DataError as e:
        return [f"{e} (the index of {m.paths[f]})"]
    row, want_dt = _row(workload)
    count = int(m.count[f])
    if len(ptr) != count or (len(nb) and (nb.min() != row or nb.max() != row)) or (dt is not None and dt != want_dt):
        return [f"{path}: its index names {len(ptr)} sequences of {sorted(set(nb.tolist()))[:3]} B"
                f"{f' ({dt})' if dt is not None else ''}; expected {count} of {row} B ({want_dt})"]
    if count and int((ptr + nb).max()) > int(m.nbytes[f]):
        return [f"{path}: its index points past the end of the data file"]
    if any(a != b for a, b in zip(images, _want_index(m, f))):
        return [f"{path}: its index is not the one generate writes (pointers out of order or overlapping)"]
    return []


# ---- readers ---------------------------------------------------------------------------------------------------

STORAGE_NO_MAP = ("--read-via=library: layout {layout} maps the data file with numpy.memmap, which needs a file "
                  "system path; storage backend {name} has none: use --read-via pread")


def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None):
    layout = workload.layout
    if via not in VIAS:
        raise ConfigError(f"--read-via={via}: layout {layout} is read with {', '.join(VIAS)} (library = "
                          f"numpy.memmap, pread = one preadv per sample)")
    if direct:
        raise ConfigError(DIRECT_UNSUPPORTED)
    st = _storage(Path(d), storage)
    use_map = via == "library" or (via == "auto" and layout == MEGATRON and st.paths)
    if use_map:
        if not st.paths:
            raise ConfigError(STORAGE_NO_MAP.format(layout=layout, name=st.name))
        return MMapReader(Path(d), manifest, workload, counters, st)
    return PreadReader(Path(d), manifest, workload, counters, st, max_open_files=max_open_files)


class _Base(SampleReader):
    def __init__(self, d: Path, manifest, workload, counters, st):
        self._layout = workload.layout
        self._st = st
        self._rel = list(manifest.paths)
        self._spf = max(1, int(workload.samples_per_file))
        self._first = manifest.first
        row, self._dtype = _row(workload)
        self.max_row_nbytes = self.decoded_nbytes = row
        self.counters = counters
        self._index: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _short(self, f: int, i: int, got: int, n: int) -> DataError:
        return DataError(f"{self._rel[f]}: short read of sample {i} ({got} of {n} B): the file is truncated; check "
                         f"the dataset with `dlbench verify`")

    def _load_index(self, f: int, images) -> tuple[np.ndarray, np.ndarray]:
        ptr, nb, dt = parse_index(self._layout, images, index_names(self._layout, self._rel[f])[0])
        if dt is not None and dt != self._dtype:
            raise DataError(f"{self._rel[f]}: its index says {dt} tokens, the workload {self._dtype}; check the "
                            f"dataset with `dlbench verify`")
        self._index[f] = (ptr, nb)
        return ptr, nb


class PreadReader(_Base):
    """The index loaded once per opened file (through the backend), then one ``preadv`` per sample at its
    pointer (an LRU of open files)."""

    def __init__(self, d, manifest, workload, counters, st, max_open_files: int = 64):
        super().__init__(d, manifest, workload, counters, st)
        self._open_read, self._preadv, self._close = st.open_read, st.preadv, st.close
        self._keys = st.keys(manifest.paths)
        self._fds: dict[int, int] = {}
        self._max_open = max(1, int(max_open_files))

    def _fd(self, f: int):
        fd = self._fds.get(f)
        if fd is None:
            if f not in self._index:
                self._load_index(f, [self._st.file_image(r) for r in index_names(self._layout, self._rel[f])])
            fd = self._fds[f] = self._open_read(self._keys[f], os.O_RDONLY)
            if self.counters is not None:
                self.counters.open()
            if len(self._fds) > self._max_open:
                old = next(iter(self._fds))
                self._close(self._fds.pop(old))
        return fd

    def read_into(self, i: int, out: np.ndarray) -> int:
        f = i // self._spf
        fd = self._fd(f)
        ptr, nb = self._index[f]
        j = i - int(self._first[f])
        off, n = int(ptr[j]), int(nb[j])
        t0 = perf_counter_ns()
        got = self._preadv(fd, [out[:n]], off)
        if self.counters is not None:
            self.counters.read(f, off, got, perf_counter_ns() - t0)
        if got != n:
            raise self._short(f, i, got, n)
        return n

    def close(self) -> None:
        while self._fds:
            self._close(self._fds.popitem()[1])


def _proc_read_bytes() -> int:
    """``read_bytes`` of /proc/self/io (bytes this process caused to be fetched from storage); 0 where absent."""
    try:
        with open("/proc/self/io", "rb") as fh:
            for ln in fh:
                if ln.startswith(b"read_bytes:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


class MMapReader(_Base):
    """``numpy.memmap`` of each data file and its index (Megatron's reader), a sample copied out of the map.
    Page faults of each copy and the device bytes the process read are counted (module docstring)."""

    def __init__(self, d, manifest, workload, counters, st):
        super().__init__(d, manifest, workload, counters, st)
        self._paths = [st.path(r) for r in self._rel]
        self._maps: dict[int, np.memmap] = {}
        self._copies = 0
        self._io0 = _proc_read_bytes() if counters is not None else 0

    def _map(self, f: int) -> np.memmap:
        mm = self._maps.get(f)
        if mm is None:
            try:
                idx = [np.memmap(self._st.path(r), dtype=np.uint8, mode="r")
                       for r in index_names(self._layout, self._rel[f])]
                self._load_index(f, idx)
                mm = self._maps[f] = np.memmap(self._paths[f], dtype=np.uint8, mode="r")
            except (OSError, ValueError) as e:
                raise DataError(f"{self._paths[f]}: cannot map it ({e}); check the dataset with `dlbench verify`") \
                    from None
            if self.counters is not None:
                self.counters.open()
        return mm

    def read_into(self, i: int, out: np.ndarray) -> int:
        f = i // self._spf
        mm = self._map(f)
        ptr, nb = self._index[f]
        j = i - int(self._first[f])
        off, n = int(ptr[j]), int(nb[j])
        if off + n > len(mm):
            raise self._short(f, i, max(0, len(mm) - off), n)
        c = self.counters
        if c is None:
            out[:n] = mm[off:off + n]
            return n
        ru = _getrusage
        r0 = ru(_SELF)
        t0 = perf_counter_ns()
        out[:n] = mm[off:off + n]
        dt = perf_counter_ns() - t0
        r1 = ru(_SELF)
        c.mmap_read(n, dt, r1.ru_minflt - r0.ru_minflt, r1.ru_majflt - r0.ru_majflt)
        self._copies += 1
        if self._copies % IO_EVERY == 0:
            self._device_bytes()
        return n

    def _device_bytes(self) -> None:
        now = _proc_read_bytes()
        self.counters.mmap_device_bytes(max(0, now - self._io0))
        self._io0 = now

    def close(self) -> None:
        if self.counters is not None:
            self._device_bytes()
        self._maps.clear()
