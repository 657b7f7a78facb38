"""Format registry: one entry per on-disk layout, looked up by name (a miss lists the valid names).

Each entry says what the rest of dlbench may ask about a layout without comparing its name:
``decodes`` (rows are encoded bytes that need ``reader.decode_into`` before the trainer sees them),
``samples_per_file`` (``"one"``, ``"all"`` or ``"block"``), ``reads_by_offset`` (a sample is a byte
range of a file that pread can fetch) and ``reader`` (``module:Class`` of its reader, imported
lazily so h5py/Pillow load only when used). Adding a layout is one ``register(Format(...))`` line
here plus its module. Pure: no I/O, no heavy imports.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..errors import unknown_choice


@dataclass(frozen=True)
class Format:
    name: str
    decodes: bool
    samples_per_file: str  # "one" | "all" | "block"
    reads_by_offset: bool
    reader: str  # "module:Class", relative to dlbench.data
    help: str = ""
    module: str = ""  # the format's own module under dlbench.data (writer, content, checks); "": built-in paths

    def reader_class(self):
        mod, cls = self.reader.split(":")
        return getattr(importlib.import_module(f"dlbench.data.{mod}"), cls)

    def hooks(self):
        """The format's own module (``module``; its functions: ``plan_files``, ``file_name``, ``write_file``,
        ``fill_row``, ``expected_row``, ``check_file``, ...), or None for the built-in HDF5/JPEG paths."""
        return importlib.import_module(f"dlbench.data.{self.module}") if self.module else None


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    if fmt.name in FORMATS:
        raise ValueError(f"format {fmt.name} registered twice")
    if fmt.samples_per_file not in ("one", "all", "block"):
        raise ValueError(f"format {fmt.name}: samples_per_file={fmt.samples_per_file!r}; one of one, all, block")
    FORMATS[fmt.name] = fmt
    return fmt


def get_format(name: str, where: str = "") -> Format:
    """The registered format ``name``; ``unknown layout 'x'; choose one of: ...`` otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise unknown_choice("layout", name, FORMATS, where) from None


def names() -> tuple[str, ...]:
    return tuple(FORMATS)


register(Format("hdf5_per_sample", decodes=False, samples_per_file="one", reads_by_offset=False,
                reader="formats:PerSampleReader", help="one HDF5 file per sample"))
register(Format("hdf5_shared", decodes=False, samples_per_file="all", reads_by_offset=True,
                reader="formats:BlockReader", help="one HDF5 file holding every sample"))
register(Format("hdf5_blocks", decodes=False, samples_per_file="block", reads_by_offset=True,
                reader="formats:BlockReader", help="HDF5 files of samples_per_file samples each"))
register(Format("jpeg_folders", decodes=True, samples_per_file="one", reads_by_offset=False,
                reader="formats:JpegReader", help="one JPEG per sample in class folders (ImageNet style)"))
register(Format("tfrecord", decodes=True, samples_per_file="block", reads_by_offset=True,
                reader="fmt_tfrecord:open_reader", module="fmt_tfrecord",
                help="TFRecord files of tf.train.Example records (DLIO's tfrecord), index files beside"))
