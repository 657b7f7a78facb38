"""surrogatetrain (SurrogateTrain / SOLAR): the offline epoch order, the run-time schedule's invariants, the
headline reduction on the SOLAR PtychoNN setting, chunked reads and capacity errors. Pure and fast."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst

from dlbench import strategies
from dlbench.errors import CapacityError, ConfigError
from dlbench.plan import MEMORY, NO_TIER, SHARED, SYNC, epoch_permutation
from dlbench.plan.invariants import check_epoch_cover, check_possession
from dlbench.plan.surrogatetrain import (
    brute_force_order,
    order_exact,
    order_heuristic,
    path_cost,
    surrogatetrain_plan,
    transition_costs,
)
from dlbench.strategies import RunContext
from dlbench.strategies.planned import peak_holdings


def _plan(F=203, W=3, b=8, E=4, c=30, seed=1, **kw):
    return surrogatetrain_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=E, local_batch=b, seed=seed,
                               buffer_samples=c, **{"pipeline": SYNC, **kw})


# ---- offline scheduling -------------------------------------------------------------------------------------

def test_transition_cost_formula_on_hand_examples():
    perms = np.array([[0, 1, 2, 3, 4, 5],
                      [4, 5, 0, 1, 2, 3],
                      [1, 0, 3, 2, 5, 4]])
    cost = transition_costs(perms, 2)
    # last 2 of π0 = {4,5}; first 2 of π1 = {4,5} -> 0 missing; first 2 of π2 = {1,0} -> 2 missing
    assert cost[0, 1] == 0 and cost[0, 2] == 2
    # last 2 of π1 = {2,3}; first 2 of π0 = {0,1} -> 2; of π2 = {1,0} -> 2
    assert cost[1, 0] == 2 and cost[1, 2] == 2
    # last 2 of π2 = {5,4}; first 2 of π0 -> 2; of π1 = {4,5} -> 0
    assert cost[2, 0] == 2 and cost[2, 1] == 0
    assert np.all(np.diag(cost) == 0)
    assert np.array_equal(transition_costs(perms, 6), np.zeros((3, 3)))      # everything buffered
    full = transition_costs(perms, 0)
    assert np.array_equal(full, np.zeros((3, 3)))                              # no buffer: nothing to order
    # the best order chains the zero-cost transitions: 2 -> 1? (0) then 1 -> x costs 2; 0 -> 1 (0) ...
    order, c = order_exact(cost)
    assert c == path_cost(cost, order) == 2


def test_transition_costs_blocked_product_matches_sets():
    rng = np.random.default_rng(3)
    F, C = 97, 31
    perms = np.stack([rng.permutation(F) for _ in range(5)])
    cost = transition_costs(perms, C, block=16)
    for a in range(5):
        for b in range(5):
            want = 0 if a == b else len(set(perms[b, :C]) - set(perms[a, F - C:]))
            assert cost[a, b] == want


@pytest.mark.parametrize("E", [3, 4, 5, 6])
def test_held_karp_is_the_brute_force_optimum(E):
    rng = np.random.default_rng(E)
    cost = rng.integers(0, 50, (E, E))
    np.fill_diagonal(cost, 0)
    assert order_exact(cost)[1] == brute_force_order(cost)[1]


def test_heuristic_against_the_exact_optimum_on_small_E():
    """The epoch-order heuristic against Held-Karp: on real transition costs (E = 8 permutations of 400
    samples, C = 150) within 1 % of the optimum and never worse than the drawing order; on uniform random
    asymmetric costs (a harder case) within 10 % each and 3 % on average."""
    E = 8
    for seed in range(4):
        perms = np.stack([epoch_permutation(seed, k, 400) for k in range(E)])
        real = transition_costs(perms, 150)
        h = order_heuristic(real)
        assert sorted(h) == list(range(E))
        opt = order_exact(real)[1]
        assert opt <= path_cost(real, h) <= min(1.01 * opt, path_cost(real, range(E)))
    gaps = []
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        cost = rng.integers(0, 1000, (E, E))
        np.fill_diagonal(cost, 0)
        opt = order_exact(cost)[1]
        gaps.append(path_cost(cost, order_heuristic(cost)) / opt - 1)
    assert min(gaps) >= 0 and max(gaps) <= 0.10 and np.mean(gaps) <= 0.03


# ---- the schedule -------------------------------------------------------------------------------------------

FLAGS = [{}, {"reorder": False}, {"remap": False}, {"balance": False}, {"chunking": False}, {"eviction": "fifo"},
         {"remap": False, "eviction": "fifo"}]


@pytest.mark.parametrize("kw", FLAGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "default")
def test_possession_cover_and_buffer_bound(kw):
    for F, W, b, c, seed in ((203, 3, 8, 30, 1), (64, 2, 5, 40, 2), (50, 4, 3, 2, 3), (37, 2, 4, 19, 4)):
        p = _plan(F=F, W=W, b=b, c=c, seed=seed, E=4, **kw)
        check_possession(p)
        check_epoch_cover(p)
        for r in range(W):
            held = peak_holdings(p, r, 1)[MEMORY]
            assert held == p.capacity.cache_peak_samples[r] <= c


def _global_batches(p, e):
    perm = epoch_permutation(p.seed, p.meta["epoch_order"][e], p.n_samples)
    B = p.world_size * p.local_batch
    return [perm[s * B:(s + 1) * B] for s in range(math.ceil(p.n_samples / B))]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(F=hst.integers(10, 150), W=hst.integers(1, 4), b=hst.integers(1, 9), frac=hst.floats(0.0, 1.0),
       seed=hst.integers(0, 50), remap=hst.booleans(), balance=hst.booleans(), eviction=hst.sampled_from(["lookahead", "fifo"]))
def test_each_epoch_a_permutation_with_the_global_shuffles_batches(F, W, b, frac, seed, remap, balance, eviction):
    if W > F:
        return
    c = max(1, int(frac * F / W))
    p = _plan(F=F, W=W, b=b, c=c, E=3, seed=seed, remap=remap, balance=balance, eviction=eviction)
    check_possession(p)
    for e in range(3):
        ep = p.epoch(e)
        ids = ep.sample_ids[ep.sample_ids >= 0]
        assert np.array_equal(np.sort(ids), np.arange(F))        # exactly once each
        for s, g in enumerate(_global_batches(p, e)):             # membership unchanged by remapping
            got = np.concatenate([ep.step_samples(r, s) for r in range(W)])
            assert np.array_equal(np.sort(got), np.sort(g))
            n = np.array([len(ep.step_samples(r, s)) for r in range(W)])
            src = [ep.source[r, ep.bounds[r, s]:ep.bounds[r, s + 1]] for r in range(W)]
            loads = np.array([(x == SHARED).sum() for x in src])
            if remap and balance:
                assert loads.max() - loads.min() <= 1             # loads balanced within one sample
            else:
                share = len(g) // W + (np.arange(W) < len(g) % W)
                assert np.array_equal(n, share)                   # DistributedSampler batch sizes


def test_remap_serves_buffered_samples_from_their_holder():
    """Whatever a rank holds when a global batch needs it comes from its memory (no PFS re-read)."""
    p = _plan(F=120, W=3, b=4, c=40, E=3)      # the whole dataset fits: after epoch 0 nothing is loaded
    assert p.meta["shared_loads_per_epoch"] == [120, 0, 0]
    ep = p.epoch(2)
    assert np.all(ep.source[ep.sample_ids >= 0] == MEMORY)
    q = _plan(F=120, W=3, b=4, c=40, E=3, remap=False)
    assert min(q.meta["shared_loads_per_epoch"][1:]) > 0        # DistributedSampler's rank rarely holds it


def test_reorder_lowers_the_transition_cost_and_loads():
    p = _plan(F=600, W=2, b=10, c=150, E=6, seed=7)
    q = _plan(F=600, W=2, b=10, c=150, E=6, seed=7, reorder=False)
    assert p.meta["epoch_order_cost"] <= q.meta["epoch_order_cost"] == p.meta["identity_order_cost"]
    assert q.meta["epoch_order"] == list(range(6))


def test_lookahead_eviction_loads_less_than_fifo():
    a = _plan(F=600, W=2, b=10, c=250, E=5)
    f = _plan(F=600, W=2, b=10, c=250, E=5, eviction="fifo")
    assert sum(a.meta["shared_loads_per_epoch"]) < sum(f.meta["shared_loads_per_epoch"])


def test_chunk_marks_runs_of_consecutive_ids():
    p = _plan(F=300, W=2, b=40, c=10, E=2)
    ep = p.epoch(0)
    assert ep.chunk is not None
    for r in range(2):
        ids, src, ch = ep.rank_samples(r), ep.rank_sources(r), ep.rank_chunk(r)
        steps = np.searchsorted(ep.bounds[r], np.arange(len(ids)), side="right") - 1
        covered = np.zeros(len(ids), int)
        for c in np.nonzero(ch > 0)[0]:
            k = int(ch[c])
            covered[c:c + k] += 1
            if k > 1:
                assert np.all(src[c:c + k] == SHARED) and len(set(steps[c:c + k])) == 1
                assert np.array_equal(ids[c:c + k], ids[c] + np.arange(k))
        assert np.all(covered == 1)
    assert ep.requests() < (ep.source[ep.sample_ids >= 0] == SHARED).sum()
    assert _plan(F=300, W=2, b=40, c=10, E=2, chunking=False).epoch(0).chunk is None


# ---- the headline: SOLAR's PtychoNN setting -----------------------------------------------------------------

SOLAR_F, SOLAR_W, SOLAR_B, SOLAR_E = 87_632, 16, 256, 10     # workloads/ptychonn.yaml, SOLAR README


def test_solar_ptychonn_headline_bytes_from_the_shared_fs_at_least_6_7x_fewer_than_naive():
    """SOLAR's PtychoNN run (README: 16 GPUs, batch 256, --cache_size 87632 split over the ranks, 10 epochs):
    the bytes the plan reads from the shared tier, against naive's, from ``Plan.bytes_by_tier`` and from
    ``dlbench simulate`` (which costs the same ``Strategy.plan``)."""
    from dlbench.simulate import SimWorkload, load_profile, simulate

    size = 3 * 128 * 128 * 4
    st = strategies.get("surrogatetrain")
    ctx = RunContext(workload=None, n_samples=SOLAR_F, sample_nbytes=np.full(SOLAR_F, size, np.int64),
                     world_size=SOLAR_W, rank=0, node_map=np.arange(SOLAR_W), seed=0, epochs=SOLAR_E,
                     local_batch=SOLAR_B, memory_budget_bytes=None)
    plan = st.plan(ctx, strategies.parse_options(st, {"buffer_fraction": 1.0}))
    naive = strategies.get("naive").plan(ctx, strategies.parse_options(strategies.get("naive"), {}))
    got = plan.bytes_by_tier(size)["shared"]
    want = naive.bytes_by_tier(size)["shared"]
    assert want / got >= 6.7
    wl = SimWorkload("ptychonn", SOLAR_F, SOLAR_B, "fixed", float(size), step_time_s=0.05)
    sim = simulate([("naive", "naive", {}), ("st", "surrogatetrain", {"buffer_fraction": 1.0})], wl=wl,
                   profile=load_profile("laptop-pfs"), nodes=SOLAR_W, epochs=SOLAR_E)
    ratio = sim["naive"]["bytes_by_tier"]["shared"] / sim["st"]["bytes_by_tier"]["shared"]
    assert ratio >= 6.7 and ratio == pytest.approx(want / got)


# ---- options and capacity -----------------------------------------------------------------------------------

def _ctx(F=64, W=2, memory=None, nbytes=1000):
    return RunContext(workload=None, n_samples=F, sample_nbytes=np.full(F, nbytes, np.int64), world_size=W, rank=0,
                      node_map=np.arange(W), seed=0, epochs=2, local_batch=4, memory_budget_bytes=memory)


def test_capacity_errors():
    st = strategies.get("surrogatetrain")
    with pytest.raises(CapacityError, match=r"--cache-capacity=100 bytes: smaller than the smallest sample \(1,024 "):
        st.plan(_ctx(), strategies.parse_options(st, {"cache_capacity": 100}))
    with pytest.raises(ConfigError, match="give one of them"):
        st.plan(_ctx(), strategies.parse_options(st, {"cache_capacity": 1e6, "buffer_fraction": 0.5}))
    # 32 samples of 1,000 bytes (1,024 aligned) > 20 KB of memory, in bytes
    with pytest.raises(CapacityError, match=r"surrogatetrain's buffer \(32,768 bytes per rank, --buffer-fraction "
                                            r"1.0\) needs 32,000 bytes of cache per rank \(the bytes of its 32 samples\), "
                                            r"20,000 available"):
        st.plan(_ctx(memory=20_000), strategies.parse_options(st, {"buffer_fraction": 1.0}))
    with pytest.raises(ConfigError, match="buffer_fraction"):
        strategies.parse_options(st, {"buffer_fraction": 1.5})
    # bytes, not page-aligned slots of the largest sample: 12,288 bytes hold 12 samples of 1,000 (1,024 aligned)
    p = st.plan(_ctx(), strategies.parse_options(st, {"cache_capacity": 3 * 4096}))
    assert p.meta["buffer_bytes_per_rank"] == 3 * 4096 and max(p.capacity.cache_peak_samples) == 12
    assert max(p.capacity.cache_peak_bytes) == 12_000 and max(p.capacity.arena_bytes_per_rank) == 12 * 1024


def test_chunking_on_another_layout_is_stated():
    from dlbench.workload import load

    st = strategies.get("surrogatetrain")
    ctx = _ctx()
    ctx.workload = load("cosmoflow", scale="tiny")      # hdf5_per_sample
    p = st.plan(ctx, strategies.parse_options(st, {"buffer_fraction": 0.5}))
    assert "one sample per request" in p.warning


def test_sleep_compute_scales_with_a_larger_local_batch():
    """regression: sleep compute took the full step time for any batch >= the local batch, so a rank given
    more samples by load balancing computed no longer than the others (the imbalance was hidden)"""
    from dlbench.compute.sleep import SleepCompute

    sc = SleepCompute(0.004, batch_size=8)
    assert sc.draw_ns(12) == 6_000_000 and sc.draw_ns(8) == 4_000_000 and sc.draw_ns(0) == 0
    assert SleepCompute(0.004).draw_ns(12) == 4_000_000     # without a batch size: per step


def test_keep_only_loaded_samples_and_never_a_sample_held_elsewhere():
    p = _plan(F=150, W=3, b=5, c=20, E=3, balance=False)
    for ep in p:
        k = ep.keep != NO_TIER
        assert np.all(ep.source[k] == SHARED)


# ---- chunked loading ----------------------------------------------------------------------------------------

class _CountingReader:
    """A fake shared-tier reader that counts requests (CONVENTIONS 12)."""

    supports_runs = True

    def __init__(self, row: int, log: list):
        self.max_row_nbytes = self.decoded_nbytes = row
        self.log = log

    def read_into(self, i, out):
        self.log.append(("one", int(i), 1))
        out[:8] = np.frombuffer(np.int64(i).tobytes(), np.uint8)
        return self.max_row_nbytes

    def read_run_into(self, first, count, rows, row0=0):
        self.log.append(("run", int(first), int(count)))
        for k in range(count):
            rows[row0 + k, :8] = np.frombuffer(np.int64(first + k).tobytes(), np.uint8)
        return count * self.max_row_nbytes

    def close(self):
        pass


@pytest.mark.parametrize("threads", [0, 2])
@pytest.mark.parametrize("runs", [True, False])
def test_a_run_is_one_request(threads, runs):
    """The loader makes exactly the plan's requests: one reader call per run (``read_run_into``), one per
    other access; every row lands where the plan puts it."""
    from types import SimpleNamespace

    from dlbench.strategies.stages.loader import Loader
    from dlbench.strategies.stages.ring import Ring
    from dlbench.strategies.stages.store import Stores
    from dlbench.strategies.stages.view import EpochView
    from dlbench.timeline import Timeline

    p = _plan(F=300, W=2, b=40, c=0, E=1)       # no buffer: every access a load
    ep = p.epoch(0)
    log: list = []
    row = 64
    ctx = SimpleNamespace(reader_factory=lambda: _CountingReader(row, log), rank=1, clock=lambda: 0,
                          workload=SimpleNamespace(name="fake"))
    ring = Ring(2, p.max_step_samples, row)
    loader = Loader(ctx, Stores({}), ring, threads, None, Timeline(1 << 12, 1))
    if not runs:
        loader.run_reads = False
    view = EpochView(p, 0, 1, runs=loader.run_reads)
    if threads:
        loader.begin(view)
    for t in range(view.steps):
        if threads:
            loader.wait(t)
        else:
            loader.fill(view, t)
        b0, b1 = view.bounds[t], view.bounds[t + 1]
        got = ring[t][:b1 - b0, :8].copy().view(np.int64).reshape(-1)
        assert np.array_equal(got, view.ids[b0:b1])
        if threads:
            loader.release(t)
    if threads:
        loader.end()
    ch = ep.rank_chunk(1)
    if runs:
        assert len(log) == loader.shared_reads == int((ch > 0).sum()) < len(view.ids)
        assert sorted(k for kind, _i, k in log if kind == "run") == sorted(int(x) for x in ch[ch > 1])
    else:
        assert len(log) == len(view.ids) and all(kind == "one" for kind, _i, _k in log)


@pytest.fixture(scope="module")
def tiny_ptycho(tmp_path_factory):
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.workload import load

    d = tmp_path_factory.mktemp("ptycho") / "tiny"
    wl = load("ptychonn", scale="tiny")
    generate(wl, d, seed=0, progress=False)
    return d, Manifest.load(d), wl


@pytest.mark.parametrize("via,mode", [("auto", "scatter"), ("auto", "block"), ("hdf5", "block")])
def test_read_run_into_equals_per_sample_reads(tiny_ptycho, via, mode):
    from dlbench.data.formats import open_reader
    from dlbench.storage import aligned_rows

    d, m, wl = tiny_ptycho
    with open_reader(d, m, wl, via=via) as r:
        assert r.supports_runs
        r.run_mode = mode
        rows = aligned_rows(12, r.max_row_nbytes)
        one = aligned_rows(1, r.max_row_nbytes)[0]
        assert r.read_run_into(37, 9, rows, 2) == 9 * r.max_row_nbytes
        for k in range(9):
            r.read_into(37 + k, one)
            assert np.array_equal(rows[2 + k], one)
        assert r.read_run_into(0, 1, rows) == r.max_row_nbytes    # a run of one


def test_throttled_run_is_one_request_with_one_latency(tiny_ptycho):
    from dlbench.data.formats import open_reader
    from dlbench.storage import LocalGamma, PfsModel, Throttle, ThrottledReader, aligned_rows

    d, m, wl = tiny_ptycho
    now = [0.0]
    th = Throttle(PfsModel(0.01, 1e9), LocalGamma(), clock=lambda: now[0],
                  sleep=lambda s: now.__setitem__(0, now[0] + s), spin_s=0.0)
    r = ThrottledReader(open_reader(d, m, wl), th)
    rows = aligned_rows(8, r.max_row_nbytes)
    r.read_run_into(10, 8, rows)
    assert th.reads == 1 and th.bytes == 8 * r.max_row_nbytes
    assert now[0] == pytest.approx(0.01 + 8 * r.max_row_nbytes / 1e15, abs=1e-6)   # one latency, not eight
    r.close()


class _CountingCost(np.ndarray):
    """A cost matrix that counts the reads made through it and refuses more than ``limit``."""

    reads = 0
    limit = 0

    def __getitem__(self, key):
        type(self).reads += 1
        if type(self).reads > type(self).limit:
            raise AssertionError(f"more than {type(self).limit} reads of the cost matrix")
        return super().__getitem__(key)


def test_order_heuristic_slow_scores_moves_by_delta():
    """Regression (fix-exec 4): every 2-opt / or-opt candidate recomputed the whole path cost in Python, from
    all E starts (~O(E^5): E=30 took 2.9 s, E=60 36 s, on every rank before training). Moves are now scored
    by their cost change, all at once: the heuristic reads the cost matrix O(E^2) times at most."""
    E = 24
    rng = np.random.default_rng(5)
    base = rng.integers(0, 1000, (E, E))
    np.fill_diagonal(base, 0)
    _CountingCost.reads, _CountingCost.limit = 0, 4 * E * E
    order = order_heuristic(base.view(_CountingCost))
    assert sorted(order) == list(range(E))
    assert path_cost(base, order) <= path_cost(base, range(E))


@pytest.mark.parametrize("seed", range(6))
def test_order_heuristic_ends_in_a_local_optimum_of_its_moves(seed):
    """The delta scoring is exact: no single reversal or move of a segment of 1-3 epochs, scored by
    recomputing the whole path, improves the heuristic's order."""
    E = 9
    rng = np.random.default_rng(seed)
    cost = rng.integers(0, 100, (E, E))
    np.fill_diagonal(cost, 0)
    p = order_heuristic(cost)
    c = path_cost(cost, p)
    for i in range(E - 1):
        for j in range(i + 1, E):
            assert path_cost(cost, p[:i] + p[i:j + 1][::-1] + p[j + 1:]) >= c
    for k in (1, 2, 3):
        for i in range(E - k + 1):
            seg, rest = p[i:i + k], p[:i] + p[i + k:]
            for j in range(len(rest) + 1):
                assert path_cost(cost, rest[:j] + seg + rest[j:]) >= c


# ---- the buffer counts bytes (issue 19) ---------------------------------------------------------------------

def _jpeg_sizes(F, seed=3):
    """ImageNet-style stored sizes: lognormal around 110 KB, 4 KB .. 2 MB."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(110_000), 0.8, F), 4_000, 2_000_000).astype(np.int64)


@pytest.mark.parametrize("eviction", ["lookahead", "fifo"])
@pytest.mark.parametrize("balance", [True, False])
def test_buffer_admits_by_summed_bytes_and_the_arena_replays_the_placement(eviction, balance):
    """Variable sizes: every rank holds at most the buffer's bytes at every step, more samples than slots of
    the largest sample would hold; replaying the plan's keeps and evictions in the executor's order on the
    executor's arena (BestFitArenaTier sized to the plan's arena bytes) never overflows and reaches exactly
    the plan's highest byte."""
    from dlbench.storage import ARENA_ALIGN
    from dlbench.strategies.surrogatetrain import BestFitArenaTier

    F, W, cap = 240, 3, 4_000_000
    sizes = _jpeg_sizes(F)
    p = surrogatetrain_plan(n_samples=F, world_size=W, node_map=np.arange(W), epochs=4, local_batch=8, seed=2,
                            buffer_bytes=cap, sample_nbytes=sizes, align=ARENA_ALIGN, eviction=eviction,
                            balance=balance, pipeline=SYNC)
    aligned = -(-sizes // ARENA_ALIGN) * ARENA_ALIGN
    slots = cap // int(aligned.max())
    assert max(p.capacity.cache_peak_samples) > slots
    for r in range(W):
        assert peak_holdings(p, r, sizes)[MEMORY] == p.capacity.cache_peak_bytes[r] <= cap
        tier = BestFitArenaTier(p.capacity.arena_bytes_per_rank[r], int(sizes.max()))
        high = 0
        for ep in p:
            ids, keep = ep.sample_ids[r], ep.rank_keep(r)
            ev = ep.evictions
            for t in range(ep.steps):
                for c in range(ep.bounds[r, t], ep.bounds[r, t + 1]):
                    if keep[c] != NO_TIER:
                        tier.reserve(int(ids[c]), int(sizes[ids[c]]))
                        high = max(high, tier._alloc.high)
                for sid in ev.sample[(ev.rank == r) & (ev.step == t)].tolist():
                    tier.delete(sid)
                assert aligned[list(tier._at)].sum() <= cap
        assert high == p.capacity.arena_bytes_per_rank[r] <= cap
        tier.close()


def test_strategy_buffer_counts_bytes_with_varying_sizes():
    """The strategy (what `run` and `simulate` plan): --cache-capacity bytes hold samples while their own
    bytes fit (main admitted cap // slot of the largest sample)."""
    F = 96
    sizes = _jpeg_sizes(F)
    ctx = RunContext(workload=None, n_samples=F, sample_nbytes=sizes, world_size=2, rank=0, node_map=np.arange(2),
                     seed=0, epochs=3, local_batch=4, memory_budget_bytes=None)
    st = strategies.get("surrogatetrain")
    cap = 2_000_000
    p = st.plan(ctx, strategies.parse_options(st, {"cache_capacity": cap}))
    assert max(p.capacity.cache_peak_samples) > cap // (-(-int(sizes.max()) // 4096) * 4096)
    assert max(p.capacity.cache_peak_bytes) <= max(p.capacity.arena_bytes_per_rank) <= cap
    assert p.capacity.cache_bytes_per_rank == max(p.capacity.cache_peak_bytes)


def test_best_fit_reuses_and_coalesces_freed_extents():
    from dlbench.plan.surrogatetrain import BestFit

    a = BestFit(100)
    assert [a.take(n) for n in (10, 20, 30, 10, 20)] == [0, 10, 30, 60, 70]
    a.free(10, 20)
    a.free(60, 10)
    assert a.take(8) == 60                        # the smallest hole that holds it ([60, 70)), not the first
    assert a.take(15) == 10 and a.take(12) == -1  # [25, 30) and [68, 70) left below the top (90), 10 above
    a.free(0, 10)
    a.free(30, 30)                                # [0, 10), [25, 60) and [68, 70): two joins
    assert (a.starts, a.ends) == ([0, 25, 68], [10, 60, 70])
    assert sorted(a.bysize) == a.bysize == [(2, 68), (10, 0), (35, 25)]
    a.free(70, 20)                                # the newest: the top comes down past [68, 70) to 68
    assert (a.top, a.high, a.starts) == (68, 90, [0, 25])
    a.free(60, 8)                                 # joins [25, 60) and reaches the top: down to 25
    a.free(10, 15)                                # everything free
    assert (a.top, a.starts, a.ends, a.bysize) == (0, [], [], [])
