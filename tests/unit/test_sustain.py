"""dlbench sustain's pure parts: the search for the largest N at AU >= threshold, the storage fit (one scale
of the profile's shared tier, least squares, conservative among ties), the scaled profile, measured points."""

import math

import pytest

from dlbench import sustain as S
from dlbench.errors import ConfigError
from dlbench.system import load


def _au(n, bw=100.0, need=10.0):
    """A toy storage: each accelerator needs `need`, the storage gives `bw` shared: AU = min(1, bw / (n need))."""
    return min(1.0, bw / (n * need))


def _pt(n, au, kind="modelled"):
    return S.Point(n, au, 0.0, 0.0, kind)


def test_largest_sustained_finds_the_boundary_with_doubling_and_bisection():
    calls = []

    def cost(n):
        calls.append(n)
        return _pt(n, _au(n))

    n, pts = S.largest_sustained(cost, 0.9, 1, 4096)
    assert n == 11                       # 100 / (11 * 10) = 0.909 ; 12 -> 0.833
    assert len(calls) == len(set(calls)) and len(calls) < 12
    assert [p.accelerators for p in pts] == sorted(p.accelerators for p in pts)
    assert S.largest_sustained(cost, 0.9, 20, 4096)[0] == 0     # even the first misses it
    assert S.largest_sustained(cost, 0.5, 1, 16)[0] == 16       # capped by the limit


def test_fit_scale_recovers_the_storage_and_says_when_it_cannot():
    meas = [("naive", _pt(k, _au(k, bw=8.0), "measured")) for k in (1, 2)]   # I/O bound: identified

    def model(st, k, s):
        return _au(k, bw=1.0 * s)

    s, rms, ident = S.fit_scale(meas, model)
    assert s == pytest.approx(8.0, rel=0.15) and rms < 0.02 and ident
    compute_bound = [("naive", _pt(k, 1.0, "measured")) for k in (1, 2)]
    s, rms, ident = S.fit_scale(compute_bound, model)
    assert not ident and rms < 0.01 and _au(2, bw=s) > 0.99 and _au(2, bw=s / 1.2) < 0.9   # the least that fits
    with pytest.raises(ConfigError, match="no measured point"):
        S.fit_scale([], model)


def test_scaled_profile_scales_the_shared_tier_only():
    p = load("laptop-pfs")
    q = S.scaled_profile(p, 2.0)
    assert q.pfs.client_link_mb_per_s == 2 * p.pfs.client_link_mb_per_s
    assert [c.mb_per_s for c in q.pfs.aggregate] == [2 * c.mb_per_s for c in p.pfs.aggregate]
    assert q.pfs.latency_s == p.pfs.latency_s / 2 and q.tiers == p.tiers
    flat = S.scaled_profile(load("local"), 0.5)       # no PFS section: one flat bandwidth
    assert flat.pfs.client_link_mb_per_s == 500 and [c.mb_per_s for c in flat.pfs.aggregate] == [500]


def test_measured_point_counts_the_prologue():
    run = {"summary": {"ranks": 2, "au": 0.9, "epoch_time_s": [1.0, 1.0], "prologue_time_s": 2.0,
                       "total_time_s": 4.0, "samples": 40, "samples_per_s": 20.0,
                       "bytes_by_tier": {"shared": 100}, "prologue_bytes_by_tier": {"shared": 300}}}
    p = S.measured_point(run, "d")
    assert p.au == pytest.approx(0.45) and p.samples_per_s == 10 and p.shared_bytes_per_s == 100
    assert p.bytes_per_s_per_accelerator == 50 and p.kind == "measured"


def test_model_point_strategy_that_cannot_run_sustains_nothing():
    from dlbench import workload as W

    wl = W.load("cosmoflow", scale="full")
    # staging of a subset bigger than the local tier runs partly from the shared tier by default (issue 19);
    # --if-too-big error is the staging that cannot run here
    p = S.model_point(strategy="staging", wl=wl, accelerator="h100", profile=load("laptop-pfs"), n=2,
                      ranks_per_node=2, epochs=1, seed=0, full_samples=wl.samples, options={"if_too_big": "error"})
    assert p.au == 0.0 and p.note.startswith("cannot run") and "too small" in p.note
    r = S.model_point(strategy="staging", wl=wl, accelerator="h100", profile=load("laptop-pfs"), n=2,
                      ranks_per_node=2, epochs=1, seed=0, full_samples=wl.samples)
    assert 0 < r.au < 1 and r.note == ""
    q = S.model_point(strategy="naive", wl=W.load("cosmoflow"), accelerator="h100", profile=load("laptop-pfs"),
                      n=3, ranks_per_node=2, epochs=1, seed=0)
    assert q.accelerators == 4 and 0 < q.au <= 1 and math.isfinite(q.samples_per_s)   # whole nodes


def test_fit_scale_compute_bound_within_noise_is_a_lower_bound():
    """Measured AU a few % under the compute-only AU (non-I/O overhead: worker start, first-step stall) was read
    as slow storage and called identified; within the run-to-run noise it is a lower bound, said so."""
    def model(st, k, s):   # 1 s of compute and 10 k / s of unhidden reads per step: any AU < 1 fits some s
        return 1.0 / (1.0 + 10.0 * k / s)

    overhead = [("naive", _pt(1, 0.98, "measured")), ("naive", _pt(2, 0.97, "measured"))]
    s, rms, ident = S.fit_scale(overhead, model)
    assert rms < 0.01 and 300 < s < 1000   # fits well: more bandwidth fits worse (the old rule: identified)
    assert not ident                       # but compute-only (AU 1) is within AU_NOISE of the points: a lower bound
    io_bound = [("naive", _pt(k, model("naive", k, 40.0), "measured")) for k in (1, 2)]   # 80 % and 67 %
    s_io, _, ident_io = S.fit_scale(io_bound, model)
    assert ident_io and s_io == pytest.approx(40.0, rel=0.15)
    row = {"scale": s, "base_profile": "local", "calibrated_pfs": "x", "fit_rms_au": rms, "identified": ident}
    assert "not I/O-bound" in S.render([{**row, "strategy": "naive", "workload": "w", "accelerator": "h100",
                                         "threshold": 0.9, "threshold_source": "t", "sustained_scale": "tiny",
                                         "sustained": 1, "sustained_kind": "modelled", "measured_scale": "tiny",
                                         "measured_passing": 2, "fit_rms_au_strategy": rms, "points": []}])
