"""A scaling study's job scripts submitted to a real Slurm (marker ``slurm``): scripts/slurm-local.sh starts a
two-node cluster on this machine, ``dlbench jobscript`` writes the generate job and one job per node count,
submit-all.sh submits them with real ``sbatch`` (points depend on the generate job), and the results root is
read back with ``dlbench compare`` and ``dlbench plot --kind scaling``. Skipped, with the reason, where the
Slurm or munge binaries are missing, the test does not run as root, or the cluster does not come up."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm-local.sh"
BINARIES = ("slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "munged", "munge")
WAIT_S = 300


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        pytest.skip(f"Slurm/munge not installed (missing: {', '.join(missing)}); apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        pytest.skip("the local Slurm cluster needs root (slurmd, the munge key)")
    d = tmp_path_factory.mktemp("slurm") / "cluster"
    env = {**os.environ, "DLBENCH_SLURM_DIR": str(d), "DLBENCH_SLURM_PORT": os.environ.get("DLBENCH_SLURM_PORT",
                                                                                          "16837")}
    r = subprocess.run(["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=180)
    print(r.stdout, r.stderr)
    if r.returncode != 0:
        pytest.skip(f"the local Slurm cluster did not start: {(r.stderr or r.stdout).strip().splitlines()[-1:]}")
    try:
        yield {**env, "SLURM_CONF": str(d / "slurm.conf")}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True, timeout=60)


STUDY = """\
name: slurm-weak
description: two-point weak scaling under a real Slurm (test size)
workload: cosmoflow
scale: tiny
system: laptop-pfs
epochs: 1
batch_size: 4
compute_time_s: 0.0
seed: 0
out: {out}
runs:
  - {{strategy: naive}}
  - {{strategy: pls, options: {{exchange_fraction: 0.3}}}}
sweep:
  ranks: [1, 2]
  scaling: weak
  samples_per_rank: 16
"""


def _run(cmd, env, **kw):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    print("$", " ".join(map(str, cmd)), "->", r.returncode, "\n", r.stdout[-3000:], r.stderr[-3000:])
    return r


def test_scaling_study_under_real_slurm(slurm_cluster, tmp_path):
    import dlbench

    # the jobs run the dlbench this test imports (a checkout on PYTHONPATH or the installed package)
    env = {**slurm_cluster, "PYTHONPATH": str(Path(dlbench.__file__).resolve().parents[1]), "DLBENCH_PFS_STATE": str(tmp_path / "pfs-state"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{slurm_cluster['PATH']}"}
    (tmp_path / "pfs-state").mkdir()
    study = tmp_path / "study.yaml"
    results, data, jobs = tmp_path / "results", tmp_path / "data", tmp_path / "jobs"
    study.write_text(STUDY.format(out=results))
    dl = [sys.executable, "-m", "dlbench.cli"]
    r = _run(dl + ["jobscript", str(study), "--scheduler", "slurm", "--nodes-list", "1,2", "--data-dir", str(data),
                   "--results", str(results), "--time", "00:05:00", "--dlbench", f"{sys.executable} -m dlbench.cli",
                   "-o", str(jobs)], env)
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in jobs.iterdir() if p.is_file())
    assert names == ["generate.sbatch", "point-N1.sbatch", "point-N2.sbatch", "study.yaml", "submit-all.sh"]

    r = _run(["bash", str(jobs / "submit-all.sh")], env, cwd=jobs)
    assert r.returncode == 0, r.stderr
    ids = [w for w in r.stdout.split() if w.isdigit()]
    assert len(ids) == 3, r.stdout  # generate, then the two points
    t0 = time.monotonic()
    while True:
        q = _run(["squeue", "-h", "-j", ",".join(ids), "-o", "%i %T %R"], env)
        if q.returncode == 0 and not q.stdout.strip():
            break
        assert time.monotonic() - t0 < WAIT_S, f"jobs still queued after {WAIT_S}s: {q.stdout}"
        time.sleep(1)
    logs = {p.name: p.read_text() for p in jobs.rglob("*.out")}
    for name, text in sorted(logs.items()):
        print(f"---- {name}\n{text[-2000:]}")

    runs = sorted(results.rglob("run.json"))
    docs = [json.loads(p.read_text()) for p in runs]
    assert len(docs) == 4, [str(p) for p in runs]  # 2 strategies x 2 node counts
    assert all(d["status"] == "ok" for d in docs), [d.get("error") for d in docs]
    by_ranks = sorted((d["config"]["ranks"], d["config"]["strategy"]) for d in docs)
    assert by_ranks == [(1, "naive"), (1, "pls"), (2, "naive"), (2, "pls")]
    print(json.dumps(docs[-1]["provenance"], indent=1))
    for d in docs:
        alloc = d["provenance"]["scheduler"]
        assert alloc["name"] == "slurm" and alloc["job_id"] in ids[1:], alloc
        assert alloc["nodes"] == (["n1", "n2"] if d["config"]["ranks"] == 2 else [alloc["nodes"][0]]), alloc
        assert alloc["tasks_per_node"] == [1] * d["config"]["ranks"], alloc
        # two slurmd on one host: the node layout comes from the allocation, not from MPI's shared-memory split
        assert d["config"]["nodes"] == d["config"]["ranks"], d["config"]
        assert d["config"]["ranks_per_node_source"] in ("SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE")
        assert d["provenance"]["launcher"] == "srun"

    r = _run(dl + ["compare", str(results)], env)
    assert r.returncode == 0, r.stderr
    assert "naive" in r.stdout and "pls" in r.stdout
    figs = tmp_path / "figs"
    r = _run(dl + ["plot", str(results), "--kind", "scaling", "-o", str(figs)], env)
    assert r.returncode == 0, r.stderr
    assert any(figs.iterdir())
