"""Format ``npz``: NumPy ``.npz`` files as ``np.savez`` writes them, one module for everything the format
does (issue 16's format registry: adding a format is this module plus one ``register`` line).

Layout. File f (``data-<f>.npz``) is a ZIP archive with one *stored* (uncompressed) member ``<name>.npy``
per workload array, in the workload's order (DLIO's generator writes ``x`` and ``y``: the DLIO translation
gives those two arrays). Each member is the .npy file of that array for the file's samples, shaped as in
``fmt_npy`` (``(count, *sample_shape)``, or the sample's shape with one sample per file), samples along
axis 0 (DLIO puts them on the last axis; bytes per file and per sample are the same). The archive is
written by ``zipfile`` exactly as ``np.savez`` does (``ZIP_STORED``, ``force_zip64=True`` local headers,
the central directory at the end) except the members' timestamp, fixed at 1980-01-01 so the bytes are a
pure function of (workload, seed). ``np.load`` reads it unchanged. File sizes are known before writing
(``plan_files``: ZIP headers + .npy headers + data) and every written file is checked against them.

Record sizes and content: as ``fmt_npy`` (the data array's length drawn per file from ``record_size``;
sample i's array a from ``content.sample_rng(workload, seed, i, 3 + a)``).

Readers. ``--read-via auto`` / ``library`` (default): ``np.load`` of the file and ``z[name]`` per array, as a
PyTorch Dataset over .npz does; with several samples per file the last file's arrays are kept (DLIO's
open-file map) so consecutive samples of one file load it once, and every load is counted as the member
bytes numpy reads. ``--read-via pread``: once per opened file each member's local header (30 fixed bytes + name + extra
field) gives where its .npy header starts, which gives the data offset (fast path: the local headers walked in order from byte 0, one pread per member, as np.savez lays
them out); then each array's row is one ``preadv`` at ``offset + j * row_bytes``. A compressed member
(``np.savez_compressed``) has no byte range: the pread reader refuses it in one line.
"""

from __future__ import annotations

import io
import os
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from . import fmt_npy as npy
from .fmt_npy import DIRECT_UNSUPPORTED, VIAS, expected_row, row_nbytes, sample_nbytes  # noqa: F401  (this format's)
from .format_base import FormatDriver

SUFFIX = ".npz"
DATE = (1980, 1, 1, 0, 0, 0)
ZIP64_LIMIT = (1 << 31) - 1                  # zipfile.ZIP64_LIMIT
LOCAL_HEAD = 30                             # fixed part of a ZIP local file header
ZIP64_LOCAL_EXTRA = 20                      # np.savez writes members with force_zip64: HHQQ in each local header
CENTRAL_HEAD, END_RECORD, ZIP64_END = 46, 22, 56 + 20


def check_spec(spec, where: str) -> None:
    """Members are ``<name>.npy``: names must be unique (checked for every layout) and not empty."""
    for a in spec.arrays:
        if not a.name or a.name.startswith("/"):
            raise ConfigError(f"workload {spec.name} ({where}): array name {a.name!r}: an npz member name must "
                              f"be non-empty and relative")


def _members(spec: dict, seed: int, f: int, count: int, rec=None) -> list[tuple[str, bytes, int]]:
    """(member name, .npy header, data bytes) of each array of file ``f``."""
    out = []
    for a, sh in zip(spec["arrays"], npy.sample_shapes(spec, seed, f, rec)):
        fs = npy.file_shape(spec, sh, count)
        out.append((a["name"] + ".npy", npy.npy_header(a["dtype"], fs),
                    int(np.prod(fs, dtype=np.int64)) * np.dtype(a["dtype"]).itemsize))
    return out


def zip_nbytes(members: list[tuple[str, bytes, int]]) -> int:
    """The size of the archive ``zipfile`` writes for these stored members (as ``np.savez``)."""
    pos = 0
    central = 0
    for name, head, data in members:
        nb = len(name.encode())
        offset = pos
        size = len(head) + data
        pos += LOCAL_HEAD + nb + ZIP64_LOCAL_EXTRA + size
        extra = (16 if size > ZIP64_LIMIT else 0) + (8 if offset > ZIP64_LIMIT else 0)
        central += CENTRAL_HEAD + nb + (4 + extra if extra else 0)
    zip64 = len(members) > 0xFFFF or pos > ZIP64_LIMIT or central > ZIP64_LIMIT
    return pos + central + (ZIP64_END if zip64 else 0) + END_RECORD


def plan_files(workload, seed: int):
    from .manifest import spec_of

    spec = spec_of(workload)
    paths, first, count = npy.layout_files(workload, seed, "data-{f:08d}" + SUFFIX)
    rec = npy.record_nbytes(spec, seed, len(paths))
    nbytes = np.asarray([zip_nbytes(_members(spec, seed, f, c, rec)) for f, c in enumerate(count.tolist())],
                        dtype=np.int64)
    return paths, first, count, nbytes


def write_file(fd: int, workload, seed: int, m, f: int) -> int:
    """Write file ``f`` into the open (empty) ``fd`` through ``zipfile`` as ``np.savez`` does; returns its
    size, which must equal the planned one."""
    from ..storage import aligned_empty
    from .manifest import spec_of

    spec = spec_of(workload)
    first, count = int(m.first[f]), int(m.count[f])
    members = _members(spec, seed, f, count)

    def write_zip(fh) -> int:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for a, (name, head, data) in enumerate(members):
                zi = zipfile.ZipInfo(name, date_time=DATE)
                zi.compress_type = zipfile.ZIP_STORED
                row = data // count
                buf = aligned_empty(max(1, row), np.uint8)
                with zf.open(zi, "w", force_zip64=True) as out:
                    out.write(head)
                    for _j, view in npy.array_rows(workload, seed, first, count, a, row, buf):
                        out.write(view)
        fh.flush()
        return fh.tell()

    if isinstance(fd, int):   # a descriptor: zipfile writes through a duplicate of it
        with os.fdopen(os.dup(fd), "wb") as fh:
            n = write_zip(fh)
    else:   # a storage backend's handle: the archive made in memory, then written at once
        from .generate import write_all

        bio = io.BytesIO()
        write_zip(bio)
        n = write_all(fd, np.frombuffer(bio.getbuffer(), dtype=np.uint8), 0)
    if n != int(m.nbytes[f]):
        raise DataError(f"{m.paths[f]}: wrote {n} B, the plan says {int(m.nbytes[f])} B")
    return n


def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
               storage=None) -> list[str]:
    """Structure: a ZIP with exactly the planned stored members, each an .npy of the planned dtype and
    shape (``np.load`` of each member's header; the data is compared by ``--checksum``/``--content``).
    ``image``: the file's bytes (a storage backend's file; ``path`` then only names it)."""
    from .manifest import spec_of

    spec = spec_of(workload)
    members = _members(spec, seed, f, int(m.count[f]))
    try:
        with zipfile.ZipFile(path if image is None else io.BytesIO(image)) as zf:
            names = zf.namelist()
            if names != [n for n, _, _ in members]:
                return [f"{path}: members {names}, expected {[n for n, _, _ in members]}"]
            for (name, _, _), a, sh in zip(members, workload.arrays, npy.sample_shapes(spec, seed, f)):
                info = zf.getinfo(name)
                if info.compress_type != zipfile.ZIP_STORED:
                    return [f"{path}: member {name} is compressed; dlbench writes stored members"]
                from numpy.lib import format as npf

                with zf.open(info) as fh:
                    version = npf.read_magic(fh)
                    shape, fortran, dt = (npf.read_array_header_1_0(fh) if version == (1, 0)
                                          else npf.read_array_header_2_0(fh))
                want = npy.file_shape(spec, sh, int(m.count[f]))
                if tuple(shape) != want or dt != np.dtype(a.dtype) or fortran:
                    return [f"{path}: member {name} is {tuple(shape)} {dt}, expected {want} {a.dtype}"]
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        return [f"{path}: not a readable .npz file ({' '.join(str(e).split())[:120]})"]
    return []


# ---- readers ------------------------------------------------------------------------------------------

def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None):
    npy.check_via(via, workload, direct)
    if via == "pread":
        return NpzPreadReader(d, manifest, workload, counters, max_open_files=max_open_files, storage=storage)
    return NpzLoadReader(d, manifest, workload, counters, storage=storage)


class _Arrays(npy._Base):
    def _init_npz(self, d, manifest, workload, counters, storage=None):
        self._init(d, manifest, workload, counters, storage)
        self._spec, self._seed, self._count = manifest.spec, manifest.seed, manifest.count
        self._names = [a.name for a in workload.arrays]
        self._dtypes = [np.dtype(a.dtype) for a in workload.arrays]

    def _row_parts(self, f: int) -> list[int]:
        """Bytes of each array in one sample's row of file ``f``."""
        return [int(np.prod(sh, dtype=np.int64)) * dt.itemsize
                for sh, dt in zip(npy.sample_shapes(self._spec, self._seed, f), self._dtypes)]

    def _error(self, f: int, i: int, e) -> DataError:
        return DataError(f"{os.fsdecode(self._paths[f])}: cannot read sample {i}: {e}; check the dataset with "
                         f"`dlbench verify`")


class NpzLoadReader(_Arrays):
    """``np.load`` and ``z[name]`` per array, as a PyTorch Dataset over .npz files does; the last file's
    arrays are kept for the next sample of the same file (several samples per file)."""

    def __init__(self, d: Path, manifest, workload, counters=None, storage=None):
        self._init_npz(d, manifest, workload, counters, storage)
        self._last: tuple[int, list] | None = None

    def read_into(self, i: int, out: np.ndarray) -> int:
        f, j = divmod(i, self._spf)
        n = int(self._rows[f])
        last = self._last
        try:
            if last is not None and last[0] == f:
                arrays = last[1]
            else:
                t0 = perf_counter_ns()
                with self._np_load(self._paths[f], allow_pickle=False) as z:
                    arrays = [z[name] for name in self._names]
                if self.counters is not None:
                    self.counters.open_read(f, 0, sum(a.nbytes for a in arrays), perf_counter_ns() - t0)
                if self._spf > 1:
                    self._last = (f, arrays)
            pos = 0
            for arr in arrays:
                row = arr if self._spf == 1 else arr[j]
                b = row.nbytes
                out[pos:pos + b] = np.ascontiguousarray(row).reshape(-1).view(np.uint8)
                pos += b
        except (OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile, EOFError) as e:
            raise self._error(f, i, e) from None
        if pos != n:
            raise self._error(f, i, f"{pos} B, the manifest says {n} B")
        return n

    def close(self) -> None:
        self._last = None


class NpzPreadReader(_Arrays):
    """Member data offsets from the ZIP local headers once per opened file, then one ``preadv`` per array
    per sample (an LRU of open files)."""

    def __init__(self, d: Path, manifest, workload, counters=None, max_open_files: int = 64, storage=None):
        self._init_npz(d, manifest, workload, counters, storage)
        st = self._storage
        self._open_read, self._preadv, self._close, self._pread = st.open_read, st.preadv, st.close, st.pread
        self._open: OrderedDict[int, tuple[int, list]] = OrderedDict()
        self._max_open = max(1, int(max_open_files))
        if self._spf == 1:
            # a file per sample: once a file of a shape was read through the headers (``_get``), the next
            # files of that shape are one ``preadv`` (``_read_whole``): each member's local header and .npy
            # header into the template's buffers, its data into the row; the headers must then equal the
            # template's but for the CRC-32 (bytes 14-18 of a local header), else the general path
            self.read_into = self._read_whole  # type: ignore[method-assign]
            rec = npy.record_nbytes(self._spec, self._seed, len(self._rows))
            self._rec_bytes = rec
            self._templates: dict[int, tuple[list[bytes], list[bytearray], list[int], int]] = {}

    def _read_whole(self, i: int, out: np.ndarray) -> int:
        key = -1 if self._rec_bytes is None else int(self._rec_bytes[i])
        tpl = self._templates.get(key)
        if tpl is None:
            tpl = self._derived(i, key)
            if tpl is None:
                return self._read_learning(i, out, key)
        want, bufs, sizes, whole = tpl
        iov: list = []
        pos = 0
        for b, n in zip(bufs, sizes):
            iov.append(b)
            iov.append(out[pos:pos + n])
            pos += n
        path = self._paths[i]
        fd = self._open_read(path, os.O_RDONLY)
        try:
            t0 = perf_counter_ns()
            got = self._preadv(fd, iov, 0)
            dt = perf_counter_ns() - t0
        finally:
            self._close(fd)
        same = got == whole
        if same:
            for b, w in zip(bufs, want):
                if b[:14] != w[:14] or b[18:] != w[18:]:
                    same = False
                    break
        if not same:   # another writer, another layout, or a truncated file: the general path says which
            return NpzPreadReader.read_into(self, i, out)
        if self.counters is not None:
            self.counters.open_read(i, len(bufs[0]), pos, dt)
        return pos

    def _derived(self, i: int, key: int):
        """Record sizes (a size per file): file ``i``'s template from a learned one of another size, where that
        one's local headers carry the sizes in the zip64 extra field only (``np.savez``'s ``force_zip64``):
        the same headers with this file's member sizes and .npy headers (checked as any template)."""
        if not self._templates:
            return None
        base = next(iter(self._templates.values()))[0]
        shapes = npy.sample_shapes(self._spec, self._seed, i, self._rec_bytes)
        segs = []
        for seg, sh, dt in zip(base, shapes, self._dtypes):
            nlen, elen = struct.unpack("<HH", seg[26:30])
            if elen != ZIP64_LOCAL_EXTRA or seg[LOCAL_HEAD + nlen:LOCAL_HEAD + nlen + 4] != b"\x01\x00\x10\x00":
                return None
            head = npy._expected_header(dt.str, tuple(int(x) for x in sh))
            msize = len(head) + int(np.prod(sh, dtype=np.int64)) * dt.itemsize
            segs.append(seg[:LOCAL_HEAD + nlen] + struct.pack("<HHQQ", 1, 16, msize, msize) + head)
        sizes = self._row_parts(i)
        if len(self._templates) >= 4096:    # bounded: a size per file would otherwise keep one per file
            self._templates = dict([next(iter(self._templates.items()))])
        tpl = self._templates[key] = (segs, [bytearray(len(x)) for x in segs], sizes,
                                      sum(sizes) + sum(len(x) for x in segs))
        return tpl

    def _read_learning(self, i: int, out: np.ndarray, key: int) -> int:
        """The general path, keeping the file's headers as the template of its shape when its members lie
        header, data, header, data... from byte 0 (``np.savez``'s layout)."""
        fd, parts = self._get(i)
        try:
            n = self._read_parts(i, fd, parts, out)
            segs, at = [], 0
            for off, b in parts:
                if off - at < LOCAL_HEAD:
                    break
                seg = self._pread(fd, off - at, at)
                if len(seg) != off - at or seg[:4] != b"PK\x03\x04":
                    break
                segs.append(seg)
                at = off + b
            else:
                sizes = [b for _o, b in parts]
                self._templates[key] = (segs, [bytearray(len(x)) for x in segs], sizes,
                                        sum(sizes) + sum(len(x) for x in segs))
        finally:
            self._open.pop(i, None)
            self._close(fd)
        return n

    def _read_parts(self, i: int, fd, parts, out: np.ndarray) -> int:
        f = i // self._spf
        j = i - f * self._spf
        cnt, clock, preadv = self.counters, perf_counter_ns, self._preadv
        pos = 0
        for off, b in parts:
            t0 = clock()
            got = preadv(fd, [out[pos:pos + b]], off + j * b)
            if cnt is not None:
                cnt.read(f, off + j * b, got, clock() - t0)
            if got != b:
                raise self._error(f, i, "short read: the file is truncated")
            pos += b
        return pos

    def _get(self, f: int) -> tuple[int, list]:
        h = self._open.get(f)
        if h is not None:
            return h
        path = self._paths[f]
        fd = self._open_read(path, os.O_RDONLY)
        try:
            parts = list(zip(member_offsets(fd, path, self._names, self._dtypes,
                                            [npy.file_shape(self._spec, sh, int(self._count[f]))
                                             for sh in npy.sample_shapes(self._spec, self._seed, f)],
                                            pread=self._pread, storage=self._storage),
                             self._row_parts(f)))
        except BaseException:
            self._close(fd)
            raise
        if self.counters is not None:
            self.counters.open()
        h = self._open[f] = (fd, parts)
        if len(self._open) > self._max_open:
            self._close(self._open.popitem(last=False)[1][0])
        return h

    def read_into(self, i: int, out: np.ndarray) -> int:
        f = i // self._spf
        fd, parts = self._get(f)
        try:
            pos = self._read_parts(i, fd, parts, out)
        except DataError:
            if self._spf == 1:
                self._close(self._open.pop(f)[0])
            raise
        if self._spf == 1:
            self._close(self._open.pop(f)[0])   # a file per sample: nothing more to read from it
        return pos

    def close(self) -> None:
        while self._open:
            self._close(self._open.popitem()[1][0])


def member_offsets(fd: int, path: bytes, names, dtypes, shapes, *, pread=os.pread, storage=None) -> list[int]:
    """Where each member ``<name>.npy``'s array data starts in the archive open as ``fd``. Fast path (archives
    ``np.savez`` writes: members in order from byte 0, sizes in each local header, no data descriptor): walk
    the local headers, one pread per member covering its 30 fixed bytes, name, extra field (zip64 sizes) and
    .npy header. Otherwise (another member order or writer): the central directory (``zipfile``) gives each
    member's local header. DataError if a member is missing, compressed or not the expected array. ``pread``
    (``os.pread``) and ``storage`` (None: ``fd`` is a descriptor): a storage backend's handle and calls."""
    try:
        return _walk_local_headers(fd, path, names, dtypes, shapes, pread)
    except _NotSequential:
        return _from_central_directory(fd, path, names, dtypes, shapes, pread, storage)


class _NotSequential(Exception):
    pass


def _walk_local_headers(fd: int, path: bytes, names, dtypes, shapes, pread=os.pread) -> list[int]:
    at, out = 0, []
    for name, dt, sh in zip(names, dtypes, shapes):
        head = pread(fd, 4096, at)
        if len(head) < LOCAL_HEAD or head[:4] != b"PK\x03\x04":
            raise _NotSequential
        flags, method = struct.unpack("<HH", head[6:10])
        comp, _size, nlen, elen = struct.unpack("<IIHH", head[18:30])
        fname = head[LOCAL_HEAD:LOCAL_HEAD + nlen]
        if fname != (name + ".npy").encode() or flags & 0x08 or len(head) < LOCAL_HEAD + nlen + elen:
            raise _NotSequential
        if method != zipfile.ZIP_STORED:
            raise _compressed(path, name + ".npy")
        if comp == 0xFFFFFFFF:   # the zip64 extra field (id 1) holds the sizes: file size, then compressed size
            extra = head[LOCAL_HEAD + nlen:LOCAL_HEAD + nlen + elen]
            comp = None
            while len(extra) >= 4:
                hid, hlen = struct.unpack("<HH", extra[:4])
                if hid == 1 and hlen >= 16:
                    comp = struct.unpack("<Q", extra[12:20])[0]
                    break
                extra = extra[4 + hlen:]
            if comp is None:
                raise _NotSequential
        data_at = at + LOCAL_HEAD + nlen + elen
        out.append(npy.data_offset(fd, path, data_at, dt, sh, head[LOCAL_HEAD + nlen + elen:], pread=pread))
        at = data_at + comp
    return out


def _compressed(path: bytes, member: str) -> DataError:
    return DataError(f"{os.fsdecode(path)}: member {member} is compressed (np.savez_compressed): it has no byte "
                     f"range to pread; use --read-via library")


def _from_central_directory(fd: int, path: bytes, names, dtypes, shapes, pread=os.pread, storage=None) -> list[int]:
    try:
        src = open(fd, "rb", closefd=False) if storage is None or storage.paths \
            else io.BytesIO(storage.file_image(path))
        with src as fh, zipfile.ZipFile(fh) as zf:
            infos = [zf.getinfo(n + ".npy") for n in names]
    except (KeyError, zipfile.BadZipFile, OSError, ValueError) as e:
        raise DataError(f"{os.fsdecode(path)}: not a readable .npz archive ({e}); check the dataset with "
                        f"`dlbench verify`") from None
    out = []
    for info, dt, sh in zip(infos, dtypes, shapes):
        if info.compress_type != zipfile.ZIP_STORED:
            raise _compressed(path, info.filename)
        head = pread(fd, LOCAL_HEAD, info.header_offset)
        if len(head) != LOCAL_HEAD or head[:4] != b"PK\x03\x04":
            raise DataError(f"{os.fsdecode(path)}: no ZIP local header for {info.filename} at byte "
                            f"{info.header_offset}; check the dataset with `dlbench verify`")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        out.append(npy.data_offset(fd, path, info.header_offset + LOCAL_HEAD + name_len + extra_len, dt, sh,
                                   pread=pread))
    return out


class NpzFormat(FormatDriver):
    """The format driver of npz (sizes, rows and expected content shared with npy): this module's functions as its operations
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
