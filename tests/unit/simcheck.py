"""What the simulate tests share (imported as ``simcheck``: this folder is on ``sys.path`` under pytest)."""

import numpy as np

from dlbench.system import from_dict

COSTING = ("epoch_times", "compute", "stall", "barrier", "fetch_s_by_tier", "bytes_by_tier", "samples")


def assert_same_costing(ref, new) -> None:
    """Two event costings (``thesis_oracle.cost_events``, ``fastevents.cost_events``) agree: every number within 1e-9
    relative, the per-tier dicts with the same tiers."""
    for name, a, b in zip(COSTING, ref, new):
        if isinstance(a, dict):
            assert a.keys() == b.keys(), name
            for k in a:
                np.testing.assert_allclose(b[k], a[k], rtol=1e-9, atol=0, err_msg=f"{name}.{k}")
        else:
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=0, err_msg=name)


def small_profile(**over):
    """A system profile with round figures (1 GB/s PFS, RAM and a 100/200 MB/s disk tier, a very fast network);
    ``disk=`` updates the disk tier, ``pfs=`` the PFS, any other key is set at the top level."""
    d = {"name": "mech", "network_mb_per_s": 1e7,
         "pfs": {"client_link_mb_per_s": 1e3, "aggregate": [{"clients": 1, "mb_per_s": 1e3}]},
         "staging": {"capacity_bytes": 1e10, "threads": 2, "write_mb_per_s": 1e7,
                     "bandwidth": [{"threads": 1, "mb_per_s": 1e7}]},
         "tiers": [{"name": "ram", "kind": "memory", "capacity_bytes": 1e10, "threads": 2,
                    "bandwidth": [{"threads": 1, "mb_per_s": 1e7}]},
                   {"name": "disk", "kind": "local", "capacity_bytes": 1e11, "threads": 2,
                    "bandwidth": [{"threads": 1, "mb_per_s": 100}, {"threads": 2, "mb_per_s": 200}]}]}
    for k, v in over.items():
        if k == "disk":
            d["tiers"][1].update(v)
        elif k == "pfs":
            d["pfs"].update(v)
        else:
            d[k] = v
    return from_dict(d)
