"""Workload specifications: what one sample looks like, how samples lie on disk, how many there are,
and how long a training step takes on known accelerators.

A workload file (``workloads/*.yaml`` or a user's own YAML passed to ``--workload``) is loaded strictly
into ``WorkloadSpec``; ``resolve(spec, scale=..., samples=...)`` applies a preset and returns the concrete
``Workload`` every other module uses. No I/O beyond reading the YAML.

Layouts:
- ``hdf5_per_sample``: one sample per HDF5 file, every array a dataset of the sample's shape
  (CosmoFlow ``full``/``unitPar``, DeepCAM ``climate/data``/``climate/labels_0``).
- ``hdf5_shared``: every sample in one HDF5 file, datasets of shape (N, *shape) (PtychoNN SOLAR layout).
- ``hdf5_blocks``: ``samples_per_file`` samples per HDF5 file, datasets (k, *shape) (HEP-CNN).
- ``jpeg_folders``: one JPEG per sample in ``classes`` class folders (ImageNet ImageFolder); file sizes
  follow ``jpeg.size`` (seeded), the decoded sample is ``jpeg.decoded_shape`` uint8.
- ``npy`` / ``npz``: NumPy files of ``samples_per_file`` samples (``dlbench.data.fmt_npy``/``fmt_npz``).
  With ``record_size`` (a size distribution, DLIO's record_length ± record_length_stdev) the data array is
  1-D and its length is drawn per file from (workload, seed, file index).
- ``tfrecord``: ``samples_per_file`` tf.train.Example records per TFRecord file (``dlbench.data.fmt_tfrecord``);
  the ``tfrecord`` section picks the read pattern (indexed or tfdata).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import (
    MAX_BATCH,
    MAX_FILE_BYTES,
    MAX_PARAMETERS,
    MAX_SAMPLE_BYTES,
    MAX_STEP_TIME_S,
    from_mapping,
    load_yaml,
    opt,
    resource_dir,
)
from .data.registry import get_format
from .data.registry import names as format_names
from .errors import ConfigError, unknown_choice

LAYOUTS = format_names()  # dlbench.data.registry: one line per layout
SCALES = ("tiny", "small", "full")
DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float16", "float32", "float64")
ACCELERATORS = ("v100", "a100", "h100")

MAX_SAMPLES = 1 << 40


@dataclass(frozen=True, kw_only=True)
class ArraySpec:
    name: str = opt(help="HDF5 dataset name (path inside the file), as the real dataset names it")
    shape: tuple[int, ...] = opt(help="shape of one sample's array", min=1)
    dtype: str = opt(help="NumPy dtype of the stored array", choices=DTYPES)
    role: str = opt("data", help="data (the model's input) or label", choices=("data", "label"))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, kw_only=True)
class SizeDistribution:
    kind: str = opt("fixed", help="fixed, normal or lognormal (seeded per sample)",
                    choices=("fixed", "normal", "lognormal"))
    mean_bytes: float = opt(help="mean file size", unit="B", min=1, max=MAX_FILE_BYTES)
    std_bytes: float = opt(0.0, help="standard deviation", unit="B", min=0, max=MAX_FILE_BYTES)
    min_bytes: float = opt(1024.0, help="sizes are clipped to at least this", unit="B", min=1, max=MAX_FILE_BYTES)
    max_bytes: float = opt(8e6, help="sizes are clipped to at most this", unit="B", min=1, max=MAX_FILE_BYTES)


@dataclass(frozen=True, kw_only=True)
class JpegSpec:
    size: SizeDistribution = opt(help="distribution of the JPEG file sizes")
    decoded_shape: tuple[int, ...] = opt((224, 224, 3), help="shape after decode + resize (H, W, C)", min=1)


@dataclass(frozen=True, kw_only=True)
class TFRecordSpec:
    read: str = opt("indexed", help="read pattern: indexed (index file + one pread per record, the PyTorch "
                                    "tfrecord readers; any sample order) or tfdata (tf.data.TFRecordDataset: "
                                    "files read sequentially, one stream per loader worker, a shuffle buffer)",
                    choices=("indexed", "tfdata"))
    shuffle_buffer: int = opt(1024, help="tfdata: records in the shuffle buffer (DLIO reader.shuffle_size), "
                                         "shared out between the streams; 1: no sample shuffle", min=1)
    file_shuffle: bool = opt(True, help="tfdata: shuffle each rank's files every epoch")
    buffer_nbytes: int = opt(256 << 10, help="tfdata: read buffer per stream (TFRecordDataset buffer_size)",
                             unit="B", min=16)


@dataclass(frozen=True, kw_only=True)
class WebDatasetSpec:
    read: str = opt("stream", help="read pattern: stream (shards per rank and loader worker, each shard one "
                                   "sequential read, a sample shuffle buffer: naive/prefetch) or indexed (one "
                                   "range read per sample, webdataset's wids; any strategy)",
                    choices=("stream", "indexed"))
    shuffle_buffer: int = opt(1000, help="stream: samples in each loader worker's shuffle buffer "
                                         "(WebDataset.shuffle(bufsize)); 1: no sample shuffle", min=1)
    initial: int = opt(100, help="stream: samples buffered before the first is emitted (shuffle(initial=))",
                       min=1)
    shard_shuffle: int = opt(100, help="stream: shards in each worker's shard shuffle buffer "
                                       "(WebDataset(shardshuffle=)); 0: shards in order", min=0)


@dataclass(frozen=True, kw_only=True)
class TokensSpec:
    sample_index: str = opt("stored", help="stored (a sample is one stored sequence, as DLIO reads it) or megatron "
                                           "(Megatron-LM GPTDataset's document, sample and shuffle indices: a "
                                           "sample is seq_length + 1 tokens cut across shuffled documents, "
                                           "dlbench.data.gpt_index)", choices=("stored", "megatron"))
    seq_length: int | None = opt(None, help="megatron: tokens per sample - 1 (default: the stored sequence's "
                                            "tokens - 1, the only value whose samples have the stored bytes)",
                                 min=1)


@dataclass(frozen=True, kw_only=True)
class StepTime:
    step_time_s: float = opt(help="seconds per training step", unit="s", min=0, max=MAX_STEP_TIME_S)
    batch_size: int = opt(help="local batch size the step time was measured at", min=1, max=MAX_BATCH)
    source: str = opt("", help="where the figure comes from")


@dataclass(frozen=True, kw_only=True)
class MeasuredStepTime:
    accelerator: str = opt(help="accelerator it was measured on", choices=ACCELERATORS)
    model: str = opt("", help="model variant it was measured with (empty: the workload's model)")
    step_time_s: float = opt(help="seconds per training step (median)", unit="s", min=0, max=MAX_STEP_TIME_S)
    batch_size: int = opt(help="local batch size it was measured at", min=1, max=MAX_BATCH)
    source: str = opt(help="how, where and with what it was measured")
    precision: str = opt("fp32", help="training precision of the step (--precision picks the entry)",
                         choices=("fp32", "bf16", "fp16"))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str = opt(help="model name")
    parameters: int = opt(0, help="trainable parameters (checkpoint size = 4 B × parameters × 3 with Adam state)",
                          min=0, max=MAX_PARAMETERS)
    source: str = opt("", help="where the architecture comes from")


@dataclass(frozen=True, kw_only=True)
class Preset:
    samples: int = opt(help="number of training samples", min=1, max=MAX_SAMPLES)
    shapes: dict[str, tuple[int, ...]] = opt(factory=dict, help="per-array shape overrides (smaller samples)")
    classes: int | None = opt(None, help="class folders (jpeg_folders)", min=1)
    samples_per_file: int | None = opt(None, help="samples per file (hdf5_blocks)", min=1)
    batch_size: int | None = opt(None, help="local batch size override (small presets)", min=1)
    note: str = opt("", help="what the preset is for")


@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    name: str = opt(help="workload name")
    description: str = opt("", help="one line")
    layout: str = opt(help="file layout", choices=format_names)   # asked per check: formats registered later count
    arrays: tuple[ArraySpec, ...] = opt((), help="the arrays of one sample (HDF5 layouts)")
    samples: int = opt(help="training samples of the real dataset", min=1, max=MAX_SAMPLES)
    batch_size: int = opt(help="local batch size per rank of the reference", min=1, max=MAX_BATCH)
    samples_per_file: int = opt(1, help="samples per HDF5 file (hdf5_blocks)", min=1)
    shared_file: str = opt("train.h5", help="file name (hdf5_shared)")
    classes: int = opt(0, help="class folders (jpeg_folders)", min=0)
    jpeg: JpegSpec | None = opt(None, help="JPEG settings (jpeg_folders)")
    tfrecord: TFRecordSpec | None = opt(None, help="TFRecord read pattern (layout tfrecord)")
    webdataset: WebDatasetSpec | None = opt(None, help="webdataset read pattern (layout webdataset)")
    tokens: TokensSpec | None = opt(None, help="token read pattern (layouts mmap_indexed_binary, indexed_binary)")
    compute: dict[str, StepTime] = opt(factory=dict, help="published step time per accelerator")
    measured: tuple[MeasuredStepTime, ...] = opt((), help="step times measured with dlbench calibrate, used "
                                                        "where no published figure exists")
    model: ModelSpec | None = opt(None, help="the model trained on it")
    presets: dict[str, Preset] = opt(factory=dict, help="tiny, small, full")
    sources: tuple[str, ...] = opt((), help="where the figures come from")
    au_threshold: float | None = opt(None, help="minimum accelerator utilisation a run must keep (MLPerf Storage "
                                                "rules, DLIO metric.au); none: no published threshold", min=0, max=1)
    au_threshold_source: str = opt("", help="where the AU threshold comes from")
    record_size: SizeDistribution | None = opt(None, help="bytes of the data array per sample, drawn per file "
                                                          "(formats with record sizes: npy, npz); none: fixed. "
                                                          "A preset's shape for the data array scales it")


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A resolved workload: concrete shapes and counts (after a preset or ``--samples``)."""

    name: str
    layout: str
    arrays: tuple[ArraySpec, ...]
    samples: int
    batch_size: int
    samples_per_file: int
    shared_file: str
    classes: int
    jpeg: JpegSpec | None
    compute: dict
    model: ModelSpec | None
    scale: str
    spec_path: str
    measured: tuple = ()
    au_threshold: float | None = None
    au_threshold_source: str = ""
    record_size: SizeDistribution | None = None
    tfrecord: TFRecordSpec | None = None
    webdataset: WebDatasetSpec | None = None
    tokens: TokensSpec | None = None

    @property
    def format(self):
        """This workload's entry of the format registry (``dlbench.data.registry``)."""
        return get_format(self.layout)

    @property
    def sample_nbytes(self) -> int:
        """Bytes of one sample as stored (HDF5 arrays), or the format's mean (``mean_sample_nbytes``: JPEG's
        mean file size)."""
        # default: the arrays' sum; with a record_size, the data array's mean size (per-file sizes: the manifest)
        return int(self.format.driver().mean_sample_nbytes(self))

    @property
    def decoded_nbytes(self) -> int:
        """Bytes of the largest decoded row (buffers are sized by it; the format's ``decoded_row_nbytes``)."""
        # default: sample_nbytes; a decoding format with a record_size (tfrecord): room for the largest image
        return int(self.format.driver().decoded_row_nbytes(self))

    @property
    def files(self) -> int:
        per_file = self.format.samples_per_file
        if per_file == "all":
            return 1
        if per_file == "block":
            return math.ceil(self.samples / self.samples_per_file)
        return self.samples

    @property
    def dataset_nbytes(self) -> int:
        return self.sample_nbytes * self.samples

    @property
    def data_array(self) -> ArraySpec | None:
        for a in self.arrays:
            if a.role == "data":
                return a
        return None

    def local_batch(self, batch_size: int | None = None) -> int:
        """The local batch per rank: ``--batch-size`` where given, else the workload's (the one place this
        default is resolved: run, simulate and calibrate ask here)."""
        return int(batch_size) if batch_size is not None else int(self.batch_size)

    def step_time(self, accelerator: str, batch_size: int) -> float:
        """Emulated compute per step: the published step time scaled linearly to ``batch_size``
        (t = t_ref × batch_size / batch_ref)."""
        if accelerator not in self.compute:
            known = sorted(self.compute) or ["(none: pass --compute-time)"]
            raise unknown_choice(f"accelerator for workload {self.name}", accelerator, known)
        st: StepTime = self.compute[accelerator]
        return st.step_time_s * batch_size / st.batch_size

    def model_name(self) -> str:
        """The workload's reference model (``model.name``, else the workload name)."""
        return self.model.name if self.model is not None and self.model.name else self.name

    def choose_step_time(self, accelerator: str | None = None, model: str | None = None,
                         precision: str = "fp32") -> StepTimeChoice:
        """The step time sleep compute uses, and why.

        ``accelerator`` given: the published figure for it, else a measured one for it. Not given (the
        default): the published a100 figure, else another published one (h100, v100), else a measured
        entry (a100, h100, v100 in that order). Published figures are for the workload's reference model: with
        ``model`` naming another variant only measured entries of that model qualify. ``precision`` other than
        fp32: only measured entries of that precision qualify (published figures are the references' own
        runs). No match: ConfigError naming what exists and what to pass instead."""
        from .compute.models import _ALIASES, model_name_for  # no torch import

        ref = _ALIASES.get(self.model_name(), self.model_name())
        chosen = model_name_for(self, model) if model else ref   # an unknown --model: one line
        variant = chosen if chosen != ref else None
        want = ref if variant is None else variant
        published = {} if variant or precision != "fp32" else dict(self.compute)
        measured = {m.accelerator: m for m in self.measured if _ALIASES.get(m.model, m.model or ref) == want
                    and m.precision == precision}
        order = (accelerator,) if accelerator else ACCELERATORS_BY_PREFERENCE
        for kind, table in (("published", published), ("measured", measured)):
            for acc in order:
                if acc in table:
                    st = table[acc]
                    why = "" if accelerator else (
                        "default" if (kind, acc) == ("published", "a100") else
                        f"default: no published a100 step time for {self.name}" + (
                            f" model {variant}" if variant else ""))
                    return StepTimeChoice(acc, kind, float(st.step_time_s), int(st.batch_size), st.source,
                                          want, why)
        have = [f"{a} published" for a in sorted(published)] + [f"{a} measured" for a in sorted(measured)]
        what = f"workload {self.name}" + (f" model {variant}" if variant else "") + (
            f" in {precision}" if precision != "fp32" else "")
        head = (f"--accelerator={accelerator}: {what} has no step time for it" if accelerator
                else f"{what} has no step time (neither published nor measured)")
        raise ConfigError(f"{head} (known: {', '.join(have) or 'none'}); pass --compute-time SECONDS or "
                          f"--compute-profile FILE (from `dlbench calibrate --workload {self.name}`)")

    def checkpoint_nbytes(self) -> int:
        """Model weights + Adam moments in float32: 12 B per parameter."""
        return 12 * (self.model.parameters if self.model else 0)


ACCELERATORS_BY_PREFERENCE = ("a100", "h100", "v100")


@dataclass(frozen=True)
class StepTimeChoice:
    """Which step time sleep compute uses: ``accelerator``, ``kind`` (published or measured), the figure at
    ``batch_size``, its ``source``, the ``model`` it is for, and ``why`` (empty when asked for explicitly)."""

    accelerator: str
    kind: str
    step_time_s: float
    batch_size: int
    source: str
    model: str
    why: str = ""

    def scaled(self, batch_size: int) -> float:
        """t = t_ref × batch_size / batch_ref (linear in the batch)."""
        return self.step_time_s * batch_size / self.batch_size

    def describe(self, batch_size: int) -> str:
        why = f"; {self.why}" if self.why else ""
        return (f"{self.accelerator} {self.kind}{why}: {self.step_time_s:g} s at batch {self.batch_size} "
                f"({self.source}), scaled linearly to batch {batch_size}")


def builtin_names() -> list[str]:
    return sorted(p.stem for p in resource_dir("workloads").glob("*.yaml"))


def load_spec(name_or_path: str) -> tuple[WorkloadSpec, str]:
    """A built-in workload by name, or a user's YAML by path (strictly validated)."""
    p = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or p.is_file():
        path = p
    else:
        path = resource_dir("workloads") / f"{name_or_path}.yaml"
        if not path.is_file():
            raise unknown_choice("workload", name_or_path, builtin_names() + ["<path to a .yaml>"])
    data = load_yaml(path, "workload file")
    spec = from_mapping(WorkloadSpec, data, where=str(path))
    _check_spec(spec, str(path))
    return spec, str(path)


NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}"


def _check_name(name: str, where: str) -> None:
    """A workload name becomes a path component (results/<workload>/..., the default data dir): letters,
    digits, ``_ . + -``, starting with a letter or digit, so no ``/``, ``..`` or hidden names can escape
    the results or data root. Refused rather than slugified: two names slugifying alike would share a
    folder silently."""
    import re

    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name) or ".." in name:
        raise ConfigError(f"workload name={name!r} ({where}): must be 1-100 characters of letters, digits, "
                          f"'_', '.', '+', '-', start with a letter or digit and hold no '..' (it names "
                          f"folders under the results and data roots)")


def _section_owner(section: str) -> str:
    """The layout whose format module owns the workload section ``section`` (its ``SECTION``)."""
    from .data.registry import FORMATS

    return next((n for n, f in FORMATS.items() if f.driver().SECTION == section), "")


def _check_spec(spec: WorkloadSpec, where: str) -> None:
    _check_name(spec.name, where)
    drv = get_format(spec.layout).driver()
    if drv.HAS_ARRAYS:   # jpeg_folders: a sample is one file's bytes (its check_spec)
        if not spec.arrays:
            raise ConfigError(f"workload {spec.name} ({where}): layout {spec.layout} needs at least one array")
        if not any(a.role == "data" for a in spec.arrays):
            raise ConfigError(f"workload {spec.name} ({where}): one array must have role: data")
        names = [a.name for a in spec.arrays]
        if len(set(names)) != len(names):
            raise ConfigError(f"workload {spec.name} ({where}): array names repeat: {names}")
    owner = _section_owner("tfrecord")
    if spec.tfrecord is not None and spec.layout != owner:
        raise ConfigError(f"workload {spec.name} ({where}): a 'tfrecord' section needs layout: {owner} (the "
                          f"layout is {spec.layout})")
    if getattr(spec, "webdataset", None) is not None and spec.layout != "webdataset":
        raise ConfigError(f"workload {spec.name} ({where}): a 'webdataset' section needs layout: webdataset (the "
                          f"layout is {spec.layout})")
    if getattr(spec, "tokens", None) is not None and spec.layout not in ("mmap_indexed_binary", "indexed_binary"):
        raise ConfigError(f"workload {spec.name} ({where}): a 'tokens' section needs layout: mmap_indexed_binary or "
                          f"indexed_binary (the layout is {spec.layout})")
    _check_record_size(spec, where)
    drv.check_spec(spec, where)   # the format's own checks (default: none)
    for acc in spec.compute:
        if acc not in ACCELERATORS:
            raise unknown_choice(f"accelerator in compute of {where}", acc, ACCELERATORS)
    seen = set()
    for m in spec.measured:
        if m.model:
            from .compute.models import MODELS

            if m.model not in MODELS:
                raise unknown_choice(f"model in measured of {where}", m.model, MODELS)
        key = (m.accelerator, m.model or "", m.precision)
        if key in seen:
            raise ConfigError(f"workload {spec.name} ({where}): measured has two entries for accelerator "
                              f"{m.accelerator}" + (f" model {m.model}" if m.model else "") + f" {m.precision}")
        seen.add(key)
    for name, pre in spec.presets.items():
        if name not in SCALES:
            raise unknown_choice(f"preset in {where}", name, SCALES)
        for arr in pre.shapes:
            if arr not in [a.name for a in spec.arrays]:
                raise unknown_choice(f"array in preset {name} of {where}", arr, [a.name for a in spec.arrays])


def _check_record_size(spec: WorkloadSpec, where: str) -> None:
    """``record_size``: only for formats with record sizes, one 1-D data array, min <= mean <= max."""
    rs = spec.record_size
    if rs is None:
        return
    fmt = get_format(spec.layout)
    head = f"workload {spec.name} ({where}): record_size"
    if not fmt.record_sizes:
        ok = [n for n in format_names() if get_format(n).record_sizes]
        raise ConfigError(f"{head}: layout {spec.layout} has fixed sample sizes; record_size is for layouts "
                          f"{', '.join(ok)}")
    data = [a for a in spec.arrays if a.role == "data"]
    if len(data) != 1 or len(data[0].shape) != 1:
        raise ConfigError(f"{head}: needs exactly one data array of one dimension (its length is drawn per "
                          f"file), got {[(a.name, list(a.shape)) for a in data]}")
    item = np.dtype(data[0].dtype).itemsize
    if not rs.min_bytes <= rs.mean_bytes <= rs.max_bytes:
        raise ConfigError(f"{head}: min_bytes={rs.min_bytes:g} <= mean_bytes={rs.mean_bytes:g} <= max_bytes="
                          f"{rs.max_bytes:g} must hold")
    if rs.max_bytes < item or rs.max_bytes > MAX_SAMPLE_BYTES:
        raise ConfigError(f"{head}: max_bytes={rs.max_bytes:g} must be from {item} (one {data[0].dtype} element) "
                          f"to {MAX_SAMPLE_BYTES:,} (64 GiB)")




def resolve(spec: WorkloadSpec, *, scale: str | None = None, samples: int | None = None,
            spec_path: str = "") -> Workload:
    """Apply a preset (``scale``) and/or a sample count. Without either: the ``tiny`` preset if the spec
    has one, else the full size. ``samples`` alone keeps the full-size shapes."""
    if samples is not None and (isinstance(samples, bool) or samples < 1 or samples > MAX_SAMPLES):
        raise ConfigError(f"--samples={samples}: must be an integer from 1 to {MAX_SAMPLES}")
    if scale is not None and scale not in SCALES:
        raise unknown_choice("scale", scale, SCALES)
    arrays, n, spf, classes = spec.arrays, spec.samples, spec.samples_per_file, spec.classes
    batch = spec.batch_size
    chosen = scale or ("full" if samples is not None else ("tiny" if "tiny" in spec.presets else "full"))
    pre = spec.presets.get(chosen)
    if pre is not None:
        arrays = tuple(dataclasses.replace(a, shape=pre.shapes.get(a.name, a.shape)) for a in arrays)
        n = pre.samples
        spf = pre.samples_per_file or spf
        classes = pre.classes or classes
        batch = pre.batch_size or batch
    elif chosen != "full":
        raise unknown_choice(f"scale for workload {spec.name}", chosen, sorted(set(spec.presets) | {"full"}))
    if samples is not None:
        n = samples
    where = f"{spec_path or spec.name}" + (f" presets.{chosen}" if pre is not None else "")
    record_size = spec.record_size
    if record_size is not None and pre is not None:   # a preset's data shape scales the size distribution
        old = next(a for a in spec.arrays if a.role == "data")
        new = next(a for a in arrays if a.role == "data")
        if new.shape != old.shape:
            k = new.nbytes / old.nbytes
            item = float(np.dtype(new.dtype).itemsize)
            record_size = dataclasses.replace(
                record_size, mean_bytes=max(item, record_size.mean_bytes * k), std_bytes=record_size.std_bytes * k,
                min_bytes=max(1.0, record_size.min_bytes * k), max_bytes=max(item, record_size.max_bytes * k))
    total = 0
    for a in arrays:
        if not a.shape or any(int(d) < 1 for d in a.shape):
            raise ConfigError(f"arrays {a.name} shape={list(a.shape)} (in {where}): every dimension must be >= 1")
        total += int(np.prod([int(d) for d in a.shape], dtype=object)) * np.dtype(a.dtype).itemsize
    if total > MAX_SAMPLE_BYTES:
        raise ConfigError(f"arrays of {spec.name} (in {where}): {total:,} bytes per sample; at most "
                          f"{MAX_SAMPLE_BYTES:,} (64 GiB) are allowed")
    return Workload(name=spec.name, layout=spec.layout, arrays=arrays, samples=n,
                    batch_size=batch, samples_per_file=spf, shared_file=spec.shared_file,
                    classes=classes, jpeg=spec.jpeg, compute=dict(spec.compute), model=spec.model,
                    scale=chosen if samples is None else f"{chosen}+samples", spec_path=spec_path,
                    measured=tuple(spec.measured), au_threshold=spec.au_threshold,
                    au_threshold_source=spec.au_threshold_source, record_size=record_size,
                    tfrecord=spec.tfrecord, webdataset=spec.webdataset, tokens=spec.tokens)


def tfrecord_options(workload) -> TFRecordSpec:
    """The workload's TFRecord read settings (defaults where its YAML has no ``tfrecord`` section)."""
    return getattr(workload, "tfrecord", None) or TFRecordSpec()


def load(name_or_path: str, *, scale: str | None = None, samples: int | None = None) -> Workload:
    spec, path = load_spec(name_or_path)
    return resolve(spec, scale=scale, samples=samples, spec_path=path)


def workload_id(name: str) -> int:
    """A stable 32-bit id of the workload name (seeds content: bytes depend on (workload, seed, i))."""
    import zlib

    return zlib.crc32(name.encode())
