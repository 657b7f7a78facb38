"""File formats: HDF5 file skeletons for the writer, and the sample readers of the run loop.

Writers. Every HDF5 file dlbench writes has contiguous, uncompressed datasets allocated at creation
(``H5D_ALLOC_TIME_EARLY``, never filled, no timestamps), so the bytes of sample s of array a sit at
``offset(a) + s * nbytes(a)`` and the file's bytes are a pure function of the shapes. ``create_hdf5``
writes such a skeleton (sparse: data regions are holes); ``H5Template`` reads its metadata bytes once so
the generator can write every further file of the same shape with plain ``os.pwrite`` (metadata
segments + data), without h5py per file and without parallel HDF5.

Readers (docs/architecture.md contract 2). ``open_reader(data_dir, manifest, workload)`` returns a ``SampleReader`` whose
``read_into(i, out)`` writes sample i's row into ``out[:nbytes]`` (uint8, ideally page-aligned: see
``aligned_empty``) and returns nbytes. Reads go through the HDF5 library (low-level h5py API, which skips
the high-level ``h5py.File``/``Dataset`` Python overhead but does the same library I/O):

- ``hdf5_per_sample``: open the file (H5Fopen), read each dataset with ``H5Dread`` straight into its slice
  of ``out`` (no temporary array), close the file, per sample: what a naive loader does.
- ``hdf5_shared``: the file and datasets stay open; row i of each array is read into ``out`` with one
  ``preadv`` at the dataset's byte offset (contiguous, unfiltered datasets, checked at open), or with one
  hyperslab ``H5Dread`` per array (``via="hdf5"``, ≈ 100 µs more per sample here).
  ``read_run_into(first, count, rows)`` reads consecutive samples as ONE request per array (aggregated
  chunked loading, surrogatetrain): a ``preadv`` scattered into the rows, or a (count, ...) hyperslab.
- ``hdf5_blocks``: as shared, with an LRU of open files (``max_open_files``).
- ``jpeg_folders``: ``os.open`` + ``os.preadv`` of the file into ``out`` + close; ``decode_into`` decodes
  with Pillow and resizes (bilinear) to ``jpeg.decoded_shape``.
- ``MemoryReader(workload, seed, n)``: an in-memory fake with the same interface whose rows are
  ``content.expected_row`` (tests, CONVENTIONS 12).

Counters. ``open_reader(..., counters=CounterSet)`` gives the reader an ``IOCounters`` of class
``shared`` (``dlbench.storage.counters``): every open and read call is counted the Darshan way (file
number = the manifest's file index). Without it (the default) the read loops are the uncounted ones.

Direct I/O. ``open_reader(..., direct=True)`` (``dlbench run --cache direct``) opens the files read by offset
with ``O_DIRECT`` and reads the 4 KiB-aligned span around each request through a page-aligned bounce buffer
(``dlbench.storage.pagecache.pread_direct``): hdf5_shared/hdf5_blocks rows (row runs use the ``block`` mode)
and jpeg_folders files. ``hdf5_per_sample`` cannot (libhdf5 opens and reads each file itself; see
``pagecache.direct_support``): asking for it is a ConfigError, the runner falls back to buffered reads with
eviction before every epoch and says so. HDF5 metadata (read by libhdf5 when a file is opened) stays buffered.

Readers are not thread-safe for concurrent calls on one reader except the JPEG reader; give each thread
its own reader (h5py serialises HDF5 calls with a global lock anyway).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from ..errors import DataError
from ..storage import PAGE, aligned_empty, preadv  # noqa: F401  (re-exported for readers and generate)
from ..workload import Workload

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


# ---- readers ------------------------------------------------------------------------------------------

class SampleReader:
    """Base of the readers: ``read_into``, ``max_row_nbytes``, ``close``; usable as a context manager."""

    max_row_nbytes: int = 0
    decoded_nbytes: int = 0
    supports_runs: bool = False     # read_run_into: consecutive samples as one request (hdf5_shared)

    def read_into(self, i: int, out: np.ndarray) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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

    def __init__(self, data_dir: Path, manifest, workload: Workload, counters=None):
        import h5py

        self._h5f, self._h5d, self._h5s = h5py.h5f, h5py.h5d, h5py.h5s
        self._init_arrays(workload)
        self._paths = [os.fsencode(str(data_dir / p)) for p in manifest.paths]
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
            fid = self._h5f.open(path, self._h5f.ACC_RDONLY, self._fapl)
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
                 direct=None):
        import h5py

        self.path = path
        try:
            self.fid = h5py.h5f.open(path, h5py.h5f.ACC_RDONLY, fapl)
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
                self.fd = os.open(path, os.O_RDONLY)
            elif via == "pread":
                raise DataError(f"{path.decode()}: datasets are not contiguous and unfiltered; "
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

                raise ConfigError(f"--cache direct: {path.decode()}'s datasets are not contiguous and unfiltered, "
                                  f"so they are read through libhdf5, which cannot use O_DIRECT here")
            self.read_row = self._read_row_direct   # the buffered read_row stays free of any mode test

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
                r = preadv(self.fd, views[lo:hi], off + (j + lo) * n)
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
                    r = preadv(self.fd, [blk], self.offsets[a] + j * n)
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
            os.close(self.fd)
            self.fd = -1
        self.ds, self.fspaces, self.mspaces = [], [], []
        self.fid.close()


class BlockReader(_ArraysMixin, SampleReader):
    """hdf5_shared / hdf5_blocks: files and datasets stay open (an LRU of ``max_open_files``)."""

    def __init__(self, data_dir: Path, manifest, workload: Workload, max_open_files: int = 64,
                 via: str = "auto", counters=None, direct: bool = False):
        if via not in ("auto", "pread", "hdf5"):
            raise ValueError(f"via={via!r}: choose auto, pread or hdf5")
        self._via = via
        self._direct = None
        if direct:
            from ..storage.pagecache import DirectBuffer

            self._direct = DirectBuffer()
        self.counters = counters
        self._init_arrays(workload)
        self._paths = [os.fsencode(str(data_dir / p)) for p in manifest.paths]
        self._spf = int(manifest.count[0]) if workload.layout == "hdf5_blocks" else 0
        self._max_open = max(1, int(max_open_files))
        self._open: OrderedDict[int, _OpenFile] = OrderedDict()
        self._fapl = _fapl()
        self._layout = workload.layout
        self.supports_runs = workload.layout == "hdf5_shared"
        self.run_mode = "scatter" if self._direct is None else "block"   # O_DIRECT: one aligned span per array
        self._scratch: list | None = None
        self._iov_cache: dict = {}
        if workload.layout == "hdf5_shared":
            self._shared = self._get(0)

    def _get(self, f: int) -> _OpenFile:
        h = self._open.get(f)
        if h is None:
            h = _OpenFile(self._paths[f], self._names, self._shapes, self._nbytes, self._fapl, self._via,
                          self.counters, f, self._direct)
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
            lists = [[memoryview(rows[k, s:s + n]) for k in range(rows.shape[0])]
                     for s, n in zip(self._starts, self._nbytes)]
            if len(self._iov_cache) > 64:
                self._iov_cache.clear()
            self._iov_cache[id(rows)] = (rows, lists)
        return [lst[row0:row0 + count] for lst in lists]

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()


class JpegReader(SampleReader):
    """jpeg_folders: the file's bytes with one ``preadv``; ``decode_into`` for the decoded sample."""

    def __init__(self, data_dir: Path, manifest, workload: Workload, counters=None, direct: bool = False):
        self._paths = [os.fsencode(str(data_dir / p)) for p in manifest.paths]
        self._sizes = manifest.nbytes
        self.counters = counters
        self.max_row_nbytes = int(self._sizes.max()) if len(self._sizes) else 0
        self.decoded_shape = tuple(workload.jpeg.decoded_shape)  # type: ignore[union-attr]
        self.decoded_nbytes = int(np.prod(self.decoded_shape))
        if direct:
            from ..storage.pagecache import DirectBuffer

            self._bounce = DirectBuffer(self.max_row_nbytes)
            self.read_into = self._read_into_direct   # the buffered read_into stays free of any mode test

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
            raise DataError(f"{self._paths[i].decode()}: read {got} B, the manifest says {n} B")
        return n

    def read_into(self, i: int, out: np.ndarray) -> int:
        n = int(self._sizes[i])
        fd = os.open(self._paths[i], os.O_RDONLY)
        try:
            cnt = self.counters
            if cnt is None:
                got = preadv(fd, [out[:n]], 0)
            else:
                t0 = perf_counter_ns()
                got = preadv(fd, [out[:n]], 0)
                cnt.open_read(i, 0, got, perf_counter_ns() - t0)
        finally:
            os.close(fd)
        if got != n:
            raise DataError(f"{self._paths[i].decode()}: read {got} B, the manifest says {n} B")
        return n

    def decode_into(self, raw: np.ndarray, nbytes: int, out: np.ndarray) -> None:
        decode_jpeg_into(raw, nbytes, out, self.decoded_shape)


def decode_jpeg_into(raw: np.ndarray, nbytes: int, out: np.ndarray, decoded_shape) -> None:
    """Decode a JPEG (``raw[:nbytes]``) with Pillow, convert to RGB, resize (bilinear) to
    ``decoded_shape`` (H, W, C) and write it into ``out`` (uint8, at least H*W*C bytes)."""
    import io

    from PIL import Image

    h, w = int(decoded_shape[0]), int(decoded_shape[1])
    with Image.open(io.BytesIO(memoryview(raw)[:nbytes])) as img:
        img = img.convert("RGB")
        if img.size != (w, h):
            img = img.resize((w, h), Image.BILINEAR)
        arr = np.asarray(img)
    out.reshape(-1)[:arr.size] = arr.reshape(-1)


class MemoryReader(SampleReader):
    """An in-memory fake dataset: ``read_into(i, out)`` writes ``content.expected_row(workload, seed, i)``
    without files. Rows are made on demand (``cache=True`` keeps them). ``sample_nbytes()`` and
    ``max_row_nbytes`` as for real readers; ``decode_into`` for JPEG workloads."""

    def __init__(self, workload: Workload, seed: int = 0, n: int | None = None, *, cache: bool = True):
        from .content import jpeg_sizes

        self.workload, self.seed = workload, int(seed)
        self.n = int(workload.samples if n is None else n)
        self._cache: dict[int, np.ndarray] | None = {} if cache else None
        drv = workload.format.driver()
        if workload.layout == "jpeg_folders":
            self._sizes = jpeg_sizes(workload, seed, np.arange(self.n))
            self.decoded_shape = tuple(workload.jpeg.decoded_shape)  # type: ignore[union-attr]
            self.decoded_nbytes = int(np.prod(self.decoded_shape))
        elif drv is not None:   # per-file row sizes (record_size)
            from .manifest import spec_of

            rows = drv.row_nbytes(spec_of(workload), seed)
            self._sizes = rows[np.arange(self.n) // workload.samples_per_file]
            self.decoded_nbytes = int(self._sizes.max()) if self.n else 0
        else:
            self._sizes = np.full(self.n, workload.sample_nbytes, dtype=np.int64)
            self.decoded_nbytes = workload.sample_nbytes
        self.max_row_nbytes = int(self._sizes.max()) if self.n else 0

    @property
    def samples(self) -> int:
        """Sample count, so the fake can stand where a Manifest is read (samples, sample_nbytes())."""
        return self.n

    def sample_nbytes(self) -> np.ndarray:
        return self._sizes.copy()

    def read_into(self, i: int, out: np.ndarray) -> int:
        from .content import expected_row, fill_row

        if not 0 <= i < self.n:
            raise IndexError(f"sample {i} out of range 0..{self.n - 1}")
        if self._cache is None:
            return fill_row(self.workload, self.seed, i, out)
        row = self._cache.get(i)
        if row is None:
            row = self._cache[i] = expected_row(self.workload, self.seed, i)
        out[:row.size] = row
        return int(row.size)

    def decode_into(self, raw: np.ndarray, nbytes: int, out: np.ndarray) -> int | None:
        drv = self.workload.format.driver()
        if drv is not None:   # an encoded format module (tfrecord: the Example's image)
            return drv.decode_into(raw, nbytes, out)
        decode_jpeg_into(raw, nbytes, out, self.decoded_shape)
        return None


def open_reader(data_dir: str | Path, manifest, workload: Workload, *, max_open_files: int = 64,
                via: str = "auto", counters=None, direct: bool = False) -> SampleReader:
    """The reader of ``data_dir``'s layout (see the module docstring). The manifest must describe the
    same workload data (name, layout, arrays, samples) as ``workload``. ``via`` (hdf5_shared, hdf5_blocks):
    ``auto``/``pread`` read rows at the datasets' byte offsets, ``hdf5`` through H5Dread hyperslabs.
    ``direct``: O_DIRECT reads (module docstring; a ConfigError for hdf5_per_sample and ``via="hdf5"``)."""
    from .manifest import spec_of

    if manifest.workload != workload.name or manifest.spec != spec_of(workload):
        raise DataError(f"--data-dir {data_dir} holds {manifest.describe()}, not the data of workload "
                        f"{workload.name} ({workload.scale}, {workload.samples} samples); "
                        "generate it or pass the matching --scale/--samples")
    d = Path(data_dir)
    if counters is not None:  # a CounterSet: this reader's counters, Darshan's last_byte_read per file
        counters = counters.new("shared", len(manifest.paths))
    drv = workload.format.driver()
    if drv is not None:   # a format module opens its own readers (``via``: its read path)
        return drv.open_reader(d, manifest, workload, via=via, counters=counters, direct=direct,
                               max_open_files=max_open_files)
    if via == "library" or (via == "pread" and workload.layout == "hdf5_per_sample"):   # --read-via
        if workload.layout == "jpeg_folders" or via == "pread":
            from ..errors import ConfigError

            raise ConfigError(f"--read-via={via}: layout {workload.layout} is read "
                              f"{'whole with pread' if via == 'library' else 'through libhdf5'}; use auto")
        via = "hdf5"   # the HDF5 library's own read (H5Dread)
    if direct:
        from ..storage.pagecache import direct_support

        ok, why = direct_support(workload.layout)
        if not ok or via == "hdf5":
            from ..errors import ConfigError

            raise ConfigError(why or "--cache direct: via='hdf5' reads through libhdf5, which cannot use O_DIRECT")
    cls = workload.format.reader_class()
    if cls is BlockReader:
        return BlockReader(d, manifest, workload, max_open_files=max_open_files, via=via, counters=counters,
                           direct=direct)
    if cls is PerSampleReader:
        return PerSampleReader(d, manifest, workload, counters)
    return cls(d, manifest, workload, counters, direct=direct)
