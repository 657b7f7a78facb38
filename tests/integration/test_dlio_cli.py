"""`dlbench run --dlio-config` and `dlbench import dlio-config` on the MLPerf Storage training configs, shrunk with
DLIO's Hydra overrides; every run states its AU threshold and writes DLIO's summary.json beside run.json."""

import json
from pathlib import Path

import pytest

from dlbench import workload as W

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
FIXUPS = {"unet3d": ["~workload.model.model_size", "++workload.workflow.checkpoint=False"],
          "resnet50": ["++workload.reader.data_loader=pytorch", "++workload.reader.sample_shuffle=seed"],
          "cosmoflow": ["++workload.reader.data_loader=pytorch"]}
# test size: 8 files of 4 KiB (resnet50: 4 files of 2 records), 2 epochs, 1 ms steps, 1 loader worker
SHRINK = ["++workload.dataset.num_files_train=8", "++workload.dataset.record_length_bytes=4096",
          "++workload.train.epochs=2", "++workload.train.computation_time=0.001", "++workload.reader.batch_size=2",
          "++workload.reader.read_threads=1"]


def _shrunk(name, fmt=None):
    extra = list(SHRINK)
    if name.startswith("resnet50"):
        extra += ["++workload.dataset.num_files_train=4", "++workload.dataset.num_samples_per_file=2"]
    if fmt == "hdf5":
        extra += ["++workload.dataset.format=hdf5", "++workload.dataset.record_length_bytes_stdev=0"]
    else:
        extra += ["++workload.dataset.record_length_bytes_stdev=512"]
    return [*FIXUPS[name.split("_")[0]], *extra]


def _results(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])


@pytest.fixture(autouse=True)
def _data_root(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))


@pytest.mark.parametrize("name", ["unet3d_h100", "resnet50_h100", "cosmoflow_h100"])
def test_run_dlio_config_hdf5(tmp_path, cli, name):
    r = cli(["run", "--dlio-config", FIX / f"{name}.yaml", *_shrunk(name, "hdf5"), "-o", tmp_path / "res",
             "--no-progress", "--ceiling-steps", 0])
    assert r.exit_code == 0, r.output
    rd = _results(r.output)
    run = json.loads((rd / "run.json").read_text())
    au = {"unet3d": 0.9, "resnet50": 0.9, "cosmoflow": 0.7}[name.split("_")[0]]
    assert run["summary"]["au_rule"]["threshold"] == au
    assert run["config"]["strategy"] == "prefetch" and run["config"]["options"]["num_workers"] == 1
    assert run["config"]["epochs"] == 2 and run["config"]["compute_time_s"] == 0.001
    assert f"AU threshold                                  {au:.1%}" in r.output
    s = json.loads((rd / "summary.json").read_text())
    files = 4 if name.startswith("resnet50") else 8
    assert (s["num_files_train"], s["epochs"], s["num_accelerators"]) == (files, 2, 1)
    assert len(s["metric"]["train_au_percentage"]) == 2
    assert s["metric"]["train_au_meet_expectation"] in ("success", "fail")
    assert "summary.json" in run["files"]


@pytest.mark.parametrize("name", ["unet3d_h100", "resnet50_h100", "cosmoflow_h100"])
def test_run_dlio_config_own_format(tmp_path, cli, name):
    """npz (unet3d) and tfrecord (resnet50, cosmoflow) as DLIO writes them: runs once the format registry has
    the layout (formats branch); until then only the translation is checked here."""
    out = tmp_path / "w.yaml"
    r = cli(["import", "dlio-config", FIX / f"{name}.yaml", *_shrunk(name), "-o", out])
    assert r.exit_code == 0, r.output
    layout = {"unet3d": "npz"}.get(name.split("_")[0], "tfrecord")
    if layout not in getattr(W, "LAYOUTS", ()):
        pytest.skip(f"layout {layout} not registered yet (format registry of the formats branch)")
    W.load_spec(str(out))   # the translation's keys (record_size: size distribution) load strictly
    r = cli(["run", "--dlio-config", FIX / f"{name}.yaml", *_shrunk(name), "-o", tmp_path / "res", "--no-progress",
             "--ceiling-steps", 0])
    assert r.exit_code == 0, r.output
    assert (_results(r.output) / "summary.json").is_file()


def test_import_writes_a_loadable_workload_with_the_run_flags(tmp_path, cli):
    out = tmp_path / "cf.yaml"
    r = cli(["import", "dlio-config", FIX / "cosmoflow_h100.yaml", *_shrunk("cosmoflow_h100", "hdf5"), "-o", out])
    assert r.exit_code == 0, r.output
    spec, _ = W.load_spec(str(out))
    assert (spec.layout, spec.samples, spec.au_threshold) == ("hdf5_per_sample", 8, 0.7)
    assert "--strategy prefetch --epochs 2 --seed 123 --compute-time 0.001 --num-workers 1" in out.read_text()


def test_unsupported_is_one_error_and_nothing_written(tmp_path, cli):
    out = tmp_path / "r.yaml"
    npz = "++workload.dataset.format=npz"   # tensorflow's loader is emulated for tfrecord only
    r = cli(["import", "dlio-config", FIX / "resnet50_h100.yaml", npz, "-o", out])
    assert r.exit_code != 0 and "reader.data_loader='tensorflow'" in r.output and not out.exists()
    r = cli(["import", "dlio-config", FIX / "resnet50_h100.yaml", npz, "-o", out, "--allow-unsupported"])
    assert r.exit_code == 0 and "warning: DLIO settings not emulated" in r.output and out.is_file()


def test_overrides_without_dlio_config_are_refused(cli):
    r = cli(["run", "++workload.train.epochs=1"])
    assert r.exit_code != 0 and "overrides need --dlio-config" in r.output


def test_builtin_workload_states_its_threshold(tmp_path, cli):
    r = cli(["run", "--workload", "cosmoflow", "--epochs", "1", "--compute-time", "0.001",
             "-o", tmp_path / "res", "--no-progress"])   # the tiny dataset, generated under DLBENCH_DATA_DIR
    assert r.exit_code == 0, r.output
    assert "AU threshold                                  70.0% (MLPerf Storage rules, cosmoflow: 70 %)" in r.output
    s = json.loads((_results(r.output) / "summary.json").read_text())
    assert s["dlbench"]["au_threshold"] == 0.7
    for k in ("start", "end", "num_files_eval", "host_memory_GB", "host_cpu_count", "host_processor_name",
              "data_size_per_host_GB", "potential_caching"):   # DLIO's top-level keys
        assert s[k] is not None, k
    assert s["potential_caching"] == [1] and s["start"] <= s["end"] and s["dlbench"]["cache_verdict"]
    assert W.load("ptychonn").au_threshold is None      # none published: the summary says so


def test_sustain_one_rank_measured_and_modelled(tmp_path, cli):
    """cosmoflow tiny (HDF5) on the emulated laptop PFS: measured at 1 rank, the shared tier fitted, N modelled."""
    r = cli(["sustain", "--workload", "cosmoflow", "--accelerator", "h100", "--strategy", "naive", "--strategy",
             "clairvoyant", "--system", "laptop-pfs", "--measure-ranks", "1", "--model-scale", "tiny",
             "--epochs", "1", "--max-accelerators", "64", "-o", tmp_path / "res", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("["):])
    assert [x["strategy"] for x in rows] == ["naive", "clairvoyant"]
    for x in rows:
        assert x["threshold"] == 0.7 and x["points"][0]["kind"] == "measured" and x["points"][0]["accelerators"] == 1
        assert all(p["kind"] == "modelled" for p in x["points"][1:])
        assert x["sustained_kind"] in ("measured", "modelled") and 0 <= x["sustained"] <= 64
        assert Path(x["points"][0]["run_dir"], "summary.json").is_file()
        ok = [p["accelerators"] for p in x["points"] if p["au"] >= 0.7]
        if x["sustained_kind"] == "modelled":
            assert x["sustained"] == max(ok) and all(p["au"] < 0.7 for p in x["points"]
                                                       if p["accelerators"] > x["sustained"])
    assert rows[0]["scale"] == rows[1]["scale"]          # one storage, one fit


def test_sustain_refuses_a_workload_without_threshold(cli):
    r = cli(["sustain", "--workload", "ptychonn", "--accelerator", "h100"])
    assert r.exit_code != 0 and "no AU threshold" in r.output


@pytest.mark.mpi
def test_sustain_measures_two_ranks(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, mpiexec

    if mpiexec() is None:
        pytest.skip("mpiexec not found")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "dlbench.cli", "sustain", "--workload", "cosmoflow", "--accelerator",
                        "h100", "--system", "laptop-pfs", "--model-scale", "tiny", "--epochs", "1",
                        "--max-accelerators", "8", "-o", str(tmp_path / "res"), "--json"],
                       capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    pts = json.loads(r.stdout)[0]["points"]
    assert [(p["accelerators"], p["kind"]) for p in pts[:2]] == [(1, "measured"), (2, "measured")]


def test_dlio_config_with_workload_or_scale_is_refused(cli):
    for flag, val in (("--workload", "cosmoflow"), ("--scale", "tiny")):
        r = cli(["run", "--dlio-config", FIX / "cosmoflow_h100.yaml", flag, val, *_shrunk("cosmoflow_h100", "hdf5")])
        assert r.exit_code != 0 and f"{flag} with --dlio-config" in r.output


def test_run_prints_the_translation_notes(tmp_path, cli):
    """`run --dlio-config` says what the translation noted (as `import` writes in its header): one
    `dlbench: note:` line each on stderr."""
    from dlbench import dlio

    args = [*_shrunk("cosmoflow_h100", "hdf5"), "++workload.reader.batch_size=3"]   # 8 samples, batches of 3
    t = dlio.load(str(FIX / "cosmoflow_h100.yaml"), args)
    assert t.notes
    r = cli(["run", "--dlio-config", FIX / "cosmoflow_h100.yaml", *args, "-o", tmp_path / "res", "--no-progress",
             "--ceiling-steps", 0])
    assert r.exit_code == 0, r.output
    for n in t.notes:
        assert f"dlbench: note: {n}\n" in r.stderr
    assert "in batches of 3" in r.stderr


SMALL_PRESET = """name: fewsamples
layout: npz
arrays:
  - {name: x, shape: [1024], dtype: uint8, role: data}
  - {name: y, shape: [1], dtype: int64, role: label}
samples: 64
batch_size: 3
compute:
  h100: {step_time_s: 0.001, batch_size: 3, source: test}
au_threshold: 0.5
presets:
  tiny: {samples: 2, shapes: {x: [512]}}
"""


def test_sustain_grows_a_preset_too_small_for_the_measured_ranks(tmp_path, cli):
    """A tiny preset with fewer samples than ranks x batch (unet3d: 8 samples, batch 7, 2 ranks) made the
    measured run fail; sustain grows the measured dataset (the preset's shapes), says so, and runs."""
    from dlbench import sustain as S

    wl = tmp_path / "few.yaml"
    wl.write_text(SMALL_PRESET)
    r = cli(["sustain", "--workload", wl, "--accelerator", "h100", "--measure-ranks", "1", "--model-scale", "tiny",
             "--epochs", "1", "--max-accelerators", "4", "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    n = S.measured_samples(2, 1, 3)
    assert n == 3 * S.MEASURE_STEPS
    assert f"fewsamples's tiny preset has 2 samples, fewer than 1 rank(s) x batch 3 x {S.MEASURE_STEPS} steps: grown " \
           f"to {n} samples of the preset's shapes" in r.stdout
    from dlbench.data.manifest import Manifest

    (d,) = (tmp_path / "data" / "sustain").iterdir()
    assert Manifest.load(d).samples == n and d.name.startswith("fewsamples-") and d.name.endswith(f"-tiny-F{n}-seed0")
    assert S.measured_samples(100, 2, 7) == 100 and S.measured_samples(8, 2, 7) == 2 * 7 * S.MEASURE_STEPS


@pytest.mark.parametrize("name, extra", [
    ("cosmoflow_h100", ["++workload.dataset.format=hdf5", "++workload.dataset.record_length_bytes_stdev=0"]),
    ("resnet50_h100", ["++workload.dataset.num_files_train=4", "++workload.dataset.num_samples_per_file=2",
                       "++workload.reader.read_threads=1"])])   # resnet50: tfrecord read as tf.data does
def test_run_reads_dlios_samples_per_epoch(tmp_path, cli, name, extra):
    """DLIO 2.0.0 drops every rank's last partial batch (torch drop_last, tf drop_remainder): 8 samples in
    batches of 3 are 6 per epoch there, and now in dlbench's run of the same config (it read 8)."""
    args = [*SHRINK, *extra, "++workload.reader.batch_size=3"]
    if name.startswith("cosmoflow"):
        args = [*FIXUPS["cosmoflow"], *args]
    r = cli(["run", "--dlio-config", FIX / f"{name}.yaml", *args, "-o", tmp_path / "res", "--no-progress",
             "--ceiling-steps", 0])
    assert r.exit_code == 0, r.output
    run = json.loads((_results(r.output) / "run.json").read_text())
    assert run["config"]["options"]["drop_last_batch"] is True
    assert run["summary"]["samples_per_epoch"] == [6, 6] and run["summary"]["samples"] == 12
    assert "dlbench drops it too (prefetch --drop-last-batch)" in r.stderr
