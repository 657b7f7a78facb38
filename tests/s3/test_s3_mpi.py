"""Two ranks over S3 (mpiexec -n 2): generate writes disjoint objects, a staging run (MPI between ranks in its
prologue) and a pls run (exchange) verify every sample; the S3 block counts each rank's GETs."""

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.s3, pytest.mark.mpi]


def test_two_ranks_over_s3(s3_url, run_mpi, tmp_path):
    env = {"DLBENCH_DATA_DIR": str(tmp_path / "data")}
    g = run_mpi(["generate", "-w", "hep_cnn", "--scale", "tiny", "--data-dir", s3_url, "--no-progress"], env=env)
    assert g.returncode == 0, g.stderr
    for strategy in ("staging", "pls"):
        _run(s3_url, run_mpi, tmp_path, env, strategy)


def _run(s3_url, run_mpi, tmp_path, env, strategy):
    r = run_mpi(["run", "--ceiling-steps", "0", "-w", "hep_cnn", "--data-dir", s3_url, "--strategy", strategy,
                 "--epochs", "2", "--verify", "--compute-time", "0.001", "--out", tmp_path / "res"], env=env)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1]
    s = json.loads((Path(line.split("results: ", 1)[1]) / "run.json").read_text())["summary"]
    per = s["s3"]["per_rank_requests"]
    assert len(per) == 2 and all(p["GET"] > 0 and p["HEAD"] == 0 for p in per)
    assert sum(p["GET"] for p in per) == s["s3"]["requests"]["GET"] and s["verified_samples"] == 2 * 64


WDS = """\
name: wdsmpi
layout: webdataset
samples_per_file: 8
arrays:
  - {name: x, shape: [4, 16], dtype: float32, role: data}
samples: 64
batch_size: 4
compute: {}
webdataset: {read: stream, shuffle_buffer: 8, initial: 2, shard_shuffle: 2}
"""


def test_webdataset_two_ranks_over_s3(s3_url, run_mpi, tmp_path):
    """webdataset shards streamed by two ranks from the bucket: the shards split between the ranks, each shard
    one GET per epoch (8 shards x 2 epochs = 16 GETs, 8 per rank), every sample verified."""
    spec = tmp_path / "wds.yaml"
    spec.write_text(WDS)
    env = {"DLBENCH_DATA_DIR": str(tmp_path / "data")}
    g = run_mpi(["generate", "-w", spec, "--data-dir", s3_url, "--no-progress"], env=env)
    assert g.returncode == 0, g.stderr
    r = run_mpi(["run", "--ceiling-steps", "0", "-w", spec, "--data-dir", s3_url, "--strategy", "naive", "--epochs",
                 "2", "--verify", "--compute-time", "0.001", "--out", tmp_path / "res"], env=env)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1]
    s = json.loads((Path(line.split("results: ", 1)[1]) / "run.json").read_text())["summary"]
    assert s["webdataset_read"] == "stream" and s["verified_samples"] == 2 * 64
    assert [p["GET"] for p in s["s3"]["per_rank_requests"]] == [8, 8]
    assert s["s3"]["requests_per_sample"] == 16 / 128
