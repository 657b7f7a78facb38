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


def test_generated_slurm_scripts_run(tmp_path, run_mpi):
    """The jobscript output runs as written: generate job, then each point, with srun standing in for
    mpiexec (a fake srun on PATH that keeps the task count)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from dlbench.jobscript import write_jobscripts

    root = Path(__file__).resolve().parents[2]
    exe = Path(sys.executable).parent / "mpiexec"
    exe = str(exe) if exe.exists() else shutil.which("mpiexec")  # run_mpi skipped the test if there is none

    st = tmp_path / "s.yaml"
    st.write_text(STUDY)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text('#!/bin/bash\nW=1\nwhile [[ "$1" == -* ]]; do case "$1" in -n) W=$2; shift 2;; '
                               '-N) shift 2;; *) shift;; esac; done\n' f'exec {exe} -n "$W" "$@"\n')
    (fake / "srun").chmod(0o755)
    jobs = tmp_path / "jobs"
    write_jobscripts(st, jobs, scheduler="slurm", data_dir=tmp_path / "data", results=tmp_path / "res",
                     env_line="true", dlbench=f"{sys.executable} -m dlbench.cli")
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("DLBENCH_NO_MPI", None)
    for script in ("generate.sbatch", "point-R1.sbatch", "point-R2.sbatch"):
        r = subprocess.run([shutil.which("bash"), str(jobs / script)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=240)
        assert r.returncode == 0, (script, r.stdout + r.stderr)
    runs = [json.loads(p.read_text()) for p in (tmp_path / "res").rglob("run.json")]
    assert sorted((x["summary"]["ranks"], x["summary"]["samples"]) for x in runs) == [(1, 32), (2, 64)]
