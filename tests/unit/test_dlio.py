"""DLIO workload configs as input (dlbench.dlio): the MLPerf Storage training configs and DLIO's default.yaml
(tests/fixtures/dlio, copied from mlcommons/storage and argonne-lcf/dlio_benchmark) translate key by key;
keys DLIO reads but dlbench does not emulate are one error; keys DLIO does not read are errors with a
did-you-mean; Hydra overrides as DLIO users type them; DLIO's summary.json from a run document."""

from pathlib import Path

import pytest

from dlbench import dlio
from dlbench.errors import ConfigError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
MLPERF = ["unet3d_a100", "unet3d_h100", "resnet50_a100", "resnet50_h100", "cosmoflow_a100", "cosmoflow_h100"]
# what a DLIO user overrides to get past dlbench's refusals of the shipped files (see test_shipped_* below)
FIXUPS = {"unet3d": ["~workload.model.model_size"],
          "resnet50": ["++workload.reader.data_loader=pytorch", "++workload.reader.sample_shuffle=seed"],
          "cosmoflow": ["++workload.reader.data_loader=pytorch"]}


def _load(name, *extra, **kw):
    return dlio.load(str(FIX / f"{name}.yaml"), [*FIXUPS[name.split("_")[0]], *extra], **kw)


@pytest.mark.parametrize("name", MLPERF)
def test_mlperf_configs_translate_key_by_key(name):
    raw = dlio.load_yaml(FIX / f"{name}.yaml")
    t = _load(name, "++workload.workflow.checkpoint=False")
    ds, rd, tr = raw["dataset"], raw["reader"], raw["train"]
    w = t.workload
    assert w["layout"] == ds["format"]                         # npz / tfrecord: the format registry's layouts
    assert w["samples"] == ds["num_files_train"] * ds["num_samples_per_file"]
    assert w["samples_per_file"] == ds["num_samples_per_file"]
    assert w["batch_size"] == rd["batch_size"] == t.run["batch_size"]
    assert t.run["epochs"] == tr["epochs"]
    assert t.run["compute_time_s"] == pytest.approx(tr["computation_time"])
    assert t.au_threshold == raw["metric"]["au"] == w["au_threshold"]
    assert t.run["strategy"] == "prefetch" and t.run["options"]["num_workers"] == rd["read_threads"]
    acc = name.split("_")[1]
    assert w["compute"][acc]["step_time_s"] == pytest.approx(tr["computation_time"])
    if ds.get("record_length_bytes_stdev"):
        assert w["record_size"]["mean_bytes"] == ds["record_length_bytes"]
        assert w["record_size"]["std_bytes"] == ds["record_length_bytes_stdev"]
    else:
        assert "record_size" not in w
    assert w["arrays"][0]["shape"] == [int(round(ds["record_length_bytes"]))]


def test_mlperf_thresholds_are_the_rules():
    assert {n: _load(n, "++workload.workflow.checkpoint=False").au_threshold for n in MLPERF} == {
        "unet3d_a100": 0.90, "unet3d_h100": 0.90, "resnet50_a100": 0.90, "resnet50_h100": 0.90,
        "cosmoflow_a100": 0.70, "cosmoflow_h100": 0.70}


def test_unet3d_figures():
    t = _load("unet3d_h100", "++workload.workflow.checkpoint=False")
    assert (t.workload["samples"], t.run["batch_size"], t.run["compute_time_s"]) == (168, 7, 0.323)
    assert t.workload["record_size"]["mean_bytes"] == 146600628
    # prefetch_size 2 over 4 workers; DLIO's TorchDataLoader keeps its workers across epochs
    # and drops every rank's last partial batch (168 / 7 has none: same samples either way)
    assert t.run["options"] == {"num_workers": 4, "prefetch_factor": 1, "persistent_workers": True,
                                "drop_last_batch": True}
    assert t.run_flags()[-6:] == ["--num-workers", "4", "--prefetch-factor", "1", "--persistent-workers",
                                  "--drop-last-batch"]


def test_dlio_2_0_0_scalar_model_name():
    """DLIO 2.0.0's own workload files say ``model: unet3d`` (a name, not a section): read as model.name."""
    t = dlio.translate({"model": "unet3d", "framework": "pytorch",
                        "dataset": {"format": "hdf5", "num_files_train": 4, "record_length": 4096},
                        "reader": {"data_loader": "pytorch", "sample_shuffle": "seed", "read_threads": 0}})
    assert t.workload["name"] == "unet3d" and t.workload["samples"] == 4
    assert t.run["options"] == {"num_workers": 0, "drop_last_batch": True}   # no workers: nothing to keep


def test_shipped_unet3d_model_size_is_read_by_no_dlio():
    with pytest.raises(ConfigError, match=r"model\.model_size \(did you mean 'model\.model_size_bytes'\?\)"):
        dlio.load(str(FIX / "unet3d_h100.yaml"))


def test_shipped_resnet50_reads_as_tf_data():
    """As shipped (format tfrecord, data_loader tensorflow, sample_shuffle off): the tfrecord layout's tfdata
    read pattern, no shuffle buffer, no file shuffle; nothing unsupported."""
    t = dlio.load(str(FIX / "resnet50_h100.yaml"))
    assert t.workload["layout"] == "tfrecord" and t.unsupported == []
    assert t.workload["tfrecord"] == {"read": "tfdata", "shuffle_buffer": 1, "file_shuffle": False}
    t = dlio.load(str(FIX / "resnet50_h100.yaml"), ["++workload.reader.sample_shuffle=seed",
                                                    "++workload.reader.shuffle_size=64"])
    assert t.workload["tfrecord"]["shuffle_buffer"] == 64
    t = _load("resnet50_h100")
    assert t.workload["tfrecord"] == {"read": "indexed"}


def test_tensorflow_loader_lists_every_unsupported_setting_in_one_error():
    with pytest.raises(ConfigError) as e:
        dlio.load(str(FIX / "resnet50_h100.yaml"), ["++workload.dataset.format=npz"])
    msg = str(e.value)
    assert "reader.data_loader='tensorflow'" in msg and "reader.sample_shuffle='off'" in msg
    assert "\n" not in msg


def test_allow_unsupported_returns_them():
    t = dlio.load(str(FIX / "resnet50_h100.yaml"), ["++workload.dataset.format=npz"], allow_unsupported=True)
    assert any(u.startswith("reader.data_loader") for u in t.unsupported)
    assert any("NOT EMULATED: reader.data_loader" in ln for ln in dlio.workload_yaml(t).splitlines())


def test_default_yaml_subfolders_are_not_emulated_evaluation_is():
    with pytest.raises(ConfigError) as e:
        dlio.load(str(FIX / "default.yaml"))
    for key in ("dataset.num_subfolders_train=2", "dataset.num_subfolders_eval=2"):
        assert key in str(e.value)
    for key in ("workflow.evaluation", "dataset.num_files_eval", "evaluation.eval_time"):   # emulated (run.evaluate)
        assert key not in str(e.value)
    t = dlio.load(str(FIX / "default.yaml"), ["++workload.dataset.num_subfolders_train=0",
                                              "~workload.dataset.num_subfolders_eval",
                                              "++workload.reader.sample_shuffle=random"])
    assert (t.workload["layout"], t.workload["samples"], t.run["batch_size"]) == ("npz", 64, 4)
    assert t.workload["arrays"][0]["shape"] == [4096] and t.au_threshold == 0.90   # DLIO's default metric.au
    # default.yaml's evaluation: 8 files read after every epoch, batch_size_eval 1, eval_time 0.5 s
    assert t.run["eval"] == {"samples": 8, "batch_size": 1, "step_time_s": 0.5, "step_stdev_s": 0.0,
                             "after_epoch": 1, "every": 1}
    off = dlio.load(str(FIX / "default.yaml"), ["++workload.workflow.evaluation=False",
                                                "++workload.dataset.num_subfolders_train=0",
                                                "~workload.dataset.num_subfolders_eval",
                                                "++workload.reader.sample_shuffle=random"])
    assert off.run["eval"] is None


def test_typo_is_an_error_with_did_you_mean():
    with pytest.raises(ConfigError, match=r"dataset\.num_file_train \(did you mean 'dataset\.num_files_train'"):
        _load("cosmoflow_h100", "++workload.dataset.num_file_train=4")


def test_old_and_new_record_length_spellings_do_not_mix():
    # DLIO 2.0.0 reads record_length and ignores record_length_bytes (4 KiB files): a file with both is refused
    with pytest.raises(ConfigError, match="mixes DLIO <= 2.0 keys"):
        _load("cosmoflow_h100", "++workload.dataset.record_length=4096")
    t = _load("cosmoflow_h100", "~workload.dataset.record_length_bytes", "~workload.dataset.record_length_bytes_stdev",
              "++workload.dataset.record_length=4096")
    assert t.workload["arrays"][0]["shape"] == [4096]


def test_overrides_hydra_style():
    cfg = {"dataset": {"num_files_train": 8}}
    out = dlio.apply_overrides(cfg, ["++workload.dataset.num_files_train=16", "+workload.train.epochs=2",
                                     "workload.dataset.num_files_train=32"])
    assert out == {"dataset": {"num_files_train": 32}, "train": {"epochs": 2}} and cfg["dataset"]["num_files_train"] == 8
    with pytest.raises(ConfigError, match="not in the config; add it with"):
        dlio.apply_overrides(cfg, ["workload.dataset.format=npz"])
    with pytest.raises(ConfigError, match="only keys under 'workload.'"):
        dlio.apply_overrides(cfg, ["++hydra.run.dir=x"])
    with pytest.raises(ConfigError, match="nothing to delete"):
        dlio.apply_overrides(cfg, ["~workload.dataset.format"])


def test_computation_time_distribution():
    t = _load("cosmoflow_h100", "++workload.train.computation_time={mean: 0.01, stdev: 0.002, type: normal}")
    assert (t.run["compute_time_s"], t.run["compute_stdev_s"]) == (0.01, 0.002)
    assert "--compute-stdev" in t.run_flags()
    with pytest.raises(ConfigError, match="emulates normal only"):
        _load("cosmoflow_h100", "++workload.train.computation_time={mean: 0.01, type: uniform}")


def test_hdf5_format_maps_to_hdf5_layouts_and_refuses_stdev():
    t = _load("cosmoflow_h100", "++workload.dataset.format=hdf5", "++workload.dataset.record_length_bytes_stdev=0")
    assert t.workload["layout"] == "hdf5_per_sample" and t.workload["arrays"][0]["name"] == "records"
    t = _load("resnet50_h100", "++workload.dataset.format=hdf5")
    assert t.workload["layout"] == "hdf5_blocks" and t.workload["samples_per_file"] == 1251
    with pytest.raises(ConfigError, match="record_length_bytes_stdev=71311 with format hdf5"):
        _load("cosmoflow_h100", "++workload.dataset.format=hdf5")


def test_checkpoint_mapping():
    # unet3d: first checkpoint at the end of epoch 5, then every 2 (DLIO 2.0.0's unet3d_h100.yaml): emulated
    t = _load("unet3d_h100")
    assert t.run["checkpoint_every_epochs"] == 2 and t.run["checkpoint_after_epochs"] == 5
    assert "the first at the end of epoch 5" in dlio.workload_yaml(t)
    t = _load("unet3d_h100", "++workload.checkpoint.checkpoint_after_epoch=2",
              "++workload.model.model_size_bytes=1200")
    assert t.run["checkpoint_every_epochs"] == 2 and t.workload["model"]["parameters"] == 100
    # bert_v100's steps_between_checkpoints: every N global steps
    t = _load("unet3d_h100", "++workload.checkpoint.steps_between_checkpoints=250")
    assert t.run["checkpoint_every_steps"] == 250 and t.run["checkpoint_every_epochs"] == 0
    with pytest.raises(ConfigError, match="steps_between_checkpoints=0"):
        _load("unet3d_h100", "++workload.checkpoint.steps_between_checkpoints=0")
    assert dlio.steps_per_epoch(168, 2, 7) == 12 and dlio.steps_per_epoch(169, 2, 7) == 13


def test_total_training_steps_is_not_emulated():
    with pytest.raises(ConfigError, match="total_training_steps=10"):
        _load("cosmoflow_h100", "++workload.train.total_training_steps=10")


def test_au_verdict():
    assert dlio.au_verdict(0.95, 0.9, "x") == {"threshold": 0.9, "source": "x", "pass": True}
    assert dlio.au_verdict(0.5, 0.9)["pass"] is False
    assert dlio.au_verdict(0.5, None) == {"threshold": None, "source": "none published", "pass": None}


def test_dlio_summary_keys_and_arithmetic():
    doc = {"config": {"workload_spec": {"samples": 8, "samples_per_file": 2, "layout": "hdf5_blocks"}},
           "environment": {"host": "h"},
           "summary": {"au": 0.5, "au_per_epoch": [0.4, 0.6], "samples_per_epoch": [8.0, 8.0],
                       "epoch_time_max_s": [2.0, 4.0], "read_bytes_per_epoch": [2**21, 2**21], "ranks": 2,
                       "nodes": 1, "epochs": 2, "workload": "w", "strategy": "naive",
                       "au_rule": {"threshold": 0.7, "source": "s", "pass": False}}}
    s = dlio.dlio_summary(doc)
    m = s["metric"]
    assert m["train_au_percentage"] == pytest.approx([40.0, 60.0]) and m["train_au_mean_percentage"] == pytest.approx(50)
    assert m["train_throughput_samples_per_second"] == [4.0, 2.0]
    assert m["train_io_mean_MB_per_second"] == pytest.approx((1.0 + 0.5) / 2)
    assert m["train_au_meet_expectation"] == "fail"
    assert (s["num_accelerators"], s["num_files_train"], s["num_samples_per_file"]) == (2, 4, 2)
    assert dlio.dlio_summary({"summary": {}}) is None


def test_every_key_dlio_reads_is_classified():
    # the keys LoadConfig reads at dlio_benchmark e1919d7 (dataset/reader/train/... sections)
    for k in ("dataset.record_length_bytes", "reader.read_threads", "reader.prefetch_size", "train.computation_time",
              "checkpoint.fsync", "checkpoint.epochs_between_checkpoints", "metric.au", "model.model_size_bytes",
              "output.metric.exclude_start_steps", "workflow.profiling", "data_reader.batch_size"):
        assert dlio.KEYS[k].kind in ("map", "note", "unsupported")


def test_builtin_unet3d_workload_matches_dlio():
    import yaml

    from dlbench import workload as W

    path = Path(__file__).resolve().parents[2] / "workloads" / "unet3d.yaml"
    d = yaml.safe_load(path.read_text())
    t = _load("unet3d_h100", "++workload.workflow.checkpoint=False")
    assert (d["samples"], d["batch_size"], d["layout"], d["au_threshold"]) == (168, 7, "npz", 0.90)
    assert d["compute"]["h100"]["step_time_s"] == t.run["compute_time_s"]
    assert d["record_size"]["mean_bytes"] == t.workload["record_size"]["mean_bytes"]
    assert d["record_size"]["std_bytes"] == t.workload["record_size"]["std_bytes"]
    W.load_spec(str(path))
    assert "unet3d" in W.builtin_names() and W.load("unet3d").au_threshold == 0.90


def test_dlio_2_0_0_record_sizes_and_dropped_batch_are_noted():
    """DLIO 2.0.0 writes int(sqrt(record_length))^2 B records and its PyTorch loader drops the last partial
    batch: both said in the notes (benchmarks/dlio_side_by_side.py measured them)."""
    cfg = {"model": "q", "dataset": {"format": "hdf5", "num_files_train": 100, "record_length": 100000},
           "reader": {"data_loader": "pytorch", "sample_shuffle": "seed", "batch_size": 8}}
    notes = " | ".join(dlio.translate(cfg).notes)
    assert "316x316 = 99,856 B; dlbench writes 100,000 B" in notes
    assert "100 samples in batches of 8: DLIO's PyTorch loader drops the last partial batch" in notes
    cfg["dataset"]["record_length"], cfg["reader"]["batch_size"] = 65536, 4
    notes = " | ".join(dlio.translate(cfg).notes)
    assert "int(sqrt(record_length))" not in notes and "drops the last partial batch" not in notes
    cfg["dataset"] = {"format": "hdf5", "num_files_train": 100, "record_length_bytes": 100000}   # later DLIO
    assert "int(sqrt(record_length))" not in " | ".join(dlio.translate(cfg).notes)


def test_keys_dlio_2_0_0_reads():
    """DLIO 2.0.0's LoadConfig reads workflow.debug and the LLM checkpoint shape under checkpoint.* (its own
    bert_v100 and megatron_deepspeed files): known keys, not 'DLIO does not read'."""
    base = {"model": "bert", "dataset": {"format": "hdf5", "num_files_train": 4, "record_length": 4096},
            "reader": {"data_loader": "pytorch", "sample_shuffle": "seed"}}
    assert any("workflow.debug" in n for n in dlio.translate({**base, "workflow": {"debug": False}}).notes)
    t = dlio.translate({**base, "workflow": {"checkpoint": True},
                        "checkpoint": {"num_layers": 40, "tensor_parallelism": 1}})
    assert t.run["checkpoint_model"]["num_layers"] == 40 and not t.unsupported   # emulated: test_dlio_checkpoint


@pytest.mark.parametrize("override, key", [
    ("++workload.dataset.num_files_train=abc", "dataset.num_files_train='abc'"),
    ("++workload.dataset.num_files_train=0", "dataset.num_files_train=0"),
    ("++workload.dataset.num_samples_per_file=0", "dataset.num_samples_per_file=0"),
    ("++workload.checkpoint.epochs_between_checkpoints=0", "checkpoint.epochs_between_checkpoints=0"),
    ("++workload.checkpoint.checkpoint_after_epoch=x", "checkpoint.checkpoint_after_epoch='x'")])
def test_bad_values_name_the_dlio_key(override, key):
    """The error names the DLIO key the user typed (it named an internal 'n' / 'c')."""
    with pytest.raises(ConfigError) as e:
        _load("cosmoflow_h100", "++workload.workflow.checkpoint=True", override)
    assert str(e.value).startswith(key + " (") and "must be an integer" in str(e.value)


@pytest.mark.parametrize("key", sorted(k for k in dlio.NUMBERS if not k.startswith("train.computation_time")))
def test_every_numeric_key_is_checked_by_its_one_table_entry(key):
    """Each numeric DLIO key is read through dlio.NUMBERS (one table: integer?, lowest): a value below its
    bound, and for an integer key a fraction, is one line naming the key and the bound."""
    integer, lo = dlio.NUMBERS[key]
    fmt = ["++workload.dataset.format=tfrecord", "++workload.reader.data_loader=tensorflow"] \
        if key == "reader.shuffle_size" else []
    bad = [lo - 1] + ([lo + 0.5] if integer else [])
    for v in bad:
        with pytest.raises(ConfigError) as e:
            _load("cosmoflow_h100", "++workload.workflow.checkpoint=True", *fmt, f"++workload.{key}={v}")
        kind = "an integer" if integer else "a number"
        assert str(e.value).startswith(f"{key}={v!r} (") and f"must be {kind} >= {lo}" in str(e.value), e.value
    assert key in dlio.KEYS


def test_dlio_summary_has_dlio_top_level_keys():
    """DLIO 2.0.0's summary.json top-level keys (utils/statscounter.py) with DLIO's meanings; dlbench's cache
    verdict beside potential_caching."""
    import datetime as dt

    end = dt.datetime(2026, 11, 25, 12, 0, 10, 500000, tzinfo=dt.timezone.utc)
    doc = {"config": {"workload_spec": {"samples": 8, "samples_per_file": 1, "layout": "npz"}},
           "environment": {"host": "h", "cpu_count": 16, "machine": "x86_64", "utc": end.isoformat()},
           "summary": {"au": 0.5, "ranks": 4, "nodes": 2, "epochs": 1, "total_time_s": 10.0,
                       "page_cache": {"dataset_bytes": 6 * 2**30, "mem_total_bytes": 2 * 2**30},
                       "cache": {"verdict": "cold", "verdict_line": "cold: ..."}}}
    s = dlio.dlio_summary(doc)
    local = end.astimezone()
    assert s["end"] == local.strftime("%Y-%m-%dT%H:%M:%S.%f")
    assert s["start"] == (local - dt.timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%S.%f")
    assert s["num_files_eval"] == 0 and s["host_processor_name"] == "x86_64"
    assert s["host_memory_GB"] == [2.0, 2.0] and s["host_cpu_count"] == [16, 16]
    assert s["data_size_per_host_GB"] == 3.0 and s["potential_caching"] == [0, 0]   # 3 GB per host > 2 GB RAM
    assert s["dlbench"]["cache_verdict"] == "cold"
    doc["summary"]["page_cache"]["dataset_bytes"] = 2**30
    assert dlio.dlio_summary(doc)["potential_caching"] == [1, 1]


def test_translation_drops_the_last_partial_batch_as_dlio():
    t = _load("cosmoflow_h100", "++workload.dataset.num_files_train=16", "++workload.reader.batch_size=7")
    assert t.run["options"]["drop_last_batch"] is True and "--drop-last-batch" in t.run_flags()
    assert any("16 samples in batches of 7" in n and "dlbench drops it too" in n for n in t.notes)
    assert dlio.steps_per_epoch(16, 1, 7, drop_last_batch=True) == 2 and dlio.steps_per_epoch(16, 1, 7) == 3
    assert dlio.steps_per_epoch(168, 2, 7, True) == 12 and dlio.steps_per_epoch(17, 2, 3, True) == 3
