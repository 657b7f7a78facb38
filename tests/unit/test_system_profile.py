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
