"""issue 12, defaults: `dlbench run --workload W` with nothing else works for every built-in workload, says where
its step time comes from, and checks compute options before generating anything."""

import json

import pytest

from dlbench import workload as W

BUILTINS = W.builtin_names()


def test_every_builtin_is_covered():
    assert set(BUILTINS) >= {"cosmoflow", "deepcam", "hep_cnn", "ptychonn", "imagenet", "unet3d"}


@pytest.mark.parametrize("name", BUILTINS)
def test_run_with_defaults_works_for_every_builtin(name, cli, tmp_path, monkeypatch):
    """Regression: deepcam, hep_cnn and ptychonn failed with "no published step time for a100" (after
    generating their dataset)."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    r = cli(["run", "--workload", name, "--epochs", "1"])
    assert r.exit_code == 0, r.output
    run = json.loads(next((tmp_path / "results").rglob("run.json")).read_text())
    c = run["summary"]["compute"]
    wl = W.load(name)
    if "a100" in wl.compute:
        assert c["accelerator"] == "a100" and c["kind"] == "published"
    else:
        assert c["kind"] == "measured" and "no published a100 step time" in c["source"]
        assert "measured on an NVIDIA H100" in c["source"]
    assert c["default"] is True
    assert "compute: sleep" in r.output and c["source"].split(":")[0] in r.output


def test_measured_entries_state_their_source():
    """Every built-in has a step time for every accelerator dlbench knows (published, else measured on it with
    dlbench calibrate), and every measured entry says how it was measured."""
    for name in BUILTINS:
        wl = W.load(name)
        have = set(wl.compute) | {m.accelerator for m in wl.measured}
        assert wl.measured or have >= set(W.ACCELERATORS), name
        for m in wl.measured:
            assert m.accelerator == "h100" and "dlbench calibrate" in m.source and "torch 2.11" in m.source


def test_choice_rules():
    dc = W.load("deepcam")
    ch = dc.choose_step_time(None)
    assert (ch.accelerator, ch.kind, ch.step_time_s, ch.batch_size) == ("h100", "measured", 0.0678, 2)
    assert dc.choose_step_time(None, "deepcam_resnet50").step_time_s == 0.041
    assert dc.choose_step_time("h100").why == ""            # asked for: no "default" note
    with pytest.raises(W.ConfigError, match="--accelerator=a100: workload deepcam has no step time.*h100 measured"):
        dc.choose_step_time("a100")
    cf = W.load("cosmoflow")
    assert cf.choose_step_time(None).kind == "published" and cf.choose_step_time(None).accelerator == "a100"
    assert cf.choose_step_time("h100").kind == "published"   # a published figure wins over a measured one
    im = W.load("imagenet")
    ch = im.choose_step_time("h100", "resnet50")   # the reference model: published (DLIO v2.0.0 = MLPerf Storage v1.0)
    assert (ch.step_time_s, ch.batch_size) == (0.224, 400)


def test_user_workload_without_step_time_fails_before_generating(cli, tmp_path, monkeypatch):
    y = tmp_path / "mine.yaml"
    y.write_text("name: mine\nlayout: hdf5_per_sample\narrays:\n  - {name: x, shape: [64], dtype: float32}\n"
                 "samples: 8\nbatch_size: 2\n")
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", y, "--epochs", "1", "--out", tmp_path / "res"])
    assert r.exit_code == 2 and "workload mine has no step time" in r.output and "--compute-time" in r.output
    assert not (tmp_path / "data").exists() and not (tmp_path / "res").exists()


@pytest.mark.parametrize("args,needle", [
    (["--accelerator", "v100"], "--accelerator=v100: workload ptychonn has no step time"),
    (["--compute-profile", "/nonexistent.yaml"], "compute profile '/nonexistent.yaml' not found"),
    (["--compute-time", "inf"], "--compute-time=inf: must be a finite number"),
    (["--compute-time", "nan"], "--compute-time=nan: must be a finite number"),
    (["--compute-time", "1e308"], "--compute-time=1e+308: must be a finite number"),
    (["--compute-stdev", "inf"], "--compute-stdev=inf: must be a finite number"),
    (["--compute", "torch", "--model", "vgg"], "unknown model 'vgg'"),
    (["--model", "vgg"], "unknown model 'vgg'"),
    (["--precision", "bf16"], "workload ptychonn in bf16 has no step time"),   # sleep: the measured bf16 entry
    (["--overlap", "on"], "--overlap=on: applies to --compute torch"),
])
def test_compute_options_checked_before_generating(args, needle, cli, tmp_path, monkeypatch):
    """Regression: --compute-time inf|nan|1e308 raised OverflowError/ValueError inside the run; every compute
    option is now checked before a dataset is generated or a results folder made."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "ptychonn", "--epochs", "1", "--out", tmp_path / "res", *args])
    assert r.exit_code == 2, r.output
    assert needle in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "data").exists() and not (tmp_path / "res").exists()


@pytest.mark.parametrize("measured,needle", [
    ("  - {accelerator: h100, step_time_s: 0.1, batch_size: 2, source: a}\n"
     "  - {accelerator: h100, step_time_s: 0.2, batch_size: 2, source: b}\n", "two entries for accelerator h100"),
    ("  - {accelerator: h100, model: vgg, step_time_s: 0.1, batch_size: 2, source: a}\n", "unknown model in measured"),
    ("  - {accelerator: tpu, step_time_s: 0.1, batch_size: 2, source: a}\n", "tpu"),
    ("  - {accelerator: h100, step_time_s: 0.1, batch_size: 2}\n", "source"),
])
def test_measured_entries_are_validated(tmp_path, measured, needle):
    y = tmp_path / "mine.yaml"
    y.write_text("name: mine\nlayout: hdf5_per_sample\narrays:\n  - {name: x, shape: [64], dtype: float32}\n"
                 "samples: 8\nbatch_size: 2\nmeasured:\n" + measured)
    with pytest.raises(W.ConfigError, match=needle):
        W.load(str(y))


def test_a_measured_entry_makes_a_user_workload_run_with_defaults(tmp_path):
    y = tmp_path / "mine.yaml"
    y.write_text("name: mine\nlayout: hdf5_per_sample\narrays:\n  - {name: x, shape: [64], dtype: float32}\n"
                 "samples: 8\nbatch_size: 2\nmeasured:\n"
                 "  - {accelerator: v100, step_time_s: 0.01, batch_size: 2, source: my lab}\n")
    ch = W.load(str(y)).choose_step_time(None)
    assert (ch.accelerator, ch.kind, ch.scaled(4)) == ("v100", "measured", 0.02)
    assert "default: no published a100 step time for mine" in ch.describe(4) and "my lab" in ch.describe(4)
