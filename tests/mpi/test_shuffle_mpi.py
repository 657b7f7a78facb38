"""staging, local and pls on 2 ranks as 2 emulated nodes (--ranks-per-node 1), with --verify."""

import json

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("strategy,extra", [("staging", []), ("local", []), ("pls", ["--exchange-fraction", "0.3"]),
                                            ("staging", ["--tier", "memory", "--local-capacity", "600000"]),
                                            ("pls", ["--exchange-fraction", "0.3", "--tier", "memory",
                                                     "--local-capacity", "4000000"])])
def test_two_nodes_verify(tiny, tmp_path, run_mpi, strategy, extra):
    out, loc = tmp_path / "res", tmp_path / "loc"
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", strategy, *extra, "--data-dir", tiny,
                 "--ranks-per-node", 1, "--epochs", 2, "--compute-time", "0.001", "--verify", "--out", out,
                 "--ceiling-steps", 0, "--local-dir", loc])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["nodes"] == 2 and s["verified_samples"] == 2 * 64
    io = s["tier_io"]
    assert io["epochs"]["shared"]["bytes"] == 0                      # training never touches the shared tier
    assert io["prologue"]["shared"]["ops"] == (64 if "--local-capacity" not in extra else 64)
    if strategy == "staging" and not extra:
        assert io["prologue"]["peer"]["bytes"] == 64 * 12292         # each node got the other's half
    if strategy == "pls":
        assert io["epochs"]["peer"]["bytes"] == 2 * 2 * 9 * 12292    # 2 ranks × 2 epochs × floor(0.3·32)
        assert s["phase_time_s"]["exchange"] > 0
    if strategy == "staging" and "--local-capacity" in extra:         # 600 kB < 64 slots of 16 KiB: per-node subset
        assert "not a global shuffle" in r.stderr.lower() or "no longer" in r.stderr
    assert not any(loc.rglob("*.row"))


def _pids_with_env(marker: str, rank: str) -> list[int]:
    import os

    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"DLBENCH_TEST_MARKER={marker}".encode() in env and f"PMI_RANK={rank}".encode() in env:
            out.append(int(d))
    return out


def test_peer_dying_during_exchange_aborts_the_job(tiny, tmp_path):
    """Rank 1 is killed (SIGKILL) while pls exchanges samples every step: the job must end, not hang."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from tests.conftest import ROOT, mpiexec

    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found")
    marker = uuid.uuid4().hex
    env = dict(os.environ, DLBENCH_TEST_MARKER=marker,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [exe, "-n", "2", sys.executable, "-m", "dlbench.cli", "run", "--workload", "hep_cnn", "--strategy", "pls",
           "--exchange-fraction", "1.0", "--data-dir", str(tiny), "--ranks-per-node", "1", "--epochs", "50",
           "--compute-time", "0.05", "--out", str(tmp_path / "res"), "--local-dir", str(tmp_path / "loc")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        # wait until the run is in its epochs (the results folder exists), then kill rank 1
        deadline = time.time() + 60
        while time.time() < deadline and not list((tmp_path / "res").rglob("run.json")):
            time.sleep(0.2)
        time.sleep(1.5)
        victims = _pids_with_env(marker, "1")
        assert victims, "rank 1 not found"
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        out, err = p.communicate(timeout=60)  # a hang fails here
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode != 0


@pytest.mark.parametrize("extra", [[], ["--loader-threads", "2"]])
def test_two_nodes_partial_staging_bytes_by_tier_match_simulate(tiny, tmp_path, run_mpi, extra):
    """A node's subset (32 samples) exceeds --local-capacity (10 samples): each node stages the first 10 of
    its subset, reads the other 22 from the shared tier every epoch, and run and simulate count the same
    bytes by tier."""
    import numpy as np

    from dlbench.simulate import SimWorkload, load_profile, simulate

    out, loc = tmp_path / "res", tmp_path / "loc"
    cap = 10 * 12292 + 100
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", "staging", "--local-capacity", cap, *extra,
                 "--data-dir", tiny, "--ranks-per-node", 1, "--epochs", 2, "--compute-time", "0.001", "--verify",
                 "--ceiling-steps", 0, "--out", out, "--local-dir", loc])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "31.2% of it is staged" in r.stdout + r.stderr
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, s = run["config"], run["summary"]
    assert s["verified_samples"] == 2 * 64
    assert s["bytes_by_tier"] == {"shared": 2 * 2 * 22 * 12292, "local": 2 * 2 * 10 * 12292, "memory": 0, "peer": 0}
    assert s["prologue_bytes_by_tier"]["shared"] == 2 * 10 * 12292
    nbytes = sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in cfg["workload_spec"]["arrays"])
    wl = SimWorkload("hep_cnn", 64, int(cfg["local_batch"]), "fixed", float(nbytes),
                     step_time_s=float(cfg["compute_step_time_s"]), layout=cfg["workload_spec"]["layout"])
    ss = simulate([("x", "staging", dict(cfg["options"]))], wl=wl, profile=load_profile("laptop-pfs"), nodes=2,
                  epochs=2, seed=int(cfg["seed"]))["x"]
    assert s["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert s["prologue_bytes_by_tier"] == {k: int(v) for k, v in ss["prologue_bytes_by_tier"].items()}
    assert s["shared_read_requests"] == ss["shared_read_requests"]
    assert s["staged_fraction"] == ss["staged_fraction"] == 10 / 32
    # the executor's own shared-tier count (run.json strategy_stats): the prologue's reads and the epochs' shared
    # accesses, with or without loader threads (the threads' reads were left out)
    assert sum(r["tiers"]["shared"]["bytes"] for r in s["strategy_stats"]) == \
        s["bytes_by_tier"]["shared"] + s["prologue_bytes_by_tier"]["shared"]
    assert not any(loc.rglob("*.row"))
