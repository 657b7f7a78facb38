import pytest

from dlbench.errors import ConfigError
from dlbench.system import from_dict, load

BASE = {
    "name": "t", "compute_mb_per_s": 100, "network_mb_per_s": 10000,
    "pfs": {"client_link_mb_per_s": 2000, "aggregate": [{"clients": 1, "mb_per_s": 66}, {"clients": 4, "mb_per_s": 146}]},
    "staging": {"capacity_bytes": 1e9, "threads": 2, "write_mb_per_s": 200,
                "bandwidth": [{"threads": 1, "mb_per_s": 16550}]},
    "tiers": [{"name": "ssd", "kind": "local", "capacity_bytes": 1e11, "threads": 2,
               "bandwidth": [{"threads": 1, "mb_per_s": 66}, {"threads": 2, "mb_per_s": 86}]}],
}


def test_thesis_profile_values():
    p = load("hdmlp-thesis")
    assert p.pfs_per_client(4) == pytest.approx(36.5e6)
    assert p.pfs_per_client(8) == pytest.approx(40.75e6)
    assert p.pfs_aggregate(6) == pytest.approx(236e6)        # linear between t(4) and t(8)
    assert p.pfs_aggregate(100) == pytest.approx(324e6)      # flat past the last point
    assert p.tier_per_thread(p.tier("ssd")) == pytest.approx(43e6)
    assert p.staging_write_s_per_byte() == pytest.approx(1 / 200e6)


def test_per_client_link_caps():
    d = dict(BASE, pfs={"client_link_mb_per_s": 10, "aggregate": BASE["pfs"]["aggregate"]})
    assert from_dict(d).pfs_per_client(1) == pytest.approx(10e6)


def test_unknown_key_is_error_with_suggestion():
    d = dict(BASE, netwrok_mb_per_s=1)
    with pytest.raises(ConfigError, match="did you mean 'network_mb_per_s'"):
        from_dict(d)


def test_non_increasing_clients_is_error():
    d = dict(BASE, pfs={"client_link_mb_per_s": 2000,
                        "aggregate": [{"clients": 4, "mb_per_s": 1}, {"clients": 4, "mb_per_s": 2}]})
    with pytest.raises(ConfigError, match=r"pfs.aggregate\[1\].clients=4.*increase"):
        from_dict(d)


def test_bad_tier_kind_and_zero_bandwidth():
    bad = dict(BASE, tiers=[dict(BASE["tiers"][0], kind="tape")])
    with pytest.raises(ConfigError, match="kind"):
        from_dict(bad)
    zero = dict(BASE, staging=dict(BASE["staging"], bandwidth=[{"threads": 1, "mb_per_s": 0}]))
    with pytest.raises(ConfigError, match="must be from 0.001 to"):
        from_dict(zero)


def test_unknown_profile_name():
    with pytest.raises(ConfigError, match="hdmlp-thesis"):
        load("hdmlp-thesys")


def _with_write(curve):
    return dict(BASE, tiers=[dict(BASE["tiers"][0], write_bandwidth=curve)])


def test_tier_write_curve_is_read_and_falls_back_to_the_read_curve():
    p = from_dict(_with_write([{"threads": 1, "mb_per_s": 20}, {"threads": 4, "mb_per_s": 50}]))
    t = p.tier("ssd")
    assert p.tier_write_aggregate(t, 1) == pytest.approx(20e6)
    assert p.tier_write_aggregate(t) == pytest.approx(30e6)          # the tier's 2 threads: linear 1..4
    assert p.tier_write_aggregate(t, 16) == pytest.approx(50e6)      # flat past the last point
    assert p.tier_aggregate(t) == pytest.approx(86e6)                # reads keep r(p)
    q = from_dict(BASE)                                              # no write curve: writes cost r(p)
    assert q.tier("ssd").write_bandwidth == ()
    assert q.tier_write_aggregate(q.tier("ssd"), 1) == q.tier_aggregate(q.tier("ssd"), 1) == pytest.approx(66e6)


@pytest.mark.parametrize("curve, match", [
    ([{"threads": 2, "mb_per_s": 5}, {"threads": 2, "mb_per_s": 6}],
     r"tiers\[0\].write_bandwidth\[1\].threads=2.*increase strictly"),
    ([{"threads": 1, "mb_per_s": 0}], r"tiers\[0\].write_bandwidth\[0\].mb_per_s=0.*must be from 0.001 to 1e\+09"),
    ([{"threads": 1, "mb_per_s": 2e9}], r"tiers\[0\].write_bandwidth\[0\].mb_per_s=2e\+09.*must be from"),
    ([{"threads": 1, "mb_per_s": -3}], r"tiers\[0\].write_bandwidth\[0\].mb_per_s=-3.* \(in my.yaml\)"),
    ([{"threads": 0, "mb_per_s": 5}], r"tiers\[0\].write_bandwidth\[0\].threads=0.*must be >= 1"),
    ([{"threads": 1, "mbps": 5}], r"tiers\[0\].write_bandwidth\[0\].mbps.*did you mean 'mb_per_s'"),
])
def test_bad_tier_write_curve_is_one_line_error(curve, match):
    with pytest.raises(ConfigError, match=match) as e:
        from_dict(_with_write(curve), "my.yaml")
    assert "\n" not in str(e.value)
