"""tfrecord on 2 ranks: generation by 2 ranks writes the bytes a serial generation writes (index files too), and a
tf.data-pattern prefetch run shards the files over the ranks with --verify."""

import json

import pytest

pytestmark = pytest.mark.mpi
pytest.importorskip("crc32c")

WL = """name: tfr
layout: tfrecord
arrays:
  - {name: x, shape: [700], dtype: uint8, role: data}
samples: 40
batch_size: 4
samples_per_file: 8
compute:
  a100: {step_time_s: 0.001, batch_size: 4}
tfrecord: {read: tfdata, shuffle_buffer: 8}
"""


def test_generate_and_run_tfdata_on_two_ranks(tmp_path, run_mpi):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    (tmp_path / "w.yaml").write_text(WL)
    r = run_mpi(["generate", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d2", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    generate(load(str(tmp_path / "w.yaml")), tmp_path / "d1", seed=0)
    for p in sorted((tmp_path / "d1").rglob("*.tfrecord*")):
        assert p.read_bytes() == (tmp_path / "d2" / p.relative_to(tmp_path / "d1")).read_bytes(), p.name
    r = run_mpi(["run", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d2", "--strategy", "prefetch",
                 "--num-workers", 2, "--epochs", 2, "--verify", "--compute-time", "0.001", "--out", tmp_path / "res",
                 "--ceiling-steps", 0, "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["summary"]
    # 5 files over 2 ranks: 3 and 2 files; each rank keeps 16 samples (the same steps), 8 are left out
    assert s["tfrecord_read"] == "tfdata" and s["samples_per_epoch"] == [32, 32]
    assert s["semantics"]["each_epoch_a_full_permutation"].startswith("no (8 samples left out")
