"""2 ranks under mpiexec inside a (faked) Slurm allocation of 2 nodes x 1 task: the node layout comes from
SLURM_TASKS_PER_NODE when --ranks-per-node is not given (one host: MPI's shared-memory split would say one node),
and run.json records the allocation, the launcher and every rank's host."""

import json
import socket

import pytest

pytestmark = pytest.mark.mpi

SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)",
         "SLURM_NTASKS": "2"}


def _run(run_mpi, tiny, out, *extra, env=None):
    r = run_mpi(["run", "--workload", "hep_cnn", "--data-dir", tiny, "--epochs", 1, "--compute-time", "0",
                 "--out", out, *extra], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(next(out.rglob("run.json")).read_text())


def test_ranks_per_node_from_allocation(tiny, tmp_path, run_mpi):
    doc = _run(run_mpi, tiny, tmp_path / "a", env=SLURM)
    assert doc["config"]["nodes"] == 2 and doc["config"]["ranks_per_node_source"] == "SLURM_TASKS_PER_NODE"
    p = doc["provenance"]
    assert p["scheduler"]["job_id"] == "4242" and p["scheduler"]["nodes"] == ["n1", "n2"]
    assert p["scheduler"]["tasks_per_node"] == [1, 1]
    assert p["launcher"] == "mpiexec" and p["ranks_per_host"] == {socket.gethostname(): 2}
    assert p["libraries"]["mpi_library"]  # MPI initialised: its version string is recorded
    # the flag still wins
    doc = _run(run_mpi, tiny, tmp_path / "b", "--ranks-per-node", 2, env=SLURM)
    assert doc["config"]["nodes"] == 1 and doc["config"]["ranks_per_node_source"] == "--ranks-per-node"


def test_no_allocation_uses_shared_memory_split(tiny, tmp_path, run_mpi):
    doc = _run(run_mpi, tiny, tmp_path / "a", env={k: "" for k in SLURM})
    assert doc["config"]["nodes"] == 1 and "shared-memory" in doc["config"]["ranks_per_node_source"]
    assert doc["provenance"]["scheduler"]["name"] is None
