"""`dlbench run` on tiny TFRecord data, both read patterns (indexed: index + pread; tfdata: tf.data's streams and
shuffle buffer), naive and prefetch, with --verify; the DLIO resnet50 config as shipped (tensorflow loader)."""

import json
from pathlib import Path

import pytest

pytest.importorskip("crc32c")

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
WL = """name: tfr
layout: tfrecord
arrays:
  - {name: x, shape: [1500], dtype: uint8, role: data}
samples: 48
batch_size: 4
samples_per_file: 8
compute:
  a100: {step_time_s: 0.001, batch_size: 4}
"""


def _results(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    d = tmp_path_factory.mktemp("tfr")
    (d / "indexed.yaml").write_text(WL + "tfrecord: {read: indexed}\n")
    (d / "tfdata.yaml").write_text(WL + "tfrecord: {read: tfdata, shuffle_buffer: 12}\n")
    generate(load(str(d / "indexed.yaml")), d / "data", seed=0)
    return d


@pytest.mark.parametrize("read", ["indexed", "tfdata"])
@pytest.mark.parametrize("strategy", ["naive", "prefetch"])
def test_run_both_read_patterns(cli, dataset, tmp_path, read, strategy):
    extra = ["--num-workers", "2"] if strategy == "prefetch" else []
    r = cli(["run", "--workload", dataset / f"{read}.yaml", "--data-dir", dataset / "data", "--strategy", strategy,
             *extra, "--epochs", "2", "--verify", "--compute-time", "0.001", "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    run = json.loads((_results(r.output) / "run.json").read_text())
    s = run["summary"]
    assert s["tfrecord_read"] == read and f"tfrecord read pattern                         {read}: " in r.output
    assert s["samples_per_epoch"] == [48, 48]
    if read == "tfdata":
        assert s["order"].startswith("tf.data") and s["semantics"]["global_batch_is_global_shuffles"].startswith("no")
    else:
        assert "global shuffle" in s["order"]


def test_tfdata_with_a_planned_strategy_is_one_error(cli, dataset, tmp_path):
    r = cli(["run", "--workload", dataset / "tfdata.yaml", "--data-dir", dataset / "data", "--strategy", "lbann",
             "--epochs", "1", "--compute-time", "0.001", "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code != 0 and "tfrecord read pattern tfdata" in r.output and "Traceback" not in r.output


def test_verify_cli_names_the_flipped_record(cli, tmp_path):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    (tmp_path / "w.yaml").write_text(WL)
    generate(load(str(tmp_path / "w.yaml")), tmp_path / "d", seed=0)
    f = tmp_path / "d" / "data-000003.tfrecord"
    b = bytearray(f.read_bytes())
    stride = len(b) // 8
    b[6 * stride + 100] ^= 1
    f.write_bytes(bytes(b))
    r = cli(["verify", "--data-dir", tmp_path / "d", "--checksum"])
    assert r.exit_code != 0 and "data-000003.tfrecord: record 6 (sample 30): payload CRC mismatch" in r.output


@pytest.mark.parametrize("loader,read", [("tensorflow", "tfdata"), ("pytorch", "indexed")])
def test_dlio_resnet50_config_runs_tfrecord(cli, tmp_path, monkeypatch, loader, read):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", FIX / "resnet50_h100.yaml", f"++workload.reader.data_loader={loader}",
             "++workload.reader.sample_shuffle=seed", "++workload.dataset.num_files_train=4",
             "++workload.dataset.num_samples_per_file=4", "++workload.dataset.record_length_bytes=4096",
             "++workload.dataset.record_length_bytes_stdev=512", "++workload.train.epochs=2",
             "++workload.train.computation_time=0.001", "++workload.reader.batch_size=2",
             "++workload.reader.read_threads=2", "--verify", "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0, r.output
    rd = _results(r.output)
    run = json.loads((rd / "run.json").read_text())
    assert run["summary"]["tfrecord_read"] == read
    s = json.loads((rd / "summary.json").read_text())
    assert (s["num_files_train"], s["num_samples_per_file"]) == (4, 4)
    files = sorted(p.name for p in (tmp_path / "data").glob("resnet50-*/*.tfrecord"))
    assert files == [f"data-{f:06d}.tfrecord" for f in range(4)]
