"""A scaling sweep under mpiexec -n 2: the launch runs the 2-rank points only, into the shared root."""

import json

import pytest

pytestmark = pytest.mark.mpi

STUDY = """
name: tiny-scaling
workload: hep_cnn
scale: tiny
system: local
epochs: 1
batch_size: 4
compute_time_s: 0.001
runs:
  - {strategy: naive}
sweep:
  ranks: [1, 2]
  scaling: weak
  samples_per_rank: 32
"""


def test_two_rank_launch_runs_its_points(tmp_path, run_mpi):
    st = tmp_path / "s.yaml"
    st.write_text(STUDY)
    r = run_mpi(["study", st, "--out", tmp_path / "res", "--data-dir", tmp_path / "data"])
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("run.json")]
    assert [(x["summary"]["ranks"], x["summary"]["samples"]) for x in runs] == [(2, 64)]  # weak: 32 per rank
    assert (tmp_path / "data" / "hep_cnn-tiny-F64-seed0").is_dir()
    assert not (tmp_path / "data" / "hep_cnn-tiny-F32-seed0").exists()
