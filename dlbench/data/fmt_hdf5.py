"""Formats ``hdf5_per_sample``, ``hdf5_shared`` and ``hdf5_blocks``: one module for everything the HDF5
layouts do (issue 16's format registry; the three registry entries share this driver, which branches on
the layout only here).

Layouts. ``hdf5_per_sample``: one file per sample (``data-<i>.h5``), every array a dataset of the sample's
shape. ``hdf5_blocks``: ``samples_per_file`` samples per file (``block-<f>.h5``), datasets ``(k, *shape)``.
``hdf5_shared``: every sample in one file (``workload.shared_file``), datasets ``(N, *shape)``.

Writers. Every HDF5 file dlbench writes has contiguous, uncompressed datasets allocated at creation
(``H5D_ALLOC_TIME_EARLY``, never filled, no timestamps), so the bytes of sample s of array a sit at
``offset(a) + s * nbytes(a)`` and the file's bytes are a pure function of the shapes. ``create_hdf5``
writes such a skeleton (sparse: data regions are holes); ``H5Template`` reads its metadata bytes once so
the generator can write every further file of the same shape with plain ``os.pwrite`` (metadata
segments + data), without h5py per file and without parallel HDF5. The rows' content is
``content.fill_arrays`` (made one chunk ahead of the writes by a filler thread, ``_Filler``). The one file
of ``hdf5_shared`` is created by rank 0 and its sample range is cut into chunks of ≈ 32 MiB, chunk c
written by rank ``c % size`` (``write_dataset``), resumable through ``.dlbench-tmp/<name>.done``.

Readers (docs/architecture.md contract 2). Reads go through the HDF5 library (low-level h5py API, which
skips the high-level ``h5py.File``/``Dataset`` Python overhead but does the same library I/O):

- ``hdf5_per_sample``: open the file (H5Fopen), read each dataset with ``H5Dread`` straight into its slice
  of ``out`` (no temporary array), close the file, per sample: what a naive loader does.
- ``hdf5_shared``: the file and datasets stay open; row i of each array is read into ``out`` with one
  ``preadv`` at the dataset's byte offset (contiguous, unfiltered datasets, checked at open), or with one
  hyperslab ``H5Dread`` per array (``via="hdf5"``, ≈ 100 µs more per sample here).
  ``read_run_into(first, count, rows)`` reads consecutive samples as ONE request per array (aggregated
  chunked loading, surrogatetrain): a ``preadv`` scattered into the rows, or a (count, ...) hyperslab.
- ``hdf5_blocks``: as shared, with an LRU of open files (``max_open_files``).

Direct I/O. ``--cache direct`` opens the files read by offset with ``O_DIRECT`` and reads the 4 KiB-aligned
span around each request through a page-aligned bounce buffer (``dlbench.storage.pagecache.pread_direct``):
hdf5_shared/hdf5_blocks rows (row runs use the ``block`` mode). ``hdf5_per_sample`` cannot (libhdf5 opens and
reads each file itself; ``direct_unsupported``). HDF5 metadata (read by libhdf5 when a file is opened) stays
buffered. Readers are not thread-safe for concurrent calls on one reader; give each thread its own reader
(h5py serialises HDF5 calls with a global lock anyway).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import ConfigError, DataError
from ..storage import aligned_empty
from ..storage.backend import PosixBackend
from ..workload import Workload
from .format_base import FormatDriver
from .formats import SampleReader

IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)

# ---- HDF5 skeletons -----------------------------------------------------------------------------------

def create_hdf5(path: str | Path, workload: Workload, k: int | None) -> list[tuple[int, int]]:
    """Create an HDF5 file at ``path`` holding ``workload.arrays`` with k samples each (datasets
    (k, *shape)), or one sample (datasets of the sample's shape) when ``k`` is None. Data space is
    allocated but not written. Returns [(offset, nbytes)] of each array's data region."""
    import h5py

    regions = []
    with h5py.File(path, "w", libver="earliest") as f:
        for a in workload.arrays:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
            dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
            dcpl.set_obj_track_times(False)
            lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
            lcpl.set_create_intermediate_group(True)
            shape = tuple(a.shape) if k is None else (int(k), *a.shape)
            space = h5py.h5s.create_simple(shape)
            dsid = h5py.h5d.create(f.id, a.name.encode(), h5py.h5t.py_create(np.dtype(a.dtype)), space,
                                   dcpl=dcpl, lcpl=lcpl)
            regions.append((int(dsid.get_offset()), int(dsid.get_storage_size())))
    return regions


class H5Template:
    """The metadata bytes of an HDF5 skeleton and where its data regions are.

    ``segments``: [(offset, bytes)] covering [0, eof) minus the data regions; ``offsets[a]``: where array
    a's data begins; ``eof``: file size."""

    def __init__(self, path: str | Path, regions: list[tuple[int, int]]):
        self.eof = os.path.getsize(path)
        self.offsets = [off for off, _ in regions]
        spans = sorted(regions)
        self.segments: list[tuple[int, bytes]] = []
        with open(path, "rb") as fh:
            pos = 0
            for off, n in spans + [(self.eof, 0)]:
                if off > pos:
                    fh.seek(pos)
                    self.segments.append((pos, fh.read(off - pos)))
                pos = max(pos, off + n)
        if pos != self.eof:
            raise DataError(f"{path}: HDF5 skeleton does not end with its data ({pos} != {self.eof})")


class _ArraysMixin:
    def _init_arrays(self, workload: Workload) -> None:
        self._names = [a.name.encode() for a in workload.arrays]
        self._dtypes = [np.dtype(a.dtype) for a in workload.arrays]
        self._shapes = [tuple(a.shape) for a in workload.arrays]
        self._nbytes = [a.nbytes for a in workload.arrays]
        self._starts = list(np.cumsum([0] + self._nbytes[:-1]))
        self.max_row_nbytes = self.decoded_nbytes = int(sum(self._nbytes))

    # No cache of views: the executors pass a fresh row view ``rows[j]`` at every call, so a cache keyed by
    # the buffer object (``id(out)``) never hit and cost ~5 us per sample rebuilding views and churning the
    # dict (issue 12; benchmarks/reader_rows.py). Raw uint8 slices cost ~0.1 us per array and are all the
    # default pread path needs; typed views are built only for HDF5 reads, whose own cost dwarfs them.
    def _check_out(self, out: np.ndarray) -> None:
        if out.size < self.max_row_nbytes:
            raise ValueError(f"read_into: out holds {out.size} B, a row needs {self.max_row_nbytes}")

    def _views_of(self, out: np.ndarray) -> list[np.ndarray]:
        """Typed views of ``out`` (one per array, shaped like the sample's array)."""
        self._check_out(out)
        return [out[s:s + n].view(dt).reshape(sh)
                for s, n, dt, sh in zip(self._starts, self._nbytes, self._dtypes, self._shapes)]


def _fapl():
    import h5py

    # the library's default close degree, as h5py.File uses: a file we hold open can also be opened by
    # h5py in the same process (a different degree makes HDF5 refuse that second open)
    return h5py.h5p.create(h5py.h5p.FILE_ACCESS)


class PerSampleReader(_ArraysMixin, SampleReader):
    """hdf5_per_sample: open, read every array into ``out``, close, per sample.

    The per-sample path does the library's work and little else (issue 19: the bare low-level loop
    ``h5f.open`` + ``h5d.open(...).read`` + ``close`` is its reference): each array is read with ``H5Dread``
    straight into its byte slice of ``out`` with a memory type made once (h5py's ``read`` otherwise builds one
    per call with ``py_create``, ≈ 6 µs), no typed view per call (with ``H5S_ALL`` the library writes the
    dataset's bytes at the buffer's address; ``out``'s size is checked first), and the file is closed by
    releasing its identifier (``H5Idec_ref``: with the default close degree the file closes once its last
    object is released, here at once) rather than ``FileID.close()``, whose ``nonlocal_close`` scans every
    live h5py identifier of the process (≈ 25 µs here). On an error the file is closed explicitly."""

    def __init__(self, data_dir: Path, manifest, workload: Workload, counters=None, storage=None):
        import h5py

        storage = storage or PosixBackend(data_dir)
        self._h5f, self._h5d, self._h5s = h5py.h5f, h5py.h5d, h5py.h5s
        self._h5fopen = storage.h5f_opener()   # H5Fopen (POSIX), or the file image of a backend without paths
        self._init_arrays(workload)
        self._paths = storage.keys(manifest.paths)
        self._fapl = _fapl()
        self._mtypes = [h5py.h5t.py_create(dt) for dt in self._dtypes]
        self._one = len(self._names) == 1     # one array per sample: no loop over arrays
        self.counters = counters
        self._offsets: list[int] | None = None  # the datasets' byte offsets (every file is written from one template)

    def read_into(self, i: int, out: np.ndarray) -> int:
        if out.size < self.max_row_nbytes:
            self._check_out(out)
        path = self._paths[i]
        try:
            fid = self._h5fopen(path, self._h5f.ACC_RDONLY, self._fapl)
        except (OSError, KeyError) as e:
            raise hdf5_error(path, e, f"sample {i}") from None
        try:
            cnt = self.counters
            if cnt is not None:
                self._counted_read(cnt, i, fid, out)
            elif self._one:
                ALL = self._h5s.ALL
                self._h5d.open(fid, self._names[0]).read(ALL, ALL, out, self._mtypes[0])
            else:
                ALL, h5open = self._h5s.ALL, self._h5d.open
                for name, s, n, mt in zip(self._names, self._starts, self._nbytes, self._mtypes):
                    h5open(fid, name).read(ALL, ALL, out[s:s + n], mt)
        except BaseException as e:
            fid.close()
            if isinstance(e, (OSError, KeyError)):
                raise hdf5_error(path, e, f"sample {i}") from None
            raise
        del fid       # the file's last reference: H5Idec_ref closes it (class doc), without nonlocal_close
        return self.max_row_nbytes

    def _counted_read(self, cnt, i: int, fid, out: np.ndarray) -> None:
        """As the plain loop, counting: one POSIX open, per dataset an H5D open, an H5Dread and the POSIX
        read of its data at the dataset's offset (what HDF5 issues for contiguous data; its metadata reads
        are not counted)."""
        clock, h5open, ALL = perf_counter_ns, self._h5d.open, self._h5s.ALL
        offs = self._offsets
        if offs is None:  # every file is written from one template: the offsets of the first hold for all
            offs = self._offsets = [-1 if o is None else int(o)
                                    for o in (h5open(fid, name).get_offset() for name in self._names)]
        cnt.h5f_open()
        if self._one:
            n = self._nbytes[0]
            d = h5open(fid, self._names[0])
            t0 = clock()
            d.read(ALL, ALL, out, self._mtypes[0])
            cnt.h5d_open_read(i, offs[0], n, clock() - t0)
            return
        for name, s, n, off, mt in zip(self._names, self._starts, self._nbytes, offs, self._mtypes):
            d = h5open(fid, name)
            t0 = clock()
            d.read(ALL, ALL, out[s:s + n], mt)
            cnt.h5d_open_read(i, off, n, clock() - t0)


def hdf5_error(path: bytes | str, e: Exception, what: str) -> DataError:
    """A one-line DataError naming the file (h5py's messages do not: "truncated file: eof = ...")."""
    p = os.fsdecode(path)
    return DataError(f"{p}: cannot read {what}: {e}; the file is damaged or truncated (check the dataset with "
                     f"`dlbench verify --data-dir {os.path.dirname(p) or '.'}`)")


class _OpenFile:
    """An open HDF5 file with its datasets. ``via="pread"`` (default where every dataset is contiguous and
    unfiltered, as dlbench writes them): a row is read with one ``os.preadv`` per array at the dataset's
    byte offset, through a descriptor kept open beside the HDF5 handle: the same bytes HDF5 returns,
    without its ≈ 100 µs per-call selection cost. ``via="hdf5"``: one hyperslab ``H5Dread`` per array."""

    def __init__(self, path: bytes, names, shapes, nbytes, fapl, via: str, counters=None, file_no: int = 0,
                 direct=None, storage=None):
        import h5py

        self.path = path
        self.storage = storage
        self.preadv = storage.preadv      # the backend's read call (POSIX: the system call itself)
        try:
            self.fid = storage.h5f_opener()(path, h5py.h5f.ACC_RDONLY, fapl)
        except OSError as e:
            raise hdf5_error(path, e, "the file") from None
        try:
            self.ds = [h5py.h5d.open(self.fid, n) for n in names]
        except (OSError, KeyError) as e:
            self.fid.close()
            raise hdf5_error(path, e, "its datasets") from None
        self.nbytes = nbytes
        self.fd = -1
        self.counters, self.file_no = counters, file_no
        offs = [d.get_offset() for d in self.ds]
        self.offsets = [-1 if o is None else int(o) for o in offs]
        if via != "hdf5":
            plain = all(o is not None and d.get_create_plist().get_nfilters() == 0
                        and d.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
                        for o, d in zip(offs, self.ds))
            if plain and direct is not None:
                from ..storage.pagecache import open_direct

                self.fd = open_direct(path)
            elif plain:
                self.fd = storage.open_read(path, os.O_RDONLY)
            elif via == "pread":
                raise DataError(f"{os.fsdecode(path)}: datasets are not contiguous and unfiltered; "
                                "read them with via='hdf5'")
        if counters is not None:
            counters.h5f_open(2 if self.fd >= 0 else 1)
            counters.h5d_open(len(self.ds))
        self.fspaces = [d.get_space() for d in self.ds]
        self.mspaces = [h5py.h5s.create_simple((1, *sh)) for sh in shapes]
        self.counts = [(1, *sh) for sh in shapes]
        self.zeros = [(0,) * len(sh) for sh in shapes]
        self.dtypes = [d.dtype for d in self.ds]
        self.starts = list(np.cumsum([0] + list(nbytes[:-1])))
        # (file offset, offset in the row, bytes) per array, as Python ints (no NumPy scalars on the read path)
        self.parts = [(int(o), int(st), int(n)) for o, st, n in zip(self.offsets, self.starts, nbytes)]
        self._h5s = h5py.h5s
        self.direct = direct      # a pagecache.DirectBuffer: the fd is O_DIRECT (None: buffered)
        if direct is not None:
            if self.fd < 0:
                self.close()
                from ..errors import ConfigError

                raise ConfigError(f"--cache direct: {os.fsdecode(path)}'s datasets are not contiguous and unfiltered, "
                                  f"so they are read through libhdf5, which cannot use O_DIRECT here")
            self.read_row = self._read_row_direct  # type: ignore[method-assign]  # the buffered read_row stays free of any mode test

    def _read_row_direct(self, j: int, out: np.ndarray, reader) -> None:
        """``read_row`` through O_DIRECT (``pagecache.pread_direct``: aligned span, bounce buffer)."""
        from ..storage.pagecache import pread_direct

        cnt, fd, bounce, clock, f = self.counters, self.fd, self.direct, perf_counter_ns, self.file_no
        for off, s, n in self.parts:
            t0 = clock()
            got = pread_direct(fd, out[s:s + n], n, off + j * n, bounce)
            if cnt is not None:
                cnt.read(f, off + j * n, got, clock() - t0)
            if got != n:
                raise self._short(j)

    def read_row(self, j: int, out: np.ndarray, reader) -> None:
        """Row ``j`` of every array into ``out`` (laid out as ``reader``'s arrays, back to back); with
        ``counters``, each POSIX read (and H5Dread) is counted Darshan-style."""
        cnt = self.counters
        if self.fd >= 0:
            fd = self.fd
            parts = self.parts
            preadv = self.preadv
            if cnt is None:
                for off, s, n in parts:
                    if preadv(fd, [out[s:s + n]], off + j * n) != n:
                        raise self._short(j)
                return
            clock, f = perf_counter_ns, self.file_no
            for off, s, n in parts:
                t0 = clock()
                got = preadv(fd, [out[s:s + n]], off + j * n)
                cnt.read(f, off + j * n, got, clock() - t0)
                if got != n:
                    raise self._short(j)
            return
        views = [v.reshape((1, *v.shape)) for v in reader._views_of(out)]
        try:
            for k, (d, fs, ms, c, z, v) in enumerate(zip(self.ds, self.fspaces, self.mspaces, self.counts,
                                                         self.zeros, views)):
                fs.select_hyperslab((j, *z), c)
                if cnt is None:
                    d.read(ms, fs, v)
                    continue
                t0 = perf_counter_ns()
                d.read(ms, fs, v)
                dt = perf_counter_ns() - t0
                n = self.nbytes[k]
                cnt.h5d_read(n)
                if self.offsets[k] >= 0:
                    cnt.read(self.file_no, self.offsets[k] + j * n, n, dt)
                else:
                    cnt.copy_read(n, dt)
        except OSError as e:
            raise hdf5_error(self.path, e, f"row {j}") from None

    def _short(self, j: int) -> DataError:
        return DataError(f"{os.fsdecode(self.path)}: short read of row {j}: the file is truncated "
                         f"(check the dataset with `dlbench verify`)")

    def read_rows_scatter(self, j: int, count: int, iovs) -> int:
        """Rows j .. j+count-1 with ONE ``preadv`` per array, scattered straight into the rows' slices
        (``iovs[a]``: that array's memoryview in each destination row)."""
        got = 0
        cnt, clock = self.counters, perf_counter_ns
        for a, (off, n) in enumerate(zip(self.offsets, self.nbytes)):
            views = iovs[a]
            for lo in range(0, count, IOV_MAX):      # the kernel takes at most IOV_MAX buffers per call
                hi = min(count, lo + IOV_MAX)
                want = (hi - lo) * n
                t0 = clock()
                r = self.preadv(self.fd, views[lo:hi], off + (j + lo) * n)
                if cnt is not None:          # one POSIX read of the whole run (what Darshan would count)
                    cnt.read(self.file_no, off + (j + lo) * n, r, clock() - t0)
                if r != want:
                    raise DataError(f"{os.fsdecode(self.path)}: short read of rows {j}..{j + count - 1}: the file "
                                    f"is truncated")
                got += want
        return got

    def read_rows_block(self, j: int, count: int, scratch: list[np.ndarray], rows: np.ndarray, row0: int) -> int:
        """Rows j .. j+count-1: each array's run read as ONE request into a contiguous scratch block (one
        ``pread``, or one ``H5Dread`` of a (count, ...) hyperslab with ``via="hdf5"``), then copied into the
        destination rows (one NumPy copy per array)."""
        got = 0
        for a, n in enumerate(self.nbytes):
            blk = scratch[a][:count * n]
            cnt, t0 = self.counters, perf_counter_ns()
            if self.fd >= 0:
                if self.direct is not None:
                    from ..storage.pagecache import pread_direct

                    r = pread_direct(self.fd, blk, count * n, self.offsets[a] + j * n, self.direct)
                else:
                    r = self.preadv(self.fd, [blk], self.offsets[a] + j * n)
                if cnt is not None:
                    cnt.read(self.file_no, self.offsets[a] + j * n, r, perf_counter_ns() - t0)
                if r != count * n:
                    raise DataError(f"{os.fsdecode(self.path)}: short read of rows {j}..{j + count - 1}: the file "
                                    f"is truncated")
            else:
                d, fs = self.ds[a], self.fspaces[a]
                shape = self.counts[a][1:]
                fs.select_hyperslab((j, *self.zeros[a]), (count, *shape))
                ms = self._h5s.create_simple((count, *shape))
                d.read(ms, fs, blk.view(self.dtypes[a]).reshape((count, *shape)))
                if cnt is not None:
                    dt = perf_counter_ns() - t0
                    cnt.h5d_read(count * n)
                    if self.offsets[a] >= 0:
                        cnt.read(self.file_no, self.offsets[a] + j * n, count * n, dt)
                    else:
                        cnt.copy_read(count * n, dt)
            start = self.starts[a]
            rows[row0:row0 + count, start:start + n] = blk.reshape(count, n)
            got += count * n
        return got

    def close(self) -> None:
        if self.fd >= 0:
            self.storage.close(self.fd)
            self.fd = -1
        self.ds, self.fspaces, self.mspaces = [], [], []
        self.fid.close()


class BlockReader(_ArraysMixin, SampleReader):
    """hdf5_shared / hdf5_blocks: files and datasets stay open (an LRU of ``max_open_files``)."""

    def __init__(self, data_dir: Path, manifest, workload: Workload, max_open_files: int = 64,
                 via: str = "auto", counters=None, direct: bool = False, storage=None):
        if via not in ("auto", "pread", "hdf5"):
            raise ValueError(f"via={via!r}: choose auto, pread or hdf5")
        self._via = via
        self._direct = None
        if direct:
            from ..storage.pagecache import DirectBuffer

            self._direct = DirectBuffer()
        self.counters = counters
        self._storage = storage or PosixBackend(data_dir)
        self._init_arrays(workload)
        self._paths = self._storage.keys(manifest.paths)
        self._spf = int(manifest.count[0]) if workload.layout == "hdf5_blocks" else 0
        self._max_open = max(1, int(max_open_files))
        self._open: OrderedDict[int, _OpenFile] = OrderedDict()
        self._fapl = _fapl()
        self._layout = workload.layout
        self.supports_runs = workload.format.reads_runs
        self.run_mode = "scatter" if self._direct is None else "block"   # O_DIRECT: one aligned span per array
        self._scratch: list | None = None
        self._iov_cache: dict = {}
        if workload.layout == "hdf5_shared":
            self._shared = self._get(0)

    def _get(self, f: int) -> _OpenFile:
        h = self._open.get(f)
        if h is None:
            h = _OpenFile(self._paths[f], self._names, self._shapes, self._nbytes, self._fapl, self._via,
                          self.counters, f, self._direct, self._storage)
            self._open[f] = h
            if len(self._open) > self._max_open:
                self._open.popitem(last=False)[1].close()
        elif len(self._open) > 1:
            self._open.move_to_end(f)
        return h

    def read_into(self, i: int, out: np.ndarray) -> int:
        if out.size < self.max_row_nbytes:
            self._check_out(out)
        if self._spf:
            f, j = divmod(i, self._spf)
            self._get(f).read_row(j, out, self)
        else:
            self._shared.read_row(i, out, self)
        return self.max_row_nbytes

    def read_run_into(self, first: int, count: int, rows: np.ndarray, row0: int = 0) -> int:
        """Samples first .. first+count-1 (consecutive rows of the shared file) into ``rows[row0:row0+count]``
        as ONE request per array (aggregated chunked loading; ``supports_runs``). ``run_mode``: ``scatter``
        (default with byte offsets: one ``preadv`` per array straight into the rows, no copy) or ``block``
        (a contiguous read into a scratch block, then one copy; always with ``via="hdf5"``: one H5Dread of a
        (count, ...) hyperslab per array). Returns the bytes read."""
        if not self.supports_runs:
            raise DataError(f"layout {self._layout}: runs of samples are read one by one (one shared HDF5 "
                            f"file only)")
        h = self._shared
        if self.run_mode == "scatter" and h.fd >= 0:
            return h.read_rows_scatter(first, count, self._iovs_of(rows, row0, count))
        scratch = self._scratch
        if scratch is None or scratch[0].size < count * self._nbytes[0]:
            cap = max(count, 64)
            scratch = self._scratch = [aligned_empty(cap * n, np.uint8) for n in self._nbytes]
        return h.read_rows_block(first, count, scratch, rows, row0)

    def _iovs_of(self, rows: np.ndarray, row0: int, count: int):
        """Per array, the list of each row's memoryview slice (built once per destination buffer, so a run
        costs a list slice, not an object per sample)."""
        e = self._iov_cache.get(id(rows))
        lists = e[1] if e is not None and e[0] is rows else None
        if lists is None:
            lists = [[memoryview(rows[k, s:s + n]) for k in range(rows.shape[0])]  # type: ignore[arg-type]  # numpy declares __buffer__ for Python >= 3.12 only
                     for s, n in zip(self._starts, self._nbytes)]
            if len(self._iov_cache) > 64:
                self._iov_cache.clear()
            self._iov_cache[id(rows)] = (rows, lists)
        return [lst[row0:row0 + count] for lst in lists]

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()




# ---- the driver: planning (pure) ----------------------------------------------------------------------

def file_name(workload, f: int) -> str:
    """Relative path of file ``f`` (for hdf5_per_sample f is the sample index)."""
    if workload.layout == "hdf5_per_sample":
        return f"data-{f:08d}.h5"
    if workload.layout == "hdf5_blocks":
        return f"block-{f:06d}.h5"
    return workload.shared_file


def _template_key(workload, k: int) -> int | None:
    """The template of a file of k samples (None: a per-sample file, datasets of the sample's shape)."""
    return None if workload.layout == "hdf5_per_sample" else k


def plan_files(workload, seed: int, file_nbytes=None):
    """(paths, first, count, file bytes). ``file_nbytes(k)``: the size of an HDF5 file holding k samples
    (from the file template: ``file_nbytes_planner``)."""
    n = workload.samples
    if workload.layout == "hdf5_per_sample":
        first = np.arange(n, dtype=np.int64)
        count = np.ones(n, dtype=np.int64)
    elif workload.layout == "hdf5_blocks":
        k = workload.samples_per_file
        first = np.arange(0, n, k, dtype=np.int64)
        count = np.minimum(k, n - first)
    else:
        first = np.zeros(1, dtype=np.int64)
        count = np.full(1, n, dtype=np.int64)
    if file_nbytes is None:
        raise ValueError("plan_manifest: hdf5_file_nbytes is needed for HDF5 layouts")
    sizes = {int(k): int(file_nbytes(int(k))) for k in np.unique(count)}
    nbytes = np.asarray([sizes[int(c)] for c in count], dtype=np.int64)
    return [file_name(workload, f) for f in range(len(first))], first, count, nbytes


def manifest_row_nbytes(workload) -> int:
    """The manifest's ``row_nbytes``: every sample's stored bytes."""
    return int(workload.sample_nbytes)


def sample_nbytes(manifest) -> np.ndarray:
    return np.full(manifest.samples, manifest._row_nbytes, dtype=np.int64)


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    """Sample ``i``'s row: its arrays' bytes back to back (``content.fill_arrays``)."""
    out = np.empty(workload.sample_nbytes, dtype=np.uint8)
    fill_row(workload, seed, i, out)
    return out


def fill_row(workload, seed: int, i: int, out: np.ndarray) -> int:
    from .content import fill_arrays

    views, pos = [], 0
    for a in workload.arrays:
        views.append(out[pos:pos + a.nbytes])
        pos += a.nbytes
    fill_arrays(workload, seed, i, views)
    return pos


# ---- the driver: writing ------------------------------------------------------------------------------

def _template_path(tmp: Path, k: int | None) -> Path:
    return tmp / f"template-{'one' if k is None else k}.h5"


def file_nbytes_planner(workload, tmp: Path):
    """``file_nbytes(k)`` for ``plan_files``: writes the skeleton of a k-sample file into ``tmp`` (the
    writers copy its metadata bytes) and returns its size."""
    def file_nbytes(k: int) -> int:
        key = _template_key(workload, k)
        p = _template_path(tmp, key)
        create_hdf5(p, workload, key)
        return os.path.getsize(p)
    return file_nbytes


def _n_chunks(workload) -> tuple[int, int]:
    from . import generate

    per = max(1, generate.CHUNK_BYTES // max(1, workload.sample_nbytes))
    return per, -(-workload.samples // per)


def prepare(workload, data_dir: Path, m, storage) -> None:
    """Rank 0, before the manifest is written: hdf5_shared's skeleton (``<name>.part``, made by libhdf5 in
    ``.dlbench-tmp`` and moved into the backend) unless it can resume one (a finished file is kept only
    when its checksum is the one recorded at generation)."""
    if workload.layout != "hdf5_shared":
        return
    from .generate import TMP_DIR

    final, part = m.paths[0], m.paths[0] + ".part"
    done = data_dir / TMP_DIR / (m.paths[0] + ".done")
    _, nch = _n_chunks(workload)
    if storage.exists(final) and storage.size(final) == m.nbytes[0]:
        want = m.sum64[0] if m.sum64 else None
        if want is not None and storage.checksum(final) == want:
            return
        storage.remove(final)  # flipped bytes, or no checksum recorded: write it again
    if storage.exists(part) and storage.size(part) == m.nbytes[0] and done.is_file() and done.stat().st_size == nch:
        return  # resume: the chunks marked done are kept
    local = data_dir / TMP_DIR / "skeleton-shared.h5"
    create_hdf5(local, workload, workload.samples)
    storage.put(part, local)
    done.write_bytes(b"\0" * nch)


class _Filler:
    """Makes sample content one chunk ahead of the writes, in a background thread: the rank's chunks
    (first sample, count) are known up front, so while chunk k is written (``pwrite`` releases the GIL)
    chunk k+1 is filled (NumPy's copies release it too) into the other of two staging buffer sets."""

    def __init__(self, writer: _Writer, chunks: list[tuple[int, int]]):
        import queue
        import threading

        self.w, self.chunks = writer, chunks
        self.free: queue.Queue = queue.Queue()
        self.ready: queue.Queue = queue.Queue()
        for _ in range(2):
            self.free.put([aligned_empty(writer.per * n) for n in writer.nb])
        self.thread = threading.Thread(target=self._run, daemon=True, name="dlbench-generate-fill")
        self.thread.start()

    def _run(self) -> None:
        from .content import fill_arrays

        w = self.w
        try:
            for s0, b in self.chunks:
                bufs = self.free.get()
                if bufs is None:
                    return
                for k in range(b):
                    fill_arrays(w.w, w.seed, s0 + k, [st[k * n:(k + 1) * n] for st, n in zip(bufs, w.nb)])
                self.ready.put((s0, b, bufs))
        except BaseException as e:  # handed to the writer, which re-raises it
            self.ready.put((None, None, e))

    def get(self, s0: int, b: int) -> list:
        got0, got_b, bufs = self.ready.get()
        if got0 is None:
            raise bufs
        if (got0, got_b) != (s0, b):  # pragma: no cover - the chunk list and the writes disagree
            raise RuntimeError(f"generate: filled chunk {(got0, got_b)} but writing {(s0, b)}")
        return bufs

    def release(self, bufs: list) -> None:
        self.free.put(bufs)

    def close(self) -> None:
        self.free.put(None)
        self.free.put(None)
        self.thread.join()


class _Writer:
    """This rank's HDF5 file writer (``writer``): the templates' metadata segments, then the rows made by
    the filler thread, with ``os.pwrite`` at the datasets' offsets."""

    def __init__(self, workload, seed: int, data_dir: Path, m, files):
        self.w, self.seed, self.d, self.m = workload, seed, data_dir, m
        self.templates: dict = {}
        self.per, _ = _n_chunks(workload)
        self.nb = [a.nbytes for a in workload.arrays]
        self.filler: _Filler | None = None
        if files:
            self.filler = _Filler(self, [ch for f in files for ch in self.chunks(int(m.first[f]), int(m.count[f]))])

    def chunks(self, first: int, count: int) -> list[tuple[int, int]]:
        return [(s0, min(self.per, first + count - s0)) for s0 in range(first, first + count, self.per)]

    def template(self, k: int | None) -> H5Template:
        t = self.templates.get(k)
        if t is None:
            from .generate import TMP_DIR

            p = _template_path(self.d / TMP_DIR, k)
            t = self.templates[k] = H5Template(p, self._regions(p))
        return t

    def _regions(self, p: Path) -> list[tuple[int, int]]:
        import h5py

        with h5py.File(p, "r") as f:
            return [(int(f[a.name].id.get_offset()), int(f[a.name].id.get_storage_size()))
                    for a in self.w.arrays]

    def write_samples(self, fd: int, tpl: H5Template, first: int, count: int, base: int) -> int:
        """Samples first..first+count-1, stored at row ``first - base`` of each dataset."""
        from .generate import write_all

        assert self.filler is not None, "a writer made with the files it writes"
        written = 0
        for s0, b in self.chunks(first, count):
            bufs = self.filler.get(s0, b)
            try:
                for off, st, n in zip(tpl.offsets, bufs, self.nb):
                    written += write_all(fd, st[:b * n], off + (s0 - base) * n)
            finally:
                self.filler.release(bufs)
        return written

    def write_file(self, fd: int, f: int) -> int:
        """File ``f`` (not shared) into the open, empty ``fd``: the template's metadata, then the rows."""
        from .generate import write_all

        tpl = self.template(_template_key(self.w, int(self.m.count[f])))
        n = 0
        for off, seg in tpl.segments:
            n += write_all(fd, np.frombuffer(seg, dtype=np.uint8), off)
        return n + self.write_samples(fd, tpl, int(self.m.first[f]), int(self.m.count[f]), int(self.m.first[f]))

    def close(self) -> None:
        if self.filler is not None:
            self.filler.close()


def writer(workload, seed: int, data_dir: Path, m, files: list[int]) -> _Writer:
    """The file writer of this rank; ``files``: the files it will write (the filler thread's chunks)."""
    return _Writer(workload, seed, data_dir, m, files)


def write_dataset(gen, m, comm, prog) -> bool:
    """hdf5_shared: this rank's chunks of the one shared file (True); other layouts: False (file by file).
    ``gen``: generate's per-rank writer (``w``, ``seed``, ``d``, ``fsync``), ``prog``: its progress counters."""
    w, d, st = gen.w, gen.d, gen.storage
    if w.layout != "hdf5_shared":
        return False
    from .generate import TMP_DIR

    rel = m.paths[0]
    if st.exists(rel) and st.size(rel) == m.nbytes[0]:  # its checksum was checked in prepare
        prog.skipped_files, prog.skipped_bytes = (1 if comm.rank == 0 else 0), (int(m.nbytes[0]) if comm.rank == 0 else 0)
        return True
    per, nch = _n_chunks(w)
    done_path = d / TMP_DIR / (rel + ".done")
    done = np.frombuffer(done_path.read_bytes(), dtype=np.uint8)
    hw = _Writer(w, gen.seed, d, m, [])
    tpl = hw.template(w.samples)   # the skeleton's template (file_nbytes_planner wrote it for the N-sample file)
    todo = [c for c in range(comm.rank, nch, comm.size) if not done[c]]
    hw.filler = _Filler(hw, [ch for c in todo for ch in hw.chunks(c * per, min(per, w.samples - c * per))])
    fd = st.open(rel + ".part", write=True, truncate=False)
    dfd = os.open(done_path, os.O_WRONLY)
    try:
        for c in range(comm.rank, nch, comm.size):
            first = c * per
            count = min(per, w.samples - first)
            if done[c]:
                prog.skipped_bytes += count * w.sample_nbytes
            else:
                prog.bytes += hw.write_samples(fd, tpl, first, count, 0)
                os.pwrite(dfd, b"\1", c)
            prog.flush()
        if gen.fsync and isinstance(fd, int):
            os.fsync(fd)
    finally:
        st.close(fd)
        os.close(dfd)
        hw.close()
    if comm.rank == 0:  # the skeleton's metadata, written by rank 0 in prepare
        prog.files = 1
        prog.bytes += int(m.nbytes[0]) - w.samples * w.sample_nbytes
    return True


def finish(data_dir: Path, m, sums: dict, storage) -> None:
    """Rank 0 at the end: hdf5_shared's ``.part`` takes its final name and its checksum is recorded."""
    if m.layout != "hdf5_shared":
        return
    part = m.paths[0] + ".part"
    if storage.exists(part):
        storage.rename(part, m.paths[0])
    if 0 not in sums:
        sums[0] = storage.checksum(m.paths[0])


# ---- the driver: verify -------------------------------------------------------------------------------

def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
               storage=None) -> list[str]:
    """Structure: the file opens and holds every array with the expected shape ((count, *shape), or the
    sample's shape for hdf5_per_sample) and dtype. ``image``: the file's bytes (a storage backend's file;
    ``path`` then only names it)."""
    import io

    import h5py

    count = int(m.count[f])
    out = []
    try:
        with h5py.File(path if image is None else io.BytesIO(image), "r") as fh:
            for a in workload.arrays:
                want = tuple(a.shape) if workload.layout == "hdf5_per_sample" else (count, *a.shape)
                if a.name not in fh:
                    out.append(f"{path}: dataset {a.name} missing")
                    continue
                ds = fh[a.name]
                if ds.shape != want or ds.dtype != np.dtype(a.dtype):
                    out.append(f"{path}: dataset {a.name} is {ds.shape} {ds.dtype}, expected {want} {a.dtype}")
    except (OSError, KeyError, ValueError) as e:
        out.append(f"{path}: not a readable HDF5 file ({' '.join(str(e).split())[:120]})")
    return out


# ---- the driver: readers ------------------------------------------------------------------------------

def direct_unsupported(layout: str) -> str:
    """Why ``--cache direct`` cannot read ``layout`` with O_DIRECT ("" when it can)."""
    if layout != "hdf5_per_sample":
        return ""
    try:
        import h5py

        has_direct = bool(getattr(h5py.get_config(), "direct_vfd", False))
    except ImportError:  # pragma: no cover - h5py is a core dependency
        has_direct = False
    return ("--cache direct: layout hdf5_per_sample is read by libhdf5, which opens and reads every "
            "per-sample file itself (sec2 driver); h5py here has no direct VFD "
            f"(h5py.get_config().direct_vfd={has_direct}, and dlbench does not use it): these reads stay "
            "buffered, with the dataset evicted from the page cache before every epoch (as --cache drop)")


def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None) -> SampleReader:
    """``via`` (--read-via): ``auto``/``pread`` read hdf5_shared/hdf5_blocks rows at the datasets' byte
    offsets, ``library`` (or ``hdf5``) through H5Dread hyperslabs; hdf5_per_sample is always read by libhdf5
    (``pread`` is refused). ``direct``: O_DIRECT reads (a ConfigError for hdf5_per_sample and libhdf5 reads)."""
    per_sample = workload.layout == "hdf5_per_sample"
    if via == "library" or (via == "pread" and per_sample):   # --read-via
        if via == "pread":
            raise ConfigError(f"--read-via={via}: layout {workload.layout} is read through libhdf5; use auto")
        via = "hdf5"   # the HDF5 library's own read (H5Dread)
    if direct:
        why = direct_unsupported(workload.layout)
        if why or via == "hdf5":
            raise ConfigError(why or "--cache direct: via='hdf5' reads through libhdf5, which cannot use O_DIRECT")
    if per_sample:
        return PerSampleReader(d, manifest, workload, counters, storage=storage)
    return BlockReader(d, manifest, workload, max_open_files=max_open_files, via=via, counters=counters,
                       direct=direct, storage=storage)


class Hdf5Format(FormatDriver):
    """The format driver of the HDF5 layouts (hdf5_per_sample, hdf5_shared, hdf5_blocks): this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    STORAGE = True   # the readers read through a storage backend (open_reader's ``storage``)

    check_file = staticmethod(check_file)
    direct_unsupported = staticmethod(direct_unsupported)
    expected_row = staticmethod(expected_row)
    file_nbytes_planner = staticmethod(file_nbytes_planner)
    fill_row = staticmethod(fill_row)
    finish = staticmethod(finish)
    manifest_row_nbytes = staticmethod(manifest_row_nbytes)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    prepare = staticmethod(prepare)
    sample_nbytes = staticmethod(sample_nbytes)
    write_dataset = staticmethod(write_dataset)
    writer = staticmethod(writer)
