"""Storage backends of the shared tier: the calls under the readers and the generator (DLIO's ``DataStorage``,
IOR's ``aiori``, fio's ioengines).

A backend names files by their path relative to the dataset root and offers

- ``open(rel, write=False, truncate=True) -> handle`` / ``close(handle)``; ``write=True`` creates (and
  truncates, unless ``truncate=False``);
- ``pread_into(handle, buf, offset) -> bytes read`` (into a writable buffer, as ``os.preadv``);
- ``pwrite(handle, buf, offset) -> bytes written``;
- ``size(rel)``, ``exists(rel)``, ``list(prefix="") -> sorted relative paths``, ``remove(rel)``,
  ``rename(src, dst)`` (atomic replace: the generator's ``.part`` files), ``mkdir(rel)``, ``put(rel, local)``
  (move a file made on the local disk in: libhdf5's skeletons), ``free_bytes()``, ``checksum(rel)``
  (``storage.checksum.file_checksum``'s sum64);
- ``file_image(rel) -> bytes``: the whole file (for libraries that read a file themselves: an HDF5 file
  image, ``h5py.File(io.BytesIO(...))``, where libhdf5 would otherwise need a path).

The readers' calls (bound once when a reader opens, so the per-sample path calls them directly):
``keys(rels)`` (a key per file: POSIX the absolute path as bytes, memory the relative path),
``open_read(key, flags) -> handle`` (flags: ``os.O_RDONLY``; POSIX: ``os.open`` itself), ``preadv(handle, buffers, offset) -> bytes read`` (vectored, as ``os.preadv``),
``pread(handle, n, offset) -> bytes`` (headers: ``os.pread``),
``close(handle)``, ``h5f_opener() -> open(key, flags, fapl)`` (libhdf5's H5Fopen, or the file image opened
with ``H5LTopen_file_image`` for a backend without paths), ``direct`` (O_DIRECT possible), ``paths`` (keys are
file system paths a library may open itself) and ``name``.

``PosixBackend(root)``: today's behaviour. A handle is the kernel file descriptor and ``pread_into`` is one
call of the module's read call (``dlbench.storage.preadv``: ``os.preadv``, or lseek + readv under
``DLBENCH_READ_CALL=readv``); a reader that keeps the descriptor can call ``preadv`` itself, as the readers
do today (``benchmarks/storage_backend.py`` measures the backend's call against a bare ``os.preadv`` loop).

``MemoryBackend()``: an in-memory fake (IOR's DUMMY, fio's null engine with bytes) for the tool's own tests:
files are ``bytearray`` objects in a dict, reads copy with one memoryview slice. ``MemoryBackend.from_dir``
loads a dataset written on disk. It serves every format's bytes; libhdf5 reads it through a file image
(``file_image``), never through a path.

``ThrottledBackend(inner, model)``: the emulated PFS (``dlbench.storage.throttle``) as a wrapper around any
backend: every ``pread_into``/``preadv`` goes through a ``Throttle`` (γ counted across processes, the modelled
time waited), the other calls pass through. Reads libhdf5 makes itself (hdf5_per_sample's H5Dread, metadata)
are not the backend's preadv and are not throttled by it; ``throttle.ThrottledReader`` (around a whole
``read_into``) throttles those.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from . import preadv as _preadv
from .checksum import file_checksum, sum64


class Backend(Protocol):
    def open(self, rel: str, write: bool = False): ...
    def close(self, handle) -> None: ...
    def pread_into(self, handle, buf, offset: int) -> int: ...
    def pwrite(self, handle, buf, offset: int) -> int: ...
    def size(self, rel: str) -> int: ...
    def exists(self, rel: str) -> bool: ...
    def list(self, prefix: str = "") -> list[str]: ...
    def remove(self, rel: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def file_image(self, rel: str) -> bytes: ...


def _check_rel(rel: str) -> str:
    if rel.startswith("/") or (".." in rel and ".." in Path(rel).parts):
        raise ValueError(f"storage path {rel!r}: must be relative to the dataset root, without '..'")
    return rel


class PosixBackend:
    """Files under ``root`` through the POSIX calls (module docstring)."""

    name = "posix"
    direct = True
    paths = True    # keys are file system paths (libraries may open them: np.load, zipfile)

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._prefix = os.path.join(str(self.root), "")     # "root/": a key's path as one string join
        self.pread_into = _preadv_into
        # the readers' calls are the system calls themselves: no wrapper on the per-sample path
        self.open_read = os.open
        self.preadv = _preadv
        self.pread = os.pread
        self.close = os.close

    def keys(self, rels) -> list[bytes]:
        # one string join per file (a pathlib join was 2 µs a file: 2 s per reader opened on a million files)
        prefix, root = self._prefix, self.root
        return [os.fsencode(prefix + r if type(r) is str and r and not r.startswith("/") else str(root / r))
                for r in rels]

    @staticmethod
    def h5f_opener():
        import h5py

        return h5py.h5f.open

    def path(self, rel: str) -> Path:
        return self.root / _check_rel(rel)

    def _str(self, rel: str) -> str:
        """``path`` as a string (the per-file calls of generate and verify: no Path object each)."""
        return self._prefix + _check_rel(rel)

    def open(self, rel: str, write: bool = False, truncate: bool = True) -> int:
        flags = (os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0)) if write else os.O_RDONLY
        return os.open(self._str(rel), flags, 0o644)

    def mkdir(self, rel: str) -> None:
        self.path(rel).mkdir(parents=True, exist_ok=True)

    def put(self, rel: str, local: str | Path) -> None:
        os.replace(local, self.path(rel))

    def free_bytes(self) -> int:
        import shutil

        return shutil.disk_usage(self.root).free

    def checksum(self, rel: str, buf: bytearray | None = None) -> int:
        return file_checksum(self._str(rel), buf)

    def pwrite(self, handle: int, buf, offset: int) -> int:
        return os.pwrite(handle, buf, offset)

    def size(self, rel: str) -> int:
        return os.stat(self._str(rel)).st_size

    def exists(self, rel: str) -> bool:
        return self.path(rel).is_file()

    def list(self, prefix: str = "") -> list[str]:
        out = []
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                rel = os.path.relpath(os.path.join(dirpath, f), self.root)
                if rel.startswith(prefix):
                    out.append(rel)
        return sorted(out)

    def remove(self, rel: str) -> None:
        self.path(rel).unlink(missing_ok=True)

    def rename(self, src: str, dst: str) -> None:
        os.replace(self._str(src), self._str(dst))

    def file_image(self, rel: str) -> bytes:
        return self.path(rel).read_bytes()


def _preadv_into(fd: int, buf, offset: int) -> int:
    return _preadv(fd, [buf], offset)


class _MemFile:
    __slots__ = ("data", "rel")

    def __init__(self, rel: str, data: bytearray):
        self.rel, self.data = rel, data

    def pwrite(self, buf, offset: int) -> int:
        mv = memoryview(buf).cast("B")
        data = self.data
        end = offset + len(mv)
        if end > len(data):
            data.extend(bytes(end - len(data)))   # a hole reads as zeros, as a sparse POSIX file
        data[offset:end] = mv
        return len(mv)


class MemoryBackend:
    """Files as ``bytearray`` objects in a dict (module docstring). Readers' handles are small integers
    (an index into the table of open files), as descriptors are."""

    name = "memory"
    direct = False
    paths = False

    def __init__(self):
        self.files: dict[str, bytearray] = {}
        self._handles: dict[int, bytearray] = {}
        self._next = 0

    def keys(self, rels) -> list[str]:
        return [_check_rel(str(r)) for r in rels]

    def open_read(self, key: str, flags: int = os.O_RDONLY) -> int:
        try:
            data = self.files[key]
        except KeyError:
            raise FileNotFoundError(2, "No such file (memory backend)", key) from None
        h = self._next
        self._next += 1
        self._handles[h] = data
        return h

    def preadv(self, handle: int, buffers, offset: int) -> int:
        src = memoryview(self._handles[handle])
        got = 0
        for b in buffers:
            mv = memoryview(b).cast("B")
            n = max(0, min(len(mv), len(src) - offset - got))
            if n:
                mv[:n] = src[offset + got:offset + got + n]
            got += n
            if n < len(mv):
                break
        return got

    def pread(self, handle: int, n: int, offset: int) -> bytes:
        """Up to ``n`` bytes at ``offset`` (``os.pread``)."""
        return bytes(self._handles[handle][offset:offset + n])

    def h5f_opener(self):
        """libhdf5 opens the file's bytes as a file image (no path)."""
        import h5py

        def open_image(key: str, flags, fapl=None):
            try:
                return h5py.h5f.open_file_image(self.file_image(key))
            except FileNotFoundError:
                raise OSError(2, f"unable to open file (memory backend: no file {key})") from None
        return open_image

    @classmethod
    def from_dir(cls, root: str | Path) -> MemoryBackend:
        """Every regular file under ``root`` (a dataset written by ``dlbench generate``), loaded."""
        mem = cls()
        src = PosixBackend(root)
        for rel in src.list():
            mem.files[rel] = bytearray(src.file_image(rel))
        return mem

    def open(self, rel: str, write: bool = False, truncate: bool = True) -> _MemFile:
        rel = _check_rel(rel)
        if write and (truncate or rel not in self.files):
            self.files[rel] = bytearray()
        elif rel not in self.files:
            raise FileNotFoundError(2, "No such file (memory backend)", rel)
        return _MemFile(rel, self.files[rel])

    def close(self, handle) -> None:
        if isinstance(handle, int):
            self._handles.pop(handle, None)

    def pread_into(self, handle: _MemFile, buf, offset: int) -> int:
        src = handle.data
        n = max(0, min(len(buf), len(src) - offset))
        if n:
            memoryview(buf).cast("B")[:n] = memoryview(src)[offset:offset + n]
        return n

    def pwrite(self, handle: _MemFile, buf, offset: int) -> int:
        return handle.pwrite(buf, offset)

    def mkdir(self, rel: str) -> None:
        pass   # folders are implied by the files' names

    def put(self, rel: str, local: str | Path) -> None:
        p = Path(local)
        self.files[_check_rel(rel)] = bytearray(p.read_bytes())
        p.unlink()

    def free_bytes(self) -> int:
        return 1 << 62   # bounded by the process's memory only

    def checksum(self, rel: str, buf: bytearray | None = None) -> int:
        return sum64(self.files[rel])

    def size(self, rel: str) -> int:
        try:
            return len(self.files[rel])
        except KeyError:
            raise FileNotFoundError(2, "No such file (memory backend)", rel) from None

    def exists(self, rel: str) -> bool:
        return rel in self.files

    def list(self, prefix: str = "") -> list[str]:
        return sorted(r for r in self.files if r.startswith(prefix))

    def remove(self, rel: str) -> None:
        self.files.pop(rel, None)

    def rename(self, src: str, dst: str) -> None:
        try:
            self.files[_check_rel(dst)] = self.files.pop(src)
        except KeyError:
            raise FileNotFoundError(2, "No such file (memory backend)", src) from None

    def file_image(self, rel: str) -> bytes:
        try:
            return bytes(self.files[rel])
        except KeyError:
            raise FileNotFoundError(2, "No such file (memory backend)", rel) from None


class ThrottledBackend:
    """``inner``'s reads held to the emulated PFS's modelled time (``throttle.Throttle``); everything else
    passes through. ``stats()``: the throttle's counts."""

    def __init__(self, inner, model=None, *, throttle=None, key: str | None = None):
        from .throttle import Throttle

        if throttle is None:
            if model is None:
                raise ValueError("ThrottledBackend: a PfsModel or a Throttle is needed")
            throttle = Throttle(model, key=key)
        self.inner, self.throttle = inner, throttle
        self.name = f"throttled({getattr(inner, 'name', type(inner).__name__)})"
        self.direct = False   # the throttled reads are the wrapper's buffered calls
        self._read, self._inner_read, self._inner_preadv = throttle.read, inner.pread_into, inner.preadv

    def pread_into(self, handle, buf, offset: int) -> int:
        return self._read(self._inner_read, handle, buf, offset)

    def preadv(self, handle, buffers, offset: int) -> int:
        return self._read(self._inner_preadv, handle, buffers, offset)

    def __getattr__(self, name):   # keys, open, open_read, close, pwrite, size, list, remove, rename, file_image
        return getattr(self.inner, name)

    def stats(self) -> dict:
        return self.throttle.stats()

    def close_backend(self) -> None:
        self.throttle.close()


def read_file(backend, rel: str, buf) -> int:
    """The whole file ``rel`` into ``buf`` (open, one read, close): a one-sample-per-file read."""
    h = backend.open(rel)
    try:
        return backend.pread_into(h, buf, 0)
    finally:
        backend.close(h)
