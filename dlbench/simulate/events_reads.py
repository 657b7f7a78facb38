"""The thesis-rules costing's per-access cost, defined once (``fastevents`` module doc; the reference loop it is
held to: tests/oracle/thesis_events.py).

- ``Setup``: the rates every costing path takes from the model and the plan (the tier rate rule's seconds per
  byte, PFS seconds per byte by γ, the write, the latency, compute, the staging buffer's share).
- ``Reads``: the per-read state, each node's latest logged PFS-read start (``log``) and the same sorted
  (``slog``, a sentinel ``inf`` at its end), and the per-access cost: ``fetch`` (γ by the window rule, a cache
  fill at γ = nodes, ``gamma: nodes``, a fixed-rate own-tier or peer read; a PFS read logged at its start);
  ``static_costs``: the same rule, vectorised, for what does not depend on time (the fast loops keep only the
  window rule's γ lookup, inlined: ``fastevents`` module doc).
- pls's exchange per step (``exchange_per_step``), the whole-bytes
  test of the staging buffer (``whole_bytes``) and the result tuple (``result``).
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from typing import NamedTuple

import numpy as np

from ..errors import ConfigError
from ..plan import LOCAL, PEER, SHARED, Plan
from ..storage.tiers import TIER_NAMES

KIND_WINDOW, KIND_FILL, KIND_FIXED = 0, 1, 2    # a PFS read under the window rule, a PFS cache fill, the rest


class Setup(NamedTuple):
    """What every costing path takes from the model and the plan."""
    W: int
    node_of: list          # node of each rank
    nodes: int
    K: int                 # ranks per node
    fixed_spb: list        # seconds per byte of a non-PFS read, by tier code (0.0 for the PFS)
    w_spb: float           # seconds per byte of the staging write
    series: bool           # write after fetch (``write: series``) or overlapped
    lat: float             # PFS request latency
    pfs_spb: list          # seconds per byte of a PFS read by γ = 0 .. nodes
    fixed_gamma: int | None   # γ = nodes under ``gamma: nodes``; None under the window rule
    comp_const: float | None  # compute per sample when the model has a step time, else None (bytes-bound)
    cap: float             # a rank's share of the node's staging buffer


def setup(model, plan: Plan) -> Setup:
    p = model.p
    rules = model.rules
    if rules.gamma == "threads":
        raise ConfigError("the event-driven costing counts γ by nodes (thesis-window or nodes), not threads")
    W = plan.world_size
    nodes = plan.nodes
    K = max(1, W // max(nodes, 1))
    spb = model.fetch_s_per_byte(nodes, p.staging.threads)      # non-PFS tiers (the PFS by γ below)
    step_time = model.step_time_s
    fixed_spb = [float(spb[c]) if c != SHARED else 0.0 for c in range(len(TIER_NAMES))]
    if plan.peer_tier == LOCAL:    # peers serve from their node-local tier: min(b_c, r_local)
        fixed_spb[PEER] = max(1.0 / p.network_bytes_per_s, float(spb[LOCAL]))
    return Setup(W, [int(x) for x in plan.node_map], nodes, K, fixed_spb,
                 p.staging_write_s_per_byte(), rules.write == "series", p.pfs.latency_s if p.pfs else 0.0,
                 [0.0] + [1.0 / float(p.pfs_per_client(g)) for g in range(1, nodes + 1)],
                 nodes if rules.gamma == "nodes" else None,
                 step_time / plan.local_batch if step_time is not None else None,
                 float(p.staging.capacity_bytes) / K)


class Reads:
    """The per-read state and the per-access cost. γ of a PFS read that starts at t on node ``nd`` = 1 + the
    other nodes whose latest logged start is at or after t: ``1 + nodes - bisect_left(slog, t) - (own >= t)``,
    ``own`` the node's entry while its rank schedules (a node's entry is replaced in ``slog`` after its rank
    has scheduled, ``relog``: its own reads never count for it). ``by_index[i]``: the seconds per byte at the
    bisection index i where the node's own entry is out of ``slog`` (the fast loops': γ = nodes - i)."""

    def __init__(self, st: Setup, fill_starts: dict | None = None):
        nodes = st.nodes
        self.log = [-np.inf] * nodes
        for nd, t in (fill_starts or {}).items():   # the tier threads' reads are all scheduled (logged) at t0
            self.log[nd] = t
        self.slog = sorted(self.log) + [float("inf")]   # slog[bisect_left(slog, t)]: the next logged start or inf
        self.by_index = [st.pfs_spb[nodes - i] for i in range(nodes)]
        self.fetch = self._fetch_rule(st, self.log, self.slog)

    @staticmethod
    def _fetch_rule(st: Setup, log: list, slog: list):
        nodes, fixed_gamma, pfs_spb, fixed_spb, lat = st.nodes, st.fixed_gamma, st.pfs_spb, st.fixed_spb, st.lat

        def fetch(s: float, c: int, fill: bool, nd: int, own: float, t: float) -> float:
            """The fetch seconds of an access of s bytes from tier code c that starts at t on node nd (``fill``:
            a PFS cache fill, at γ = nodes); a PFS read is logged at its start."""
            if c == SHARED:
                if fill:
                    g = nodes
                elif fixed_gamma is not None:
                    g = fixed_gamma
                else:
                    g = 1 + nodes - bisect_left(slog, t) - (1 if own >= t else 0)
                if t > log[nd]:
                    log[nd] = t
                return s * pfs_spb[g] + lat
            return s * fixed_spb[c]
        return fetch

    def relog(self, nd: int, old: float) -> None:
        """Node nd's log entry was ``old`` when its rank began: move it in ``slog`` to its new value."""
        new = self.log[nd]
        if new != old:
            slog = self.slog
            del slog[bisect_left(slog, old)]
            insort(slog, new)


def static_costs(st: Setup, s: np.ndarray, src: np.ndarray, fill: np.ndarray, comp: np.ndarray, ondemand: bool):
    """``Reads.fetch`` for what does not depend on time, vectorised (``src`` int64 tier codes): (kind
    (``KIND_*``), fetch (0.0 for a window-rule read), write, io (ondemand; else None), cost): a fixed-rate
    access's whole cost, ondemand fetch + write + compute, under loader threads fetch + write (``write: series``)
    or max(fetch, write)."""
    pfs = src == SHARED
    fill_spb = st.pfs_spb[st.nodes]
    if st.fixed_gamma is not None:     # gamma: nodes: every PFS read at a fixed rate, logged
        kind = np.where(pfs, KIND_FILL, KIND_FIXED)
        fetch = np.where(pfs, s * np.where(fill, fill_spb, st.pfs_spb[st.nodes]) + st.lat, 0.0)
    else:
        kind = np.where(fill, KIND_FILL, np.where(pfs, KIND_WINDOW, KIND_FIXED))
        fetch = np.where(fill, s * fill_spb + st.lat, 0.0)
    fetch = np.where(pfs, fetch, s * np.asarray(st.fixed_spb)[src])
    wr = s * st.w_spb
    if ondemand:
        io = fetch + wr
        return kind, fetch, wr, io, io + comp
    return kind, fetch, wr, None, (fetch + wr if st.series else np.maximum(fetch, wr))


def exchange_per_step(model, ep, sizes: np.ndarray, W: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(xs, tio), each (W, steps), of an epoch with background transfers (pls), else None: ``xs`` the seconds
    the bytes rank r sends at step j take on the network (b_c), ``tio`` the seconds its trainer spends on the
    local-tier files of the exchange (reads of what it sends, writes of what it receives; the default model's
    ``_exchange_tier_io_s``). The reference simulator has no background exchange between nodes; the thesis-window
    costing takes the default model's rule."""
    tr = ep.transfers
    steps = ep.steps
    if tr is None or not len(tr) or not steps:
        return None
    st = np.minimum(tr.step, steps - 1)
    xb = np.zeros((W, steps))
    np.add.at(xb, (tr.src, st), sizes[tr.sample])
    tio = model._exchange_tier_io_s(tr, st, sizes, W, steps)
    return xb / model.p.network_bytes_per_s, (tio if tio is not None else np.zeros((W, steps)))


def whole_bytes(sizes: np.ndarray, cap: float, local_batch: int) -> bool:
    """The reference's buffer sums (held + s <= cap, held -= a step's bytes) are exact in float64: whole
    bytes, the sums below 2**53 (held stays below the cap plus a step's bytes). Then the plain loop takes them
    as integer prefix sums; otherwise the generic loop runs (the same answers, slower)."""
    if not len(sizes):
        return True
    mx = float(sizes.max())
    return bool(float(sizes.min()) >= 0 and math.isfinite(cap) and cap + 2 * local_batch * mx < 2.0 ** 53
                and np.array_equal(np.floor(sizes), sizes))


def epoch_times(plan: Plan, epoch_steps: list, step_end: list, t0: float) -> np.ndarray:
    """Each epoch's time from the global steps' end times."""
    out = np.zeros(plan.epochs)
    prev = t0
    k = 0
    for e, ns in enumerate(epoch_steps):
        if ns:
            k += ns
            out[e] = step_end[k - 1] - prev
            prev = step_end[k - 1]
    return out


def result(plan: Plan, epoch_steps: list, step_end: list, t0: float, compute, stall, barrier, fetch: np.ndarray,
           byts: np.ndarray, samples, requests: np.ndarray | None) -> tuple:
    """The costing's tuple: (epoch_times, compute, stall, barrier, fetch_s_by_tier, bytes_by_tier, samples)
    and, where the PFS requests were counted while loading every epoch, the requests per rank."""
    out = (epoch_times(plan, epoch_steps, step_end, t0), np.asarray(compute, dtype=np.float64),
           np.asarray(stall, dtype=np.float64), np.asarray(barrier, dtype=np.float64),
           {n: fetch[:, i].copy() for i, n in enumerate(TIER_NAMES)},
           {n: byts[:, i].copy() for i, n in enumerate(TIER_NAMES)}, np.asarray(samples, dtype=np.float64))
    return out if requests is None else out + (requests.copy(),)
