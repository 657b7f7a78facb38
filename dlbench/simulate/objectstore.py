"""A simulated run's requests to an object store (``pfs.kind: object_store``): the ``summary["s3"]`` block a
measured S3 run gets from its backend's counters (``dlbench.storage.s3.request_summary``), made from the plan."""

from __future__ import annotations

import numpy as np

from ..plan import SHARED
from ..storage.s3 import KINDS


def modelled_block(summary: dict, plan, sizes, profile) -> dict:
    """``summary["s3"]`` of a simulated run on an object-store profile (``pfs.kind: object_store``): the GETs the
    plan makes of the shared tier (the epochs' ``shared_read_requests`` plus the prologue's reads), their bytes,
    GETs per sample and, with ``pfs.usd_per_million_requests``, their cost; no latency percentiles (the model
    has one per-request latency, ``pfs.latency_s``)."""
    pro = 0
    pro_b = 0.0
    if plan is not None and len(plan.prologue.sample):
        m = plan.prologue.src == SHARED
        pro = int(m.sum())
        if sizes is not None:
            pro_b = float(np.asarray(sizes, dtype=np.float64)[plan.prologue.sample[m]].sum())
    gets = int(summary.get("shared_read_requests") or 0) + pro
    nbytes = float((summary.get("bytes_by_tier") or {}).get("shared", 0.0)) + pro_b
    req = dict.fromkeys(KINDS, 0)
    req["GET"] = gets
    samples = int(summary.get("samples") or 0)
    out = {"requests": req, "bytes": {**dict.fromkeys(KINDS, 0), "GET": int(round(nbytes))}, "retries": 0,
           "throttled": 0, "requests_per_sample": round(gets / samples, 4) if samples else None,
           "get_latency_ms": None, "ttfb_ms": None, "per_rank_requests": []}
    price = profile.pfs.usd_per_million_requests if profile.pfs is not None else None
    if price is not None:
        out["cost_usd"] = round(gets / 1e6 * float(price), 6)
    return out
