"""DLIO workload configs as input: translate a DLIO (argonne-lcf/dlio_benchmark) workload YAML into a dlbench
workload and the run settings that reproduce it. Pure: no I/O beyond reading the YAML, no MPI, no clocks.

DLIO's schema is the ``workload`` group of its Hydra config; every key ``LoadConfig`` reads
(``dlio_benchmark/utils/config.py``) is listed in ``KEYS`` with what dlbench does with it:

- ``map``: translated (dataset, reader, train, checkpoint, metric.au);
- ``note``: has no effect on what dlbench measures (names, DLIO's own folders); said in the notes;
- ``unsupported``: changes DLIO's I/O or timing in a way dlbench does not emulate. A value other than the
  no-op one (``noop``) is an error listing every such key at once, or a warning with ``allow_unsupported``.

A key DLIO does not read is an error with a did-you-mean (DLIO silently ignores it: ``record_length_bytes`` on
DLIO 2.0.0, whose key is ``record_length``, gives 4 KiB files; ``model.model_size`` in DLIO's own unet3d configs
is never read, DLIO reads ``model.model_size_bytes``). Both spellings of the record length are accepted
(``record_length``, ``checkpoint.model_size`` of DLIO <= 2.0; ``record_length_bytes``,
``model.model_size_bytes`` after), one schema per file.

Format → dlbench layout: ``hdf5`` → ``hdf5_per_sample`` (1 sample per file) or ``hdf5_blocks``; ``npz``,
``npy``, ``tfrecord`` → the layouts of the same name (format registry). DLIO's reader → dlbench's ``prefetch``
strategy (a torch DataLoader: ``read_threads`` workers kept across epochs as DLIO's, ``prefetch_size`` batches in
flight in all, every rank's last partial batch dropped as DLIO 2.0.0's loaders drop it: ``drop_last_batch``).

Hydra overrides as DLIO users type them: ``++workload.dataset.num_files_train=16`` (also ``+`` or none) sets,
``~workload.model.model_size`` deletes.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .config import load_yaml
from .errors import ConfigError, did_you_mean

# DLIO defaults (dlio_benchmark/utils/config.py ConfigArguments) for the keys dlbench maps
DEFAULTS = {
    "dataset.format": "tfrecord", "dataset.num_files_train": 8, "dataset.num_samples_per_file": 1,
    "dataset.record_length_bytes": 64 * 1024, "dataset.record_length_bytes_stdev": 0,
    "dataset.record_length_bytes_resize": 0, "dataset.record_element_type": "uint8",
    "reader.batch_size": 1, "reader.read_threads": 1, "reader.prefetch_size": 2,
    "reader.file_shuffle": "off", "reader.sample_shuffle": "off", "reader.shuffle_size": 1024,
    "reader.data_loader": "tensorflow", "train.epochs": 1, "train.total_training_steps": -1,
    "train.computation_time": 0.0, "train.seed": 123, "metric.au": 0.90, "framework": "tensorflow",
    "checkpoint.checkpoint_after_epoch": 1, "checkpoint.epochs_between_checkpoints": 1,
    "checkpoint.steps_between_checkpoints": -1, "model.model_size_bytes": 10240,
    "workflow.train": True, "workflow.checkpoint": False,
    "workflow.evaluation": False, "dataset.num_files_eval": 0, "reader.batch_size_eval": 1,
    "evaluation.eval_time": 0.0, "evaluation.eval_time_stdev": 0.0, "evaluation.eval_after_epoch": 1,
    "evaluation.epochs_between_evals": 1,
}

_NOOP_FALSE = (False, None, 0, "", "False", "false")


@dataclass(frozen=True)
class Key:
    kind: str                      # map | note | unsupported
    why: str = ""                  # for note/unsupported: what dlbench does instead
    noop: tuple = ()               # unsupported: values that change nothing (no error)


def _u(why: str, *noop) -> Key:
    return Key("unsupported", why, tuple(noop))


def _n(why: str) -> Key:
    return Key("note", why)


_M = Key("map")

# every key DLIO's LoadConfig reads (dotted, relative to the workload file's root)
KEYS: dict[str, Key] = {
    "framework": _n("dlbench reads with a torch DataLoader (reader.data_loader decides)"),
    # storage: local_fs (a POSIX --data-dir) or s3 (storage_root = the bucket, dataset.data_folder = the prefix:
    # --data-dir s3://bucket/prefix); translated by _storage
    "storage.storage_type": _M,
    "storage.storage_root": _M,
    "storage.storage_options": _M,
    "dataset.record_length_bytes": _M, "dataset.record_length_bytes_stdev": _M,
    "dataset.record_length_bytes_resize": _n("DLIO's in-memory size after its emulated resize: no I/O effect "
                                             "(DLIO multiplies samples/s by record_length for its MB/s)"),
    "dataset.num_files_train": _M, "dataset.num_samples_per_file": _M, "dataset.format": _M,
    "dataset.record_dims": _M, "dataset.record_element_type": _M,
    "dataset.record_element_bytes": _n("implied by record_element_type"),
    "dataset.num_files_eval": _M,
    # keys of DLIO's dlrm workload (read by the DLIO versions with its indexed_binary format)
    "dataset.eval_num_samples_per_file": _u("DLIO's dlrm evaluation files are not emulated", None),
    "workflow.do_eval": _u("dlrm's evaluation switch: dlbench emulates DLIO's workflow.evaluation", *_NOOP_FALSE),
    "train.total_eval_steps": _u("a fixed count of evaluation steps is not emulated (dlbench reads the "
                                 "evaluation files once per evaluation)", None, -1, 0),
    "evaluation.steps_between_evals": _u("evaluation every N steps is not emulated", None, -1, 0),
    "dataset.generation_buffer_size": _n("generation detail"),
    "dataset.data_folder": _n("dlbench generates its own dataset under --data-dir (default: its data cache)"),
    "dataset.num_subfolders_train": _u("dlbench writes one flat folder", 0),
    "dataset.num_subfolders_eval": _u("dlbench writes the evaluation files in one flat folder", 0),
    "dataset.enable_chunking": _u("HDF5 chunking is not emulated", *_NOOP_FALSE),
    "dataset.chunk_size": _u("HDF5 chunking is not emulated", 0),
    "dataset.compression": _u("compressed files are not emulated", "none", None),
    "dataset.compression_level": _n("only with compression"),
    "dataset.file_prefix": _n("dlbench names its files itself"),
    "dataset.keep_files": _n("generation detail"),
    "dataset.hdf5.chunk_dims": _u("HDF5 chunking is not emulated", None),
    "dataset.hdf5.num_dset_per_record": _u("one dataset per record", 1),
    "dataset.hdf5.max_shape": _u("resizable HDF5 datasets are not emulated", None),
    "reader.dont_use_mmap": _n("dlbench's readers choose their own read path"),
    "reader.reader_classname": _u("custom reader classes are not emulated", None, ""),
    "reader.multiprocessing_context": _n("torch DataLoader default context"),
    "reader.data_loader": _M,
    "reader.data_loader_classname": _u("custom data loader classes are not emulated", None, ""),
    "reader.data_loader_sampler": _u("DLIO's iterative/index samplers: dlbench uses DistributedSampler order",
                                     None, "index"),
    "reader.read_threads": _M, "reader.computation_threads": _n("TensorFlow's parallel map threads"),
    "reader.batch_size": _M, "reader.batch_size_eval": _M,
    "reader.prefetch_size": _M, "reader.file_shuffle": _M, "reader.sample_shuffle": _M,
    "reader.shuffle_size": _M,
    "reader.file_access": _u("DLIO's shared-file/MPI-IO access modes are not emulated", "multi"),
    "reader.read_type": _u("DLIO's in-memory (read once) reads are not emulated", "on_demand"),
    "reader.transfer_size": _u("DLIO's transfer size is not emulated", None, 0),
    "reader.odirect": _u("O_DIRECT reads are not emulated", *_NOOP_FALSE),
    "reader.preprocess_time": _u("per-sample preprocessing time is not emulated", 0, 0.0, None, {}),
    "reader.preprocess_time_stdev": _u("per-sample preprocessing time is not emulated", 0, 0.0),
    "reader.pin_memory": _n("only meaningful with CUDA; dlbench's prefetch has --pin-memory"),
    "reader.transformed_record_dims": _u("DLIO's record transformation is not emulated", None),
    "reader.transformed_record_element_type": _u("DLIO's record transformation is not emulated", None),
    "train.epochs": _M, "train.total_training_steps": _M, "train.seed_change_epoch": _M,
    "train.computation_time": _M, "train.computation_time_stdev": _M, "train.seed": _M,
    "evaluation.eval_time": _M, "evaluation.eval_time_stdev": _M, "evaluation.eval_after_epoch": _M,
    "evaluation.epochs_between_evals": _M,
    "checkpoint.checkpoint_folder": _n("dlbench writes checkpoints in the run folder"),
    "checkpoint.checkpoint_after_epoch": _M, "checkpoint.epochs_between_checkpoints": _M,
    "checkpoint.steps_between_checkpoints": _M,
    "checkpoint.type": _M,
    "checkpoint.checkpoint_mechanism_classname": _u("custom checkpoint classes are not emulated", None, ""),
    "checkpoint.fsync": _n("dlbench fsyncs every checkpoint (DLIO stores this key as checkpoint_sync)"),
    "checkpoint.time_between_checkpoints": _u("time-based checkpoints are not emulated", -1, None),
    "checkpoint.num_checkpoints_write": _u("checkpoint-only runs are not emulated", -1, None),
    "checkpoint.num_checkpoints_read": _u("checkpoint reads are not emulated", -1, 0, None),
    "checkpoint.recovery_rank_shift": _u("checkpoint recovery is not emulated", *_NOOP_FALSE),
    "checkpoint.rank_sync": _n("dlbench's checkpoint is a step of every rank"),
    "checkpoint.mode": _u("DLIO's checkpoint modes are not emulated", "default", None),
    "checkpoint.randomize_tensor": _n("checkpoint content"),
    "checkpoint.ksm.madv_mergeable_id": _u("KSM is not emulated", None),
    "checkpoint.ksm.high_ram_trigger": _u("KSM is not emulated", None),
    "checkpoint.ksm.low_ram_exit": _u("KSM is not emulated", None),
    "checkpoint.ksm.await_time": _u("KSM is not emulated", None),
    "model.name": _M, "model.type": _n("metadata"), "model.model_size_bytes": _M,
    "model.optimization_groups": _M,
    "model.num_layers": _M,
    "model.layer_parameters": _M,
    "model.model_datatype": _n("checkpoint dtype"), "model.optimizer_datatype": _n("checkpoint dtype"),
    "model.parallelism.tensor": _M,
    "model.parallelism.pipeline": _M,
    "model.parallelism.data": _n("data parallel = ranks / (tensor x pipeline)"),
    "model.parallelism.zero_stage": _M,
    **{f"model.transformer.{k}": _M
       for k in ("vocab_size", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads")},
    "output.folder": _n("dlbench writes results/<workload>/<strategy>/<stamp> (--out)"),
    "output.log_file": _n("dlbench prints to stdout"),
    "output.metric.exclude_start_steps": _u("dlbench counts every step (first_step_stall_s shows step 0)", 0),
    "output.metric.exclude_end_steps": _u("dlbench counts every step", 0),
    "workflow.train": _M, "workflow.generate_data": _n("dlbench generates on first use (or `dlbench generate`)"),
    "workflow.evaluation": _M,
    "workflow.checkpoint": _M,
    "workflow.profiling": _u("DLIO's profilers are not run (dlbench records its own phases and counters)",
                             *_NOOP_FALSE),
    "profiling.profiler": _n("only with workflow.profiling"),
    "profiling.iostat_devices": _n("only with workflow.profiling"),
    "metric.au": _M,
    # the DLIO <= 2.0 spellings of the record length (one spelling per file)
    "dataset.record_length": _M, "dataset.record_length_stdev": _M, "dataset.record_length_resize": _n(
        "DLIO's in-memory size after its emulated resize: no I/O effect"), "checkpoint.model_size": _M,
    # keys DLIO 2.0.0 reads that later DLIO moved or dropped
    "workflow.debug": _n("DLIO 2.0.0 waits for Enter before starting"),
    # DLIO 2.0.0's checkpoint shape (translated by _dlio2_checkpoint)
    "checkpoint.optimization_groups": _M, "checkpoint.num_layers": _M, "checkpoint.layer_parameters": _M,
    "checkpoint.tensor_parallelism": _M, "checkpoint.pipeline_parallelism": _M,
}
# DLIO reads `reader` or its old name `data_reader`
KEYS.update({"data_reader." + k[len("reader."):]: v for k, v in list(KEYS.items()) if k.startswith("reader.")})
_OPEN = ("storage.storage_options", "reader.preprocess_time", "train.computation_time")
_ALIASES = {"dataset.record_length": "dataset.record_length_bytes",
            "dataset.record_length_stdev": "dataset.record_length_bytes_stdev",
            "dataset.record_length_resize": "dataset.record_length_bytes_resize",
            "checkpoint.model_size": "model.model_size_bytes"}
LAYOUT_OF = {"npz": "npz", "npy": "npy", "tfrecord": "tfrecord"}
DLIO_FORMATS: tuple[str, ...] = ("hdf5", "npz", "npy", "tfrecord")
# token datasets (dlbench/data/fmt_indexed.py): DLIO's megatron_deepspeed.yaml and dlrm.yaml
LAYOUT_OF.update({"indexed_binary": "indexed_binary", "mmap_indexed_binary": "mmap_indexed_binary"})
DLIO_FORMATS += ("indexed_binary", "mmap_indexed_binary")
SHUFFLES = ("off", "seed", "random")
DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
          "float64")


@dataclass
class Translation:
    """A DLIO config translated: ``workload`` (a dlbench workload YAML mapping), ``run`` (the run settings:
    epochs, batch_size, compute_time_s, compute_stdev_s, strategy, options, checkpoint_every_epochs,
    max_steps), ``au_threshold``, ``notes`` (keys without effect on the measurement) and ``unsupported``
    (keys dlbench does not emulate, with their values)."""

    workload: dict
    run: dict
    au_threshold: float
    source: str
    notes: list = field(default_factory=list)
    unsupported: list = field(default_factory=list)

    def run_flags(self) -> list[str]:
        """The ``dlbench run`` flags that reproduce the run settings."""
        r = self.run
        out = ["--strategy", r["strategy"], "--epochs", str(r["epochs"]), "--seed", str(r["seed"]),
               "--compute-time", f"{r['compute_time_s']:g}"]
        if r["compute_stdev_s"]:
            out += ["--compute-stdev", f"{r['compute_stdev_s']:g}"]
        from . import strategies
        from .config import option_flag

        opts = strategies.get(r["strategy"]).Options
        for k, v in r["options"].items():
            flag = option_flag(opts, k)
            out += [flag if v else f"--no-{flag[2:]}"] if isinstance(v, bool) else [flag, str(v)]
        return out


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in _OPEN and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def apply_overrides(cfg: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    """Hydra-style overrides on a DLIO workload mapping: ``++workload.a.b=v`` / ``+workload.a.b=v`` /
    ``workload.a.b=v`` set (values parsed as YAML, as Hydra does), ``~workload.a.b`` deletes. The
    ``workload.`` prefix names the workload file's root (DLIO's config group); other groups are errors."""
    cfg = copy.deepcopy(cfg)
    for raw in overrides:
        s = raw.strip()
        m = re.fullmatch(r"(\+\+|\+|~)?([A-Za-z0-9_.]+)(?:=(.*))?", s, re.S)
        if not m:
            raise ConfigError(f"override {raw!r}: expected ++workload.KEY=VALUE or ~workload.KEY")
        op, key, value = m.group(1) or "", m.group(2), m.group(3)
        if not key.startswith("workload."):
            raise ConfigError(f"override {raw!r}: only keys under 'workload.' (the DLIO workload file) are "
                              f"read; hydra/other config groups are not")
        parts = key[len("workload."):].split(".")
        if op == "~":
            found: object = cfg
            for p in parts[:-1]:
                found = found.get(p) if isinstance(found, dict) else None
            if not isinstance(found, dict) or parts[-1] not in found:
                raise ConfigError(f"override {raw!r}: key {'.'.join(parts)} is not in the config (nothing to "
                                  f"delete)")
            del found[parts[-1]]
            continue
        if value is None:
            raise ConfigError(f"override {raw!r}: expected KEY=VALUE")
        node = cfg
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {raw!r}: {p} holds a value, not a section")
            node = nxt
        if op == "" and parts[-1] not in node:
            raise ConfigError(f"override {raw!r}: key {'.'.join(parts)} is not in the config; add it with "
                              f"++{key}=...")
        node[parts[-1]] = yaml.safe_load(value) if value != "" else ""
    return cfg


# DLIO's numeric keys: (an integer?, the lowest value allowed); ``_num`` reads each through this one table
NUMBERS: dict[str, tuple[bool, float]] = {
    "dataset.num_files_train": (True, 1),
    "dataset.num_samples_per_file": (True, 1),
    "dataset.record_length_bytes": (False, 1),
    "dataset.record_length_bytes_stdev": (False, 0),
    "reader.batch_size": (True, 1),
    "reader.read_threads": (True, 0),
    "reader.prefetch_size": (True, 0),
    "reader.shuffle_size": (True, 1),
    "train.epochs": (True, 1),
    "train.total_training_steps": (True, -1),
    "train.computation_time": (False, 0),
    "train.computation_time.mean": (False, 0),
    "train.computation_time.stdev": (False, 0),
    "train.computation_time_stdev": (False, 0),
    "metric.au": (False, 0),
    "checkpoint.checkpoint_after_epoch": (True, 0),
    "checkpoint.epochs_between_checkpoints": (True, 1),
    "dataset.num_files_eval": (True, 0),
    "reader.batch_size_eval": (True, 1),
    "evaluation.eval_time": (False, 0),
    "evaluation.eval_time_stdev": (False, 0),
    "evaluation.eval_after_epoch": (True, 0),
    "evaluation.epochs_between_evals": (True, 1),
}


# a number in exponent form without a dot (``5e-3``): YAML 1.1 (PyYAML) reads it as a string, DLIO (OmegaConf's
# float resolver) as 0.005
_EXP_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_TRANSFORMER = {"hidden": "model.transformer.hidden_size", "ffn": "model.transformer.ffn_hidden_size",
                "vocab": "model.transformer.vocab_size", "heads": "model.transformer.num_attention_heads"}


def _checkpoint_model(flat: dict, where: str) -> dict | None:
    """DLIO's LLM checkpoint (``model.num_layers`` > 0 with ``model.transformer.*`` and ``model.parallelism.*``)
    as ``dlbench.checkpoint.models.get_model``'s keyword arguments, or None (no LLM shape given: the checkpoint
    is ``model_size_bytes``). Missing shape keys are one error: no default shape is made up."""
    layers = flat.get("model.num_layers")
    given = [k for k in flat if k.startswith("model.transformer.")]
    if not given and layers in (None, 1, -1, 0):
        return None
    missing = [key for key in ("model.num_layers", *_TRANSFORMER.values()) if flat.get(key) is None]
    if missing:
        raise ConfigError(f"{where}: an LLM checkpoint needs {', '.join(missing)} (dlbench sizes every rank's "
                          f"shards from the transformer's shape)")
    out = {"layers": flat["model.num_layers"], **{k: flat[v] for k, v in _TRANSFORMER.items()},
           "kv_heads": flat.get("model.transformer.num_kv_heads") or flat["model.transformer.num_attention_heads"],
           "tp": flat.get("model.parallelism.tensor", 1), "pp": flat.get("model.parallelism.pipeline", 1),
           "zero": flat.get("model.parallelism.zero_stage", 0)}
    for k, v in out.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if k == "zero" else 1):
            key = dict(_TRANSFORMER, layers="model.num_layers", tp="model.parallelism.tensor",
                       pp="model.parallelism.pipeline", zero="model.parallelism.zero_stage",
                       kv_heads="model.transformer.num_kv_heads")[k]
            raise ConfigError(f"{where}: {key}={v!r}: must be an integer >= {0 if k == 'zero' else 1}")
    return out


# DLIO 2.0.0's checkpoint shape: each key's 2.0.0 spelling (checkpoint.*), the model.* spelling, its default
_DLIO2_SHAPE = {"type": ("checkpoint.type", None, "rank_zero"),
                "optimization_groups": ("checkpoint.optimization_groups", "model.optimization_groups", []),
                "num_layers": ("checkpoint.num_layers", "model.num_layers", 1),
                "layer_parameters": ("checkpoint.layer_parameters", "model.layer_parameters", [17371, 24740228]),
                "tp": ("checkpoint.tensor_parallelism", "model.parallelism.tensor", 1),
                "pp": ("checkpoint.pipeline_parallelism", "model.parallelism.pipeline", 1)}
_DLIO2_GIVEN = ("checkpoint.type", "checkpoint.optimization_groups", "checkpoint.num_layers",
                "checkpoint.layer_parameters", "checkpoint.tensor_parallelism", "checkpoint.pipeline_parallelism",
                "model.optimization_groups", "model.layer_parameters")


def _dlio2_checkpoint(flat: dict, model_bytes, where: str, v2_spelling: bool = False) -> dict | None:
    """DLIO 2.0.0's checkpoint (``checkpoint.type`` / ``optimization_groups`` / ``num_layers`` /
    ``layer_parameters`` / ``tensor_parallelism`` / ``pipeline_parallelism``, or their model.* spellings) as
    the spec ``dlbench.run.checkpoint.dlio2_files`` writes, or None when none of these keys is given and the
    file is not in DLIO 2.0.0's spelling (``v2_spelling``: ``record_length``, ``checkpoint.model_size``). Keys
    not given take DLIO 2.0.0's defaults (``rank_zero``, 1 layer of [17371, 24740228] parameters: what DLIO
    2.0.0 writes beside the model for its unet3d files too)."""
    shaped = any(k in flat for k in _DLIO2_GIVEN)
    transformer = any(k.startswith("model.transformer.") for k in flat)
    if not shaped and (not v2_spelling or transformer):
        return None
    if transformer:
        raise ConfigError(f"{where}: model.transformer.* (an LLM checkpoint sized from its shape) and DLIO 2.0.0's "
                          f"{', '.join(k for k in _DLIO2_GIVEN if k in flat)}: give one checkpoint shape")
    spec: dict = {}
    for name, (key, alt, default) in _DLIO2_SHAPE.items():
        used = key if key in flat else alt if alt is not None and alt in flat else key
        v = flat.get(used, default)
        if name == "type":
            if v not in ("rank_zero", "all_ranks"):
                raise ConfigError(f"{where}: {used}={v!r}: DLIO allows rank_zero, all_ranks")
        elif name in ("optimization_groups", "layer_parameters"):
            if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise ConfigError(f"{where}: {used}={v!r}: must be a list of integers (element counts)")
        elif not isinstance(v, int) or isinstance(v, bool) or v < (0 if name == "num_layers" else 1):
            raise ConfigError(f"{where}: {used}={v!r}: must be an integer >= {0 if name == 'num_layers' else 1}")
        spec[name] = v
    for name in ("pp", "tp"):   # DLIO 2.0.0's own check (ConfigArguments.validate)
        if spec["num_layers"] % spec[name]:
            key, alt = _DLIO2_SHAPE[name][0], _DLIO2_SHAPE[name][1]
            key = key if key in flat or alt is None else alt
            raise ConfigError(f"{where}: {key}={spec[name]}: must divide the number of layers "
                              f"({spec['num_layers']}), as DLIO requires")
    if not isinstance(model_bytes, int) or isinstance(model_bytes, bool) or model_bytes < 0:
        raise ConfigError(f"{where}: checkpoint.model_size={model_bytes!r}: must be an integer >= 0")
    spec["model_size"] = model_bytes
    return spec


def _num(key: str, v, where: str):
    """The value ``v`` of the numeric DLIO key ``key`` as its ``NUMBERS`` entry says (int or float, bounded
    below; ``5e-3`` read as DLIO reads it), or a one-line ConfigError."""
    integer, lo = NUMBERS[key]
    if isinstance(v, str) and _EXP_FLOAT.fullmatch(v.strip()):
        v = float(v)
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if ok and integer and float(v) != int(v):
        ok = False
    if not ok or v < lo:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{key}={v!r} ({where}): must be {kind} >= {lo}")
    return int(v) if integer else float(v)


def _compute_time(flat: dict, where: str) -> tuple[float, float]:
    """DLIO's train.computation_time: a number (mean) or {mean, stdev, type}; plus computation_time_stdev."""
    ct = flat.get("train.computation_time", 0.0)
    if isinstance(ct, dict):
        unknown = set(ct) - {"mean", "stdev", "type"}
        if unknown:
            k = sorted(unknown)[0]
            raise ConfigError(f"train.computation_time.{k} ({where}): unknown key; DLIO reads mean, stdev, type"
                              f"{did_you_mean(k, ['mean', 'stdev', 'type'])}")
        kind = str(ct.get("type", "normal")).lower()
        if kind != "normal":
            raise ConfigError(f"train.computation_time.type={kind!r} ({where}): dlbench emulates normal only")
        mean = _num("train.computation_time.mean", ct.get("mean", 0.0), where)
        std = _num("train.computation_time.stdev", ct.get("stdev", 0.0), where)
    else:
        mean = _num("train.computation_time", ct, where)
        std = 0.0
    if "train.computation_time_stdev" in flat:
        std = _num("train.computation_time_stdev", flat["train.computation_time_stdev"], where)
    return mean, std


def check_keys(flat: dict, where: str) -> None:
    """Unknown keys: one error naming them all, each with a did-you-mean."""
    known = list(KEYS)
    bad = [k for k in flat if k not in KEYS and not any(k.startswith(o + ".") for o in _OPEN)]
    if bad:
        items = []
        for k in bad:
            section = k.rsplit(".", 1)[0] if "." in k else ""
            same = [c for c in known if (c.rsplit(".", 1)[0] if "." in c else "") == section] or known
            hint = did_you_mean(k, same)
            items.append(f"{k}{hint}")
        raise ConfigError(f"{where}: key(s) DLIO does not read (DLIO would ignore them silently): "
                          f"{'; '.join(items)}")
    old = [k for k in flat if k in _ALIASES]
    new = [k for k in flat if k in _ALIASES.values()]
    if old and new:
        raise ConfigError(f"{where}: mixes DLIO <= 2.0 keys ({', '.join(old)}) with keys of later DLIO "
                          f"({', '.join(new)}); each DLIO version reads one spelling and ignores the other: "
                          f"use one schema")


S3_OPTIONS = {"endpoint_url": "AWS_ENDPOINT_URL", "region": "AWS_REGION", "access_key_id": "AWS_ACCESS_KEY_ID",
              "secret_access_key": "AWS_SECRET_ACCESS_KEY", "s3_force_path_style": None}


def _storage(flat: dict, where: str, notes: list, unsupported: list) -> dict:
    """DLIO's ``storage`` section -> ``{"data_dir": "s3://bucket/prefix" | None, "storage_env": {AWS_*: value}}``.
    local_fs: the dataset lives under --data-dir (storage_root is a note; storage_options are not emulated). s3:
    storage_root is the bucket, dataset.data_folder the prefix; storage_options' endpoint, region and credentials
    become the AWS_* variables the S3 backend reads (where the environment does not set them already)."""
    kind = str(flat.get("storage.storage_type") or "local_fs")
    root = flat.get("storage.storage_root")
    opts = flat.get("storage.storage_options") or {}
    if kind == "local_fs":
        if root is not None:
            notes.append(f"storage.storage_root={root!r}: dlbench's dataset lives under --data-dir")
        if opts:
            unsupported.append(f"storage.storage_options={opts!r} (options of an object store; storage_type is "
                               f"local_fs)")
        return {"data_dir": None, "storage_env": {}}
    if kind != "s3":
        raise ConfigError(f"{where}: storage.storage_type={kind!r}: dlbench reads local_fs or s3")
    if not root or not isinstance(root, str):
        raise ConfigError(f"{where}: storage.storage_root={root!r}: with storage_type s3 it names the bucket")
    if not isinstance(opts, dict):
        raise ConfigError(f"{where}: storage.storage_options={opts!r}: a mapping of S3 options "
                          f"({', '.join(S3_OPTIONS)})")
    env = {}
    for k, v in opts.items():
        if k not in S3_OPTIONS:
            unsupported.append(f"storage.storage_options.{k}={v!r} (dlbench's S3 backend reads "
                               f"{', '.join(S3_OPTIONS)})")
        elif S3_OPTIONS[k] is not None and v is not None:
            env[S3_OPTIONS[k]] = str(v)
    folder = str(flat.get("dataset.data_folder") or "").strip().removeprefix("./").strip("/")
    bucket = root.removeprefix("s3://").strip("/")
    return {"data_dir": f"s3://{bucket}/{folder}" if folder else f"s3://{bucket}", "storage_env": env}


def translate(cfg: dict, *, where: str = "DLIO config", name: str | None = None, allow_unsupported: bool = False,
              accelerator: str | None = None) -> Translation:
    """Translate a DLIO workload mapping (after overrides). ConfigError for unknown keys, bad values and
    (without ``allow_unsupported``) keys dlbench does not emulate."""
    if isinstance(cfg.get("model"), str):
        # DLIO 2.0.0's own workload files name the model with a scalar (``model: unet3d``); later DLIO has a
        # ``model`` section (``model.name``)
        cfg = {**cfg, "model": {"name": cfg["model"]}}
    flat = _flatten(cfg)
    check_keys(flat, where)
    dlio_2_0 = "dataset.record_length" in flat   # DLIO <= 2.0's spelling: its generators' record sizes apply
    v2_spelling = any(k in flat for k in _ALIASES)   # DLIO 2.0.0's checkpoint defaults apply (_dlio2_checkpoint)
    for old_key, new_key in _ALIASES.items():
        if old_key in flat:
            flat[new_key] = flat.pop(old_key)
    unsupported = []
    notes = []
    for k, v in flat.items():
        spec = KEYS.get(k)
        if spec is None:
            continue
        if spec.kind == "unsupported" and v not in spec.noop:
            unsupported.append(f"{k}={v!r} ({spec.why})")
        elif spec.kind == "note":
            notes.append(f"{k}={v!r}: {spec.why}")

    storage = _storage(flat, where, notes, unsupported)

    def get(key):
        return flat.get(key, DEFAULTS.get(key))

    def num(key):
        return _num(key, get(key), where)

    fmt = str(get("dataset.format")).lower()
    if fmt not in DLIO_FORMATS:   # no layout to write or read: --allow-unsupported cannot run without one
        raise ConfigError(f"dataset.format={fmt!r} ({where}): dlbench writes and reads {', '.join(DLIO_FORMATS)}; "
                          f"a run needs one of them (--allow-unsupported does not apply to the format): override "
                          f"it with ++workload.dataset.format=npz")
    if not get("workflow.train"):
        raise ConfigError(f"workflow.train=False ({where}): dlbench runs training; DLIO's generate-only or "
                          f"checkpoint-only runs are not emulated")
    loader = str(get("reader.data_loader") or flat.get("data_reader.data_loader") or "tensorflow").lower()
    # TFRecord through tf.data: emulated by the tfrecord layout's tfdata read pattern (dlbench.plan.tfdata)
    tf_pipeline = fmt == "tfrecord" and loader == "tensorflow"
    if loader != "pytorch" and not tf_pipeline:
        unsupported.append(f"reader.data_loader={loader!r} (dlbench reads with a torch DataLoader: pass "
                           f"++workload.reader.data_loader=pytorch)")
    rd = {k[len("data_reader."):]: v for k, v in flat.items() if k.startswith("data_reader.")}
    for k, v in rd.items():
        flat.setdefault("reader." + k, v)
    for key in ("reader.file_shuffle", "reader.sample_shuffle"):
        v = str(get(key)).lower()
        if v not in SHUFFLES:
            raise ConfigError(f"{key}={v!r} ({where}): DLIO allows {', '.join(SHUFFLES)}")
    if tf_pipeline:
        notes.append(f"reader.data_loader='tensorflow' with format tfrecord: read as tf.data does (tfrecord.read: "
                     f"tfdata): files sharded over the ranks, one stream per reader.read_threads, a shuffle buffer "
                     f"of reader.shuffle_size records (sample_shuffle={get('reader.sample_shuffle')!r}), file "
                     f"shuffle {'on' if str(get('reader.file_shuffle')).lower() != 'off' else 'off'}")
    elif str(get("reader.sample_shuffle")).lower() == "off":
        unsupported.append("reader.sample_shuffle='off' (dlbench always reads a seeded permutation of all "
                           "samples per epoch; pass ++workload.reader.sample_shuffle=seed)")
    else:
        notes.append(f"reader.sample_shuffle={get('reader.sample_shuffle')!r}, file_shuffle="
                     f"{get('reader.file_shuffle')!r}: dlbench reads a seeded global permutation of the samples, "
                     f"a new one every epoch (DLIO seed + epoch, seed_change_epoch)")
    if "reader.shuffle_size" in flat and not tf_pipeline:
        notes.append(f"reader.shuffle_size={flat['reader.shuffle_size']!r}: the TensorFlow shuffle buffer; the "
                     f"torch DataLoader (and dlbench) shuffle over all samples")
    if get("train.seed_change_epoch") is False:
        unsupported.append("train.seed_change_epoch=False (dlbench draws a new permutation every epoch)")

    files = num("dataset.num_files_train")
    spf = num("dataset.num_samples_per_file")
    rec = num("dataset.record_length_bytes")
    std = num("dataset.record_length_bytes_stdev")
    dtype = str(get("dataset.record_element_type"))
    if dtype not in DTYPES:
        raise ConfigError(f"dataset.record_element_type={dtype!r} ({where}): choose one of {', '.join(DTYPES)}")
    import numpy as np

    item = np.dtype(dtype).itemsize
    dims = flat.get("dataset.record_dims")
    if dims:
        if not isinstance(dims, list) or not all(isinstance(d, int) and d >= 1 for d in dims):
            raise ConfigError(f"dataset.record_dims={dims!r} ({where}): a list of positive integers")
        shape = [int(d) for d in dims]
        if std:
            unsupported.append(f"dataset.record_length_bytes_stdev={std:g} with record_dims (fixed shape)")
    else:
        shape = [max(1, int(round(rec / item)))]
    batch = num("reader.batch_size")
    epochs = num("train.epochs")
    workers = num("reader.read_threads")
    prefetch = num("reader.prefetch_size")
    ct, ct_std = _compute_time(flat, where)
    steps = num("train.total_training_steps")
    au = num("metric.au")
    if au > 1:
        raise ConfigError(f"metric.au={au} ({where}): a fraction from 0 to 1 (0.90 = 90 %)")
    wname = str(name or flat.get("model.name") or "dlio")
    wname = re.sub(r"[^A-Za-z0-9_.+-]", "-", wname).strip("-.") or "dlio"
    samples = files * spf
    if samples % batch:
        notes.append(f"{samples} samples in batches of {batch}: DLIO's PyTorch loader drops the last partial batch "
                     f"(drop_last=True; its TensorFlow loader: drop_remainder=True), floor(samples / ranks / batch) "
                     f"steps per rank and epoch; dlbench drops it too (prefetch --drop-last-batch)")
    side = math.isqrt(int(rec))
    if dlio_2_0 and not dims and side * side != int(rec):
        notes.append(f"dataset.record_length={rec:g}: DLIO 2.0.0 writes records of int(sqrt(record_length))^2 = "
                     f"{side}x{side} = {side * side:,} B; dlbench writes {int(shape[0]) * item:,} B")

    if fmt == "hdf5":
        layout = "hdf5_per_sample" if spf == 1 else "hdf5_blocks"
        if std:
            unsupported.append(f"dataset.record_length_bytes_stdev={std:g} with format hdf5 (dlbench's HDF5 "
                               f"samples have one fixed shape)")
        arr_name = "records"
    else:
        layout = LAYOUT_OF.get(fmt, fmt)
        arr_name = "x"
    workload: dict = {
        "name": wname,
        "description": f"translated from DLIO config {Path(where).name}",
        "layout": layout,
        "arrays": [{"name": arr_name, "shape": shape, "dtype": dtype, "role": "data"}],
        "samples": samples, "batch_size": batch, "samples_per_file": spf,
        "au_threshold": au, "au_threshold_source": f"DLIO config {Path(where).name} metric.au",
    }
    if fmt == "npz":   # DLIO's npz generator writes the records as x and a label per sample as y (np.savez)
        workload["arrays"].append({"name": "y", "shape": [1], "dtype": "int64", "role": "label"})
    if fmt == "tfrecord":   # the read pattern: tf.data's (tensorflow) or index + pread (pytorch readers)
        shuffle = num("reader.shuffle_size")
        workload["tfrecord"] = ({"read": "tfdata", "shuffle_buffer": 1 if str(get("reader.sample_shuffle")).lower()
                                 == "off" else shuffle,
                                 "file_shuffle": str(get("reader.file_shuffle")).lower() != "off"}
                                if tf_pipeline else {"read": "indexed"})
    if std and fmt != "hdf5" and not dims:
        workload["record_size"] = {"kind": "normal", "mean_bytes": rec, "std_bytes": std,
                                   "min_bytes": float(item), "max_bytes": rec + 4 * std}
    acc = accelerator or _accelerator_from_name(where)
    if acc:
        workload["compute"] = {acc: {"step_time_s": ct, "batch_size": batch,
                                     "source": f"DLIO {Path(where).name} train.computation_time"}}
    model_bytes = get("model.model_size_bytes")
    ckpt_every_epochs = ckpt_every_steps = ckpt_after_epochs = 0
    ckpt_model = None
    if get("workflow.checkpoint"):
        after = num("checkpoint.checkpoint_after_epoch")
        between = num("checkpoint.epochs_between_checkpoints")
        steps_between = get("checkpoint.steps_between_checkpoints")
        if steps_between not in (None, -1):
            # DLIO: every steps_between_checkpoints global steps, from that step (epochs keys ignored)
            if not isinstance(steps_between, int) or isinstance(steps_between, bool) or steps_between < 1:
                raise ConfigError(f"{where}: checkpoint.steps_between_checkpoints={steps_between!r}: must be "
                                  f"an integer >= 1 (or -1: by epochs)")
            ckpt_every_steps = steps_between
        else:
            # DLIO: at the end of epoch checkpoint_after_epoch (1-based), then every epochs_between_checkpoints
            ckpt_after_epochs = after
        ckpt_every_epochs = between if steps_between in (None, -1) else 0
        ckpt_model = _dlio2_checkpoint(flat, model_bytes, where, v2_spelling) or _checkpoint_model(flat, where)
        workload["model"] = {"name": wname, "parameters": int(math.ceil(float(model_bytes) / 12)),
                             "source": f"DLIO model.model_size_bytes={model_bytes} (dlbench writes 12 B per "
                                       f"parameter)"}
        if ckpt_model is not None and "type" in ckpt_model:   # DLIO 2.0.0's checkpoint shape
            from .run.checkpoint import dlio2_files

            rank0 = sum(f.nbytes for f in dlio2_files(ckpt_model, 0))
            workload["model"] = {"name": wname, "parameters": int(math.ceil(rank0 / 12)), "source":
                                 f"DLIO 2.0.0 checkpoint.* ({ckpt_model['type']}: model, optimizer and layer "
                                 f"files as DLIO writes them, {rank0:,} bytes on rank 0; dlbench.run.checkpoint)"}
        elif ckpt_model is not None:
            from .checkpoint.models import get_model

            workload["model"] = {"name": wname, "parameters": get_model(
                None, **{k: v for k, v in ckpt_model.items() if k != "zero"}).parameters(),
                "source": "DLIO model.num_layers, model.transformer.* (every rank writes its TP/PP/ZeRO "
                          "shards as DLIO sizes them: dlbench.checkpoint.models)"}
    options: dict = {"num_workers": workers}
    if workers > 0:
        options["prefetch_factor"] = max(1, math.ceil(prefetch / workers)) if prefetch > 0 else 2
        # DLIO's PyTorch loader keeps its workers across epochs (TorchDataLoader: persistent_workers=True)
        options["persistent_workers"] = True
    # DLIO 2.0.0 reads floor(share / batch) full batches per rank and epoch (torch DataLoader drop_last=True,
    # tf.data batch(drop_remainder=True)): so does the run, for DLIO's samples per epoch
    options["drop_last_batch"] = True
    if prefetch == 0 and workers > 0:
        notes.append("reader.prefetch_size=0: torch needs >= 1 batch per worker; dlbench prefetches 1")
    run = {"epochs": epochs, "batch_size": batch, "compute_time_s": ct, "compute_stdev_s": ct_std,
           "strategy": "prefetch", "options": options, "checkpoint_every_epochs": ckpt_every_epochs,
           "checkpoint_after_epochs": ckpt_after_epochs, "checkpoint_every_steps": ckpt_every_steps,
           "checkpoint_model": ckpt_model,
           "max_steps": steps if steps > 0 else None, "seed": int(get("train.seed") or 0)}
    if run["max_steps"] is not None:
        unsupported.append(f"train.total_training_steps={steps} (dlbench runs whole epochs)")
    run["eval"] = _evaluation(get, num, spf, epochs, notes)
    run.update(storage)
    if unsupported and not allow_unsupported:
        raise ConfigError(f"{where}: DLIO settings dlbench does not emulate (pass --allow-unsupported to run "
                          f"without them, or override them): {'; '.join(unsupported)}")
    _check_translated(workload, where)
    return Translation(workload=workload, run=run, au_threshold=au, source=str(where), notes=notes,
                       unsupported=unsupported)


def _evaluation(get, num, spf: int, epochs: int, notes: list) -> dict | None:
    """DLIO's evaluation phase (``workflow.evaluation``): after training epoch ``e`` (DLIO counts from 1) with
    ``e >= eval_after_epoch`` and every ``epochs_between_evals`` from there, every rank reads its share of the
    ``num_files_eval`` files in batches of ``reader.batch_size_eval`` (floor(samples / ranks / batch) steps, as
    DLIO's eval loop), each step followed by ``eval_time`` of emulated compute. None: no evaluation."""
    files = num("dataset.num_files_eval")    # every value checked, as DLIO reads them, evaluating or not
    after, every = num("evaluation.eval_after_epoch"), num("evaluation.epochs_between_evals")
    ev = {"samples": files * spf, "batch_size": num("reader.batch_size_eval"),
          "step_time_s": num("evaluation.eval_time"), "step_stdev_s": num("evaluation.eval_time_stdev"),
          "after_epoch": after, "every": every}
    if not get("workflow.evaluation"):
        return None
    if files == 0:
        notes.append("workflow.evaluation=True with dataset.num_files_eval=0: no evaluation files, nothing to "
                     "evaluate")
        return None
    due = [e for e in range(1, epochs + 1) if e >= after and (e - after) % every == 0]
    notes.append(f"evaluation: {files} file(s) of {spf} sample(s) read after training epoch(s) "
                 f"{', '.join(map(str, due)) or 'none'} (DLIO counts from 1), batches of {ev['batch_size']}, "
                 f"{ev['step_time_s']:g} s per step: phase eval, outside the epoch time and AU")
    return ev


def _check_translated(workload: dict, where: str) -> None:
    """The translated workload, validated as ``dlbench run`` will load it: an error names the user's DLIO file
    (not the workload YAML written under the data root from it)."""
    from . import workload as W
    from .config import from_mapping

    try:
        W._check_spec(from_mapping(W.WorkloadSpec, copy.deepcopy(workload), where=where), where)
    except ConfigError as e:
        raise ConfigError(f"{where}: these DLIO settings give a workload dlbench cannot run: {e}") from None


def _accelerator_from_name(where: str) -> str | None:
    m = re.search(r"_(v100|a100|h100)(?:_|\.|$)", Path(where).name)
    return m.group(1) if m else None


def load(path: str, overrides=(), *, allow_unsupported: bool = False, name: str | None = None) -> Translation:
    """Read a DLIO workload YAML, apply Hydra-style overrides, translate."""
    cfg = load_yaml(path, "DLIO config")
    cfg = apply_overrides(cfg, list(overrides))
    return translate(cfg, where=str(path), name=name, allow_unsupported=allow_unsupported)


def workload_yaml(t: Translation) -> str:
    """The dlbench workload YAML of a translation, with the run flags, notes and unsupported keys as comments."""
    head = [f"# dlbench workload translated from the DLIO config {t.source}",
            f"# run it as DLIO would: dlbench run --workload THIS.yaml --scale full {' '.join(t.run_flags())}"]
    if t.run["checkpoint_every_epochs"]:
        head.append(f"#   + --checkpoint-every <{t.run['checkpoint_every_epochs']} x steps per epoch> "
                    f"(DLIO checkpoints every {t.run['checkpoint_every_epochs']} epochs)"
                    + (f", the first at the end of epoch {t.run['checkpoint_after_epochs']} (applied by "
                       f"dlbench run --dlio-config)" if t.run.get("checkpoint_after_epochs") else ""))
    if t.run.get("checkpoint_every_steps"):
        head.append(f"#   + --checkpoint-every {t.run['checkpoint_every_steps']} (DLIO's steps_between_checkpoints)")
    head += [f"# note: {n}" for n in t.notes]
    head += [f"# NOT EMULATED: {u}" for u in t.unsupported]
    if t.run.get("eval"):
        head.append("# NOT EMULATED by `dlbench run --workload THIS.yaml`: DLIO's evaluation (`dlbench run "
                    "--dlio-config` emulates it)")
    if t.run.get("checkpoint_model"):
        head.append("# NOT EMULATED by `dlbench run --workload THIS.yaml`: DLIO's checkpoint files per rank (there: "
                    "rank 0 writes one file of model.parameters x 12 bytes; `dlbench run --dlio-config` emulates them)")
    return "\n".join(head) + "\n" + yaml.safe_dump(t.workload, sort_keys=False, default_flow_style=None)


# --- DLIO's summary.json ---------------------------------------------------------------------------------------

def au_verdict(au: float | None, threshold: float | None, source: str = "") -> dict:
    """The AU rule: pass when AU >= threshold (MLPerf Storage / DLIO metric.au); no threshold: none published."""
    if threshold is None:
        return {"threshold": None, "source": source or "none published", "pass": None}
    return {"threshold": float(threshold), "source": source, "pass": bool(au is not None and au >= threshold)}


def dlio_summary(doc: dict) -> dict | None:
    """DLIO's ``summary.json`` (dlio_benchmark/utils/statscounter.py) from a dlbench run.json document, so
    MLPerf Storage / DLIO post-processing reads a dlbench run. AU per epoch = compute / epoch time, mean over
    ranks; throughput per epoch = the epoch's samples / the slowest rank's epoch time. ``train_io_mean_MB_per_second``
    is measured: bytes read per epoch / the slowest rank's epoch time, in MiB/s as DLIO's (DLIO multiplies its
    samples/s by the nominal record_length instead). None when the run has no summary."""
    s = doc.get("summary") or {}
    if not s or "au" not in s:
        return None
    cfg = doc.get("config") or {}
    au_ep = s.get("au_per_epoch") or [s["au"]]
    spe = s.get("samples_per_epoch")
    tmax = s.get("epoch_time_max_s") or []
    rb = s.get("read_bytes_per_epoch")
    if spe and len(tmax) == len(spe):
        thr = [n / t if t > 0 else 0.0 for n, t in zip(spe, tmax)]
    else:
        thr = [s.get("samples_per_s", 0.0)]
    if rb and len(tmax) == len(rb):
        io = [b / t / 2**20 if t > 0 else 0.0 for b, t in zip(rb, tmax)]
    else:
        tot = sum(tmax) if tmax else 0.0
        io = [s.get("read_bytes", 0) / tot / 2**20 if tot else 0.0]

    def mean(x):
        return float(sum(x) / len(x)) if x else 0.0

    def std(x):
        m = mean(x)
        return float((sum((v - m) ** 2 for v in x) / len(x)) ** 0.5) if x else 0.0

    au_pct = [100.0 * a for a in au_ep]
    rule = s.get("au_rule") or {}
    metric = {
        "train_au_percentage": au_pct, "train_au_mean_percentage": mean(au_pct),
        "train_au_stdev_percentage": std(au_pct),
        "train_throughput_samples_per_second": thr,
        "train_throughput_mean_samples_per_second": mean(thr),
        "train_throughput_stdev_samples_per_second": std(thr),
        "train_io_mean_MB_per_second": mean(io), "train_io_stdev_MB_per_second": std(io),
    }
    if rule.get("threshold") is not None:
        metric["train_au_meet_expectation"] = "success" if mean(au_pct) >= 100 * rule["threshold"] else "fail"
    wl = cfg.get("workload_spec") or {}
    env = doc.get("environment") or {}
    prov = doc.get("provenance") or {}
    pc = s.get("page_cache") or {}
    cache = s.get("cache") or {}
    hosts = int(s.get("nodes") or 1)
    start, end = _dlio_times(env.get("utc"), s.get("total_time_s"))
    mem = pc.get("mem_total_bytes") or prov.get("mem_total_bytes")
    mem_gb = [float(mem) / 2**30] * hosts if mem else None
    ds = pc.get("dataset_bytes")
    per_host_gb = float(ds) / hosts / 2**30 if ds is not None else None
    out = {
        "schema": "dlio.summary (written by dlbench)",
        "start": start, "end": end,
        "num_accelerators": s.get("ranks"), "num_hosts": s.get("nodes"),
        "hostname": env.get("host"),
        "epochs": s.get("epochs"),
        "num_files_train": (-(-wl["samples"] // wl["samples_per_file"]) if wl.get("layout") != "hdf5_shared"
                            else 1) if wl.get("samples") and wl.get("samples_per_file") else None,
        # the evaluation files (DLIO's valid folder) when the run emulated DLIO's evaluation, else none read
        "num_files_eval": (-(-int((cfg.get("eval") or {}).get("samples", 0)) // int(wl["samples_per_file"]))
                           if cfg.get("eval") and wl.get("samples_per_file") else 0),
        "num_samples_per_file": wl.get("samples_per_file"),
        "host_memory_GB": mem_gb,
        "host_cpu_count": [int(env["cpu_count"])] * hosts if env.get("cpu_count") else None,
        "host_processor_name": env.get("machine"),
        "data_size_per_host_GB": per_host_gb,
        # DLIO: per host, 1 when its memory exceeds the data it consumes (the page cache could hold it)
        "potential_caching": ([int(m > per_host_gb) for m in mem_gb] if mem_gb is not None and per_host_gb is not None
                              else None),
        "metric": metric,
        "dlbench": {"au_threshold": rule.get("threshold"), "au_threshold_source": rule.get("source"),
                    "train_io_MB": "MiB/s of bytes actually read (DLIO: samples/s x nominal record_length)",
                    "workload": s.get("workload"), "strategy": s.get("strategy"),
                    "simulated": bool(doc.get("simulated") or s.get("simulated")),
                    # beside DLIO's potential_caching (could the page cache hold it): did the reads reach the
                    # device (cold), or come from memory (warm) — measured (dlbench.storage.pagecache)
                    "cache_verdict": cache.get("verdict"), "cache_verdict_line": cache.get("verdict_line"),
                    "top_level_keys": "start/end: local time as DLIO's (end: when run.json was written; start: "
                                      "end - total_time_s); num_files_eval: the evaluation files read (0: no evaluation); "
                                      "host_memory_GB, host_cpu_count: rank 0's host (MemTotal in GiB, logical "
                                      "CPUs) for each of num_hosts; host_processor_name: platform.machine(); "
                                      "data_size_per_host_GB: the dataset's bytes / num_hosts in GiB; "
                                      "potential_caching: DLIO's (per host, 1 when host_memory_GB > "
                                      "data_size_per_host_GB); cache_verdict: whether the reads reached the device"},
    }
    return out


DLIO_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"   # DLIO's utcnow(): datetime.now() (local time, despite the name)


def _dlio_times(end_utc: str | None, total_s) -> tuple[str | None, str | None]:
    """DLIO's ``start``/``end`` strings (local time, DLIO's format) from run.json's write time (UTC ISO) and the
    benchmark's total time."""
    import datetime as dt

    if not end_utc:
        return None, None
    try:
        end = dt.datetime.fromisoformat(end_utc).astimezone()
    except (TypeError, ValueError):
        return None, None
    start = end - dt.timedelta(seconds=float(total_s or 0.0))
    return start.strftime(DLIO_TIME_FORMAT), end.strftime(DLIO_TIME_FORMAT)


def steps_per_epoch(samples: int, ranks: int, batch: int, drop_last_batch: bool = False) -> int:
    """Steps per rank and epoch under DistributedSampler without drop_last: ceil(ceil(N / W) / B); with
    ``drop_last_batch`` (DLIO's loaders) floor(ceil(N / W) / B)."""
    per_rank = -(-samples // ranks)
    return per_rank // batch if drop_last_batch else -(-per_rank // batch)


def run_settings(t: Translation, given: dict, typed: set[str], folder) -> tuple[tuple, list[str]]:
    """``run --dlio-config``: write ``t``'s workload YAML under ``folder`` and return the run's settings
    ``(workload path, strategy, epochs, batch_size, seed, compute_time, compute_stdev, scale, strategy options)``
    where a flag in ``typed`` (typed on the command line; its value in ``given``) wins over the config's, and
    the notes to print. The config's loader options go to its strategy only."""
    wl_path = write_workload_file(t, folder)
    r = t.run
    notes = []

    def pick(flag: str, key: str):
        return given[flag] if flag in typed else r[key]

    strategy = pick("strategy", "strategy")
    opts = dict(given["strategy_opts"])
    if strategy == r["strategy"]:
        for k, v in r["options"].items():
            if opts.get(k) is None:
                opts[k] = v
    else:
        notes.append(f"--strategy {strategy}: DLIO's reader settings (read_threads, prefetch_size, its dropped last "
                     f"batch) map onto {r['strategy']} only; {strategy} runs with its own options")
    return (str(wl_path), strategy, pick("epochs", "epochs"), pick("batch_size", "batch_size"), pick("seed", "seed"),
            pick("compute_time", "compute_time_s"), pick("compute_stdev", "compute_stdev_s"), "full", opts), notes


def checkpoint_schedule(t: Translation, ranks: int, batch_size: int | None, drop_last_batch: bool,
                        every: int = 0, first: int = 0) -> tuple[int, int, dict | None]:
    """``run --dlio-config``'s checkpoints: ``(checkpoint_every, checkpoint_first, checkpoint_model)`` in global
    steps from DLIO's ``checkpoint_after_epoch``/``epochs_between_checkpoints`` (steps per epoch at ``ranks``
    and the local batch: ``batch_size``, else the config's) or ``steps_between_checkpoints``; a
    ``--checkpoint-every`` typed on the command line (``every`` > 0) wins and keeps ``first``."""
    r = t.run
    model = None
    if r["checkpoint_every_epochs"] and every == 0:
        spe = max(1, steps_per_epoch(t.workload["samples"], ranks, batch_size or r["batch_size"], drop_last_batch))
        every = r["checkpoint_every_epochs"] * spe
        first = r.get("checkpoint_after_epochs", 0) * spe   # DLIO's checkpoint_after_epoch
    if r.get("checkpoint_every_steps") and every == 0:
        every = r["checkpoint_every_steps"]                 # DLIO's steps_between_checkpoints
    if every and r.get("checkpoint_model"):
        model = r["checkpoint_model"]                       # every rank writes its shards
    return every, first, model


# --- files (the only I/O of this module) ----------------------------------------------------------------------

def write_text_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place (nothing half-written)."""
    import os

    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"--out {path}: cannot write ({e.strerror or e})") from None


def write_workload_file(t: Translation, folder) -> Path:
    """The translation's workload YAML under ``folder`` as ``<name>-<12 hex of its SHA-256>.yaml`` (same
    translation, same file: every rank of a run may write it; each writes the same bytes atomically)."""
    import hashlib

    text = workload_yaml(t)
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"$DLBENCH_DATA_DIR: cannot create {folder} ({e.strerror or e})") from None
    path = folder / f"{t.workload['name']}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"
    if not path.is_file():
        write_text_atomic(path, text)
    return path
