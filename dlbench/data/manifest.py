"""The dataset manifest: what a data directory holds, written by ``dlbench generate``.

``<data_dir>/dlbench-manifest.json``, schema ``dlbench.manifest/1``::

    {"schema": "dlbench.manifest/1", "complete": true,
     "workload": "cosmoflow", "scale": "tiny", "seed": 0, "content": "dlbench.content/1",  # JPEG: "dlbench.jpeg/2"
     "spec": {...the data-defining part of the resolved workload: layout, arrays, samples, ...},
     "samples": 32, "dataset_nbytes": ...,
     "files": [["data-00000000.h5", first_sample, sample_count, file_bytes], ...],
     "provenance": {...ranks, seconds, library versions: may differ between runs of the same dataset}}

Everything outside ``provenance`` is a pure function of (workload, seed) and the HDF5 library version, so
a serial and an ``mpiexec -n 2`` generation write the same manifest. ``complete`` is false while a
generation is under way or after it failed; readers and ``verify`` refuse an incomplete dataset.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import DataError
from .spec import CONTENT_VERSION, spec_of  # noqa: F401 (this module's names too: data/spec.py sits below the registry)

SCHEMA = "dlbench.manifest/1"


def content_version(layout: str) -> str:
    """The content version this dlbench writes for ``layout`` (the manifest's ``content``)."""
    return _driver(layout).CONTENT_VERSION
MANIFEST_NAME = "dlbench-manifest.json"


class FileEntry(NamedTuple):
    path: str      # relative to the data dir
    first: int     # first sample in the file
    count: int     # type: ignore[assignment]  # samples in the file (the field shadows tuple.count)
    nbytes: int    # file size in bytes


@dataclass
class Manifest:
    workload: str
    spec: dict
    seed: int
    samples: int
    layout: str
    paths: list[str]
    first: np.ndarray        # int64 per file
    count: np.ndarray        # int64 per file
    nbytes: np.ndarray       # int64 per file (file size)
    scale: str = ""
    complete: bool = False
    content: str = CONTENT_VERSION
    provenance: dict = field(default_factory=dict)
    _row_nbytes: int = 0     # stored bytes per sample for HDF5 layouts
    sum64: list | None = None  # per file: storage.checksum.file_checksum of the file as written (None: not recorded)

    # ---- queries -----------------------------------------------------------------------------------
    @property
    def files(self) -> list[FileEntry]:
        return [FileEntry(p, int(f), int(c), int(b))
                for p, f, c, b in zip(self.paths, self.first, self.count, self.nbytes)]

    @property
    def dataset_nbytes(self) -> int:
        return int(self.nbytes.sum())

    def sample_nbytes(self) -> np.ndarray:
        """Stored bytes per sample (int64, length ``samples``): the row size for HDF5 layouts, the file
        size for JPEG."""
        return _driver(self.layout).sample_nbytes(self)

    def file_index(self, i):
        """Index into ``files`` of the file holding sample(s) ``i`` (vectorised)."""
        return np.searchsorted(self.first, i, side="right") - 1

    def file_of(self, i: int) -> tuple[str, int]:
        """(relative path, index within the file) of sample ``i``."""
        if not 0 <= i < self.samples:
            raise IndexError(f"sample {i} out of range 0..{self.samples - 1}")
        f = int(self.file_index(i))
        return self.paths[f], int(i - self.first[f])

    def same_dataset(self, other: Manifest) -> bool:
        return (self.workload == other.workload and self.seed == other.seed and self.spec == other.spec
                and self.content == other.content)

    def describe(self) -> str:
        return f"workload {self.workload} (seed {self.seed}, {self.samples} samples, {len(self.paths)} files)"

    # ---- JSON --------------------------------------------------------------------------------------
    def to_json(self) -> str:
        head = {"schema": SCHEMA, "complete": bool(self.complete), "workload": self.workload,
                "scale": self.scale, "seed": int(self.seed), "content": self.content, "spec": self.spec,
                "samples": int(self.samples), "row_nbytes": int(self._row_nbytes),
                "dataset_nbytes": self.dataset_nbytes}
        text = json.dumps(head, indent=1)[:-2]
        rows = ",\n  ".join(json.dumps([p, int(f), int(c), int(b)])
                            for p, f, c, b in zip(self.paths, self.first, self.count, self.nbytes))
        text += ',\n "files": [\n  ' + rows + "\n ],\n"
        if self.sum64 is not None:
            text += ' "sum64": ' + json.dumps([None if c is None else int(c) for c in self.sum64]) + ",\n"
        text += ' "provenance": ' + json.dumps(self.provenance, sort_keys=True) + "\n}\n"
        return text

    def save(self, data_dir: str | Path) -> Path:
        """Write atomically (temporary name, then rename)."""
        path = Path(data_dir) / MANIFEST_NAME
        tmp = path.with_name(path.name + ".part")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest") -> Manifest:
        try:
            if d.get("schema") != SCHEMA:
                raise DataError(f"{where}: schema {d.get('schema')!r} is not {SCHEMA!r}")
            files = d["files"]
            paths = [str(f[0]) for f in files]
            arr = np.asarray([f[1:4] for f in files], dtype=np.int64).reshape(-1, 3)
            return cls(workload=str(d["workload"]), spec=d["spec"], seed=int(d["seed"]),
                       samples=int(d["samples"]), layout=str(d["spec"]["layout"]), paths=paths,
                       first=arr[:, 0].copy(), count=arr[:, 1].copy(), nbytes=arr[:, 2].copy(),
                       scale=str(d.get("scale", "")), complete=bool(d.get("complete", False)),
                       content=str(d.get("content", "")), provenance=dict(d.get("provenance", {})),
                       _row_nbytes=int(d.get("row_nbytes", 0)),
                       sum64=_sum_list(d.get("sum64"), len(paths)))
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise DataError(f"{where}: not a valid dlbench manifest ({type(e).__name__}: {e})") from None

    def check_consistent(self, where: str = "manifest") -> None:
        """The manifest's counts agree with each other: files cover samples 0..samples-1 in order, without
        gaps or overlaps, and ``samples`` equals the spec's. DataError naming the disagreement (an edited
        manifest would otherwise index past its file list in the middle of a run)."""
        n_files = len(self.paths)
        if not (len(self.first) == len(self.count) == len(self.nbytes) == n_files):
            raise DataError(f"{where}: inconsistent manifest: {n_files} paths but {len(self.first)} file rows")
        spec_n = self.spec.get("samples") if isinstance(self.spec, dict) else None
        covered = int(self.count.sum()) if n_files else 0
        starts = np.concatenate([[0], np.cumsum(self.count)[:-1]]) if n_files else self.first
        if self.samples < 1 or covered != self.samples or (spec_n is not None and int(spec_n) != self.samples) \
                or np.any(self.count < 1) or np.any(self.nbytes < 0) or not np.array_equal(self.first, starts):
            raise DataError(f"{where}: inconsistent manifest: samples={self.samples}, its spec says {spec_n}, "
                            f"its {n_files} files hold {covered} samples"
                            + ("" if np.array_equal(self.first, starts) else " with gaps or overlaps")
                            + "; the file was edited or damaged: regenerate the dataset (dlbench generate "
                              "--force)")
        if _one_per_file(self.layout) and n_files != self.samples:
            raise DataError(f"{where}: inconsistent manifest: {self.layout} needs one file per sample, "
                            f"{n_files} files for {self.samples} samples")

    @classmethod
    def load(cls, data_dir: str | Path, *, require_complete: bool = True) -> Manifest:
        """The manifest of ``data_dir``; DataError if it is missing, unreadable or (by default)
        incomplete."""
        path = Path(data_dir) / MANIFEST_NAME
        if not path.is_file():
            raise DataError(f"--data-dir {data_dir}: no dataset here ({MANIFEST_NAME} missing); "
                            f"run `dlbench generate --workload W --data-dir {data_dir}` first")
        try:
            d = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable manifest ({e})") from None
        if not isinstance(d, dict):
            raise DataError(f"{path}: not a valid dlbench manifest")
        m = cls.from_dict(d, where=str(path))
        if m.complete:
            m.check_consistent(str(path))
        if require_complete and not m.complete:
            raise DataError(f"--data-dir {data_dir}: generation of {m.describe()} did not complete; "
                            "re-run the same `dlbench generate` to finish it")
        return m

    @classmethod
    def exists(cls, data_dir: str | Path) -> bool:
        return (Path(data_dir) / MANIFEST_NAME).is_file()


def _sum_list(v, n: int) -> list | None:
    """The optional per-file checksums: a list of n ints (or nulls); anything else is ignored (None)."""
    if not isinstance(v, list) or len(v) != n:
        return None
    return [int(c) if isinstance(c, int) and not isinstance(c, bool) else None for c in v]


# ---- planning (pure) ----------------------------------------------------------------------------------

def _driver(layout: str):
    """The format module of ``layout`` (dlbench.data.registry ``module``)."""
    from .registry import get_format

    return get_format(layout).driver()


def _one_per_file(layout: str) -> bool:
    from .registry import FORMATS

    fmt = FORMATS.get(layout)
    return fmt is not None and fmt.samples_per_file == "one"


def plan_manifest(workload, seed: int, *, hdf5_file_nbytes=None) -> Manifest:
    """The manifest a generation of (workload, seed) writes, before any byte is written: the format
    module's ``plan_files``. ``hdf5_file_nbytes(k)`` gives the size of a file holding k samples, for
    formats whose file sizes come from a written template (HDF5: ``file_nbytes_planner``)."""
    drv = _driver(workload.layout)
    from .format_base import overrides

    if hdf5_file_nbytes is None or not overrides(type(drv), "file_nbytes_planner"):   # sizes of its own
        paths, first, count, nbytes = drv.plan_files(workload, seed)
    else:
        paths, first, count, nbytes = drv.plan_files(workload, seed, file_nbytes=hdf5_file_nbytes)
    return Manifest(workload=workload.name, spec=spec_of(workload), seed=int(seed), samples=workload.samples,
                    layout=workload.layout, paths=list(paths), first=np.asarray(first, dtype=np.int64),
                    count=np.asarray(count, dtype=np.int64), nbytes=np.asarray(nbytes, dtype=np.int64),
                    scale=workload.scale, content=content_version(workload.layout),
                    _row_nbytes=drv.manifest_row_nbytes(workload))
