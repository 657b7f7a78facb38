"""Sample readers: what every format's reader shares, and the one dispatch to the format modules.

Each layout's reader lives in its format module (dlbench.data.registry: ``fmt_hdf5``, ``fmt_jpeg``,
``fmt_npy``, ``fmt_npz``, ``fmt_tfrecord``). ``open_reader(data_dir, manifest, workload)`` checks that the
manifest describes the workload's data and asks the layout's module (``Format.driver().open_reader``) for a
``SampleReader``, whose ``read_into(i, out)`` writes sample i's row into ``out[:nbytes]`` (uint8, ideally
page-aligned: see ``aligned_empty``) and returns nbytes (docs/architecture.md contract 2). A format whose rows
are encoded (``Format.decodes``) gives its readers ``decode_into(raw, nbytes, out)``.

``MemoryReader(workload, seed, n)``: an in-memory fake with the same interface whose rows are
``content.expected_row`` (tests, CONVENTIONS 12).

Counters. ``open_reader(..., counters=CounterSet)`` gives the reader an ``IOCounters`` of class ``shared``
(``dlbench.storage.counters``): every open and read call is counted the Darshan way (file number = the
manifest's file index). Without it (the default) the read loops are the uncounted ones.

Direct I/O. ``open_reader(..., direct=True)`` (``dlbench run --cache direct``): each format module reads
with O_DIRECT where it can and raises a ConfigError naming why where it cannot
(``dlbench.data.registry.direct_support``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..storage import PAGE, aligned_empty, preadv  # noqa: F401  (re-exported for readers and generate)
from ..workload import Workload
from .format_base import overrides


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




class MemoryReader(SampleReader):
    """An in-memory fake dataset: ``read_into(i, out)`` writes ``content.expected_row(workload, seed, i)``
    without files. Rows are made on demand (``cache=True`` keeps them). ``sample_nbytes()`` and
    ``max_row_nbytes`` as for real readers; ``decode_into`` for formats that decode."""

    def __init__(self, workload: Workload, seed: int = 0, n: int | None = None, *, cache: bool = True):
        self.workload, self.seed = workload, int(seed)
        self.n = int(workload.samples if n is None else n)
        self._cache: dict[int, np.ndarray] | None = {} if cache else None
        drv = workload.format.driver()
        # sizes per sample index (jpeg), else per-file row sizes (record_size), else the sample's bytes
        self._sizes = drv.sample_sizes(workload, self.seed, self.n)
        self.max_row_nbytes = int(self._sizes.max()) if self.n else 0
        self.decoded_nbytes = self.max_row_nbytes
        if overrides(type(drv), "decoder"):   # the decode step bound to the workload (jpeg: its decoded shape)
            self.decode_into = drv.decoder(workload)  # type: ignore[method-assign]  # the format's decode step, bound once
            self.decoded_nbytes = int(workload.decoded_nbytes)

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
        return self.workload.format.driver().decode_into(raw, nbytes, out)


def open_reader(data_dir: str | Path, manifest, workload: Workload, *, max_open_files: int = 64,
                via: str = "auto", counters=None, direct: bool = False, storage=None) -> SampleReader:
    """The reader of ``data_dir``'s layout, opened by its format module (see the module docstring). The
    manifest must describe the same workload data (name, layout, arrays, samples) as ``workload``. ``via``:
    ``--read-via`` (each module says which it takes); ``direct``: O_DIRECT reads; ``storage``: a storage
    backend (``dlbench.storage.backend``; default: POSIX files under ``data_dir``), for the format modules
    that read through one (``STORAGE``)."""
    from .manifest import spec_of

    if manifest.workload != workload.name or manifest.spec != spec_of(workload):
        raise DataError(f"--data-dir {data_dir} holds {manifest.describe()}, not the data of workload "
                        f"{workload.name} ({workload.scale}, {workload.samples} samples); "
                        "generate it or pass the matching --scale/--samples")
    if counters is not None:  # a CounterSet: this reader's counters, Darshan's last_byte_read per file
        counters = counters.new("shared", len(manifest.paths))
    drv = workload.format.driver()
    kw = {}
    if storage is not None:
        from ..errors import ConfigError
        from .registry import FORMATS

        if not drv.STORAGE:
            able = [n for n, f in FORMATS.items() if f.driver().STORAGE]
            raise ConfigError(f"storage backend {storage.name}: layout {workload.layout}'s readers read POSIX "
                              f"files only; backends serve layouts {', '.join(able)}")
        if direct and not storage.direct:
            raise ConfigError(f"--cache direct: storage backend {storage.name} has no O_DIRECT reads")
        kw["storage"] = storage
    return drv.open_reader(Path(data_dir), manifest, workload, via=via, counters=counters, direct=direct,
                           max_open_files=max_open_files, **kw)
