"""The ``tfrecord`` layout: TFRecord files of ``tf.train.Example`` records, written and read without TensorFlow.

Framing (TensorFlow's ``RecordWriter``): every record is ``uint64 length`` (little endian), ``uint32 masked
CRC32C of those 8 bytes``, the payload, ``uint32 masked CRC32C of the payload``; mask(c) = ((c >> 15) | (c << 17))
+ 0xa282ead8 mod 2**32. CRC32C comes from the ``crc32c`` package (a C extension, hardware CRC where the CPU has
it), never a Python loop.

Payload: a serialized ``tf.train.Example`` with the two features DLIO's TFRecord generator writes
(``dlio_benchmark/data_generator/tf_generator.py``, 2.0.0 and later): ``image`` (bytes_list: the sample's row,
docs/architecture.md contract 1) and ``size`` (int64_list: the side of the square image, isqrt of its bytes, as DLIO 2.0.0
writes it — its records are side**2 bytes; 2.0.1 stores the byte count; no reader uses it). The protobuf wire format is hand-encoded (nested length-delimited
messages; map entries in the order image, size). Every record of a dataset has the same payload size, so record
j of a file starts at ``j * (payload + 16)``.

Files: ``data-<f>.tfrecord``, ``samples_per_file`` records each (the last file may hold fewer); beside each, the
index file the PyTorch tfrecord readers use (``index/<file>.idx``: one ``offset length`` line per record, length
including the framing, as ``tfrecord2idx`` of DALI and of the ``tfrecord`` package write it). Both are written to
``.part`` names and renamed (the index first: a data file under its final name always has its index).

A row (what ``read_into`` returns) is the record's payload, the serialized Example (``decodes``: the decode phase
parses it, as ``tf.io.parse_example`` does, and copies the ``image`` bytes into the trainer's row).

Two read patterns (``workload.tfrecord.read``; the run's summary states which, in ``order``):

- ``indexed`` (default; the PyTorch tfrecord readers, DALI): the index file of a file is loaded at its first
  access, then one ``preadv`` per record at its offset (header, payload straight into the row, footer). No CRC
  check (those readers do not check either). Any sample order: the plan's global shuffle applies as for every
  other layout.
- ``tfdata`` (``tf.data.TFRecordDataset``): a file is a stream read sequentially through a ``buffer_nbytes``
  buffer (TensorFlow's default 256 KiB), every record's two CRCs checked (TensorFlow checks both). Records the
  stream passes before the one asked for are kept (the shuffle buffer's content) until asked for; the order
  the plan gives is the one ``dlbench.plan.tfdata`` derives from TF's pipeline (file shard per rank, file
  shuffle, one stream per loader worker, shuffle buffer), so each stream reads its files front to back. Asked
  for a record behind its stream (already evicted or another worker's), the reader reads it alone by offset
  (counted in ``rereads``); the kept records are bounded (``keep_records``, oldest dropped first).
"""

from __future__ import annotations

import io
import math
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from ..storage import aligned_empty, preadv
from .format_base import FormatDriver
from .formats import SampleReader

HEADER = 12          # uint64 length + masked crc
FOOTER = 4           # masked crc of the payload
FRAMING = HEADER + FOOTER
MASK_DELTA = 0xA282EAD8
INDEX_DIR = "index"
READS = ("indexed", "tfdata")


def _crc32c():
    try:
        import crc32c
    except ImportError:  # pragma: no cover - a core dependency
        raise ConfigError("layout tfrecord needs the crc32c package: pip install crc32c") from None
    return crc32c.crc32c


def mask(crc: int) -> int:
    """TensorFlow's masked CRC (``crc32c::Mask``)."""
    crc &= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def masked_crc(data) -> int:
    return mask(_crc32c()(data))


def header(length: int) -> bytes:
    """The 12 bytes before a payload of ``length`` bytes."""
    n = struct.pack("<Q", length)
    return n + struct.pack("<I", masked_crc(n))


def frame(payload: bytes) -> bytes:
    """One whole record: header, payload, footer."""
    return header(len(payload)) + bytes(payload) + struct.pack("<I", masked_crc(payload))


# ---- tf.train.Example, hand-encoded -----------------------------------------------------------------------

def _varint(x: int) -> bytes:
    out = bytearray()
    while True:
        b = x & 0x7F
        x >>= 7
        if x:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _ld(field: int, body_len: int) -> bytes:
    """Tag and length of a length-delimited field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(body_len)


def example_parts(image_nbytes: int, size_value: int | None = None) -> tuple[bytes, bytes]:
    """(prefix, suffix) of the serialized Example ``{image: bytes_list[<image_nbytes bytes>], size:
    int64_list[size_value]}``: the payload is prefix + image + suffix. ``size_value`` defaults to the image's
    byte count."""
    size_value = image_nbytes if size_value is None else size_value
    # Features.feature["image"] = Feature{bytes_list: BytesList{value: [image]}}
    blist_len = len(_ld(1, image_nbytes)) + image_nbytes
    feat_img_len = len(_ld(1, blist_len)) + blist_len
    key_img = _ld(1, 5) + b"image"
    entry_img_len = len(key_img) + len(_ld(2, feat_img_len)) + feat_img_len
    # Features.feature["size"] = Feature{int64_list: Int64List{value: [size_value]}} (packed)
    packed = _varint(size_value & 0xFFFFFFFFFFFFFFFF)
    ilist = _ld(1, len(packed)) + packed
    feat_size = _ld(3, len(ilist)) + ilist
    entry_size_body = _ld(1, 4) + b"size" + _ld(2, len(feat_size)) + feat_size
    entry_size = _ld(1, len(entry_size_body)) + entry_size_body
    features_len = len(_ld(1, entry_img_len)) + entry_img_len + len(entry_size)
    prefix = (_ld(1, features_len) + _ld(1, entry_img_len) + key_img + _ld(2, feat_img_len) + _ld(1, blist_len)
              + _ld(1, image_nbytes))
    return prefix, entry_size


def _read_varint(b, p: int, end: int) -> tuple[int, int]:
    x = shift = 0
    while p < end:
        c = b[p]
        p += 1
        x |= (c & 0x7F) << shift
        if c < 0x80:
            return x, p
        shift += 7
    raise ValueError("truncated varint")


def _fields(b, p: int, end: int) -> list:
    """[(field number, wire type, value, or start, end)] of the message b[p:end] (wire types 0, 1, 2, 5)."""
    out = []
    while p < end:
        c = b[p]
        if c < 0x80:
            key, p = c, p + 1
        else:
            key, p = _read_varint(b, p, end)
        field, wt = key >> 3, key & 7
        if wt == 2:
            c = b[p] if p < end else 0x80
            if c < 0x80:
                n, p = c, p + 1
            else:
                n, p = _read_varint(b, p, end)
            if p + n > end:
                raise ValueError("length past the end of its message")
            out.append((field, wt, p, p + n))
            p += n
        elif wt == 0:
            v, p = _read_varint(b, p, end)
            out.append((field, wt, v, v))
        elif wt == 5 or wt == 1:
            p += 4 if wt == 5 else 8
        else:
            raise ValueError(f"wire type {wt}")
    if p != end:
        raise ValueError("message overruns its length")
    return out


def parse_example(buf, nbytes: int | None = None) -> dict:
    """The features of a serialized Example: name -> ``("bytes", [(start, end), ...])`` (offsets into ``buf``),
    ``("int64", [values])`` or ``("float", (start, end))``. ValueError when it is not a valid Example. Walks the
    message headers only (the bytes values are not touched)."""
    b = buf if isinstance(buf, bytes | bytearray) else memoryview(buf).cast("B")
    out: dict = {}
    for field, wt, s0, e0 in _fields(b, 0, len(b) if nbytes is None else nbytes):
        if field != 1 or wt != 2:
            continue
        for ef, ewt, es, ee in _fields(b, s0, e0):          # Features: map entries
            if ef != 1 or ewt != 2:
                continue
            name = feat = None
            for kf, kwt, ks, ke in _fields(b, es, ee):
                if kwt == 2 and kf == 1:
                    name = bytes(b[ks:ke]).decode()
                elif kwt == 2 and kf == 2:
                    feat = (ks, ke)
            if name is None or feat is None:
                raise ValueError("map entry without key or value")
            for ff, fwt, fs, fe in _fields(b, *feat):     # Feature: oneof bytes_list / float_list / int64_list
                if fwt != 2:
                    continue
                if ff == 1:
                    out[name] = ("bytes", [(vs, ve) for vf, vwt, vs, ve in _fields(b, fs, fe)
                                           if vf == 1 and vwt == 2])
                elif ff == 3:
                    vals: list = []
                    for vf, vwt, vs, ve in _fields(b, fs, fe):
                        if vf == 1 and vwt == 2:      # packed
                            p = vs
                            while p < ve:
                                x, p = _read_varint(b, p, ve)
                                vals.append(x - (1 << 64) if x >= 1 << 63 else x)
                        elif vf == 1 and vwt == 0:
                            vals.append(vs - (1 << 64) if vs >= 1 << 63 else vs)
                    out[name] = ("int64", vals)
                elif ff == 2:
                    out[name] = ("float", (fs, fe))
    return out


# ---- sizes, names, content (pure) ---------------------------------------------------------------------------

DIRECT_UNSUPPORTED = ("--cache direct: the tfrecord readers read through buffered I/O (as TensorFlow and the PyTorch "
                      "tfrecord readers do): these reads stay buffered, with the dataset evicted from the page cache "
                      "before every epoch (as --cache drop)")


def check_spec(spec, where: str) -> None:
    """Any arrays: a record's image is the concatenation of the sample's arrays (docs/architecture.md contract 1)."""


def shared_read_plan(name: str, ctx, *, meta, streams: int, drop_last_batch: bool, sampler_order):
    """The plan of a strategy reading every sample from the shared tier (naive, prefetch): read pattern
    ``tfdata``: tf.data's order of ``streams`` loader streams (``dlbench.plan.tfdata``); ``indexed``: the
    sampler's order (``sampler_order(meta)``), one pread per record through the index files."""
    from ..workload import tfrecord_options

    tf = tfrecord_options(ctx.workload)
    if tf.read == "tfdata":
        from ..plan import SHARED
        from ..plan.tfdata import tfdata_plan

        spf = max(1, ctx.workload.samples_per_file)
        first = np.arange(0, ctx.n_samples, spf, dtype=np.int64)
        return tfdata_plan(strategy=name, first=first, count=np.minimum(spf, ctx.n_samples - first),
                           n_samples=ctx.n_samples,
                           world_size=ctx.world_size, node_map=ctx.node_map, epochs=ctx.epochs,
                           local_batch=ctx.local_batch, seed=ctx.seed, streams=streams,
                           shuffle_buffer=tf.shuffle_buffer, file_shuffle=tf.file_shuffle, tier=SHARED, meta=meta,
                           drop_last_batch=drop_last_batch)
    return sampler_order(meta).replace(read_pattern="indexed",
                                       order="global shuffle (DistributedSampler); tfrecord read pattern indexed "
                                             "(index file + one pread per record)")


def check_plan(workload, plan, strategy: str) -> None:
    """A plan another strategy built cannot follow tf.data's order: read pattern ``tfdata`` is planned by
    ``shared_read_plan`` (naive, prefetch) only."""
    from ..errors import ConfigError
    from ..workload import tfrecord_options

    if tfrecord_options(workload).read == "tfdata" and plan.read_pattern != "tfdata":
        raise ConfigError(f"--strategy={strategy}: the tfrecord read pattern tfdata (tf.data's order) is "
                          f"planned by the naive and prefetch strategies only; use one of them, or "
                          f"tfrecord.read: indexed in the workload")


def summary_keys(workload) -> dict:
    """The run summary's keys of this format: the read pattern (indexed: pread per record; tfdata: streams)."""
    from ..workload import tfrecord_options

    return {"tfrecord_read": tfrecord_options(workload).read}


@lru_cache(maxsize=256)
def _parts(image_nbytes: int) -> tuple[bytes, bytes]:
    # ``size`` as DLIO 2.0.0 writes it: the side of its square image (its records are side**2 bytes), so a DLIO
    # config gives byte-identical records (benchmarks/dlio_side_by_side.py); DLIO 2.0.1 writes the byte count
    return example_parts(image_nbytes, math.isqrt(image_nbytes))


def image_sizes(spec: dict, seed: int) -> np.ndarray:
    """Per file, the bytes of one record's image (all arrays; the data array's size drawn per file from
    ``record_size``, as for npy/npz: ``fmt_npy.row_nbytes``)."""
    from .fmt_npy import row_nbytes as arrays_nbytes

    return arrays_nbytes(spec, seed)


def row_nbytes(spec: dict, seed: int) -> np.ndarray:
    """Per file, the stored row of one sample: the serialized Example (payload)."""
    return np.asarray([len(_parts(n)[0]) + n + len(_parts(n)[1]) for n in image_sizes(spec, seed).tolist()],
                      dtype=np.int64)


def sample_nbytes(manifest) -> np.ndarray:
    """Per sample, its stored bytes (the payload; the manifest's ``sample_nbytes()``)."""
    return np.repeat(row_nbytes(manifest.spec, manifest.seed), manifest.count)


def file_name(f: int) -> str:
    return f"data-{f:06d}.tfrecord"


def index_path(rel: str) -> str:
    return f"{INDEX_DIR}/{Path(rel).name}.idx"


def index_text(count: int, stride: int) -> bytes:
    off = np.arange(count, dtype=np.int64) * stride
    return "".join(f"{o} {stride}\n" for o in off.tolist()).encode()


def plan_files(workload, seed: int):
    """(paths, first, count, file bytes): ``samples_per_file`` records per file, ``payload + 16`` bytes each."""
    from .manifest import spec_of

    n, k = workload.samples, max(1, workload.samples_per_file)
    first = np.arange(0, n, k, dtype=np.int64)
    count = np.minimum(k, n - first)
    stride = row_nbytes(spec_of(workload), seed) + FRAMING
    return [file_name(f) for f in range(len(first))], first, count, count * stride


def _shapes(workload, seed: int, f: int):
    from .fmt_npy import sample_shapes
    from .manifest import spec_of

    return sample_shapes(spec_of(workload), seed, f)


def fill_image(workload, seed: int, i: int, out: np.ndarray, shapes) -> None:
    """Sample i's image (its arrays' bytes in order, each filled as npy/npz fill it: ``fmt_npy.fill_array``)
    into ``out``; ``shapes``: the arrays' shapes in its file."""
    from .fmt_npy import fill_array

    pos = 0
    for a, (sh, arr) in enumerate(zip(shapes, workload.arrays)):
        nb = int(np.prod(sh, dtype=np.int64)) * np.dtype(arr.dtype).itemsize
        view = out[pos:pos + nb]
        if view.ctypes.data % np.dtype(arr.dtype).itemsize:   # an unaligned spot in a record: fill a copy
            tmp = np.empty(nb, np.uint8)
            fill_array(workload, seed, i, a, tmp)
            view[...] = tmp
        else:
            fill_array(workload, seed, i, a, view)
        pos += nb


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample i's stored payload: the serialized Example (uint8, a fresh array)."""
    shapes = _shapes(workload, seed, i // max(1, workload.samples_per_file))
    n = sum(int(np.prod(sh, dtype=np.int64)) * np.dtype(a.dtype).itemsize for sh, a in zip(shapes, workload.arrays))
    pre, suf = _parts(n)
    out = np.empty(len(pre) + n + len(suf), np.uint8)
    out[:len(pre)] = np.frombuffer(pre, np.uint8)
    fill_image(workload, seed, i, out[len(pre):len(pre) + n], shapes)
    out[len(pre) + n:] = np.frombuffer(suf, np.uint8)
    return out


def decode_into(raw: np.ndarray, nbytes: int, out: np.ndarray) -> int:
    """The decode phase: parse the Example in ``raw[:nbytes]`` and copy its ``image`` bytes into ``out``."""
    try:
        kind, vals = parse_example(raw, nbytes)["image"]
        if kind != "bytes" or len(vals) != 1:
            raise ValueError("feature 'image' is not one bytes value")
    except (KeyError, ValueError) as err:
        raise DataError(f"tfrecord: a record's payload is not the Example dlbench writes ({err}); check the "
                        f"dataset with `dlbench verify --checksum`") from None
    s, e = vals[0]
    out[:e - s] = raw[s:e]
    return e - s


# ---- writing ------------------------------------------------------------------------------------------------

CHUNK_BYTES = 32 << 20


def write_file(fd: int, workload, seed: int, m, f: int) -> int:
    """File ``f`` of manifest ``m`` into the open (empty) ``fd``, staged ≈ 32 MiB at a time: constant header and
    Example framing, each record's image, its payload CRC. Returns the bytes written."""
    from .generate import write_all

    crc = _crc32c()
    first, count = int(m.first[f]), int(m.count[f])
    shapes = _shapes(workload, seed, f)
    n = sum(int(np.prod(sh, dtype=np.int64)) * np.dtype(a.dtype).itemsize for sh, a in zip(shapes, workload.arrays))
    pre, suf = _parts(n)
    p = len(pre) + n + len(suf)
    stride = p + FRAMING
    per = max(1, CHUNK_BYTES // stride)
    buf = np.empty((min(per, count), stride), np.uint8)
    buf[:, :HEADER] = np.frombuffer(header(p), np.uint8)
    buf[:, HEADER:HEADER + len(pre)] = np.frombuffer(pre, np.uint8)
    buf[:, HEADER + len(pre) + n:HEADER + p] = np.frombuffer(suf, np.uint8)
    img0 = HEADER + len(pre)
    written = 0
    for s0 in range(first, first + count, per):
        b = min(per, first + count - s0)
        for r in range(b):
            row = buf[r]
            fill_image(workload, seed, s0 + r, row[img0:img0 + n], shapes)
            row[HEADER + p:] = np.frombuffer(struct.pack("<I", mask(crc(row[HEADER:HEADER + p]))), np.uint8)
        written += write_all(fd, buf[:b].reshape(-1), (s0 - first) * stride)
    if written != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {written} B, the plan says {int(m.nbytes[f])} B")
    return written


def _stride(m, f: int) -> int:
    return int(m.nbytes[f]) // max(1, int(m.count[f]))


def _storage(data_dir: Path, storage):
    from ..storage.backend import PosixBackend

    return storage if storage is not None else PosixBackend(data_dir)


def write_extra(data_dir: Path, m, f: int, storage=None) -> None:
    """File f's index (``index/<file>.idx``), atomically (``.part`` then rename); the generator calls it before
    the data file takes its final name. ``storage``: the backend of the data files (default POSIX)."""
    from .generate import write_all

    st = _storage(data_dir, storage)
    final = index_path(m.paths[f])
    st.mkdir(INDEX_DIR)
    part = final + ".part"
    try:
        h = st.open(part, write=True)
        try:
            write_all(h, np.frombuffer(index_text(int(m.count[f]), _stride(m, f)), dtype=np.uint8), 0)
        finally:
            st.close(h)
        st.rename(part, final)
    except BaseException:
        st.remove(part)
        raise


def extra_ok(data_dir: Path, m, f: int, storage=None) -> bool:
    """File f's index holds what ``write_extra`` writes (a complete data file is skipped on re-run only then)."""
    try:
        return _storage(data_dir, storage).file_image(index_path(m.paths[f])) == index_text(int(m.count[f]),
                                                                                             _stride(m, f))
    except OSError:
        return False


def remove_extra(data_dir: Path, m, storage=None) -> None:
    """The index files of a dataset being replaced."""
    st = _storage(data_dir, storage)
    for p in m.paths:
        for q in (index_path(p), index_path(p) + ".part"):
            st.remove(q)
    if st.paths:
        try:
            (data_dir / INDEX_DIR).rmdir()
        except OSError:
            pass


# ---- verification ---------------------------------------------------------------------------------------------

def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None, storage=None) -> list[str]:
    """Structure: the file's index, and its first record's header (length and the length's CRC). ``image`` and
    ``storage``: the file's bytes and the backend holding its index (a storage backend's dataset)."""
    return _check(path, m, f, deep=False, image=image, storage=storage)


def check_records(path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
                  storage=None) -> list[str]:
    """``verify --checksum``/``--content``: every record's header and payload CRC (one sequential pass),
    each bad record named by file and record number."""
    return _check(path, m, f, deep=True, image=image, storage=storage)


def _check(path: Path, m, f: int, deep: bool, limit: int = 5, image: bytes | None = None,
           storage=None) -> list[str]:
    out = []
    data_dir = Path(path).parent
    if storage is not None:   # the dataset's root: the path names file f under it
        data_dir = Path(path)
        for _ in Path(m.paths[f]).parts:
            data_dir = data_dir.parent
    count = int(m.count[f])
    if not deep and not extra_ok(data_dir, m, f, storage):
        out.append(f"{data_dir / index_path(m.paths[f])}: missing or not the index of {m.paths[f]} ({count} "
                   f"records); regenerate with `dlbench generate --force`")
    stride = _stride(m, f)
    p = stride - FRAMING
    crcf = _crc32c()
    want_hdr = header(p)
    read: Callable[[int, Any, int], int]
    done: Callable[[int], None]
    if image is not None:
        from ..storage.backend import MemoryBackend

        mem = MemoryBackend()
        mem.files["f"] = bytearray(image)
        read, fd, done = mem.preadv, mem.open_read("f", os.O_RDONLY), mem.close
    else:
        read, fd, done = preadv, os.open(path, os.O_RDONLY), os.close
    try:
        todo = count if deep else min(1, count)
        per = max(1, CHUNK_BYTES // stride)
        buf = np.empty(min(per, max(todo, 1)) * stride, np.uint8)
        for j0 in range(0, todo, per):
            b = min(per, todo - j0)
            got = read(fd, [buf[:b * stride]], j0 * stride)
            if got != b * stride:
                out.append(f"{path}: truncated at record {j0 + got // stride}")
                break
            recs = buf[:b * stride].reshape(b, stride)
            for r in range(b):
                rec = recs[r]
                j = j0 + r
                if rec[:HEADER].tobytes() != want_hdr:
                    ln = int.from_bytes(rec[:8].tobytes(), "little")
                    ok = mask(crcf(rec[:8])) == int.from_bytes(rec[8:12].tobytes(), "little")
                    out.append(f"{path}: record {j}: header " + (f"length {ln}, expected {p}" if ok else
                                                                 "length CRC mismatch (corrupt header)"))
                elif deep and mask(crcf(rec[HEADER:HEADER + p])) != int.from_bytes(rec[HEADER + p:].tobytes(),
                                                                                    "little"):
                    out.append(f"{path}: record {j} (sample {int(m.first[f]) + j}): payload CRC mismatch (bytes "
                               f"changed since generation)")
                if len(out) >= limit:
                    return out
    finally:
        done(fd)
    return out


# ---- readers --------------------------------------------------------------------------------------------------

class _Base(SampleReader):
    def __init__(self, data_dir: Path, manifest, workload, counters=None, storage=None):
        from ..workload import tfrecord_options

        self.opts = tfrecord_options(workload)
        self._data_dir = Path(data_dir)
        self._rel = list(manifest.paths)
        st = self._storage = _storage(self._data_dir, storage)
        # the backend's calls (POSIX: os.open, the read call, os.close themselves)
        self._open_read, self._preadv, self._close = st.open_read, st.preadv, st.close
        self._paths = st.keys(manifest.paths)
        self._spf = max(1, int(workload.samples_per_file))
        self._count = [int(c) for c in manifest.count]
        self._payload = row_nbytes(manifest.spec, manifest.seed).tolist()   # per file
        self._stride = [p + FRAMING for p in self._payload]
        self.max_row_nbytes = max(self._payload, default=0)
        self.decoded_nbytes = int(image_sizes(manifest.spec, manifest.seed).max()) if self._payload else 0
        self.counters = counters
        self._hdr = bytearray(HEADER)
        self._ftr = bytearray(FOOTER)
        self.rereads = 0

    def decode_into(self, raw: np.ndarray, nbytes: int, out: np.ndarray) -> int:
        return decode_into(raw, nbytes, out)

    def _short(self, f: int, j: int) -> DataError:
        return DataError(f"{os.fsdecode(self._paths[f])}: short read of record {j}: the file is truncated "
                         f"(check the dataset with `dlbench verify`)")


class IndexedReader(_Base):
    """``read: indexed``: the file's index loaded at its first access; one ``preadv`` per record at its offset
    (header and footer into scratch, the payload into the row)."""

    def __init__(self, *a, max_open_files: int = 64, **kw):
        super().__init__(*a, **kw)
        self._index: dict[int, tuple[list, list]] = {}
        self._fds: OrderedDict[int, int] = OrderedDict()
        self._max_open = max_open_files

    def _load_index(self, f: int) -> tuple[list, list]:
        p = self._data_dir / index_path(self._rel[f])
        try:
            src = p if self._storage.paths else io.BytesIO(self._storage.file_image(index_path(self._rel[f])))
            a = np.loadtxt(src, dtype=np.int64, ndmin=2)
        except (OSError, ValueError) as e:
            raise DataError(f"{p}: cannot read the index of {self._rel[f]} ({e}); regenerate the dataset "
                            f"(dlbench generate --force)") from None
        if a.shape != (self._count[f], 2):
            raise DataError(f"{p}: {a.shape[0]} index lines for {self._count[f]} records; regenerate the dataset")
        idx = self._index[f] = (a[:, 0].tolist(), (a[:, 1] - FRAMING).tolist())
        return idx

    def _fd(self, f: int) -> int:
        fd = self._fds.get(f)
        if fd is None:
            fd = self._fds[f] = self._open_read(self._paths[f], os.O_RDONLY)
            if self.counters is not None:
                self.counters.open()
            if len(self._fds) > self._max_open:
                self._close(self._fds.popitem(last=False)[1])
        return fd

    def read_into(self, i: int, out: np.ndarray) -> int:
        f, j = divmod(i, self._spf)
        idx = self._index.get(f) or self._load_index(f)
        off, n = idx[0][j], idx[1][j]
        fd = self._fd(f)
        cnt = self.counters
        if cnt is None:
            got = self._preadv(fd, [self._hdr, out[:n], self._ftr], off)
        else:
            t0 = perf_counter_ns()
            got = self._preadv(fd, [self._hdr, out[:n], self._ftr], off)
            cnt.read(f, off, got, perf_counter_ns() - t0)
        if got != n + FRAMING:
            raise self._short(f, j)
        if int.from_bytes(self._hdr[:8], "little") != n:
            raise DataError(f"{os.fsdecode(self._paths[f])}: record {j} at offset {off} holds "
                            f"{int.from_bytes(self._hdr[:8], 'little')} bytes, its index says {n}; regenerate "
                            f"the dataset")
        return n

    def close(self) -> None:
        while self._fds:
            self._close(self._fds.popitem()[1])


class _Stream:
    __slots__ = ("fd", "off", "buf", "pos", "end", "next_j")

    def __init__(self, fd: int, off: int, buf: memoryview, j: int):
        self.fd, self.off, self.buf, self.pos, self.end, self.next_j = fd, off, buf, 0, 0, j


class TFDataReader(_Base):
    """``read: tfdata``: sequential buffered streams per file, both CRCs checked (module docstring)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._bufsize = int(self.opts.buffer_nbytes)
        self._streams: dict[int, _Stream] = {}
        self._kept: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()   # the shuffle buffer's records
        self._free: list[np.ndarray] = []                                        # their slots, for reuse
        self._bufs: list[memoryview] = []                                        # read buffers, for reuse
        self.keep_records = max(64, 2 * int(self.opts.shuffle_buffer))
        self._crc = _crc32c()
        self.sequential = self.evicted = 0

    def _open(self, f: int, j: int) -> _Stream:
        fd = self._open_read(self._paths[f], os.O_RDONLY)
        if self.counters is not None:
            self.counters.open()
        # read buffers are reused from exhausted streams (a fresh one per file would page-fault on every use)
        buf = self._bufs.pop() if self._bufs else memoryview(aligned_empty(self._bufsize)).cast("B")  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
        st = self._streams[f] = _Stream(fd, j * self._stride[f], buf, j)
        return st

    def _fill(self, st: _Stream, f: int) -> None:
        cnt = self.counters
        t0 = perf_counter_ns() if cnt is not None else 0
        got = self._preadv(st.fd, [st.buf], st.off)
        if cnt is not None:
            cnt.read(f, st.off, got, perf_counter_ns() - t0)
        if got <= 0:
            raise self._short(f, st.next_j)
        st.off += got
        st.pos, st.end = 0, got

    def _take(self, st: _Stream, f: int, dest: memoryview, n: int) -> None:
        """The stream's next n bytes into ``dest`` (through the buffer; a remainder of at least one buffer
        is read straight into ``dest``, as TensorFlow's buffered input does)."""
        pos, bs = 0, len(st.buf)
        while pos < n:
            avail = st.end - st.pos
            if avail == 0:
                if n - pos >= bs:
                    cnt = self.counters
                    t0 = perf_counter_ns() if cnt is not None else 0
                    got = self._preadv(st.fd, [dest[pos:n]], st.off)
                    if cnt is not None:
                        cnt.read(f, st.off, got, perf_counter_ns() - t0)
                    if got != n - pos:
                        raise self._short(f, st.next_j)
                    st.off += got
                    return
                self._fill(st, f)
                continue
            k = avail if avail < n - pos else n - pos
            dest[pos:pos + k] = st.buf[st.pos:st.pos + k]
            st.pos += k
            pos += k

    def _record(self, st: _Stream, f: int, dest: np.ndarray) -> int:
        """The stream's next record's payload into ``dest``, both CRCs checked."""
        hdr = self._hdr
        self._take(st, f, memoryview(hdr), HEADER)
        n = int.from_bytes(hdr[:8], "little")
        j = st.next_j
        if mask(self._crc(memoryview(hdr)[:8])) != int.from_bytes(hdr[8:], "little"):
            raise DataError(f"{os.fsdecode(self._paths[f])}: record {j}: length CRC mismatch (corrupt header); "
                            f"check the dataset with `dlbench verify --checksum`")
        if n > dest.size:
            raise DataError(f"{os.fsdecode(self._paths[f])}: record {j} holds {n} bytes, at most "
                            f"{dest.size} expected")
        self._take(st, f, memoryview(dest)[:n], n)  # type: ignore[arg-type]  # ndarray exports the buffer
        self._take(st, f, memoryview(self._ftr), FOOTER)
        if mask(self._crc(dest[:n])) != int.from_bytes(self._ftr, "little"):
            raise DataError(f"{os.fsdecode(self._paths[f])}: record {j}: payload CRC mismatch (bytes changed "
                            f"since generation); check the dataset with `dlbench verify --checksum`")
        st.next_j = j + 1
        return n

    def _reread(self, f: int, j: int, out: np.ndarray) -> int:
        """Record j alone, by offset (behind its stream), CRCs checked."""
        self.rereads += 1
        if self.counters is not None:
            self.counters.open()
        st = _Stream(self._open_read(self._paths[f], os.O_RDONLY), j * self._stride[f], memoryview(b""), j)   # unbuffered
        try:
            return self._record(st, f, out)
        finally:
            self._close(st.fd)

    def read_into(self, i: int, out: np.ndarray) -> int:
        kept = self._kept.pop(i, None)
        if kept is not None:
            buf, n = kept
            out[:n] = buf[:n]
            self._free.append(buf)       # the slot is reused (no page faults of a fresh buffer per record)
            return n
        f, j = divmod(i, self._spf)
        st = self._streams.get(f)
        if st is None:
            # a file's first access: its stream starts at record 0 when j is within the shuffle window,
            # else at j (the records before it are another worker's, or were skipped by the order)
            st = self._open(f, 0 if j <= self.keep_records else j)
        if j < st.next_j:
            return self._reread(f, j, out)
        base = f * self._spf
        while st.next_j < j:             # records the shuffle buffer holds: read now, delivered later
            k = st.next_j
            buf = self._free.pop() if self._free else aligned_empty(self.max_row_nbytes)
            n = self._record(st, f, buf)
            self._kept[base + k] = (buf, n)
            if len(self._kept) > self.keep_records:
                self._free.append(self._kept.popitem(last=False)[1][0])
                self.evicted += 1
        n = self._record(st, f, out)
        self.sequential += 1
        if st.next_j >= self._count[f]:  # the file is exhausted: TensorFlow closes it
            self._close(st.fd)
            self._bufs.append(st.buf)
            del self._streams[f]
        return n

    def close(self) -> None:
        for st in self._streams.values():
            self._close(st.fd)
        self._streams.clear()
        self._kept.clear()
        self._free.clear()


def open_reader(data_dir, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None) -> SampleReader:
    """The reader of the workload's read pattern (``tfrecord.read``: indexed or tfdata; module docstring)."""
    from ..workload import tfrecord_options

    if via != "auto":
        raise ConfigError(f"--read-via={via}: layout tfrecord is read as its workload's tfrecord.read says "
                          f"(indexed or tfdata, which also sets the sample order); use auto")
    if direct:
        raise ConfigError(DIRECT_UNSUPPORTED)
    if tfrecord_options(workload).read == "tfdata":
        return TFDataReader(Path(data_dir), manifest, workload, counters, storage=storage)
    return IndexedReader(Path(data_dir), manifest, workload, counters, max_open_files=max_open_files, storage=storage)


class TFRecordFormat(FormatDriver):
    """The format driver of tfrecord: this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True   # data and index files written, checked and read through a storage backend (``storage=``)
    SECTION = "tfrecord"   # the workload YAML section this format owns (its read pattern: workload.TFRecordSpec)
    DIRECT_UNSUPPORTED = DIRECT_UNSUPPORTED

    check_file = staticmethod(check_file)
    check_plan = staticmethod(check_plan)
    check_records = staticmethod(check_records)
    check_spec = staticmethod(check_spec)
    decode_into = staticmethod(decode_into)
    expected_row = staticmethod(expected_row)
    extra_ok = staticmethod(extra_ok)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    remove_extra = staticmethod(remove_extra)
    row_nbytes = staticmethod(row_nbytes)
    sample_nbytes = staticmethod(sample_nbytes)
    shared_read_plan = staticmethod(shared_read_plan)
    summary_keys = staticmethod(summary_keys)
    write_extra = staticmethod(write_extra)
    write_file = staticmethod(write_file)
