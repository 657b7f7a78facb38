"""DLIO configs as a DLIO user writes them (issue 26): ``computation_time: 5e-3`` (YAML 1.1 reads a float without a
dot as a string; DLIO reads 0.005), dlrm's extra keys (known keys dlbench does not emulate: refused, or warned
with --allow-unsupported) and errors that name the DLIO key and the user's file, never the workload YAML the
translation writes under the data root."""
from pathlib import Path

import pytest
import yaml

from dlbench import dlio
from dlbench.errors import ConfigError

BASE = {"dataset": {"format": "npz", "num_files_train": 8, "record_length_bytes": 4096},
        "reader": {"data_loader": "pytorch", "batch_size": 2, "sample_shuffle": "seed"},
        "train": {"epochs": 1}}


def _file(tmp_path, text, name="w.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text, want", [("5e-3", 0.005), ("2E-3", 0.002), ("1e0", 1.0), ("-0e1", 0.0),
                                        ("0.005", 0.005), ("1.5e-2", 0.015)])
def test_computation_time_in_exponent_form_is_dlios_number(tmp_path, text, want):
    src = yaml.safe_dump(BASE)
    src = src.replace("train:\n  epochs: 1\n", f"train:\n  epochs: 1\n  computation_time: {text}\n")
    t = dlio.load(_file(tmp_path, src))
    assert t.run["compute_time_s"] == pytest.approx(want)
    t = dlio.load(_file(tmp_path, yaml.safe_dump(BASE), "o.yaml"), [f"++workload.train.computation_time={text}"])
    assert t.run["compute_time_s"] == pytest.approx(want)


@pytest.mark.parametrize("text", ["5e-x", "'five'", "e-3"])
def test_other_strings_are_still_refused_naming_the_key(tmp_path, text):
    with pytest.raises(ConfigError, match=r"^train\.computation_time=.* \(.*o\.yaml\): must be a number >= 0"):
        dlio.load(_file(tmp_path, yaml.safe_dump(BASE), "o.yaml"), [f"++workload.train.computation_time={text}"])


DLRM_LIKE = """model:
  name: dlrm
framework: pytorch
workflow: {generate_data: False, train: True, do_eval: True}
dataset: {format: indexed_binary, num_files_train: 1, num_files_eval: 1, num_samples_per_file: 64,
          record_length: 4096, eval_num_samples_per_file: 16}
reader: {data_loader: pytorch, batch_size: 8, batch_size_eval: 16, sample_shuffle: random}
train: {epochs: 1, computation_time: 0.001, total_training_steps: 8, total_eval_steps: 4}
evaluation: {eval_time: 0.002, steps_between_evals: 4}
"""
EXTRA = ("workflow.do_eval=True", "dataset.eval_num_samples_per_file=16", "train.total_eval_steps=4",
         "evaluation.steps_between_evals=4")


def test_dlrm_extra_keys_are_known_keys(tmp_path):
    f = _file(tmp_path, DLRM_LIKE, "dlrm.yaml")
    npz = "++workload.dataset.format=npz"
    with pytest.raises(ConfigError) as e:
        dlio.load(f, [npz])
    assert "does not read" not in str(e.value) and "does not emulate" in str(e.value)
    assert all(k in str(e.value) for k in EXTRA)
    t = dlio.load(f, [npz], allow_unsupported=True)     # warned, not refused
    assert all(any(u.startswith(k) for u in t.unsupported) for k in EXTRA)
    assert t.workload["layout"] == "npz" and t.workload["samples"] == 64


def test_a_format_without_a_layout_names_the_dlio_key_and_the_users_file(tmp_path, cli):
    # DLIO's csv has no dlbench layout (indexed_binary, dlrm's, has one since the token formats)
    f = _file(tmp_path, DLRM_LIKE.replace("format: indexed_binary", "format: csv"), "dlrm.yaml")
    with pytest.raises(ConfigError) as e:
        dlio.load(f, allow_unsupported=True)
    assert str(e.value).startswith(f"dataset.format='csv' ({f}): ")
    r = cli(["run", "--dlio-config", f, "--allow-unsupported", "--dry-run"])
    assert r.exit_code != 0 and "dataset.format='csv'" in r.output
    assert "dlio-workloads" not in r.output and "layout=" not in r.output and "Traceback" not in r.output


def test_a_translation_dlbench_cannot_load_names_the_users_file():
    bad = {"name": "x", "layout": "npz", "arrays": [{"name": "x", "shape": [4], "dtype": "uint8", "role": "data"},
                                                    {"name": "x", "shape": [1], "dtype": "int64", "role": "label"}],
           "samples": 4, "batch_size": 2, "samples_per_file": 1}
    with pytest.raises(ConfigError, match=r"^my\.yaml: these DLIO settings give a workload dlbench cannot run: "):
        dlio._check_translated(bad, "my.yaml")


def test_dlrms_billions_of_samples_are_one_line_not_a_memory_error(tmp_path, cli):
    """Following the format error's advice on DLIO's dlrm (4,195,198,976 samples in one file) planned per-sample
    arrays of 31 GiB: a numpy MemoryError traceback. Now one line naming the sample count."""
    f = _file(tmp_path, DLRM_LIKE, "dlrm.yaml")
    r = cli(["run", "--dlio-config", f, "--allow-unsupported", "--dry-run", "++workload.dataset.format=npz",
             "++workload.dataset.num_samples_per_file=4195198976"])
    assert r.exit_code == 2 and "Traceback" not in r.output and "MemoryError" not in r.output
    assert "workload dlrm: 4,195,198,976 samples: planning them needs about 250.1 GiB" in r.output


def test_plan_size_error_bounds():
    from dlbench.run.setup import PLAN_BYTES_PER_SAMPLE, plan_size_error

    gib = 2**30
    assert plan_size_error(1_000_000, 4, "w", 8 * gib) is None                     # 256 MB of 8 GiB
    n = int(0.8 * 8 * gib / PLAN_BYTES_PER_SAMPLE / 4) + 1000
    assert "use fewer samples" in plan_size_error(n, 4, "w", 8 * gib)
    assert plan_size_error(n, 4, "w", 0) is None                                     # no /proc/meminfo: no check


UNET3D_V2 = """model: unet3d
framework: pytorch
workflow: {generate_data: False, train: True, checkpoint: True}
dataset: {data_folder: data/unet3d/, format: npz, num_files_train: 168, num_samples_per_file: 1,
          record_length: 146600628, record_length_stdev: 68341808, record_length_resize: 2097152}
reader: {data_loader: pytorch, batch_size: 7, read_threads: 4, file_shuffle: seed, sample_shuffle: seed}
train: {epochs: 5, computation_time: 0.323}
checkpoint: {checkpoint_folder: checkpoints/unet3d, checkpoint_after_epoch: 5, epochs_between_checkpoints: 2,
             model_size: 499153191}
metric: {au: 0.90}
"""


def test_readme_unet3d_example_runs_on_dlio_2_0_0s_shape(tmp_path, cli):
    """Regression: the README's example deleted model.model_size, which DLIO 2.0.0's unet3d configs do not have
    (their size is checkpoint.model_size): the command failed on the file users have."""
    f = _file(tmp_path, UNET3D_V2, "unet3d_h100.yaml")
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("dlbench run --dlio-config unet3d_h100.yaml"))
    args = line.split()[4:-1]   # the overrides after the file name, without the line continuation
    assert "~workload.model.model_size" not in args
    r = cli(["run", "--dlio-config", f, *args, "++workload.workflow.checkpoint=False", "--dry-run"])
    assert r.exit_code == 0, r.output
    t = dlio.load(f)
    # 2.0.0's schedule (first after epoch 5, then every 2 epochs) and size are emulated
    assert (t.run["checkpoint_after_epochs"], t.run["checkpoint_every_epochs"]) == (5, 2)
