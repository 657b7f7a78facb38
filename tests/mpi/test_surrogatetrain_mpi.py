"""surrogatetrain on 2 ranks as 2 emulated nodes (--ranks-per-node 1) with --verify on tiny PtychoNN (one
shared HDF5 file): every batch is the plan's (unequal local batches included), bytes by tier and shared-tier
requests follow the plan (a run of consecutive ids is one request)."""

import json

import numpy as np
import pytest

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("st") / "ptycho"
    from dlbench.data.generate import generate
    from dlbench.workload import load

    generate(load("ptychonn", scale="tiny"), d, seed=0, progress=False)
    return d


def _plan(opts, tiny):
    from dlbench import strategies
    from dlbench.data.manifest import Manifest
    from dlbench.strategies import RunContext
    from dlbench.workload import load

    m = Manifest.load(tiny)
    st = strategies.get("surrogatetrain")
    ctx = RunContext(workload=load("ptychonn", scale="tiny"), n_samples=m.samples, sample_nbytes=m.sample_nbytes(),
                     world_size=2, rank=0, node_map=np.array([0, 1]), seed=0, epochs=3, local_batch=16,
                     memory_budget_bytes=None)
    return st.plan(ctx, strategies.parse_options(st, opts)), m


@pytest.mark.parametrize("extra,opts", [
    (["--buffer-fraction", "0.5", "--loader-threads", "2"], {"buffer_fraction": 0.5, "loader_threads": 2}),
    (["--buffer-fraction", "0.5", "--no-remap", "--no-balance", "--no-chunking", "--eviction", "fifo"],
     {"buffer_fraction": 0.5, "remap": False, "balance": False, "chunking": False, "eviction": "fifo"}),
])
def test_two_nodes_verify_bytes_and_requests_follow_the_plan(tiny, tmp_path, run_mpi, extra, opts):
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "ptychonn", "--strategy", "surrogatetrain", *extra, "--data-dir", tiny,
                 "--ranks-per-node", 1, "--epochs", 3, "--batch-size", 16, "--compute-time", "0.001", "--verify",
                 "--ceiling-steps", 0, "--out", out, "--system", "laptop-pfs"])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["nodes"] == 2 and s["verified_samples"] == 3 * 256
    plan, m = _plan(opts, tiny)
    want = plan.bytes_by_tier(m.sample_nbytes())
    for tier in ("shared", "memory", "peer"):
        assert s["bytes_by_tier"].get(tier, 0) == want[tier], (tier, s["bytes_by_tier"], want)
    assert want["memory"] > 0
    reqs = sum(st["requests"] for st in s["strategy_stats"])
    assert reqs == sum(ep.requests() for ep in plan) == s["tier_io"]["epochs"]["shared"]["ops"]
    shared_accesses = sum(int(((ep.sample_ids >= 0) & (ep.source == 0)).sum()) for ep in plan)
    batches = [st["local_batch"] for st in s["strategy_stats"]]
    if opts.get("chunking", True):
        assert reqs < shared_accesses and "one request per run" in s["strategy_stats"][0]["chunking"]
        assert max(b["max"] for b in batches) == plan.max_step_samples
    else:
        assert reqs == shared_accesses
        assert all(b["min"] == b["max"] == 16 for b in batches)


@pytest.fixture(scope="module")
def tiny_jpeg(tmp_path_factory):
    """64 ImageNet-style JPEGs whose sizes vary (lognormal, 4 KB .. 2 MB)."""
    d = tmp_path_factory.mktemp("stjpg") / "img"
    from dlbench.data.generate import generate
    from dlbench.workload import load

    generate(load("imagenet", scale="tiny"), d, seed=0, progress=False)
    return d


@pytest.mark.parametrize("eviction", ["lookahead", "fifo"])
def test_buffer_holds_bytes_not_slots_run_equals_simulate(tiny_jpeg, tmp_path, run_mpi, eviction):
    """Issue 19: with variable-size samples the buffer admits and evicts by the samples' own bytes, more
    samples than slots of the largest sample would hold; each rank's best-fit arena stores the plan's keeps
    (it evicts and refills) without overflowing, and `simulate` of the same plan (the manifest's sizes)
    counts the same bytes by tier and requests."""
    from dlbench.data.manifest import Manifest
    from dlbench.simulate import SimWorkload, load_profile, simulate

    m = Manifest.load(tiny_jpeg)
    sizes = m.sample_nbytes()
    assert sizes.min() * 3 < sizes.max()                 # sizes really vary
    cap = int(sizes.sum()) // 5                           # 2 ranks x 20 % of the dataset: the buffer evicts
    out = tmp_path / "res"
    r = run_mpi(["run", "--workload", "imagenet", "--strategy", "surrogatetrain", "--cache-capacity", cap,
                 "--eviction", eviction, "--data-dir", tiny_jpeg, "--ranks-per-node", 1, "--epochs", 3,
                 "--batch-size", 8, "--compute-time", "0.001", "--verify", "--ceiling-steps", 0, "--out", out,
                 "--system", "laptop-pfs"])
    assert r.returncode == 0, r.stdout + r.stderr
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, s = run["config"], run["summary"]
    assert s["verified_samples"] == 3 * 64
    wl = SimWorkload("imagenet", m.samples, int(cfg["local_batch"]), "fixed", float(sizes.mean()),
                     step_time_s=float(cfg["compute_step_time_s"]), layout=cfg["workload_spec"]["layout"])
    ss = simulate([("x", "surrogatetrain", dict(cfg["options"]))], wl=wl, profile=load_profile("laptop-pfs"),
                  nodes=2, ranks_per_node=1, epochs=3, seed=int(cfg["seed"]), sizes=sizes)["x"]
    assert s["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert s["bytes_by_tier"]["memory"] > 0
    assert s["shared_read_requests"] == ss["shared_read_requests"]
    slots = cap // (-(-int(sizes.max()) // 4096) * 4096)          # main: slots of the largest sample
    for rank, st in enumerate(s["strategy_stats"]):
        mem, plan = st["tiers"]["memory"], st["plan"]
        assert mem["deletes"] > 0                                 # evicts and refills
        assert mem["capacity_bytes"] == plan["arena_bytes_per_rank"][rank] <= cap
    assert max(ss["cache_peak_bytes"]) <= cap
    from dlbench import strategies
    from dlbench.strategies import RunContext
    from dlbench.workload import load

    st = strategies.get("surrogatetrain")
    ctx = RunContext(workload=load("imagenet", scale="tiny"), n_samples=m.samples, sample_nbytes=sizes, world_size=2,
                     rank=0, node_map=np.array([0, 1]), seed=int(cfg["seed"]), epochs=3, local_batch=8,
                     memory_budget_bytes=None)
    plan = st.plan(ctx, strategies.parse_options(st, dict(cfg["options"])))
    assert plan.capacity.cache_peak_bytes == ss["cache_peak_bytes"]
    assert max(plan.capacity.cache_peak_samples) > slots
