"""The cache family on 2 ranks as 2 emulated nodes (--ranks-per-node 1), with --verify: every access
follows its planned source (shared tier, own cache, a peer's cache over MPI)."""

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("cache") / "hep"
    from dlbench.data.generate import generate
    from dlbench.workload import load

    generate(load("hep_cnn", scale="tiny"), d, seed=0, progress=False)
    return d


def _plan_bytes(strategy, opts, tiny):
    """Bytes by tier the plan promises (the same planner the ranks ran)."""
    from dlbench import strategies
    from dlbench.data.manifest import Manifest
    from dlbench.strategies import RunContext
    from dlbench.system import load as load_profile
    from dlbench.workload import load

    m = Manifest.load(tiny)
    st = strategies.get(strategy)
    ctx = RunContext(workload=load("hep_cnn", scale="tiny"), n_samples=m.samples, sample_nbytes=m.sample_nbytes(),
                     world_size=2, rank=0, node_map=np.array([0, 1]), seed=0, epochs=3, local_batch=8,
                     system=load_profile("laptop-pfs"), memory_budget_bytes=None)
    return st.plan(ctx, strategies.parse_options(st, opts)).bytes_by_tier(m.sample_nbytes())


@pytest.mark.parametrize("strategy,extra,opts", [
    ("lbann", ["--mode", "preload"], {"mode": "preload"}),
    ("lbann", ["--mode", "dynamic", "--loader-threads", "2"], {"mode": "dynamic", "loader_threads": 2}),
    ("clairvoyant", [], {}),
    ("clairvoyant", ["--cache-capacity", 8 * 16384, "--local-cache-capacity", 150_000, "--local-dir", "LOCAL"],
     {"cache_capacity": 8 * 16384, "local_cache_capacity": 150_000}),
    # fills on the fill thread under --barrier, and fills stored by the trainer (--no-fill-thread)
    ("clairvoyant", ["--barrier", "--cache-capacity", 8 * 16384, "--local-cache-capacity", 150_000, "--local-dir",
                     "LOCAL"], {"cache_capacity": 8 * 16384, "local_cache_capacity": 150_000}),
    ("clairvoyant", ["--no-fill-thread", "--loader-threads", "0"], {"fill_thread": False, "loader_threads": 0}),
    ("locality", [], {}),
    ("locality", ["--cache-capacity", 28 * 16384, "--loader-threads", "2"],
     {"cache_capacity": 28 * 16384, "loader_threads": 2}),
    ("deepio", ["--mode", "ordered", "--cache-capacity", 20 * 16384], {"mode": "ordered", "cache_capacity": 20 * 16384}),
    ("deepio", ["--mode", "opportunistic", "--cache-capacity", 20 * 16384, "--loader-threads", "2"],
     {"mode": "opportunistic", "cache_capacity": 20 * 16384, "loader_threads": 2}),
])
def test_two_nodes_verify_and_bytes_follow_the_plan(tiny, tmp_path, run_mpi, strategy, extra, opts):
    out = tmp_path / "res"
    extra = [str(tmp_path / "local") if x == "LOCAL" else x for x in extra]
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", strategy, *extra, "--data-dir", tiny,
                 "--ranks-per-node", 1, "--epochs", 3, "--batch-size", 8, "--compute-time", "0.001", "--verify",
                 "--ceiling-steps", 0, "--out", out, "--system", "laptop-pfs"])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["nodes"] == 2 and s["verified_samples"] == 3 * 64
    if opts.get("mode") == "opportunistic":   # only the 40 samples in memory are trained on
        assert s["order_quality"]["max_after_E"] <= 40 / 64 and s["semantics"]["order_changes"] == "yes"
    want = _plan_bytes(strategy, opts, tiny)
    got = s["bytes_by_tier"]
    for tier in ("shared", "local", "memory", "peer"):
        assert got.get(tier, 0) == want[tier], (tier, got, want)
    assert want["peer"] > 0
    if "--local-cache-capacity" in extra:
        assert want["local"] > 0 and not any((tmp_path / "local").rglob("*.row")), "local tier left behind"


def test_sample_kept_at_a_step_reaches_the_peer_that_needs_it_next_step(run_mpi):
    """regression: with fills on the fill thread, a send a peer needs at the next step waited for this rank's
    next step, and with a barrier after every step both ranks waited forever"""
    script = Path(__file__).with_name("planned_peer_next_step.py")
    r = run_mpi([], python_args=(str(script),), timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rank 0 ok delivered=4 verified=4" in r.stdout and "rank 1 ok delivered=4 verified=4" in r.stdout


def test_peer_messages_per_step_and_sender_count_exactly(run_mpi):
    """Peer messages (issue 19: one per (step, sender), gathered and scattered by MPI; cut at a byte cap) deliver
    every sample right and count samples, bytes and messages as the plan says (peer_push_protocols.py)."""
    script = Path(__file__).with_name("peer_push_protocols.py")
    r = run_mpi([], python_args=(str(script),), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # (the two ranks' lines may interleave on the shared stdout)
    assert r.stdout.count(" ok got=") == 12 and "BAD" not in r.stdout, r.stdout + r.stderr


@pytest.fixture(scope="module")
def tiny_jpeg(tmp_path_factory):
    """64 ImageNet-style JPEGs whose sizes vary (lognormal, 4 KB .. 2 MB)."""
    d = tmp_path_factory.mktemp("cachejpg") / "img"
    from dlbench.data.generate import generate
    from dlbench.workload import load

    generate(load("imagenet", scale="tiny"), d, seed=0, progress=False)
    return d


@pytest.mark.parametrize("strategy,opts", [("clairvoyant", {"cache_capacity": 1_500_000}),
                                           ("lbann", {"mode": "preload", "cache_capacity": "EXACT"})])
def test_memory_tier_holds_bytes_not_slots_run_equals_simulate(tiny_jpeg, tmp_path, run_mpi, strategy, opts):
    """Issue 19: with variable-size samples the memory tier admits samples while their own bytes fit the
    capacity; each rank's arena stores exactly the plan's bytes, and `simulate` of the same plan (the
    manifest's sizes) counts the same bytes by tier and per rank."""
    from dlbench.data.manifest import Manifest
    from dlbench.simulate import SimWorkload, load_profile, simulate

    m = Manifest.load(tiny_jpeg)
    sizes = m.sample_nbytes()
    assert sizes.min() * 3 < sizes.max()                 # sizes really vary
    opts = dict(opts)
    if opts["cache_capacity"] == "EXACT":                 # the bytes of the larger preloaded range, no slack
        own = (np.arange(m.samples) * 2) // m.samples
        opts["cache_capacity"] = max(int(sizes[own == r].sum()) for r in range(2))
    cap = opts["cache_capacity"]
    out = tmp_path / "res"
    flags = [x for k, v in opts.items() for x in (f"--{k.replace('_', '-')}", v)]
    r = run_mpi(["run", "--workload", "imagenet", "--strategy", strategy, *flags, "--data-dir", tiny_jpeg,
                 "--ranks-per-node", 1, "--epochs", 3, "--batch-size", 8, "--compute-time", "0.001", "--verify",
                 "--ceiling-steps", 0, "--out", out, "--system", "laptop-pfs"])
    assert r.returncode == 0, r.stdout + r.stderr
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, s = run["config"], run["summary"]
    assert s["verified_samples"] == 3 * 64
    wl = SimWorkload("imagenet", m.samples, int(cfg["local_batch"]), "fixed", float(sizes.mean()),
                     step_time_s=float(cfg["compute_step_time_s"]))
    ss = simulate([("x", strategy, dict(cfg["options"]))], wl=wl, profile=load_profile("laptop-pfs"), nodes=2,
                  ranks_per_node=1, epochs=3, seed=int(cfg["seed"]), sizes=sizes)["x"]
    assert s["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    for rank, st in enumerate(s["strategy_stats"]):
        mem = st["tiers"]["memory"]
        assert mem["write_bytes"] == ss["cache_peak_bytes"][rank] <= cap, (rank, mem, ss["cache_peak_bytes"])
        # more samples than slots of the largest sample would hold, in an arena of the bytes (+ alignment)
        assert mem["writes"] > cap // int(sizes.max()), mem
        assert mem["write_bytes"] <= mem["capacity_bytes"] <= mem["write_bytes"] + 63 * mem["writes"]
