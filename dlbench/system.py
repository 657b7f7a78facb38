"""System profiles (a run-time concept: `dlbench run --system` and `dlbench simulate` read the same file):
the storage tiers, file system, network and compute of a machine, as the performance
model and the single-machine PFS emulation need them. Pure: reads a YAML mapping, no I/O beyond
that, no clocks.

A profile (``configs/systems/*.yaml``; every bandwidth in MB/s with 1 MB = 10^6 bytes, every capacity in
bytes, the unit in each key's name)::

    name: hdmlp-thesis
    compute_mb_per_s: 100            # c: samples are consumed at s / c (optional: a workload step time instead)
    network_mb_per_s: 10000          # b_c: one node's link to a peer
    exchange_mb_per_s: 800           # (optional) a rank's send rate in pls's exchange of sample-sized messages
                                     # both ways at once; without it b_c
    exchange_sample_s: 0.0002        # (optional) pls's exchange through its stage with the local file tier:
                                     # seconds per sample a rank sends or receives beyond the bytes at
                                     # exchange_mb_per_s (file read, file write/rename/unlink, the two ranks'
                                     # MPI calls); replaces the tier's file_write_s/write/read pieces there
    page_cache_bytes: 2.0e10         # (optional) what a node's page cache holds (tiers' cached_bandwidth)
    worker_start_s: 0.07             # (optional) a loader worker process's start, paid every epoch by a
                                     # DataLoader without persistent_workers
    loader_batch_s: 6.0e-4           # (optional) a DataLoader batch's hand-off from a worker: the trainer's
                                     # time in next() per batch (unpickle, shared-memory fd, map)
    loader_worker_batch_s: 5.0e-4    # (optional) and the worker's own time per batch on top of its reads
    wake_latency:                    # (optional) how late a blocking wait ends on this host: a training
      - {wait_s: 0.001, late_s: 1.0e-4}   # step or a PFS request ends late_s(its length) after its end
      - {wait_s: 0.01, late_s: 5.0e-4}
    pfs:                             # or ``pfs: null``: the shared tier is not modelled (no throttling at run
                                     # time; ``dlbench simulate`` refuses such a profile)
      latency_s: 0.0                 # fixed cost per read request (optional, default 0)
      client_link_mb_per_s: 2000     # b_fs: one client's link to the file system
      aggregate:                     # t(γ): total file-system bandwidth with γ concurrent clients
        - {clients: 1, mb_per_s: 66}
        - {clients: 2, mb_per_s: 86}
      open_s: 1.2e-4                 # (optional) the format reader's per-file cost beyond the bytes (HDF5 open,
      cached_mb_per_s: 20000         # parse) and its pread rate from the page cache: a read lasts at least
                                     # open_s + s / cached_mb_per_s (the emulated PFS overlaps the real read)
    staging:                         # the staging buffer (tier 0): samples wait here until consumed
      capacity_bytes: 1.0e9
      threads: 2                     # p_0: the loader's I/O threads per node
      write_mb_per_s: 200            # β: copying a sample into the buffer
      bandwidth: [{threads: 1, mb_per_s: 16550}]   # r_0(p): aggregate over p threads
    tiers:                           # node-local tiers, fastest first
      - {name: ram, kind: memory, capacity_bytes: 5.0e10, threads: 2, bandwidth: [...]}
      - {name: ssd, kind: local, capacity_bytes: 1.0e11, threads: 2, bandwidth: [...],
         write_bandwidth: [...],     # w_j(p) (optional): the tier's writes; without it they cost r_j(p)
         cached_bandwidth: [...],    # (optional) r_j(p) from the page cache: used when every node's files on
                                     # the tier fit page_cache_bytes (files just written stay cached)
         file_write_s: 4.0e-5,       # (optional) a sample written as a file: create, close, rename, unlink
         cached_write_mb_per_s: 5000}  # and its bytes into the page cache (pls's received samples)
    rules:                           # the performance model's rule set (optional; ``ModelRules``, defaults shown)
      gamma: threads                 # γ counted as nodes x PFS threads per node | nodes | thesis-window
      write: overlap                 # copy into the staging buffer overlapped with the next fetch | series
      tier_read: per-thread          # a thread reads a local/peer tier at r(p)/p | full (r(p))
      prologue: overlap              # staging before epoch 0: read, receive, write overlap | series
      exchange: series               # pls's messages move inside the MPI wait, after the step | overlap

Curves are piecewise linear between their points (counts strictly increasing, bandwidths > 0); below the
first point the first value holds, above the last point the last value holds. Unknown keys, missing keys,
non-increasing counts and non-positive bandwidths are ``ConfigError``s naming the key and the file. The
optional figures (``dlbench calibrate-storage`` measures each; a profile without them loads and is costed as
before, except for the ``exchange`` rule) must be finite and > 0 where given.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import MAX_NODES, MAX_THREADS, from_mapping, load_yaml, opt, resource_dir
from .errors import ConfigError, unknown_choice

MB = 1e6  # the thesis' and the profile's MB: 10^6 bytes
TIER_KINDS = ("memory", "local")


@dataclass(frozen=True, kw_only=True)
class ThreadPoint:
    threads: int = opt(help="threads reading the tier at once", min=1, max=MAX_THREADS)
    mb_per_s: float = opt(help="aggregate bandwidth over those threads", unit="MB/s", min=0)


@dataclass(frozen=True, kw_only=True)
class ClientPoint:
    clients: int = opt(help="clients reading the file system at once (γ)", min=1, max=MAX_NODES * MAX_THREADS)
    mb_per_s: float = opt(help="aggregate file-system bandwidth t(γ)", unit="MB/s", min=0)


@dataclass(frozen=True, kw_only=True)
class WakePoint:
    wait_s: float = opt(help="length of a blocking wait (a sleep)", unit="s", min=0)
    late_s: float = opt(help="mean time the waiting thread resumes after the wait's end", unit="s", min=0)


@dataclass(frozen=True, kw_only=True)
class PfsSpec:
    latency_s: float = opt(0.0, help="fixed cost of one read request", unit="s", min=0)
    client_link_mb_per_s: float = opt(help="b_fs: one client's link to the file system", unit="MB/s", min=0)
    aggregate: tuple[ClientPoint, ...] = opt(help="t(γ): aggregate bandwidth by concurrent clients")
    open_s: float | None = opt(None, help="per-file cost of the workload's format reader beyond the bytes (open, "
                                          "parse: HDF5's superblock and object headers), measured by "
                                          "calibrate-storage through that reader on files in the page cache "
                                          "(optional)", unit="s", min=0)
    cached_mb_per_s: float | None = opt(None, help="one reader's pread rate from the page cache on the dataset's "
                                                   "files (optional; with open_s, the reader's own time of a "
                                                   "read: open_s + s / cached)", unit="MB/s", min=0)
    kind: str = opt("pfs", help="pfs (a parallel file system) or object_store (S3: latency_s is the per-request "
                                "latency, client_link_mb_per_s one connection's bandwidth, aggregate t(γ) by "
                                "concurrent requests); object_store adds the request counts and their cost")
    usd_per_million_requests: float | None = opt(None, help="object_store: the price of a million GET requests "
                                                            "(optional; simulate then reports the requests' cost)",
                                                 unit="USD", min=0)


@dataclass(frozen=True, kw_only=True)
class StagingSpec:
    capacity_bytes: float = opt(help="staging buffer per node", unit="B", min=0)
    threads: int = opt(help="p_0: loader I/O threads per node (they are the node's PFS clients)", min=1,
                       max=MAX_THREADS)
    write_mb_per_s: float = opt(help="β: copy into the staging buffer", unit="MB/s", min=0)
    bandwidth: tuple[ThreadPoint, ...] = opt(help="r_0(p): staging-buffer bandwidth by threads")


@dataclass(frozen=True, kw_only=True)
class TierSpec:
    name: str = opt(help="tier name (ram, ssd, ...)")
    kind: str = opt(help="memory (plan tier MEMORY) or local (plan tier LOCAL, a node-local disk)",
                    choices=TIER_KINDS)
    capacity_bytes: float = opt(help="capacity per node", unit="B", min=0)
    threads: int = opt(help="background prefetch threads per node for this tier", min=1, max=MAX_THREADS)
    bandwidth: tuple[ThreadPoint, ...] = opt(help="r_j(p): aggregate bandwidth by threads")
    write_bandwidth: tuple[ThreadPoint, ...] = opt((), help="w_j(p): aggregate write bandwidth by threads "
                                                            "(optional; without it writes cost r_j(p))")
    cached_bandwidth: tuple[ThreadPoint, ...] = opt((), help="r_j(p) of the tier's files in the node's page cache "
                                                             "(optional; the model reads at it when the node's "
                                                             "files on the tier fit page_cache_bytes)")
    file_write_s: float | None = opt(None, help="per-file cost of writing a sample as a file on the tier: create, "
                                                "write into the page cache, close, rename, later unlink (its "
                                                "fixed part; optional)", unit="s", min=0)
    cached_write_mb_per_s: float | None = opt(None, help="one thread's write rate into the tier's files through the "
                                                         "page cache, no fsync (optional, with file_write_s)",
                                              unit="MB/s", min=0)


GAMMA_RULES = ("threads", "nodes", "thesis-window")


@dataclass(frozen=True, kw_only=True)
class ModelRules:
    """How ``dlbench simulate`` counts contention and overlap (dlbench/simulate/model.py explains each rule;
    ``thesis`` = the HDMLP thesis' reference simulator, ``default`` = the physical reading)."""

    gamma: str = opt("threads", help="γ, the PFS clients a read shares t(γ) with: threads (nodes x the node's "
                                     "PFS threads), nodes, or thesis-window (1 + other nodes whose log holds a "
                                     "PFS read starting at or after the read's start: event-driven)",
                     choices=GAMMA_RULES)
    write: str = opt("overlap", help="the copy into the staging buffer: overlap (a thread copies f while "
                                     "fetching f+1) or series (fetch, then copy)", choices=("overlap", "series"))
    tier_read: str = opt("per-thread", help="a thread reading a local or peer tier gets per-thread (r(p)/p) or "
                                            "full (r(p)) bandwidth", choices=("per-thread", "full"))
    prologue: str = opt("overlap", help="staging before epoch 0: overlap (PFS read, network receive and tier "
                                        "write overlap) or series (per tier thread: PFS reads at γ = nodes, "
                                        "then peer copies, each followed by its write)",
                        choices=("overlap", "series"))
    exchange: str = opt("series", help="pls's peer messages: series (the transfer adds to the step: an MPI "
                                       "without an asynchronous progress thread, mpich's default, moves "
                                       "rendezvous messages only inside MPI calls) or overlap (moved during "
                                       "the step; a step lasts at least the transfer)",
                        choices=("series", "overlap"))


RULE_PRESETS = {"default": ModelRules(),
                "thesis": ModelRules(gamma="thesis-window", write="series", tier_read="full", prologue="series",
                                      exchange="overlap")}


def rules_from(value, where: str = "rules") -> ModelRules:
    """A ``ModelRules`` from a preset name (default, thesis), a mapping (over the defaults; ``preset:``
    picks the base), or a ``ModelRules``."""
    if isinstance(value, ModelRules):
        return value
    if value is None:
        return RULE_PRESETS["default"]
    if isinstance(value, str):
        if value not in RULE_PRESETS:
            raise unknown_choice(where, value, sorted(RULE_PRESETS))
        return RULE_PRESETS[value]
    if isinstance(value, dict):
        import dataclasses

        d = dict(value)
        base = rules_from(d.pop("preset", "default"), f"{where}.preset")
        over = from_mapping(ModelRules, {**dataclasses.asdict(base), **d}, where=where, prefix=f"{where}.")
        return over
    raise ConfigError(f"{where}={value!r}: give a preset ({', '.join(sorted(RULE_PRESETS))}) or a mapping of "
                      f"gamma, write, tier_read, prologue, exchange")


@dataclass(frozen=True, kw_only=True)
class SystemProfile:
    name: str = opt(help="profile name")
    description: str = opt("", help="one line")
    compute_mb_per_s: float | None = opt(None, help="c: compute throughput per rank (None: use the workload step time)",
                                         unit="MB/s", min=0)
    network_mb_per_s: float = opt(help="b_c: network bandwidth of one node to a peer", unit="MB/s", min=0)
    exchange_mb_per_s: float | None = opt(None, help="one rank's send rate in a bidirectional exchange of "
                                                     "sample-sized messages (pls's pattern; calibrate-storage "
                                                     "under MPI; optional: without it b_c)", unit="MB/s", min=0)
    exchange_sample_s: float | None = opt(None, help="pls's exchange through its stage with the local file tier "
                                                     "(calibrate-storage under MPI with --local-dir): seconds per "
                                                     "sample a rank sends or receives beyond the bytes at "
                                                     "exchange_mb_per_s; the model's local-tier exchange cost in "
                                                     "the series rule (optional: without it the tier's file "
                                                     "pieces)", unit="s", min=0)
    wake_latency: tuple[WakePoint, ...] = opt((), help="how late a blocking wait of a given length ends on this "
                                                       "host (scheduler wake-up, time slices lost to other "
                                                       "processes; calibrate-storage, all ranks at once; "
                                                       "optional): a training step and a PFS request end this "
                                                       "much later")
    page_cache_bytes: float | None = opt(None, help="memory a node's page cache can hold (calibrate-storage: "
                                                    "MemAvailable); with a tier's cached_bandwidth (optional)",
                                         unit="B", min=0)
    worker_start_s: float | None = opt(None, help="a loader worker process's start: fork to its first sample "
                                                  "delivered (torch DataLoader, 1 worker; optional): paid every "
                                                  "epoch by a prefetch loader without persistent_workers",
                                       unit="s", min=0)
    loader_batch_s: float | None = opt(None, help="a DataLoader batch's hand-off from its worker process: the "
                                                  "trainer's time blocked in next() per batch with the worker "
                                                  "ahead (calibrate-storage; optional): added to every step of "
                                                  "a prefetch loader with worker processes", unit="s", min=0)
    loader_worker_batch_s: float | None = opt(None, help="a DataLoader worker's own time per batch on top of its "
                                                         "reads (pickling, the socket; calibrate-storage; "
                                                         "optional): added to the worker's reading", unit="s",
                                              min=0)
    pfs: PfsSpec | None = opt(help="the shared (parallel) file system; null: not modelled (no run-time "
                                   "throttling; cannot be simulated)")
    staging: StagingSpec = opt(help="the staging buffer (tier 0)")
    tiers: tuple[TierSpec, ...] = opt((), help="node-local tiers, fastest first")
    rules: ModelRules = opt(factory=ModelRules, help="the performance model's rule set (dlbench simulate)")
    sources: tuple[str, ...] = opt((), help="where the figures come from")
    calibration: dict | None = opt(None, help="the raw measurements of `dlbench calibrate-storage` with their "
                                              "spread (on record; the model reads the curves above)")

    # --- derived, in bytes and bytes/s -------------------------------------------------------------------
    def _need_pfs(self) -> PfsSpec:
        if self.pfs is None:
            raise ConfigError(f"system profile {self.name}: pfs is null (the shared tier is not modelled); "
                              f"the performance model needs a pfs section (e.g. --system hdmlp-thesis)")
        return self.pfs

    def pfs_model(self):
        """The PFS bandwidth model of this profile (``dlbench.storage.PfsModel``: the one definition of
        t(γ) and r(γ) that the run-time throttle and the simulator share), or None when the shared tier is
        not modelled (``pfs: null``: reads are measured as they are)."""
        return self._pfs_model

    @functools.cached_property
    def _pfs_model(self):
        if self.pfs is None:
            return None
        from .storage.throttle import PfsModel

        return PfsModel(float(self.pfs.latency_s), float(self.pfs.client_link_mb_per_s),
                        tuple((int(p.clients), float(p.mb_per_s)) for p in self.pfs.aggregate))

    def tier_capacity_bytes(self, kind: str) -> float | None:
        """Summed capacity per node of the tiers of ``kind`` (memory|local); None if the profile has none."""
        caps = [t.capacity_bytes for t in self.tiers if t.kind == kind]
        return float(sum(caps)) if caps else None

    def describe_shared_tier(self) -> dict:
        """What run.json records about the shared tier: modelled or measured, and the model's numbers."""
        if self.pfs is None:
            return {"profile": self.name, "modelled": False,
                    "note": "shared tier read as it is (no PFS emulation): figures are measured"}
        return {"profile": self.name, "modelled": True, "latency_s": self.pfs.latency_s,
                "client_link_mb_per_s": self.pfs.client_link_mb_per_s,
                "aggregate_mb_per_s_by_clients": {int(p.clients): p.mb_per_s for p in self.pfs.aggregate},
                "note": "every shared-tier read really happens, then waits until its modelled time "
                        "(latency + bytes / min(b_fs, t(γ)/γ)) has passed"}

    def pfs_aggregate(self, clients) -> np.ndarray | float:
        """t(γ) in bytes/s, interpolated (``PfsModel.aggregate_MBps``)."""
        self._need_pfs()
        v = self._pfs_model.aggregate_MBps(clients) * MB
        return float(v) if np.ndim(v) == 0 else v

    def pfs_per_client(self, clients) -> np.ndarray | float:
        """min(b_fs, t(γ)/γ) in bytes/s: one client's bandwidth when γ clients read at once
        (``PfsModel.per_client_Bps``)."""
        self._need_pfs()
        return self._pfs_model.per_client_Bps(clients)

    def pfs_reader_floor_s(self, nbytes):
        """The format reader's own time of one shared-tier read (``pfs.open_s + s / pfs.cached_mb_per_s``),
        0 where the profile has neither figure. The emulated PFS runs the real read inside the modelled
        interval and waits only the difference, so a read lasts max(latency + s / r(γ), this)."""
        pfs = self._need_pfs()
        if pfs.open_s is None and pfs.cached_mb_per_s is None:
            return 0.0
        out = np.asarray(nbytes, dtype=np.float64) / (pfs.cached_mb_per_s * MB) if pfs.cached_mb_per_s else 0.0
        return (pfs.open_s or 0.0) + out

    def tier(self, name_or_kind: str) -> TierSpec:
        for t in self.tiers:
            if t.name == name_or_kind:
                return t
        for t in self.tiers:
            if t.kind == name_or_kind:
                return t
        raise unknown_choice(f"tier of system profile {self.name}", name_or_kind, [t.name for t in self.tiers])

    def tier_per_thread(self, tier: TierSpec, threads: float | None = None, cached: bool = False) -> float:
        """r_j(p)/p in bytes/s: one thread's share when p threads read tier j (``cached``: the page-cache
        curve ``cached_bandwidth``)."""
        p = float(threads or tier.threads)
        return self.tier_aggregate(tier, p, cached=cached) / p

    def tier_aggregate(self, tier: TierSpec, threads: float | None = None, cached: bool = False) -> float:
        """r_j(p) in bytes/s: tier j's bandwidth with p threads reading it (default: the tier's threads);
        ``cached``: its files in the page cache (``cached_bandwidth``; a ConfigError if the tier has none)."""
        p = float(threads or tier.threads)
        pts = tier.cached_bandwidth if cached else tier.bandwidth
        if not pts:
            raise ConfigError(f"system profile {self.name}: tier {tier.name} has no cached_bandwidth (measure it "
                              f"with dlbench calibrate-storage --local-dir)")
        return float(_interp(p, [q.threads for q in pts], [q.mb_per_s for q in pts]))

    def tier_write_aggregate(self, tier: TierSpec, threads: float | None = None) -> float:
        """w_j(p) in bytes/s: tier j's bandwidth with p threads writing it (default: the tier's threads);
        r_j(p) where the tier has no ``write_bandwidth``."""
        if not tier.write_bandwidth:
            return self.tier_aggregate(tier, threads)
        p = float(threads or tier.threads)
        pts = tier.write_bandwidth
        return float(_interp(p, [q.threads for q in pts], [q.mb_per_s for q in pts]))

    def staging_write_s_per_byte(self) -> float:
        """max(1/β, 1/(r_0(p_0)/p_0)) seconds per byte: copying a sample into the staging buffer."""
        st = self.staging
        p0 = float(st.threads)
        r0 = float(_interp(p0, [q.threads for q in st.bandwidth], [q.mb_per_s for q in st.bandwidth])) / p0
        return max(1.0 / (st.write_mb_per_s * MB), 1.0 / r0)

    def wake_late_s(self, wait_s):
        """How late a blocking wait of ``wait_s`` (a number or an array) ends (``wake_latency``, linear between
        its points, flat outside); 0 without the figure."""
        pts = self.wake_latency
        if not pts:
            return 0.0 if np.ndim(wait_s) == 0 else np.zeros(np.shape(wait_s))
        v = np.interp(np.asarray(wait_s, dtype=np.float64), [q.wait_s for q in pts], [q.late_s for q in pts])
        return float(v) if v.ndim == 0 else v

    @property
    def network_bytes_per_s(self) -> float:
        return self.network_mb_per_s * MB

    @property
    def exchange_bytes_per_s(self) -> float:
        """A rank's send rate in pls's exchange: ``exchange_mb_per_s`` (measured with sample-sized messages
        both ways at once) where the profile has it, else b_c."""
        return (self.exchange_mb_per_s or self.network_mb_per_s) * MB


def _interp(x, xs, ys_mb):
    """Piecewise-linear curve in bytes/s; flat outside the points."""
    v = np.interp(np.asarray(x, dtype=np.float64), np.asarray(xs, dtype=np.float64),
                  np.asarray(ys_mb, dtype=np.float64) * MB)
    return float(v) if np.ndim(v) == 0 else v


def _check_curve(points, key: str, count: str, where: str) -> None:
    if not points:
        raise ConfigError(f"{key}{where}: needs at least one point {{{count}: N, mb_per_s: X}}")
    counts = [getattr(p, count) for p in points]
    for i in range(1, len(counts)):
        if counts[i] <= counts[i - 1]:
            raise ConfigError(f"{key}[{i}].{count}={counts[i]}{where}: {count} must increase strictly "
                              f"(previous point has {counts[i - 1]})")
    for i, p in enumerate(points):
        _check_rate(f"{key}[{i}].mb_per_s", p.mb_per_s, where)


# physically plausible bandwidths: from 1 KB/s (a wait of ~3 h for a 10 MB sample) to 1 PB/s
MIN_MB_PER_S, MAX_MB_PER_S = 1e-3, 1e9
MAX_LATENCY_S = 60.0


def _check_rate(key: str, val: float, where: str) -> None:
    if not MIN_MB_PER_S <= val <= MAX_MB_PER_S:
        raise ConfigError(f"{key}={val:g}{where}: must be from {MIN_MB_PER_S:g} to {MAX_MB_PER_S:g} MB/s (a "
                          f"bandwidth outside it makes every modelled wait instant or endless)")


def validate(profile: SystemProfile, where: str = "") -> SystemProfile:
    """Checks beyond field types: curves, positive bandwidths, distinct tier names."""
    w = f" (in {where})" if where else ""
    checks = [("network_mb_per_s", profile.network_mb_per_s),
              ("staging.write_mb_per_s", profile.staging.write_mb_per_s)]
    if profile.pfs is not None:
        checks.append(("pfs.client_link_mb_per_s", profile.pfs.client_link_mb_per_s))
    if profile.compute_mb_per_s is not None:
        checks.append(("compute_mb_per_s", profile.compute_mb_per_s))
    for key, val in checks:
        _check_rate(key, val, w)
    if profile.pfs is not None and profile.pfs.latency_s > MAX_LATENCY_S:
        raise ConfigError(f"pfs.latency_s={profile.pfs.latency_s:g}{w}: must be from 0 to {MAX_LATENCY_S:g} s")
    if profile.pfs is not None:
        _check_curve(profile.pfs.aggregate, "pfs.aggregate", "clients", w)
        if profile.pfs.kind not in ("pfs", "object_store"):
            raise ConfigError(f"pfs.kind={profile.pfs.kind!r}{w}: choose pfs or object_store")
        if profile.pfs.usd_per_million_requests is not None and profile.pfs.kind != "object_store":
            raise ConfigError(f"pfs.usd_per_million_requests{w}: a price per request needs pfs.kind: object_store")
    _check_curve(profile.staging.bandwidth, "staging.bandwidth", "threads", w)
    names = [t.name for t in profile.tiers]
    if len(set(names)) != len(names):
        raise ConfigError(f"tiers{w}: tier names repeat: {names}")
    for i, t in enumerate(profile.tiers):
        _check_curve(t.bandwidth, f"tiers[{i}].bandwidth", "threads", w)
        if t.write_bandwidth:
            _check_curve(t.write_bandwidth, f"tiers[{i}].write_bandwidth", "threads", w)
        if t.cached_bandwidth:
            _check_curve(t.cached_bandwidth, f"tiers[{i}].cached_bandwidth", "threads", w)
        _check_seconds(f"tiers[{i}].file_write_s", t.file_write_s, w)
        if t.cached_write_mb_per_s is not None:
            _check_rate(f"tiers[{i}].cached_write_mb_per_s", t.cached_write_mb_per_s, w)
    # the measured mechanisms (calibrate-storage): optional, each finite and > 0 where given
    if profile.pfs is not None:
        _check_seconds("pfs.open_s", profile.pfs.open_s, w)
        if profile.pfs.cached_mb_per_s is not None:
            _check_rate("pfs.cached_mb_per_s", profile.pfs.cached_mb_per_s, w)
    _check_seconds("worker_start_s", profile.worker_start_s, w)
    for key in ("loader_batch_s", "loader_worker_batch_s"):   # 0 allowed: a hand-off too small to measure
        v = getattr(profile, key)
        if v is not None and not (np.isfinite(v) and 0 <= v <= MAX_LATENCY_S):
            raise ConfigError(f"{key}={v:g}{w}: must be a finite number of seconds, >= 0 and at most "
                              f"{MAX_LATENCY_S:g}")
    for i, q in enumerate(profile.wake_latency):
        if i and q.wait_s <= profile.wake_latency[i - 1].wait_s:
            raise ConfigError(f"wake_latency[{i}].wait_s={q.wait_s:g}{w}: wait_s must increase strictly (previous "
                              f"point has {profile.wake_latency[i - 1].wait_s:g})")
        for key, v in (("wait_s", q.wait_s), ("late_s", q.late_s)):
            if not (np.isfinite(v) and 0 <= v <= MAX_LATENCY_S):
                raise ConfigError(f"wake_latency[{i}].{key}={v:g}{w}: must be a finite number of seconds from 0 "
                                  f"to {MAX_LATENCY_S:g}")
    if profile.exchange_mb_per_s is not None:
        _check_rate("exchange_mb_per_s", profile.exchange_mb_per_s, w)
    xq = profile.exchange_sample_s
    if xq is not None and not (np.isfinite(xq) and 0 <= xq <= MAX_LATENCY_S):
        raise ConfigError(f"exchange_sample_s={xq:g}{w}: must be a finite number of seconds from 0 to "
                          f"{MAX_LATENCY_S:g}")
    pc = profile.page_cache_bytes
    if pc is not None and not (np.isfinite(pc) and pc > 0):
        raise ConfigError(f"page_cache_bytes={pc:g}{w}: must be a finite number of bytes > 0")
    return profile


def _check_seconds(key: str, val: float | None, where: str) -> None:
    if val is not None and not (np.isfinite(val) and 0 < val <= MAX_LATENCY_S):
        raise ConfigError(f"{key}={val:g}{where}: must be a finite number of seconds, > 0 and at most "
                          f"{MAX_LATENCY_S:g}")


def from_dict(data: dict, where: str = "") -> SystemProfile:
    """A profile from a mapping (strict: unknown keys are errors with a did-you-mean)."""
    return validate(from_mapping(SystemProfile, data, where=where), where)


def builtin_names() -> list[str]:
    try:
        return sorted(p.stem for p in (resource_dir("configs") / "systems").glob("*.yaml"))
    except ConfigError:
        return []


def load(name_or_path: str | Path) -> SystemProfile:
    """A packaged profile by name (``configs/systems/<name>.yaml``) or a YAML file by path."""
    s = str(name_or_path)
    p = Path(s)
    if not (s.endswith((".yaml", ".yml")) or p.is_file()):
        p = resource_dir("configs") / "systems" / f"{s}.yaml"
        if not p.is_file():
            raise unknown_choice("system profile", s, builtin_names() + ["<path to a .yaml>"])
    return from_dict(load_yaml(p, "system profile"), where=str(p))
