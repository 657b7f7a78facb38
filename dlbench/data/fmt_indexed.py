"""Token datasets: Megatron-LM's indexed dataset (layout ``mmap_indexed_binary``) and DLIO's ``indexed_binary``,
one module for both (two ``register`` lines). Large-model pretraining reads its tokens from a few huge files.

Samples. The workload's one array is a sample's token sequence (1-D; DLIO configs: ``record_length`` bytes of
uint8; the built-in ``megatron`` workload: 1,024 uint16 tokens = 2,048 B). File f holds the sequences of samples
``first .. first+count-1`` back to back, no header (the ``.bin``); a sample is one byte range found through the
file's index. Each sequence is its own document; by default sample i is sequence i (as DLIO reads it). With
``tokens: {sample_index: megatron}`` a sample is what Megatron-LM's GPTDataset reads: ``seq_length + 1`` tokens cut
across shuffled documents (``dlbench.data.gpt_index``: document, sample and shuffle indices built once per
reader from the documents' lengths; a sample is 1-2+ byte ranges, each read by its own copy out of the map or
``preadv``). Its bytes must be the stored sequence's (``seq_length`` = the sequence's tokens - 1), so the
dataset's sizes and the plan stay those of the stored samples.

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
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError, DataError
from .format_base import FormatDriver
from .formats import SampleReader

if TYPE_CHECKING:
    from .gpt_index import GptIndex

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
    gpt_seq_length(spec, where)


def gpt_seq_length(workload, where: str = "") -> int | None:
    """``seq_length`` of a workload whose ``tokens.sample_index`` is megatron (None: a sample is a stored
    sequence); ConfigError unless a sample's ``seq_length + 1`` tokens are the stored sequence's."""
    tk = getattr(workload, "tokens", None)
    if tk is None or tk.sample_index != "megatron":
        return None
    tokens = int(np.prod(workload.arrays[0].shape, dtype=np.int64))
    seq = tokens - 1 if tk.seq_length is None else int(tk.seq_length)
    if seq + 1 != tokens or seq < 1:
        raise ConfigError(f"workload {workload.name}{f' ({where})' if where else ''}: tokens.seq_length={seq}: a "
                          f"sample is seq_length + 1 tokens and must have the stored sequence's {tokens} tokens "
                          f"(arrays {workload.arrays[0].name} shape [{tokens}]): set seq_length {tokens - 1}, or "
                          f"the shape to [{seq + 1}]")
    return seq


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


INDEX_CHUNK = 1 << 22   # index entries per piece written or compared (32 MiB of int64): bounded memory


def _head(count: int, dtype) -> bytes:
    dt = np.dtype(dtype)
    return MAGIC + struct.pack("<QBQQ", VERSION, DTYPE_CODES[dt], count, count + 1)


def index_pieces(layout: str, k: int, count: int, row: int, dtype, chunk: int | None = None):
    """The bytes of index file ``k`` (``index_names`` order) of a data file of ``count`` sequences of ``row``
    bytes, yielded in pieces of at most ``chunk`` (default ``INDEX_CHUNK``) entries (a 277-million-sequence
    index is 5.5 GB)."""
    chunk = int(chunk or INDEX_CHUNK)

    def ranges(n):
        return ((s, min(n, s + chunk)) for s in range(0, n, chunk))
    if layout == MEGATRON:
        yield _head(count, dtype)
        tokens = row // np.dtype(dtype).itemsize
        for s, e in ranges(count):
            yield np.full(e - s, tokens, dtype="<i4").tobytes()
        for s, e in ranges(count):
            yield (np.arange(s, e, dtype="<i8") * row).tobytes()
        for s, e in ranges(count + 1):
            yield np.arange(s, e, dtype="<i8").tobytes()
    elif k == 0:
        for s, e in ranges(count):
            yield (np.arange(s, e, dtype="<u8") * row).tobytes()
    else:
        for s, e in ranges(count):
            yield np.full(e - s, row, dtype="<u8").tobytes()


def index_bytes(layout: str, count: int, row: int, dtype) -> list[bytes]:
    """Each index file's whole bytes (tests and small datasets; generate and verify use ``index_pieces``)."""
    return [b"".join(index_pieces(layout, k, count, row, dtype)) for k in range(1 if layout == MEGATRON else 2)]


MEGATRON_FIXED = len(MAGIC) + 8 + 1 + 8 + 8


def parse_index(layout: str, images: list, name: str) -> tuple[np.ndarray, np.ndarray, int, np.dtype | None]:
    """(pointers, sizes, bytes per size unit, token dtype or None) from the index files' bytes (buffers: bytes or
    read-only memory maps), as views into them (no copy: Megatron maps its index too); a sample's bytes are
    ``int(sizes[j]) * unit``. DataError naming ``name`` when they are not an index."""
    if layout == DLIO:
        off, sz = (np.frombuffer(b, dtype="<u8") if len(b) % 8 == 0 else None for b in images)
        if off is None or sz is None or len(off) != len(sz):
            raise DataError(f"{name}: .off.idx/.sz.idx are not two uint64 arrays of one length")
        return off, sz, 1, None
    b = images[0]
    fixed = MEGATRON_FIXED
    if len(b) < fixed or bytes(b[:len(MAGIC)]) != MAGIC:
        raise DataError(f"{name}: not a Megatron index (no MMIDIDX magic)")
    version, code, n, docs = struct.unpack("<QBQQ", bytes(b[9:fixed]))
    if version != VERSION or code not in CODE_DTYPES:
        raise DataError(f"{name}: index version {version}, dtype code {code}; dlbench reads version 1, codes 1-8")
    if len(b) != fixed + n * 4 + n * 8 + docs * 8:
        raise DataError(f"{name}: {len(b)} B, an index of {n} sequences and {docs} documents has "
                        f"{fixed + n * 12 + docs * 8} B")
    dt = CODE_DTYPES[code]
    lengths = np.frombuffer(b, dtype="<i4", count=n, offset=fixed)
    ptr = np.frombuffer(b, dtype="<i8", count=n, offset=fixed + 4 * n)
    return ptr, lengths, dt.itemsize, dt


# ---- content ---------------------------------------------------------------------------------------------------

CONTENT_VERSION = "dlbench.tokens/1"
VOCAB = 50257      # GPT-2's vocabulary: integer tokens stay below it (``_token_mask``)


_C0, _C1, _C2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _splitmix64_inplace(x: np.ndarray) -> None:
    """``content._splitmix64`` in place (the same values; uint64 arithmetic wraps, no temporaries per step)."""
    with np.errstate(over="ignore"):
        x += _C0
        x ^= x >> _S30
        x *= _C1
        x ^= x >> _S27
        x *= _C2
        x ^= x >> _S31


def _token_mask(dt: np.dtype) -> int:
    """Integer tokens keep the low bits below the largest power of two <= min(VOCAB, the dtype's maximum + 1)."""
    return (1 << (min(VOCAB, int(np.iinfo(dt).max) + 1).bit_length() - 1)) - 1


def fill_tokens(workload, seed: int, first: int, count: int, out: np.ndarray) -> None:
    """The tokens of samples ``first .. first+count-1`` into ``out`` (uint8, ``count`` rows back to back), from a
    counter-based hash (splitmix64, vectorized over the chunk: generation stays write-bound, no generator per
    sample): sample i's row is the bytes of hash words ``i * W .. i * W + W - 1`` (W = ceil(row / 8)) of a key of
    (workload, seed); integer tokens are those bytes read as the dtype's unsigned integers, masked below the
    largest power of two <= min(VOCAB, the dtype's maximum + 1) (uint16: 0..32767); float tokens are uniform in (0, 1), one hash per token. A pure function of (workload,
    seed, sample), so ``expected_row`` recomputes any sample alone."""
    from ..workload import workload_id
    from .content import _splitmix64

    a = workload.arrays[0]
    dt = np.dtype(a.dtype)
    row = int(np.prod(a.shape, dtype=np.int64)) * dt.itemsize
    with np.errstate(over="ignore"):
        k = _splitmix64(np.asarray([workload_id(workload.name) ^ (int(seed) * 0x9E3779B97F4A7C15 & (2**64 - 1))
                                    ^ 0x70CE45], dtype=np.uint64))[0]
        if dt.kind == "f":
            per = row // dt.itemsize
            h = _splitmix64(np.arange(first * per, (first + count) * per, dtype=np.uint64) ^ k) >> np.uint64(11)
            out[:count * row].view(dt)[...] = (h.astype(np.float64) + 0.5) / float(1 << 53)
            return
        words = -(-row // 8)
        h = np.arange(first * words, (first + count) * words, dtype=np.uint64)
        h ^= k
        _splitmix64_inplace(h)
    u = np.dtype(f"u{dt.itemsize}")
    raw = h.view(np.uint8)
    if words * 8 != row:
        raw = np.ascontiguousarray(raw.reshape(count, words * 8)[:, :row])
    vals = raw.view(u)
    vals &= u.type(_token_mask(dt))
    out[:count * row] = raw.reshape(-1)


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample i's tokens as stored (uint8, a fresh array)."""
    from ..storage import aligned_empty

    out = aligned_empty(_row(workload)[0], np.uint8)
    fill_tokens(workload, seed, i, 1, out)
    return out


_GPT_CACHE: dict[tuple, object] = {}


def expected_read_row(workload, seed: int, i: int) -> np.ndarray:
    """What a reader delivers for sample ``i`` (``run --verify``): the stored row, or with the Megatron sample
    index the tokens of its pieces, from the generated documents (every document has the stored sequence's
    tokens, as generate writes them)."""
    seq = gpt_seq_length(workload)
    if seq is None:
        return expected_row(workload, seed, i)
    from .gpt_index import GptIndex

    row, dt = _row(workload)
    key = (workload.name, int(workload.samples), seq, int(seed), row)
    gi = _GPT_CACHE.get(key)
    if gi is None:
        _GPT_CACHE.clear()
        gi = _GPT_CACHE[key] = GptIndex(np.full(int(workload.samples), row // dt.itemsize), seq,
                                        int(workload.samples), int(seed))
    assert isinstance(gi, GptIndex)
    parts = [expected_row(workload, seed, doc)[tok * dt.itemsize:(tok + n) * dt.itemsize]
             for doc, tok, n in gi.pieces(i)]
    return np.concatenate(parts)


# ---- writing ---------------------------------------------------------------------------------------------------

CHUNK_BYTES = 8 << 20    # staged per write (the token hash's temporaries are 4-8x this)


def write_file(fd, workload, seed: int, m, f: int) -> int:
    """Data file ``f`` (the sequences back to back), staged ≈ 8 MiB at a time."""
    from ..storage import aligned_empty
    from .generate import write_all

    first, count = int(m.first[f]), int(m.count[f])
    row, _ = _row(workload)
    per = max(1, CHUNK_BYTES // max(1, row))
    buf = aligned_empty(min(per, max(1, count)) * row, np.uint8)
    written = 0
    for s0 in range(first, first + count, per):
        b = min(per, first + count - s0)
        fill_tokens(workload, seed, s0, b, buf)
        written += write_all(fd, buf[:b * row], (s0 - first) * row)
    if written != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {written} B, the plan says {int(m.nbytes[f])} B")
    return written


def _storage(data_dir: Path, storage):
    from ..storage.backend import PosixBackend

    return storage if storage is not None else PosixBackend(data_dir)


def _want_pieces(m, f: int, k: int):
    """Index file ``k`` of data file ``f`` as generate writes it, in pieces."""
    a = m.spec["arrays"][0]
    dt = np.dtype(a["dtype"])
    row = int(np.prod(a["shape"], dtype=np.int64)) * dt.itemsize
    return index_pieces(m.spec["layout"], k, int(m.count[f]), row, dt)


def _matches(st, rel: str, pieces) -> bool:
    """``rel`` holds exactly ``pieces`` (read back piece by piece through the backend); OSError if unreadable."""
    h = st.open_read(st.keys([rel])[0], os.O_RDONLY)
    try:
        off = 0
        for piece in pieces:
            if st.pread(h, len(piece), off) != piece:
                return False
            off += len(piece)
        return st.size(rel) == off
    finally:
        st.close(h)


def write_extra(data_dir: Path, m, f: int, storage=None) -> None:
    """File f's index file(s), each atomically (``.part`` then rename), before the data file takes its name."""
    from .generate import write_all

    st = _storage(data_dir, storage)
    for k, rel in enumerate(index_names(m.spec["layout"], m.paths[f])):
        part = rel + ".part"
        try:
            h = st.open(part, write=True)
            try:
                off = 0
                for piece in _want_pieces(m, f, k):
                    off += write_all(h, np.frombuffer(piece, dtype=np.uint8), off) if piece else 0
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
        return all(_matches(st, rel, _want_pieces(m, f, k))
                   for k, rel in enumerate(index_names(m.spec["layout"], m.paths[f])))
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


def _index_images(st, names: list[str]) -> list:
    """The index files' bytes: memory maps where the backend has paths (no copy of a large index), else the
    backend's file image."""
    if st.paths:
        return [np.memmap(st.path(r), dtype=np.uint8, mode="r") if st.size(r) else b"" for r in names]
    return [st.file_image(r) for r in names]


def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None, storage=None) -> list[str]:
    """Structure: the index files parse, name ``count`` sequences of the planned size and dtype lying inside the
    data file, and are byte for byte the ones generate writes (compared piece by piece)."""
    layout = m.spec["layout"]
    root = _root(path, m, f)
    st = _storage(root, storage)
    names = index_names(layout, m.paths[f])
    try:
        images = _index_images(st, names)
    except OSError:
        return [f"{root / names[0]}: missing (the index of {m.paths[f]}); regenerate with `dlbench generate --force`"]
    try:
        ptr, sz, unit, dt = parse_index(layout, images, str(root / names[0]))
    except DataError as e:
        return [f"{e} (the index of {m.paths[f]})"]
    row, want_dt = _row(workload)
    count = int(m.count[f])
    lo, hi = (int(sz.min()) * unit, int(sz.max()) * unit) if len(sz) else (row, row)
    if len(ptr) != count or lo != row or hi != row or (dt is not None and dt != want_dt):
        return [f"{path}: its index names {len(ptr)} sequences of {lo}-{hi} B{f' ({dt})' if dt is not None else ''}; "
                f"expected {count} of {row} B ({want_dt})"]
    del ptr, sz, images
    try:
        same = all(_matches(st, rel, _want_pieces(m, f, k)) for k, rel in enumerate(names))
    except OSError as e:
        return [f"{root / names[0]}: unreadable ({e})"]
    if not same:
        return [f"{path}: its index is not the one generate writes (pointers or document indices differ)"]
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
        self._index: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        self._gpt_seq = gpt_seq_length(workload)     # None: a sample is one stored sequence
        self._gpt: GptIndex | None = None
        self._n, self._seed = int(manifest.samples), int(getattr(manifest, "seed", 0))

    def _gpt_pieces(self, i: int) -> list[tuple[int, int, int]]:
        """Megatron's sample ``i`` as (file, byte offset, bytes) ranges (``gpt_index``; built at the first read
        from every file's index: the documents' lengths)."""
        if self._gpt is None:
            from .gpt_index import GptIndex

            assert self._gpt_seq is not None
            lengths = []
            for f in range(len(self._rel)):
                _, sz, unit = self._index.get(f) or self._load_index(f)
                lengths.append(sz.astype(np.int64) * unit // self._dtype.itemsize)
            self._gpt = GptIndex(np.concatenate(lengths), self._gpt_seq, self._n, self._seed)
        item, out = self._dtype.itemsize, []
        for doc, tok, ntok in self._gpt.pieces(i):
            f = doc // self._spf
            ptr = self._index[f][0]
            out.append((f, int(ptr[doc - int(self._first[f])]) + tok * item, ntok * item))
        return out

    def _short(self, f: int, i: int, got: int, n: int) -> DataError:
        return DataError(f"{self._rel[f]}: short read of sample {i} ({got} of {n} B): the file is truncated; check "
                         f"the dataset with `dlbench verify`")

    def _load_index(self, f: int) -> tuple[np.ndarray, np.ndarray, int]:
        names = index_names(self._layout, self._rel[f])
        try:
            images = _index_images(self._st, names)
        except (OSError, ValueError) as e:
            raise DataError(f"{names[0]}: cannot read the index of {self._rel[f]} ({e}); check the dataset with "
                            f"`dlbench verify`") from None
        ptr, sz, unit, dt = parse_index(self._layout, images, names[0])
        if dt is not None and dt != self._dtype:
            raise DataError(f"{self._rel[f]}: its index says {dt} tokens, the workload {self._dtype}; check the "
                            f"dataset with `dlbench verify`")
        ent = self._index[f] = (ptr, sz, unit)
        return ent


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
                self._load_index(f)
            fd = self._fds[f] = self._open_read(self._keys[f], os.O_RDONLY)
            if self.counters is not None:
                self.counters.open()
            if len(self._fds) > self._max_open:
                old = next(iter(self._fds))
                self._close(self._fds.pop(old))
        return fd

    def read_into(self, i: int, out: np.ndarray) -> int:
        if self._gpt_seq is not None:     # Megatron's sample: one preadv per document range
            pos = 0
            for f, off, n in self._gpt_pieces(i):
                fd = self._fd(f)
                t0 = perf_counter_ns()
                got = self._preadv(fd, [out[pos:pos + n]], off)
                if self.counters is not None:
                    self.counters.read(f, off, got, perf_counter_ns() - t0)
                if got != n:
                    raise self._short(f, i, got, n)
                pos += n
            return pos
        f = i // self._spf
        fd = self._fd(f)
        ptr, sz, unit = self._index[f]
        j = i - int(self._first[f])
        off, n = int(ptr[j]), int(sz[j]) * unit
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
            self._load_index(f)
            try:
                mm = self._maps[f] = np.memmap(self._paths[f], dtype=np.uint8, mode="r")
            except (OSError, ValueError) as e:
                raise DataError(f"{self._paths[f]}: cannot map it ({e}); check the dataset with `dlbench verify`") \
                    from None
            if self.counters is not None:
                self.counters.open()
        return mm

    def read_into(self, i: int, out: np.ndarray) -> int:
        if self._gpt_seq is not None:     # Megatron's sample: one copy out of the map per document range
            pos = 0
            for f, off, n in self._gpt_pieces(i):
                pos += self._copy(f, i, off, n, out[pos:pos + n])
            return pos
        f = i // self._spf
        mm = self._map(f)
        ptr, sz, unit = self._index[f]
        j = i - int(self._first[f])
        off, n = int(ptr[j]), int(sz[j]) * unit
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

    def _copy(self, f: int, i: int, off: int, n: int, out: np.ndarray) -> int:
        """One range of file ``f`` copied out of its map (a Megatron sample's piece), counted as a copy."""
        mm = self._map(f)
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


class IndexedFormat(FormatDriver):
    """The format driver of the token layouts (mmap_indexed_binary, indexed_binary): this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True   # data and index files written, checked and read through a storage backend (``storage=``)
    CONTENT_VERSION = CONTENT_VERSION
    DIRECT_UNSUPPORTED = DIRECT_UNSUPPORTED

    check_file = staticmethod(check_file)
    check_spec = staticmethod(check_spec)
    expected_row = staticmethod(expected_row)
    expected_read_row = staticmethod(expected_read_row)
    extra_ok = staticmethod(extra_ok)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    remove_extra = staticmethod(remove_extra)
    sample_nbytes = staticmethod(sample_nbytes)
    write_extra = staticmethod(write_extra)
    write_file = staticmethod(write_file)
