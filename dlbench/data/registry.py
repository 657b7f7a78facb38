"""Format registry: one entry per on-disk layout, looked up by name (a miss lists the valid names).

Each entry says what the rest of dlbench may ask about a layout without comparing its name:
``decodes`` (rows are encoded bytes that need the format's decode step, ``Format.decoder(workload)``, before the
trainer sees them),
``samples_per_file`` (``"one"``, ``"all"`` or ``"block"``), ``reads_by_offset`` (a sample is a byte
range of a file that pread can fetch) and ``reader`` (``module:Class`` of its reader, imported
lazily so h5py/Pillow load only when used). Adding a layout is one ``register(Format(...))`` line
here plus its module: every format's ``module`` (fmt_hdf5, fmt_jpeg, fmt_npy, fmt_npz, fmt_tfrecord, ...) defines
one ``dlbench.data.format_base.FormatDriver`` subclass owning its writer, reader, decode step, expected content
and structure check (docs/formats.md lists the hooks), and every caller asks ``Format.driver()``, that class's
one instance, checked on first use (a module outside dlbench.data: at its ``register`` line). Pure: no I/O, no
heavy imports.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

from ..errors import unknown_choice
from .format_base import FormatDriver, check_driver


@dataclass(frozen=True)
class Format:
    name: str
    decodes: bool
    samples_per_file: str  # "one" | "all" | "block"
    reads_by_offset: bool = False  # descriptive (docs/formats.md's table, checked against it by a test)
    reader: str = ""  # "module:Class": a module under dlbench.data, or a dotted module path (``module`` below)
    help: str = ""
    module: str = ""  # the format module owning write/read/content/verify (docs/formats.md): a name under
    # dlbench.data (the built-ins: "fmt_npz") or a dotted path to a module anywhere ("mypkg.fmt_raw")
    record_sizes: bool = False  # accepts a workload's record_size (data array length drawn per file)
    reads_runs: bool = False  # a run of consecutive samples is one request (aggregated chunked loading, plan chunk)
    read_via: str = ""  # what --read-via auto/library/pread mean for it (the CLI's help lists every format's)

    def reader_class(self):
        mod, cls = self.reader.split(":")
        return getattr(_module(mod), cls)

    def decoder(self, workload):
        """The format's decode step for ``workload``: ``decode(raw, nbytes, out)`` turns a stored row
        (``raw[:nbytes]``) into the decoded row the trainer sees, written into ``out`` (returns the decoded
        bytes, or None: the whole ``workload.decoded_nbytes``); None when rows are delivered as stored
        (``decodes`` false). Asked once per executor/verifier, called per sample: the module's
        ``decoder(workload)`` (the workload's decoded shape bound), else its ``decode_into``."""
        if not self.decodes:
            return None
        return self.driver().decoder(workload)

    def driver(self) -> FormatDriver:
        """The format's driver: the one instance of the ``FormatDriver`` subclass its module defines
        (dlbench.data.format_base; docs/formats.md lists the hooks), the module imported on first use."""
        drv = _DRIVERS.get(self.name)   # asked per sample by content and decode paths: one dict lookup
        if drv is None:
            drv = _DRIVERS[self.name] = _load_driver(self.module, self.name, self.decodes)
        return drv


@cache
def _module(name: str):
    """The format module, imported once: a bare name is a module of dlbench.data, a dotted path is imported as
    it is (a format outside the package)."""
    return importlib.import_module(name if "." in name else f"dlbench.data.{name}")


_DRIVERS: dict[str, FormatDriver] = {}   # format name -> its driver instance, made on first use


def _load_driver(module: str, name: str, decodes: bool) -> FormatDriver:
    """The driver instance of ``module``'s one ``FormatDriver`` subclass, its class checked for format ``name``
    (``format_base.check_driver``)."""
    mod = _module(module)
    found = [c for c in vars(mod).values()
             if isinstance(c, type) and issubclass(c, FormatDriver) and c.__module__ == mod.__name__]
    if len(found) != 1:
        raise TypeError(f"format {name}: module {mod.__name__} defines {len(found)} FormatDriver subclasses "
                        f"({', '.join(c.__name__ for c in found) or 'none'}); it must define exactly one")
    check_driver(found[0], decodes, name)
    return found[0]()


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    if not fmt.module:
        raise ValueError(f"format {fmt.name}: no module (the format module that writes, reads and checks it)")
    if fmt.name in FORMATS:
        raise ValueError(f"format {fmt.name} registered twice")
    if fmt.samples_per_file not in ("one", "all", "block"):
        raise ValueError(f"format {fmt.name}: samples_per_file={fmt.samples_per_file!r}; one of one, all, block")
    _DRIVERS.pop(fmt.name, None)
    if "." in fmt.module:   # a format outside dlbench (user code): its class checked at its register line
        fmt.driver()
    FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str, where: str = "") -> Format:
    """The registered format ``name``; ``unknown layout 'x'; choose one of: ...`` otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise unknown_choice("layout", name, FORMATS, where) from None


def direct_support(layout: str) -> tuple[bool, str]:
    """(can ``--cache direct`` read this layout with O_DIRECT, why not): the format driver's
    ``direct_unsupported(layout)`` (default: its ``DIRECT_UNSUPPORTED``; a non-empty reason: it cannot). A layout
    not registered here (a test's fake reader) has no such limit."""
    if layout not in FORMATS:
        return True, ""
    why: str = FORMATS[layout].driver().direct_unsupported(layout)
    return (False, why) if why else (True, "")


def names() -> tuple[str, ...]:
    return tuple(FORMATS)


def read_via_help() -> str:
    """Every registered format's ``read_via``, for ``--read-via``'s help."""
    return " ".join(f"{f.name}: {f.read_via}." for f in FORMATS.values() if f.read_via)


register(Format("hdf5_per_sample", decodes=False, samples_per_file="one", reads_by_offset=False,
                reader="fmt_hdf5:PerSampleReader", module="fmt_hdf5", help="one HDF5 file per sample",
                read_via="auto = library (H5Dread; pread refused)"))
register(Format("hdf5_shared", decodes=False, samples_per_file="all", reads_by_offset=True,
                reader="fmt_hdf5:BlockReader", module="fmt_hdf5", reads_runs=True, help="one HDF5 file holding every sample",
                read_via="auto = pread at the datasets' offsets; library = H5Dread hyperslabs"))
register(Format("hdf5_blocks", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_hdf5:BlockReader", module="fmt_hdf5",
                help="HDF5 files of samples_per_file samples each",
                read_via="auto = pread at the datasets' offsets; library = H5Dread hyperslabs"))
register(Format("jpeg_folders", decodes=True, samples_per_file="one", reads_by_offset=False,
                reader="fmt_jpeg:JpegReader", module="fmt_jpeg",
                help="one JPEG per sample in class folders (ImageNet style)",
                read_via="auto = pread of the whole file (library refused)"))
register(Format("npy", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_npy:NpyLoadReader", module="fmt_npy", record_sizes=True,
                help="NumPy .npy files (np.save) of samples_per_file samples; read with np.load or by offset",
                read_via="auto = library (np.load); pread = rows at offsets parsed once per file"))
register(Format("npz", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_npz:NpzLoadReader", module="fmt_npz", record_sizes=True,
                help="NumPy .npz files (np.savez, stored members, DLIO keys x/y); read with np.load or by offset",
                read_via="auto = library (np.load); pread = members' rows at offsets parsed once per file"))
register(Format("tfrecord", decodes=True, samples_per_file="block", reads_by_offset=True,
                reader="fmt_tfrecord:open_reader", module="fmt_tfrecord", record_sizes=True,
                help="TFRecord files of tf.train.Example records (DLIO's tfrecord), index files beside",
                read_via="auto only (the workload's tfrecord.read: indexed or tfdata)"))
register(Format("mmap_indexed_binary", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_indexed:MMapReader", module="fmt_indexed",
                help="Megatron-LM's indexed token dataset: .bin sequences + .idx (MMIDIDX) index; read with numpy.memmap",
                read_via="auto = library (numpy.memmap of .bin and .idx; pread on a backend without paths); "
                         "pread = one preadv per sequence at its index pointer"))
register(Format("indexed_binary", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_indexed:PreadReader", module="fmt_indexed",
                help="DLIO's indexed_binary: sequences back to back + .off.idx/.sz.idx (uint64) index files",
                read_via="auto = pread (one preadv per sample at its .off.idx offset); library = numpy.memmap"))
register(Format("webdataset", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="fmt_webdataset:StreamReader", module="fmt_webdataset",
                help="webdataset tar shards of {key}.{ext} members (TarWriter's bytes); streamed shard by shard",
                read_via="auto only (the workload's webdataset.read: stream = one read per shard, indexed = one "
                         "range read per sample)"))
