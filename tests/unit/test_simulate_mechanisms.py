"""The mechanisms issue 19's real-vs-simulated comparison found missing, each priced from a profile figure
that ``dlbench calibrate-storage`` measures: the local tier read from the page cache, the format reader's
per-file cost, a DataLoader's worker start per epoch, pls's exchange in series with the step at the measured
exchange rate, and received samples written as files."""

import dataclasses

import numpy as np
import pytest
from simcheck import small_profile

from dlbench.errors import ConfigError
from dlbench.simulate import SimWorkload, simulate
from dlbench.system import ThreadPoint, from_dict

WL = SimWorkload("f", 400, 8, "fixed", 1e6, step_time_s=0.01)


def test_local_tier_read_from_the_page_cache_when_the_nodes_files_fit():
    """staging stores the whole 400 MB on every node's disk and reads it synchronously: with a page cache of
    1 GB at the cached curve's r(2)/2 = 5 GB/s (0.2 ms per sample: 25 steps x (10 ms + 8 x 0.2 ms)), with
    100 MB (or no cached curve: old profiles) at r(2)/2 = 100 MB/s (10 ms per sample)."""
    cached = {"cached_bandwidth": [{"threads": 1, "mb_per_s": 8000}, {"threads": 2, "mb_per_s": 10000}]}
    old = simulate([("s", "staging", {})], wl=WL, profile=small_profile(), nodes=2, epochs=2)["s"]
    fits = simulate([("s", "staging", {})], wl=WL, profile=small_profile(disk=cached, page_cache_bytes=1e9),
                    nodes=2, epochs=2)["s"]
    small = simulate([("s", "staging", {})], wl=WL, profile=small_profile(disk=cached, page_cache_bytes=1e8),
                     nodes=2, epochs=2)["s"]
    steps = 400 // 2 // 8
    assert fits["epoch_time_s"][1] == pytest.approx(steps * (0.01 + 8 * 0.2e-3), rel=1e-3)
    assert old["epoch_time_s"][1] == pytest.approx(steps * (0.01 + 8 * 10e-3), rel=1e-3)
    assert small["epoch_time_s"][1] == pytest.approx(old["epoch_time_s"][1], rel=1e-9)
    assert any("page-cache" in n for n in fits["model_notes"])


def test_pfs_read_lasts_at_least_the_format_readers_own_time():
    """naive reads 1 MB from a PFS at 1 GB/s (1 ms): with the reader's open_s = 3 ms + 1 MB / 1 GB/s (4 ms)
    above it, a step of 8 samples pays 8 x 4 ms; below it (0.1 ms + 1 MB / 10 GB/s), the PFS's 1 ms stands."""
    base = simulate(["naive"], wl=WL, profile=small_profile(), nodes=1, epochs=1)["naive"]["epoch_time_s"][0]
    slow = simulate(["naive"], wl=WL, profile=small_profile(pfs={"open_s": 3e-3, "cached_mb_per_s": 1e3}), nodes=1,
                    epochs=1)["naive"]["epoch_time_s"][0]
    fast = simulate(["naive"], wl=WL, profile=small_profile(pfs={"open_s": 1e-4, "cached_mb_per_s": 1e4}), nodes=1,
                    epochs=1)["naive"]["epoch_time_s"][0]
    assert base == pytest.approx(400 * (1e-3 + 0.01 / 8), rel=1e-3)
    assert slow == pytest.approx(400 * (4e-3 + 0.01 / 8), rel=1e-3)
    assert fast == pytest.approx(base, rel=1e-9)


def test_dataloader_without_persistent_workers_pays_the_worker_start_every_epoch():
    """prefetch (1 worker, 1 MB at 1 GB/s = 1 ms per sample, compute 1.25 ms per sample: compute-bound): each
    epoch's first read starts worker_start_s = 0.2 s late, so every epoch lasts ~0.2 s longer; with
    persistent_workers (or num_workers 0, or no figure) nothing changes."""
    prof = small_profile(worker_start_s=0.2)
    rows = [("p", "prefetch", {"num_workers": 1}), ("pp", "prefetch", {"num_workers": 1, "persistent_workers": True})]
    r = simulate(rows, wl=WL, profile=prof, nodes=1, epochs=2)
    plain = simulate(rows[:1], wl=WL, profile=small_profile(), nodes=1, epochs=2)["p"]
    for e in range(2):
        assert r["p"]["epoch_time_s"][e] == pytest.approx(plain["epoch_time_s"][e] + 0.2, abs=2e-3)
        assert r["pp"]["epoch_time_s"][e] == pytest.approx(plain["epoch_time_s"][e], rel=1e-9)


def test_pls_exchange_rule_series_adds_the_transfer_at_the_measured_exchange_rate():
    """pls on a memory tier (no file costs), Q = 0.5: each rank sends 100 x 1 MB per epoch. series (default):
    the epoch lasts local shuffling's + 100 MB / exchange_mb_per_s (200 MB/s: 0.5 s; without the figure b_c
    = 400 MB/s: 0.25 s); overlap: the 0.4 MB sent per step at 400 MB/s (1 ms... 4 ms a step of 4 samples)
    hides under the 10 ms step."""
    rows = [("pls", "pls", {"exchange_fraction": 0.5, "tier": "memory"}), ("loc", "local", {"tier": "memory"})]
    r_b = simulate(rows, wl=WL, profile=small_profile(network_mb_per_s=400), nodes=2, epochs=2)
    r_x = simulate(rows, wl=WL, profile=small_profile(network_mb_per_s=400, exchange_mb_per_s=200), nodes=2, epochs=2)
    r_o = simulate(rows, wl=WL, profile=small_profile(network_mb_per_s=400, rules={"exchange": "overlap"}), nodes=2,
                   epochs=2)
    for e in range(2):
        loc = r_b["loc"]["epoch_time_s"][e]
        assert r_b["pls"]["epoch_time_s"][e] == pytest.approx(loc + 0.25, rel=1e-6)
        assert r_x["pls"]["epoch_time_s"][e] == pytest.approx(loc + 0.5, rel=1e-6)
        assert r_o["pls"]["epoch_time_s"][e] == pytest.approx(loc, rel=1e-6)
    assert r_x["pls"]["phase_time_s"]["exchange"] == pytest.approx(1.0, rel=1e-6)


def test_pls_received_samples_cost_a_file_write_each():
    """With file_write_s = 1 ms and cached_write_mb_per_s = 1000 on the disk (rules exchange: overlap, b_c
    fast): pls Q = 0.5 reads its 100 sent samples at r(1) = 100 MB/s (1 s) and writes the 100 received at
    1 ms + 1 ms each (0.2 s): 1.2 s per epoch."""
    prof = small_profile(disk={"file_write_s": 1e-3, "cached_write_mb_per_s": 1e3}, rules={"exchange": "overlap"})
    r = simulate([("pls", "pls", {"exchange_fraction": 0.5}), ("loc", "local", {})], wl=WL, profile=prof,
                 nodes=2, epochs=2)
    assert r["pls"]["phase_time_s"]["exchange"] == pytest.approx(2 * 1.2, rel=1e-6)


def test_pls_exchange_measured_through_the_stage_replaces_the_file_pieces():
    """pls Q = 0.5 on the disk tier, rule series, exchange_mb_per_s = 200, exchange_sample_s = 1 ms: each rank
    sends 100 x 1 MB and receives 100 per epoch: 100 MB / 200 MB/s (0.5 s) + 200 samples x 1 ms (0.2 s) =
    0.7 s per epoch, whatever the disk's file pieces (file_write_s 5 ms would add 0.5 s of writes alone, the
    reads at r(1) = 100 MB/s 1 s); without exchange_sample_s those pieces count (old profiles)."""
    rows = [("pls", "pls", {"exchange_fraction": 0.5})]
    disk = {"file_write_s": 5e-3, "cached_write_mb_per_s": 1e3}
    r = simulate(rows, wl=WL, profile=small_profile(disk=disk, exchange_mb_per_s=200, exchange_sample_s=1e-3),
                 nodes=2, epochs=2)["pls"]
    old = simulate(rows, wl=WL, profile=small_profile(disk=disk, exchange_mb_per_s=200), nodes=2, epochs=2)["pls"]
    assert r["phase_time_s"]["exchange"] == pytest.approx(2 * 0.7, rel=1e-6)
    assert old["phase_time_s"]["exchange"] == pytest.approx(2 * (0.5 + 1.0 + 100 * (5e-3 + 1e-3)), rel=1e-6)


@pytest.mark.parametrize("key,val", [("worker_start_s", 0.0), ("exchange_sample_s", -1e-3),
                                     ("exchange_sample_s", float("nan")), ("worker_start_s", float("nan")),
                                     ("page_cache_bytes", -1.0), ("exchange_mb_per_s", float("inf")),
                                     ("pfs.open_s", -1e-3), ("pfs.cached_mb_per_s", 0.0),
                                     ("disk.file_write_s", float("inf")), ("disk.cached_write_mb_per_s", 0.0)])
def test_measured_figures_are_validated(key, val):
    if key.startswith(("pfs.", "disk.")):
        sec, k = key.split(".")
        kw = {sec: {k: val}}
    else:
        kw = {key: val}
    with pytest.raises(ConfigError, match=key.split(".")[-1]):
        small_profile(**kw)


def test_cached_curve_is_validated_and_old_profiles_load():
    with pytest.raises(ConfigError, match="cached_bandwidth"):
        small_profile(disk={"cached_bandwidth": [{"threads": 2, "mb_per_s": 10}, {"threads": 1, "mb_per_s": 10}]})
    p = small_profile()
    assert p.worker_start_s is None and p.pfs.open_s is None and not p.tiers[1].cached_bandwidth
    disk = dataclasses.replace(p.tiers[1], cached_bandwidth=(ThreadPoint(threads=1, mb_per_s=5),))
    assert p.tier_aggregate(disk, 1, cached=True) == 5e6
    with pytest.raises(ConfigError, match="cached_bandwidth"):
        p.tier_aggregate(p.tiers[1], 1, cached=True)


def test_one_pfs_bandwidth_model_for_the_throttle_and_the_simulator():
    """SystemProfile's t(γ) and r(γ) are PfsModel's (the emulated PFS's), at points, between them, past them
    and for arrays."""
    p = from_dict({"name": "x", "network_mb_per_s": 1e3,
                   "pfs": {"latency_s": 1e-4, "client_link_mb_per_s": 150,
                           "aggregate": [{"clients": 1, "mb_per_s": 100}, {"clients": 4, "mb_per_s": 400},
                                         {"clients": 8, "mb_per_s": 480}]},
                   "staging": {"capacity_bytes": 1e9, "threads": 1, "write_mb_per_s": 1e3,
                               "bandwidth": [{"threads": 1, "mb_per_s": 1e3}]}})
    m = p.pfs_model()
    g = np.array([0.5, 1, 2, 3, 4, 6, 8, 100])
    assert np.allclose(p.pfs_per_client(g), [m.rate_Bps(int(x)) if x >= 1 else m.rate_Bps(1) for x in g])
    assert np.allclose(p.pfs_aggregate(g), [m.aggregate_MBps(float(x)) * 1e6 for x in g])
    assert p.pfs_per_client(2) == pytest.approx(min(150, 200 / 2) * 1e6)
    assert m.read_time_s(1_000_000, 6) == pytest.approx(1e-4 + 1e6 / (440e6 / 6))


def test_a_step_ends_late_by_the_hosts_wake_up_latency():
    """local on a memory tier is compute-bound (25 steps of 10 ms per epoch); with wake_latency 1 ms at
    10 ms (0.2 ms at 2 ms: 0.6 ms at 6 ms between them) every step lasts 11 ms."""
    rows = [("l", "local", {"tier": "memory"})]
    pts = [{"wait_s": 0.002, "late_s": 2e-4}, {"wait_s": 0.01, "late_s": 1e-3}]
    plain = simulate(rows, wl=WL, profile=small_profile(), nodes=2, epochs=2)["l"]
    late = simulate(rows, wl=WL, profile=small_profile(wake_latency=pts), nodes=2, epochs=2)["l"]
    assert plain["epoch_time_s"][1] == pytest.approx(25 * 0.01, rel=1e-3)
    assert late["epoch_time_s"][1] == pytest.approx(25 * 0.011, rel=1e-3)
    assert small_profile(wake_latency=pts).wake_late_s(0.006) == pytest.approx(6e-4)
    with pytest.raises(ConfigError, match="wake_latency"):
        small_profile(wake_latency=pts[::-1])
    with pytest.raises(ConfigError, match="late_s"):
        small_profile(wake_latency=[{"wait_s": 0.01, "late_s": float("nan")}])


def test_a_pfs_request_ends_late_by_the_wake_up_latency_of_its_length():
    """naive: 1 MB at 1 GB/s = 1 ms per PFS request; wake_latency 0.5 ms at 1 ms: 1.5 ms per request (the
    2 ms point is the step's: 10 ms steps end 0.5 ms late too, flat past the last point)."""
    pts = [{"wait_s": 0.001, "late_s": 5e-4}, {"wait_s": 0.002, "late_s": 5e-4}]
    t = simulate(["naive"], wl=WL, profile=small_profile(wake_latency=pts), nodes=1, epochs=1)["naive"]["epoch_time_s"][0]
    assert t == pytest.approx(400 * 1.5e-3 + 50 * 0.0105, rel=1e-3)


def test_page_cache_counts_a_nodes_own_files():
    """local shards the 400 MB over 2 nodes (200 MB each, no all-gather): a 300 MB page cache holds a node's
    files though not the dataset; 150 MB does not."""
    cached = {"cached_bandwidth": [{"threads": 1, "mb_per_s": 8000}, {"threads": 2, "mb_per_s": 10000}]}
    rows = [("l", "local", {})]
    fit = simulate(rows, wl=WL, profile=small_profile(disk=cached, page_cache_bytes=3e8), nodes=2, epochs=2)["l"]
    no = simulate(rows, wl=WL, profile=small_profile(disk=cached, page_cache_bytes=1.5e8), nodes=2, epochs=2)["l"]
    assert any("page-cache" in n for n in fit["model_notes"])
    assert not any("page-cache" in n for n in no["model_notes"])
    assert fit["epoch_time_s"][1] < no["epoch_time_s"][1] / 2


def test_dataloader_hands_every_batch_from_its_worker_to_the_trainer():
    """prefetch with DataLoader workers (1 rank, 400 samples of 1 MB in 50 batches of 8; a read 1 ms, a step
    10 ms = 1.25 ms per sample: the model hands a step's samples to its compute one by one). By hand: without
    the hand-off, sample 0 is read by 1 ms and the 50 steps follow back to back: 1 + 50 x 10 = 501 ms. The
    trainer's share (loader_batch_s = 2 ms) adds to every step: 1 + 50 x 12 = 601 ms, 0.1 s more stall. The
    worker's share (loader_worker_batch_s = 6 ms, 0.75 ms per sample) makes sample i ready at 1.75 (i + 1) ms,
    slower than the steps: step k (samples 8k..8k+7, the j-th needed 1.25 j after its start) starts at
    max over j of 1.75 (8k + j + 1) - 1.25 j = 14 k + 5.25 ms; the last (k = 49) at 691.25, ends at 701.25 ms.
    Both: steps of 12 ms still wait for the worker: 691.25 + 12 = 703.25 ms. num_workers 0 (the trainer
    reads) pays neither."""
    rows = [("p", "prefetch", {"num_workers": 1}), ("pp", "prefetch", {"num_workers": 1, "persistent_workers": True}),
            ("p0", "prefetch", {"num_workers": 0})]
    plain = simulate(rows, wl=WL, profile=small_profile(), nodes=1, epochs=1)
    trainer = simulate(rows, wl=WL, profile=small_profile(loader_batch_s=0.002), nodes=1, epochs=1)
    worker = simulate(rows[:1], wl=WL, profile=small_profile(loader_worker_batch_s=0.006), nodes=1, epochs=1)["p"]
    both = simulate(rows[:1], wl=WL, profile=small_profile(loader_batch_s=0.002, loader_worker_batch_s=0.006),
                    nodes=1, epochs=1)["p"]
    assert plain["p"]["epoch_time_s"][0] == pytest.approx(0.501, rel=1e-9)
    for label in ("p", "pp"):
        assert trainer[label]["epoch_time_s"][0] == pytest.approx(0.601, rel=1e-9)
        assert trainer[label]["phase_time_s"]["stall"] == pytest.approx(plain[label]["phase_time_s"]["stall"] + 0.1, rel=1e-9)
    assert trainer["p0"]["epoch_time_s"][0] == pytest.approx(plain["p0"]["epoch_time_s"][0], rel=1e-12)
    assert worker["epoch_time_s"][0] == pytest.approx(0.70125, rel=1e-9)
    assert both["epoch_time_s"][0] == pytest.approx(0.70325, rel=1e-9)


@pytest.mark.parametrize("key,val", [("loader_batch_s", -1e-3), ("loader_batch_s", float("nan")),
                                     ("loader_worker_batch_s", float("inf"))])
def test_loader_handoff_figures_are_validated_and_zero_is_allowed(key, val):
    with pytest.raises(ConfigError, match=key):
        small_profile(**{key: val})
    assert getattr(small_profile(**{key: 0.0}), key) == 0.0


@pytest.mark.parametrize("page_cache,cached", [(2.5e8, True), (1.5e8, True), (0.8e8, False)],
                         ids=["bound-fits", "distinct-fit", "distinct-over"])
def test_page_cache_counts_a_samples_file_once(page_cache, cached):
    """A node's files are its distinct samples: here each rank reads its 100 samples of 1 MB twice an epoch
    from the local tier (200 MB read, 100 MB of files). 250 MB: the reads' bytes fit (no dedup needed); 150 MB:
    they do not, the distinct files do; 80 MB: the files do not."""
    from dlbench.plan import LOCAL, global_shuffle_plan
    from dlbench.simulate import Model

    plan = global_shuffle_plan(strategy="twice", n_samples=400, world_size=2, node_map=np.array([0, 1]), epochs=2,
                               local_batch=8, seed=0, tier=LOCAL)
    plan = plan.map_epochs(lambda ep: dataclasses.replace(ep, sample_ids=np.tile(ep.sample_ids[:, :100], 2)))
    disk = {"cached_bandwidth": [{"threads": 1, "mb_per_s": 8000}]}
    m = Model(small_profile(disk=disk, page_cache_bytes=page_cache), step_time_s=0.01)
    assert m.local_tier_cached(plan, np.full(400, 1e6)) is cached
