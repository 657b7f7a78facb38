"""The contract of a data format: ``FormatDriver``, the base class every format module subclasses once.

A format module (``dlbench/data/fmt_<name>.py``, or a module anywhere for a format registered by user code)
defines one subclass; ``Format.driver()`` (dlbench.data.registry) returns its one instance, and generate,
content, manifest, verify, the readers, the workload schema, the planners, the run loop and the simulator call
its methods. Like IOR's ``aiori.h`` or fio's ``ioengine_ops``, the class is the declared table of operations:

- required (abstract): ``plan_files``, ``expected_row``, ``sample_nbytes``, ``check_file``, ``open_reader``, and
  one of ``write_file`` / ``writer``;
- optional: every other public name below, each with the behaviour a format gets when it leaves it out;
- constants: ``STORAGE``, ``HAS_ARRAYS``, ``SECTION``, ``CONTENT_VERSION``, ``DIRECT_UNSUPPORTED``.

A subclass may define only these public names (its own helpers start with ``_``): a misspelled hook fails when
the class is defined, i.e. when its module is imported, with one line naming it and the closest valid name.
Operations can be plain functions of the module bound as ``name = staticmethod(name)`` (the built-in modules do:
their tests and benchmarks call the functions) or methods. docs/formats.md lists every hook;
tests/unit/test_format_base.py checks the list against this class. Pure: no I/O, no heavy imports.
"""
from __future__ import annotations

import difflib
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from .spec import CONTENT_VERSION as _CONTENT_V1


class FormatDriver(ABC):
    """Base of every format's driver; see the module docstring. Defaults are today's behaviour of a format
    module that leaves a hook out."""

    # ---- constants ------------------------------------------------------------------------------------
    STORAGE: bool = False            # readers, writer and checks go through a storage backend (``storage=``)
    HAS_ARRAYS: bool = True          # a sample is the workload's arrays (jpeg: the file's bytes, no ``arrays``)
    SECTION: str = ""                # the workload YAML section the format owns ("tfrecord", "webdataset")
    CONTENT_VERSION: str = _CONTENT_V1  # the manifest's ``content`` (jpeg: dlbench.jpeg/2)
    DIRECT_UNSUPPORTED: str = ""     # why ``--cache direct`` cannot read it ("": it can)

    # ---- required -------------------------------------------------------------------------------------
    @abstractmethod
    def plan_files(self, workload, seed: int):
        """``(paths, first, count, nbytes)``: every file's relative path, first sample, sample count, bytes."""

    @abstractmethod
    def expected_row(self, workload, seed: int, i: int) -> np.ndarray:
        """Sample ``i``'s stored bytes (uint8, a fresh array), as the generator writes them."""

    @abstractmethod
    def sample_nbytes(self, manifest) -> np.ndarray:
        """Stored bytes per sample (int64, one per sample of ``manifest``)."""

    @abstractmethod
    def check_file(self, path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
                   storage=None) -> list[str]:
        """``dlbench verify``'s structure check of file ``f``: problems, one line each (``image``: the file's
        bytes where a backend holds it)."""

    @abstractmethod
    def open_reader(self, data_dir, manifest, workload, /, *, via: str = "auto", counters=None, direct: bool = False,
                    max_open_files: int = 64, storage=None):
        """A ``dlbench.data.formats.SampleReader`` of the dataset; a ``--read-via``/``--cache direct`` it does
        not do is refused in one line (ConfigError)."""

    def write_file(self, fd, workload, seed: int, m, f: int) -> int:
        """Write file ``f`` into ``fd`` (a descriptor or a backend's write handle) through
        ``dlbench.data.generate.write_all``; return the bytes written. Required unless ``writer`` is given."""
        raise NotImplementedError(f"{type(self).__name__}: neither write_file nor writer")  # refused by check_driver

    def writer(self, workload, seed: int, data_dir: Path, m, files: list[int]):
        """This rank's file writer for ``files`` (its ``write_file(fd, f) -> bytes`` and ``close()``); default:
        ``write_file`` per file (HDF5 keeps a template across files)."""
        return _FileByFile(self, workload, seed, m)

    # ---- workload -------------------------------------------------------------------------------------
    def check_spec(self, spec, where: str) -> None:
        """The format's own checks of a workload spec (a ConfigError of one line); default: none."""
        return None

    def mean_sample_nbytes(self, workload) -> int:
        """``Workload.sample_nbytes``; default: the arrays' sum (with a ``record_size``: its mean for the data
        array)."""
        if workload.record_size is not None:
            return sum(int(workload.record_size.mean_bytes) if a.role == "data" else a.nbytes for a in workload.arrays)
        return sum(a.nbytes for a in workload.arrays)

    def decoded_row_nbytes(self, workload) -> int:
        """``Workload.decoded_nbytes`` (the largest decoded row); default: the sample's bytes (a decoding format
        with a ``record_size``: room for its largest record)."""
        if workload.record_size is not None and workload.format.decodes:
            return sum(int(workload.record_size.max_bytes) if a.role == "data" else a.nbytes for a in workload.arrays)
        return workload.sample_nbytes

    def row_nbytes(self, spec: dict, seed: int) -> np.ndarray | None:
        """Row bytes per file when they vary (``record_size``); default None: every row is the sample's bytes."""
        return None

    def sample_sizes(self, workload, seed: int, n: int) -> np.ndarray:
        """Bytes of samples ``0..n-1`` without a manifest (``MemoryReader``); default: ``row_nbytes`` per file,
        else ``workload.sample_nbytes`` each."""
        from .spec import spec_of

        rows = self.row_nbytes(spec_of(workload), seed)
        if rows is None:
            return np.full(n, workload.sample_nbytes, dtype=np.int64)
        return rows[np.arange(n) // workload.samples_per_file]

    def size_distribution(self, workload) -> tuple[str, float, float, float, float] | None:
        """``(kind, mean, std, min, max)`` of sample bytes when they are drawn (the simulator's workload);
        default None: fixed sizes (or the workload's ``record_size``)."""
        return None

    def row_arrays(self, workload) -> tuple | None:
        """The row the trainer sees as ``(name, shape, dtype, role)`` tuples when it is not the workload's arrays
        (jpeg: the decoded image); default None: the workload's arrays."""
        return None

    # ---- manifest and content -------------------------------------------------------------------------
    def manifest_row_nbytes(self, workload) -> int:
        """The manifest's ``row_nbytes`` (HDF5); default 0 (not recorded)."""
        return 0

    def expected_read_row(self, workload, seed: int, i: int) -> np.ndarray:
        """What a reader delivers for sample ``i`` (``run --verify``) when that is not the stored row (the token
        formats' Megatron sample index: a token range across documents); default: ``expected_row``."""
        return self.expected_row(workload, seed, i)

    def fill_row(self, workload, seed: int, i: int, out: np.ndarray) -> int:
        """Sample ``i``'s row into ``out[:nbytes]``, returning nbytes; default: ``expected_row`` copied."""
        row = self.expected_row(workload, seed, i)
        out[:row.size] = row
        return int(row.size)

    # ---- generation -----------------------------------------------------------------------------------
    def file_nbytes_planner(self, workload, tmp: Path):
        """``file_nbytes(k)``: bytes of a file of k samples, from skeletons written into ``tmp`` (HDF5), given to
        ``plan_files(..., file_nbytes=)``; default None: ``plan_files`` knows its sizes."""
        return None

    def prepare(self, workload, data_dir: Path, m, storage) -> None:
        """Rank 0 before any file is written (jpeg: class folders; hdf5_shared: the skeleton); default: nothing."""
        return None

    def file_order(self, workload, files: list[int], /) -> list[int]:
        """The order this rank writes its ``files`` in (jpeg: folder by folder); default: as given."""
        return files

    def write_dataset(self, gen, m, comm, prog) -> bool:
        """Write the whole dataset its own way (hdf5_shared: chunks of one file) and return True; default False:
        file by file."""
        return False

    def finish(self, data_dir: Path, m, sums: dict, storage) -> None:
        """After every rank wrote its files (hdf5_shared: the ``.part`` renamed, its checksum); default: nothing."""
        return None

    def write_extra(self, data_dir: Path, m, f: int, storage=None) -> None:
        """Files beside data file ``f`` (tfrecord: its index), written before it takes its name; default: none."""
        return None

    def extra_ok(self, data_dir: Path, m, f: int, storage=None) -> bool:
        """Whether the files beside an already written data file ``f`` are right too; default True."""
        return True

    def remove_extra(self, data_dir: Path, m, storage=None) -> None:
        """Remove the files beside the data of an old dataset (``generate --force``); default: nothing."""
        return None

    # ---- reading and decoding -------------------------------------------------------------------------
    def decoder(self, workload):
        """The decode step ``decode(raw, nbytes, out)`` bound to ``workload`` (jpeg: its decoded shape); default:
        ``decode_into``. Asked only for a format registered with ``decodes``."""
        return self.decode_into

    def decode_into(self, raw: np.ndarray, nbytes: int, out: np.ndarray) -> int | None:
        """Decode a stored row ``raw[:nbytes]`` into ``out``; returns the decoded bytes (None: the whole
        ``decoded_nbytes``). A format registered with ``decodes`` overrides it or ``decoder`` (check_driver)."""
        raise NotImplementedError(f"{type(self).__name__}: rows are delivered as stored (no decode step)")

    def check_records(self, path: Path, workload, seed: int, m, f: int, image: bytes | None = None,
                      storage=None) -> list[str]:
        """``verify --checksum``/``--content``'s full read of file ``f`` (tfrecord: every record's CRCs);
        default: no problems (the whole-file checksum covers it)."""
        return []

    def direct_unsupported(self, layout: str) -> str:
        """Why ``--cache direct`` cannot read ``layout`` ("": it can); default ``DIRECT_UNSUPPORTED``."""
        return self.DIRECT_UNSUPPORTED

    def shared_read_plan(self, name: str, ctx, *, meta, streams: int, drop_last_batch: bool, sampler_order):
        """The shared-tier strategies' read plan (tfrecord: tf.data's order); default: the sampler's,
        ``sampler_order(meta)``."""
        return sampler_order(meta)

    # ---- run --------------------------------------------------------------------------------------------
    def check_plan(self, workload, plan, strategy: str) -> None:
        """Refuse (ConfigError, one line) a strategy's plan the format cannot read; default: any plan."""
        return None

    def summary_keys(self, workload) -> dict:
        """Keys the format adds to run.json's summary (tfrecord: ``tfrecord_read``); default: none."""
        return {}

    # ---- the class check --------------------------------------------------------------------------------
    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        allowed = hook_names()
        for name in vars(cls):
            if name.startswith("_") or name in allowed:
                continue
            near = difflib.get_close_matches(name, sorted(allowed), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise TypeError(f"format class {cls.__module__}.{cls.__name__}: unknown hook {name!r}{hint} (the hooks: "
                            "dlbench.data.format_base.FormatDriver, docs/formats.md; helpers start with _)")


class _FileByFile:
    """The default ``writer``: the format's ``write_file`` per file."""

    def __init__(self, drv: FormatDriver, workload, seed: int, m):
        self._write, self._w, self._seed, self._m = drv.write_file, workload, seed, m

    def write_file(self, fd, f: int) -> int:
        return self._write(fd, self._w, self._seed, self._m, f)

    def close(self) -> None:
        pass


REQUIRED = ("plan_files", "expected_row", "sample_nbytes", "check_file", "open_reader")
CONSTANT_DOCS = {   # the class constants, documented here (docs/formats.md's table is made from it)
    "STORAGE": "False: its readers, writer and checks go through a storage backend (``open_reader(..., storage=)``, "
               "``generate(..., storage=)``, ``verify(..., storage=)``); without it a backend is refused in one line.",
    "HAS_ARRAYS": "True: a sample is the workload's arrays (jpeg: False, a sample is the file's bytes, no ``arrays``).",
    "SECTION": "\"\": the workload YAML section the format owns (tfrecord, webdataset: their read pattern).",
    "CONTENT_VERSION": "``dlbench.content/1``: the manifest's ``content`` (jpeg: dlbench.jpeg/2; tokens: "
                       "dlbench.tokens/1).",
    "DIRECT_UNSUPPORTED": "\"\": why ``--cache direct`` cannot read it (\"\": it can).",
}
CONSTANTS = tuple(CONSTANT_DOCS)


def hook_names() -> frozenset[str]:
    """Every public name of the contract: required operations, optional hooks, constants."""
    return frozenset(n for n in vars(FormatDriver) if not n.startswith("_"))


def overrides(cls: type, name: str) -> bool:
    """Whether ``cls`` defines ``name`` itself rather than taking the base class's default."""
    return getattr(cls, name) is not getattr(FormatDriver, name)


def check_driver(cls: type, decodes: bool, where: str) -> None:
    """The registration-time check of a driver class (``where``: the format's name): one line naming what is
    missing. Unknown names were refused when the class was defined (``__init_subclass__``)."""
    if not (isinstance(cls, type) and issubclass(cls, FormatDriver)):
        raise TypeError(f"format {where}: {cls!r} is not a dlbench.data.format_base.FormatDriver subclass")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise TypeError(f"format {where}: {cls.__name__} does not define the required {', '.join(missing)}")
    if not (overrides(cls, "write_file") or overrides(cls, "writer")):
        raise TypeError(f"format {where}: {cls.__name__} defines neither write_file nor writer (one is required)")
    if decodes and not (overrides(cls, "decode_into") or overrides(cls, "decoder")):
        raise TypeError(f"format {where}: registered with decodes=True but {cls.__name__} defines neither "
                        "decode_into nor decoder")


def hooks_markdown() -> str:
    """docs/formats.md's hook table, made from the class (tests/unit/test_format_base.py compares the two):
    one row per public name, in the class's order, with its kind, signature and docstring (the default)."""
    import inspect

    rows = ["| name | kind | what it is; the default when a format leaves it out |", "|---|---|---|"]
    for name, v in vars(FormatDriver).items():
        if name.startswith("_"):
            continue
        if name in CONSTANT_DOCS:
            rows.append(f"| `{name}` | constant | default {CONSTANT_DOCS[name]} |")
            continue
        sig = _signature(inspect.signature(v)).replace("|", "\\|")
        kind = ("required" if name in REQUIRED else
                "required (or `writer`)" if name == "write_file" else "optional")
        doc = " ".join((v.__doc__ or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}{sig}` | {kind} | {doc} |")
    return "\n".join(rows) + "\n"


def _signature(sig) -> str:
    """``(a, b: int = 1, /, *, c=None) -> T`` without ``self`` and with the annotations unquoted."""
    out, star = [], False
    params = list(sig.parameters.values())[1:]
    for k, p in enumerate(params):
        if p.kind is not p.POSITIONAL_ONLY and k and params[k - 1].kind is p.POSITIONAL_ONLY:
            out.append("/")
        if p.kind is p.KEYWORD_ONLY and not star:
            out.append("*")
            star = True
        t = p.name + (f": {p.annotation}" if p.annotation is not p.empty else "")
        if p.default is not p.empty:
            t += f" = {p.default!r}" if p.annotation is not p.empty else f"={p.default!r}"
        out.append(t)
    if params and params[-1].kind is params[-1].POSITIONAL_ONLY:
        out.append("/")
    ret = f" -> {sig.return_annotation}" if sig.return_annotation is not sig.empty else ""
    return f"({', '.join(out)}){ret}"
