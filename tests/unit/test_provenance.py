"""Provenance in run.json (dlbench.provenance): scheduler allocations from fake environments, ranks per node
derived from them, mountinfo matching, the workload hash, compare's warnings and report's block."""

from __future__ import annotations

import json

import pytest

from dlbench import provenance as pv
from dlbench.comm import get_comm


@pytest.mark.parametrize("text,want", [("1", [1]), ("2(x2)", [2, 2]), ("2(x3),1", [2, 2, 2, 1]),
                                       ("4,4(x2)", [4, 4, 4])])
def test_slurm_tasks_per_node(text, want):
    assert pv.parse_slurm_tasks_per_node(text) == want


@pytest.mark.parametrize("bad", ["", "2x2", "2(2)", "a", "2(x)"])
def test_slurm_tasks_per_node_rejects(bad):
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE"):
        pv.parse_slurm_tasks_per_node(bad)


@pytest.mark.parametrize("text,want", [
    ("n[1-2]", ["n1", "n2"]), ("node7", ["node7"]), ("gpu[08-10,12]", ["gpu08", "gpu09", "gpu10", "gpu12"]),
    ("a1,b[3-4],c", ["a1", "b3", "b4", "c"]), ("x[1-2]-ib", ["x1-ib", "x2-ib"])])
def test_slurm_nodelist(text, want):
    assert pv.expand_slurm_nodelist(text) == want


def test_slurm_allocation_from_job_env():
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)",
           "SLURM_NTASKS": "4"}
    a = pv.allocation(env)
    assert (a["name"], a["job_id"], a["nodes"], a["tasks_per_node"], a["ntasks"]) == \
        ("slurm", "4242", ["n1", "n2"], [2, 2], 4)
    assert pv.ranks_per_node_from_allocation(4, env) == (2, "SLURM_TASKS_PER_NODE")
    assert pv.ranks_per_node_from_allocation(None, env) == (2, "SLURM_TASKS_PER_NODE")


def test_slurm_step_layout_wins_inside_srun():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-4]", "SLURM_TASKS_PER_NODE": "1(x4)",
           "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "3(x2)",
           "SLURM_STEP_NUM_TASKS": "6"}
    a = pv.allocation(env)
    assert a["nodes"] == ["n1", "n2"] and a["tasks_per_node"] == [3, 3] and a["ntasks"] == 6
    assert pv.ranks_per_node_from_allocation(6, env) == (3, "SLURM_STEP_TASKS_PER_NODE")
    assert pv.launcher(env) == "srun"


def test_no_derivation_when_uneven_or_mismatched():
    env = {"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "2,1"}
    k, why = pv.ranks_per_node_from_allocation(3, env)
    assert k is None and "uneven" in why and "shared-memory" in why
    env = {"SLURM_JOB_ID": "1", "SLURM_TASKS_PER_NODE": "2(x2)"}
    k, why = pv.ranks_per_node_from_allocation(1, env)  # mpiexec -n 1 inside a 4-task allocation
    assert k is None and "4 tasks" in why
    assert pv.ranks_per_node_from_allocation(2, {})[0] is None


def test_bad_slurm_variable_named_not_raised():
    a = pv.allocation({"SLURM_JOB_ID": "9", "SLURM_TASKS_PER_NODE": "lots"})
    assert a["job_id"] == "9" and a["tasks_per_node"] is None and "SLURM_TASKS_PER_NODE='lots'" in a["error"]


def test_pbs_allocation_from_nodefile(tmp_path):
    nf = tmp_path / "nodes"
    nf.write_text("c1\nc1\nc2\nc2\n")
    env = {"PBS_JOBID": "12.pbs", "PBS_NODEFILE": str(nf)}
    a = pv.allocation(env)
    assert (a["name"], a["nodes"], a["tasks_per_node"], a["ntasks"]) == ("pbs", ["c1", "c2"], [2, 2], 4)
    assert pv.ranks_per_node_from_allocation(4, env) == (2, "PBS_NODEFILE")


def test_flux_job_id_and_launchers():
    assert pv.allocation({"FLUX_JOB_ID": "f2x"})["name"] == "flux"
    assert pv.launcher({}) == "none"
    assert pv.launcher({"PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}) == "mpiexec"
    assert pv.launcher({"OMPI_COMM_WORLD_SIZE": "2"}) == "mpiexec"
    assert pv.launcher({"FLUX_TASK_RANK": "0"}) == "flux"


def test_serial_comm_has_no_allocation_source():
    assert get_comm().layout_source is None


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 22 0:25 / /scratch rw,nosuid shared:2 - lustre 10.0.0.1@o2ib:/fs rw,flock,lazystatfs
31 30 0:26 / /scratch/my\\040dir rw - tmpfs tmpfs rw,size=1024k
"""


def test_mountinfo_longest_prefix():
    m = pv.parse_mountinfo(MOUNTINFO)
    assert pv.mount_of("/scratch/u/data", m)["fstype"] == "lustre"
    assert pv.mount_of("/scratch/u/data", m)["options"] == "rw,nosuid,flock,lazystatfs"  # rw once
    assert pv.mount_of("/scratchy", m)["fstype"] == "ext4"  # a prefix of the string, not of the path
    assert pv.mount_of("/scratch/my dir/x", m)["fstype"] == "tmpfs"


def test_filesystem_of_missing_path_uses_parent(tmp_path):
    fs = pv.filesystem(tmp_path / "not" / "yet")
    assert fs["fstype"] and fs["statfs"]["size_bytes"] > 0


def test_workload_hash_canonical():
    a = pv.spec_sha256({"name": "cosmoflow", "samples": 16, "shape": [4, 4]})
    assert a == pv.spec_sha256({"shape": [4, 4], "samples": 16, "name": "cosmoflow"})
    assert a != pv.spec_sha256({"name": "cosmoflow", "samples": 32, "shape": [4, 4]})


def test_collect_record(tmp_path):
    cfg = {"data_dir": str(tmp_path), "local_dir": str(tmp_path / "local"), "out": str(tmp_path / "res"),
           "workload_spec": {"name": "w"}, "hosts": ["h1", "h1", "h2"], "ranks_per_node_source": "--ranks-per-node"}
    p = pv.collect(cfg)
    json.dumps(p)
    assert p["hosts"] == ["h1", "h2"] and p["ranks_per_host"] == {"h1": 2, "h2": 1}
    assert set(p["filesystems"]) == {"data", "local", "results"}
    assert p["dlbench"]["git_commit"] or p["dlbench"]["files_sha256"]
    assert p["libraries"]["numpy"] and p["workload_sha256"] == pv.spec_sha256({"name": "w"})
    assert p["mem_total_bytes"] > 0


def _run(name, **changes):
    prov = {"dlbench": {"version": "0.1", "git_commit": "a" * 40}, "workload_sha256": "b" * 64,
            "libraries": {"numpy": "2.0", "h5py": "3.11"}, "hosts": [name], "launcher": "mpiexec",
            "scheduler": {"name": "slurm", "job_id": name}, "filesystems": {"data": {"fstype": "lustre",
                                                                                   "statfs": {"free_bytes": 1}}}}
    for k, v in changes.items():
        d = prov
        *head, last = k.split("__")
        for h in head:
            d = d[h]
        d[last] = v
    return {"run_dir": name, "provenance": prov}


def test_compare_warns_one_line_per_differing_field():
    same = pv.differences([_run("r1"), _run("r2")])
    assert same == []  # job id, hosts, free space differ per run: not warned
    lines = pv.differences([_run("r1"), _run("r2", libraries__numpy="1.26", filesystems__data__fstype="nfs")])
    assert len(lines) == 2
    assert any("libraries.numpy" in ln and "'2.0'" in ln and "'1.26'" in ln for ln in lines)
    assert any("filesystems.data.fstype" in ln and "nfs" in ln for ln in lines)
    assert pv.differences([_run("r1"), {"run_dir": "old"}]) == []  # a run without provenance: nothing to say


def test_report_block():
    text = pv.render(_run("r1")["provenance"])
    assert text.startswith("provenance:") and "git aaaaaaaaaaaa" in text and "slurm job r1" in text
    assert "not recorded" in pv.render(None)


def test_write_run_records_provenance_except_for_imported_records(tmp_path):
    from dlbench import results

    cfg = {"data_dir": str(tmp_path), "workload_spec": {"name": "w"}}
    doc = json.loads(results.write_run(tmp_path / "a", config=cfg, summary={}).read_text())
    assert doc["provenance"]["workload_sha256"] == pv.spec_sha256({"name": "w"})
    doc = json.loads(results.write_run(tmp_path / "b", config=cfg, summary={},
                                       extra={"imported": {"kind": "darshan"}}).read_text())
    assert doc["provenance"] is None  # ran elsewhere: this machine's facts would be false


def test_mpiexec_inside_allocation_uses_job_layout():
    # Hydra's proxies run in an srun step of one task per node; the ranks follow the job's layout
    env = {"SLURM_JOB_ID": "8", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_NTASKS": "4",
           "SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_STEP_NUM_TASKS": "2",
           "PMI_SIZE": "4", "MPI_LOCALNRANKS": "2"}
    assert pv.launcher(env) == "mpiexec"
    assert pv.ranks_per_node_from_allocation(4, env) == (2, "SLURM_TASKS_PER_NODE")
