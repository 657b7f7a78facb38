"""Format ``raw``: one file per sample (``sample-<i>.raw``) holding the sample's row exactly (its arrays'
bytes in order, no header), read with one ``preadv`` at offset 0. Only the operations docs/formats.md lists
as required: ``plan_files``, ``write_file``, ``expected_row``, ``sample_nbytes``, ``check_file``,
``open_reader``, bound in one ``FormatDriver`` subclass (``RawFormat``); it writes through the public
``dlbench.data.generate.write_all``."""

from __future__ import annotations

import os
from pathlib import Path
from time import perf_counter_ns

import numpy as np

from dlbench.data.content import fill_arrays
from dlbench.data.format_base import FormatDriver
from dlbench.data.formats import SampleReader
from dlbench.errors import ConfigError, DataError
from dlbench.storage import aligned_empty


def plan_files(workload, seed: int):
    n, row = int(workload.samples), int(workload.sample_nbytes)
    return ([f"sample-{i:08d}.raw" for i in range(n)], np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64),
            np.full(n, row, dtype=np.int64))


def expected_row(workload, seed: int, i: int) -> np.ndarray:
    sizes = [a.nbytes for a in workload.arrays]
    out = aligned_empty(sum(sizes), np.uint8)
    edges = np.cumsum([0, *sizes])
    fill_arrays(workload, seed, i, [out[edges[k]:edges[k + 1]] for k in range(len(sizes))])
    return out


def write_file(fd, workload, seed: int, m, f: int) -> int:
    from dlbench.data.generate import write_all

    return write_all(fd, expected_row(workload, seed, int(m.first[f])), 0)


def sample_nbytes(manifest) -> np.ndarray:
    return np.asarray(manifest.nbytes, dtype=np.int64).copy()


def check_file(path: Path, workload, seed: int, m, f: int, image: bytes | None = None, storage=None) -> list[str]:
    n = len(image) if image is not None else os.stat(path).st_size
    return [] if n == int(m.nbytes[f]) else [f"{path}: {n} B, expected {int(m.nbytes[f])} B"]


def open_reader(d: Path, manifest, workload, *, via: str = "auto", counters=None, direct: bool = False,
                max_open_files: int = 64, storage=None):
    if via not in ("auto", "pread"):
        raise ConfigError(f"--read-via={via}: layout raw is read with auto, pread")
    if direct:
        raise ConfigError("--cache direct: layout raw is read with buffered pread only")
    return RawReader(d, manifest, counters)


class RawReader(SampleReader):
    def __init__(self, d: Path, manifest, counters=None):
        self._paths = [os.fsencode(str(Path(d) / p)) for p in manifest.paths]
        self._rows = np.asarray(manifest.nbytes, dtype=np.int64)
        self.max_row_nbytes = self.decoded_nbytes = int(self._rows.max()) if len(self._rows) else 0
        self.counters = counters

    def read_into(self, i: int, out: np.ndarray) -> int:
        n = int(self._rows[i])
        fd = os.open(self._paths[i], os.O_RDONLY)
        try:
            t0 = perf_counter_ns()
            got = os.preadv(fd, [out[:n]], 0)
        finally:
            os.close(fd)
        if self.counters is not None:
            self.counters.open_read(i, 0, got, perf_counter_ns() - t0)
        if got != n:
            raise DataError(f"{os.fsdecode(self._paths[i])}: short read of sample {i} ({got} of {n} B)")
        return n


class RawFormat(FormatDriver):
    """The format driver of raw: only the required operations: this module's functions as its operations
    (dlbench.data.format_base.FormatDriver lists the hooks; those left out keep their defaults)."""

    check_file = staticmethod(check_file)
    expected_row = staticmethod(expected_row)
    open_reader = staticmethod(open_reader)
    plan_files = staticmethod(plan_files)
    sample_nbytes = staticmethod(sample_nbytes)
    write_file = staticmethod(write_file)
