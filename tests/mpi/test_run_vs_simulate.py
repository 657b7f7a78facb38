"""One definition for every number (issue 16): a 2-rank run and `simulate` of the same configuration follow
one plan, so they report identical bytes by tier, read bytes and read requests (summed over ranks in both),
for every strategy; and the shares mean the same thing (the same function builds both summaries)."""

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mpi

ROWS = [
    ("naive", {}),
    ("prefetch", {"num_workers": 1}),
    ("staging", {}),
    ("local", {}),
    ("pls", {"exchange_fraction": 0.5}),
    ("lbann", {"mode": "preload"}),
    ("clairvoyant", {"cache_capacity": 8 * 16384}),
    ("locality", {"cache_capacity": 12 * 16384}),
    ("deepio", {"mode": "ordered", "cache_capacity": 10 * 16384}),
    ("surrogatetrain", {}),
]


@pytest.fixture(scope="module")
def study_runs(tmp_path_factory):
    import os
    import shutil
    import subprocess
    import sys

    ROOT = Path(__file__).resolve().parents[2]
    cand = Path(sys.executable).parent / "mpiexec"
    exe = str(cand) if cand.exists() else shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found: pip install 'dlbench[mpi]'")
    tmp = tmp_path_factory.mktemp("rvs")
    study = tmp / "all.yaml"
    rows = "\n".join(f"  - {{strategy: {s}, options: {json.dumps(o)}}}" for s, o in ROWS)
    study.write_text(f"name: rvs\nworkload: hep_cnn\nscale: tiny\nsystem: laptop-pfs\nepochs: 2\nbatch_size: 8\n"
                     f"compute_time_s: 0.001\nseed: 0\nruns:\n{rows}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_PFS_STATE": str(tmp)}
    env.pop("DLBENCH_NO_MPI", None)
    r = subprocess.run([exe, "-n", "2", sys.executable, "-m", "dlbench.cli", "study", str(study), "--ranks-per-node",
                        "1", "--data-dir", str(tmp / "data"), "--local-dir", str(tmp / "loc"), "--out", str(tmp / "res")], capture_output=True,
                       text=True, timeout=400, env=env, cwd=tmp)
    assert r.returncode == 0, r.stderr[-2000:]
    runs = [json.loads(p.read_text()) for p in sorted((tmp / "res").rglob("run.json"))]
    assert len(runs) == len(ROWS)
    return {run["config"]["strategy"]: run for run in runs}


@pytest.mark.parametrize("strategy,opts", ROWS, ids=[r[0] for r in ROWS])
def test_run_and_simulate_count_the_same_bytes_and_requests(study_runs, strategy, opts):
    from dlbench.simulate import SimWorkload, load_profile, simulate

    run = study_runs[strategy]
    cfg, ms = run["config"], run["summary"]
    nbytes = sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in cfg["workload_spec"]["arrays"])
    wl = SimWorkload("hep_cnn", int(cfg["workload_spec"]["samples"]), int(cfg["local_batch"]), "fixed",
                     float(nbytes), step_time_s=float(cfg["compute_step_time_s"]), layout=cfg["workload_spec"]["layout"])
    ss = simulate([("x", strategy, dict(cfg["options"]))], wl=wl, profile=load_profile("laptop-pfs"), nodes=2,
                  ranks_per_node=1, epochs=int(cfg["epochs"]), seed=int(cfg["seed"]))["x"]
    assert ms["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert ms["read_bytes"] == ss["read_bytes"]
    assert ms["shared_read_requests"] == ss["shared_read_requests"]
    assert ms["prologue_bytes_by_tier"] == {k: int(v) for k, v in ss["prologue_bytes_by_tier"].items()}
    # the same keys with the same definitions
    assert ms["definitions"] == ss["definitions"]
    for k in ("exposed_io_share", "e2e_exposed_io_share", "au", "read_share", "samples_per_s", "total_time_s"):
        assert isinstance(ss[k], float) and isinstance(ms[k], float), k
    assert ms["samples"] == ss["samples"]
    # bytes moved between ranks: staging's distribution before epoch 0, pls's exchange during the epochs (the
    # executor's own count of what it received), under peer in both
    got = sum((st.get("exchange") or {}).get("bytes_received", 0) for st in ms["strategy_stats"])
    if strategy == "pls":
        assert got > 0 and ms["bytes_by_tier"]["peer"] == got
    if strategy == "staging":
        assert ms["prologue_bytes_by_tier"]["peer"] > 0
