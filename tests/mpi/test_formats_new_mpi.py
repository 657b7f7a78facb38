"""The token formats and webdataset on 2 ranks: generation by 2 ranks writes the bytes a serial generation writes
(index files too), and a webdataset stream run splits the shards over the ranks with --verify."""

import json

import pytest

pytestmark = pytest.mark.mpi

TOK = """name: tok2
layout: mmap_indexed_binary
arrays:
  - {name: tokens, shape: [128], dtype: uint16, role: data}
samples: 40
batch_size: 4
samples_per_file: 8
compute: {}
"""
WDS = """name: wds2
layout: webdataset
arrays:
  - {name: x, shape: [300], dtype: uint8, role: data}
samples: 64
batch_size: 4
samples_per_file: 10
compute: {}
webdataset: {shuffle_buffer: 8, initial: 4}
"""


@pytest.mark.parametrize("spec", [TOK, WDS], ids=["mmap_indexed_binary", "webdataset"])
def test_two_rank_generation_is_the_serial_bytes(tmp_path, run_mpi, spec):
    from dlbench.data.generate import generate
    from dlbench.workload import load

    (tmp_path / "w.yaml").write_text(spec)
    r = run_mpi(["generate", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d2", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    generate(load(str(tmp_path / "w.yaml")), tmp_path / "d1", seed=0)
    files = sorted(p for p in (tmp_path / "d1").iterdir() if not p.name.startswith("dlbench-"))
    assert len(files) == (10 if "tokens" in spec else 7)
    for p in files:
        assert p.read_bytes() == (tmp_path / "d2" / p.name).read_bytes(), p.name


def test_webdataset_stream_splits_shards_over_ranks(tmp_path, run_mpi):
    (tmp_path / "w.yaml").write_text(WDS)
    r = run_mpi(["generate", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_mpi(["run", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d", "--strategy", "naive",
                 "--epochs", 2, "--verify", "--compute-time", "0.001", "--out", tmp_path / "res", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["summary"]
    # 7 shards: rank 0 holds 0, 2, 4, 6 (34 samples), rank 1 holds 1, 3, 5 (30): both keep 30 (60 per epoch), 4 left out
    assert s["webdataset_read"] == "stream" and s["samples_per_epoch"] == [60, 60]
    assert s["semantics"]["each_epoch_a_full_permutation"].startswith("no (4 samples left out")
    q = s["order_quality"]    # shards stay with their rank: each sees at most its own shards (<= 34 of 64)
    assert q["fraction_of_dataset_seen_per_rank_after_epoch"][-1] <= 0.5 < q["global_shuffle_expected_after_epoch"][-1]
    reads = [r["POSIX_READS"] for r in s["io_counters"]["by_rank"]]
    assert reads[1] == 2 * 3 and 2 * 3 <= reads[0] <= 2 * 4      # each rank fetches only its own shards


def test_token_dataset_mmap_run_on_two_ranks(tmp_path, run_mpi):
    (tmp_path / "w.yaml").write_text(TOK)
    r = run_mpi(["generate", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_mpi(["run", "--workload", tmp_path / "w.yaml", "--data-dir", tmp_path / "d", "--strategy", "naive",
                 "--epochs", 2, "--verify", "--compute-time", "0.001", "--out", tmp_path / "res", "--no-progress"])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["summary"]
    assert s["verified_samples"] == 2 * 40 and s["read_bytes"] == 2 * 40 * 256
    per_rank = [c["MMAP_READS"] for c in s["io_counters"]["by_rank"]]
    assert per_rank == [40, 40]          # each rank's copies out of its own maps, shipped per rank
