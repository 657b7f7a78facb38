"""The Plan: for every epoch, rank and step, which samples a rank consumes and where each one's bytes come
from, plus background traffic (staging before epoch 0, moves between ranks, cache fills and evictions).
Pure: built from (manifest size, world layout, seed, epochs, batch, strategy options) with NumPy; no files,
MPI or clocks. Executors follow it access by access and ``dlbench simulate`` costs exactly it.

Typed parts (no untyped side dicts):

- per access (``EpochPlan`` arrays of shape (W, n_max)): ``sample_ids``, ``source`` (tier code),
  ``peer`` (for ``PEER`` accesses: the rank that sends the bytes during that step), ``keep`` (the own tier
  the rank stores the delivered sample in after the step: a cache fill; ``NO_TIER``: dropped after use);
- ``Transfers``: background moves between ranks during an epoch (PLS's exchange), step/src/dst/sample;
- ``Evictions``: a rank drops its copy of a sample after a step;
- ``Prologue``: moves before epoch 0 (staging, preloads), row by row: reads of the shared tier into a rank's
  own tier, and peer moves (who sends which sample to whom, e.g. staging's distribution between nodes);
- ``Plan.pipeline`` (``Pipeline``, required: the planner states it): how the executor fetches (``sync``: one
  request at a time, in the trainer; ``prefetch``: ``threads`` loader threads read ahead ``window`` steps in
  access order), read by the executor and by ``dlbench simulate`` (``Pipeline.reader_threads``);
- what executors, the loop and the simulator decide on, each a typed field (``Plan.__init__``): ``order``,
  ``warning``, ``semantics`` (the plan's own row when it differs from its strategy's), ``staged_fraction``,
  ``read_pattern``, ``max_step_samples``, ``exchange`` (pls's ``ExchangeShare``), ``capacity`` (``Capacity``: the
  peaks and capacities per rank and node), and the simulator's model options ``peer_tier`` and
  ``shared_reads_in_trainer``; ``Plan.replace`` returns a copy with some of them changed (pure);
- ``Plan.meta``: human-readable notes only (the planner's inputs and figures a reader may want: tie-break,
  epoch order and its cost, loads per epoch, ...). Nothing decides on a note (a source-scan test);
  ``Plan.notes(keys)`` is the one read, for reports.

Possession rule (checked by ``check_possession``): within a step, deliveries come first, then keeps, then
transfers land (and moved samples leave the sender), then evictions. An own-tier access or a peer's send at
step s needs the holder to hold the sample from an earlier step (or epoch, or the prologue).

Epochs are built on demand (``plan.epoch(e)``) so a plan for 1.28 M samples × 2,048 nodes × 90 epochs
never needs all epochs in memory at once; every process builds the same arrays from the same inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..storage.tiers import TIER_NAMES, Tier
from .semantics import Semantics

# tier codes used in plans (uint8): the ``Tier`` values as plain ints (what the hot paths compare)
SHARED, LOCAL, MEMORY, PEER = int(Tier.SHARED), int(Tier.LOCAL), int(Tier.MEMORY), int(Tier.PEER)
NO_TIER = 255          # keep: the delivered sample is not stored
PIPELINES = ("sync", "prefetch")


@dataclass(frozen=True)
class Pipeline:
    """How the executor fetches a plan's accesses: ``sync``: the trainer reads each step itself; ``prefetch``:
    ``threads`` loader threads per rank (None: the system profile's staging threads) read ahead in access
    order. ``window``: steps read ahead (ring depth - 1; the steps whose peer receives are posted ahead)."""

    kind: str
    threads: int | None = None
    window: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PIPELINES:
            raise ValueError(f"pipeline {self.kind!r}: one of {PIPELINES}")
        if self.window < 0:
            raise ValueError(f"pipeline window {self.window}: at least 0")

    def reader_threads(self) -> int:
        """Loader threads per rank the executor runs and the simulator costs: ``threads`` (at least 1) for a
        ``prefetch`` pipeline, 0 for ``sync`` (the trainer reads each step itself)."""
        return max(1, int(self.threads or 1)) if self.kind == "prefetch" else 0


SYNC = Pipeline("sync")    # the trainer reads each step itself, nothing read ahead


@dataclass(frozen=True)
class ExchangeShare:
    """Background moves between ranks every epoch (pls): ``q`` the exchanged fraction of a shard,
    ``samples_per_epoch`` the samples each rank sends per epoch."""

    q: float
    samples_per_epoch: int


_PER_RANK = ("cache_peak_samples", "cache_peak_bytes", "local_cache_peak_bytes", "storage_bytes_per_rank",
             "arena_bytes_per_rank")

# the dry run's ``capacity`` keys, in its order (``Capacity.summary``)
CAPACITY_SUMMARY_KEYS = ("needed_per_node_bytes", "capacity_per_node_bytes", "capacity_source", "cache_peak_samples",
                         "cache_peak_bytes", "cache_bytes_per_rank", "cache_capacity_per_rank_bytes",
                         "cache_capacity_source", "local_cache_peak_bytes")


@dataclass(frozen=True)
class Capacity:
    """What a plan holds and was given, per node and per rank (None: the strategy states no such figure).
    Per-rank figures are lists indexed by rank. Filled by the planner (peaks) and the strategy's capacity check
    (capacities and their sources); executors size their tiers by them, the simulator checks tiers against them."""

    needed_per_node_bytes: float | None = None      # bytes a node stores (staging, local, pls)
    capacity_per_node_bytes: float | None = None    # what a node may store
    capacity_source: str | None = None              # where that capacity comes from (a flag, a profile's tier)
    cache_peak_samples: list[int] | None = None     # per rank: the most samples its memory cache holds at once
    cache_peak_bytes: list[int] | None = None       # per rank: the most bytes of those (each sample its size)
    cache_bytes_per_rank: float | None = None       # the worst rank's cache need (what the check compared)
    cache_capacity_per_rank_bytes: float | None = None
    cache_capacity_source: str | None = None
    local_cache_peak_bytes: list[int] | None = None  # per rank: the most bytes its node-local cache holds
    storage_bytes_per_rank: list[int] | None = None  # per rank: its shard's peak store (local, pls)
    arena_bytes_per_rank: list[int] | None = None    # per rank: the highest byte of its best-fit arena

    def of_rank(self, figure: str, rank: int) -> int:
        """The per-rank ``figure`` (``cache_peak_samples``, ``storage_bytes_per_rank``, ...) of ``rank``; a plan
        that states none is a strategy bug, said in one line."""
        values = getattr(self, figure)
        if figure not in _PER_RANK or values is None:
            raise ValueError(f"plan capacity: no per-rank {figure!r} stated (per-rank figures: {', '.join(_PER_RANK)})")
        return int(values[rank])

    def summary(self) -> dict:
        """The dry run's ``capacity``: the stated figures among ``CAPACITY_SUMMARY_KEYS``, in that order."""
        return {k: getattr(self, k) for k in CAPACITY_SUMMARY_KEYS if getattr(self, k) is not None}


def _i64(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64).reshape(-1))


@dataclass(frozen=True)
class Transfers:
    """Background moves between ranks in one epoch: at step ``step[i]`` rank ``src[i]`` sends sample
    ``sample[i]`` to rank ``dst[i]``, which stores it in its tier ``tier`` when the step ends (it belongs to
    the receiver's store from the next step on). ``move``: the sender deletes its copy when the send
    completes (PLS); otherwise both keep one. Rows sorted by (step, src, dst), stable."""

    step: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    sample: np.ndarray
    tier: int = LOCAL
    move: bool = False

    @staticmethod
    def make(step, src, dst, sample, *, tier: int = LOCAL, move: bool = False) -> Transfers:
        step, src, dst, sample = _i64(step), _i64(src), _i64(dst), _i64(sample)
        order = np.lexsort((dst, src, step))
        return Transfers(step[order], src[order], dst[order], sample[order], int(tier), bool(move))

    def __len__(self) -> int:
        return len(self.sample)

    def sends(self, rank: int) -> np.ndarray:
        """Row indices rank ``rank`` sends (in step order)."""
        return np.nonzero(self.src == rank)[0]

    def recvs(self, rank: int) -> np.ndarray:
        return np.nonzero(self.dst == rank)[0]


@dataclass(frozen=True)
class Evictions:
    """Rank ``rank[i]`` drops its copy of sample ``sample[i]`` at the end of step ``step[i]``."""

    rank: np.ndarray
    step: np.ndarray
    sample: np.ndarray

    @staticmethod
    def make(rank, step, sample) -> Evictions:
        rank, step, sample = _i64(rank), _i64(step), _i64(sample)
        order = np.lexsort((sample, step, rank))
        return Evictions(rank[order], step[order], sample[order])

    def __len__(self) -> int:
        return len(self.sample)


@dataclass(frozen=True)
class EpochPlan:
    """One epoch. ``sample_ids[r, bounds[r, s]:bounds[r, s+1]]`` are rank r's samples at step s, in the
    order it consumes them; ``source`` (same shape, uint8 tier code) says where each comes from; ``peer``
    (int32, -1 where unused) the sending rank of a PEER access; ``keep`` (uint8, ``NO_TIER`` where unused)
    the own tier a delivered sample is stored in after its step. Rows shorter than the widest are padded
    with -1. ``transfers``/``evictions``: background moves and cache drops (module doc).

    ``chunk`` (optional, int32, same shape): aggregated chunked loading. ``chunk[r, c] = k >= 2`` says columns
    c .. c+k-1 of rank r (same step, all read from ``SHARED``, samples ``sample_ids[r, c] + 0 .. k-1``) are
    read as ONE request (one HDF5 hyperslab of k consecutive rows); the covered columns c+1 .. c+k-1 hold 0;
    every other access holds 1 (its own request). None: every access is its own request. Executors whose
    reader cannot read runs (layouts other than one shared HDF5 file) read the columns one by one."""

    epoch: int
    sample_ids: np.ndarray      # int64 (W, n_max)
    source: np.ndarray          # uint8 (W, n_max)
    bounds: np.ndarray          # int64 (W, steps + 1)
    peer: np.ndarray | None = None       # int32 (W, n_max)
    keep: np.ndarray | None = None       # uint8 (W, n_max)
    transfers: Transfers | None = None
    evictions: Evictions | None = None
    chunk: np.ndarray | None = None      # int32 (W, n_max): request lengths (class doc)

    @property
    def world_size(self) -> int:
        return self.sample_ids.shape[0]

    @property
    def steps(self) -> int:
        return self.bounds.shape[1] - 1

    def step_samples(self, rank: int, step: int) -> np.ndarray:
        return self.sample_ids[rank, self.bounds[rank, step]:self.bounds[rank, step + 1]]

    def rank_samples(self, rank: int) -> np.ndarray:
        return self.sample_ids[rank, :self.bounds[rank, -1]]

    def rank_sources(self, rank: int) -> np.ndarray:
        return self.source[rank, :self.bounds[rank, -1]]

    def counts(self) -> np.ndarray:
        """Samples consumed per rank this epoch."""
        return self.bounds[:, -1] - self.bounds[:, 0]

    def rank_peers(self, rank: int) -> np.ndarray:
        n = self.bounds[rank, -1]
        return self.peer[rank, :n] if self.peer is not None else np.full(n, -1, np.int32)

    def rank_keep(self, rank: int) -> np.ndarray:
        n = self.bounds[rank, -1]
        return self.keep[rank, :n] if self.keep is not None else np.full(n, NO_TIER, np.uint8)

    def rank_chunk(self, rank: int) -> np.ndarray:
        """Request length per column of ``rank``'s row (all 1 without a ``chunk`` array)."""
        n = self.bounds[rank, -1]
        return self.chunk[rank, :n] if self.chunk is not None else np.ones(n, np.int32)

    def requests(self) -> int:
        """Shared-tier requests of this epoch (a chunk counts once)."""
        mask = (self.sample_ids >= 0) & (self.source == SHARED)
        if self.chunk is None:
            return int(mask.sum())
        return int((mask & (self.chunk > 0)).sum())

    def step_of_columns(self) -> np.ndarray:
        """(W, n_max) the step of every column (-1 past a rank's row)."""
        W, n = self.sample_ids.shape
        out = np.full((W, n), -1, np.int64)
        col = np.arange(n)
        for r in range(W):
            b = self.bounds[r]
            m = col < b[-1]
            out[r, m] = np.searchsorted(b, col[m], side="right") - 1
        return out

    def transfer_bytes(self, sample_nbytes: np.ndarray | int) -> float:
        """Bytes this epoch's background transfers move between ranks (0 without transfers)."""
        t = self.transfers
        if t is None or not len(t):
            return 0.0
        sizes = np.asarray(sample_nbytes)
        return float(sizes[t.sample].sum()) if sizes.ndim else float(sizes) * len(t)

    def peer_sends(self, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What ``rank`` sends to serve other ranks' PEER accesses: (step, dst, column in dst's row,
        sample), in step order, within a step in (dst, column) order."""
        if self.peer is None:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        dst, col = np.nonzero((self.peer == rank) & (self.source == PEER))
        steps = self.step_of_columns()[dst, col]
        order = np.lexsort((col, dst, steps))
        return (steps[order], dst[order].astype(np.int64), col[order].astype(np.int64),
                self.sample_ids[dst, col][order])


@dataclass(frozen=True)
class Prologue:
    """Background traffic before epoch 0 (staging, preloads), one row per sample moved: rank ``rank[i]``
    stores sample ``sample[i]`` in its tier ``dst[i]``, read from tier ``src[i]``: ``SHARED`` (the rank
    reads it from the shared tier itself) or ``PEER`` (rank ``peer[i]`` sends it: a sender → receiver row;
    the sender holds it from an earlier row). Rows reading the shared tier come first in a rank's work: the
    peer rows are carried out once every rank's reads are stored. ``groups[r]`` (optional): rank r's storage
    group; the ranks of a group share one store (a node-local directory), so a sample any of them stores is
    held by all of them."""

    rank: np.ndarray
    sample: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    peer: np.ndarray
    groups: np.ndarray | None = None

    @staticmethod
    def empty() -> Prologue:
        z = np.zeros(0, dtype=np.int64)
        return Prologue(z, z, z.astype(np.uint8), z.astype(np.uint8), z)

    def reads(self, rank: int) -> np.ndarray:
        """Row indices of ``rank``'s reads of the shared tier (in row order)."""
        return np.nonzero((self.rank == rank) & (self.src == SHARED))[0]

    def sends(self, rank: int) -> np.ndarray:
        """Row indices of the peer moves ``rank`` sends (in row order)."""
        return np.nonzero((self.peer == rank) & (self.src == PEER))[0]

    def recvs(self, rank: int) -> np.ndarray:
        """Row indices of the peer moves ``rank`` receives (in row order)."""
        return np.nonzero((self.rank == rank) & (self.src == PEER))[0]


class Plan:
    """A strategy's whole plan. ``epoch(e)`` calls the strategy's pure epoch builder (cached for the
    most recent epochs). ``pipeline`` is required; the typed fields after it are what readers decide on
    (module doc); ``meta`` holds human-readable notes only."""

    # the typed fields ``replace`` may change (besides ``pipeline`` and ``prologue``)
    FIELDS = ("order", "warning", "semantics", "staged_fraction", "read_pattern", "max_step_samples", "exchange",
              "capacity", "peer_tier", "shared_reads_in_trainer")

    def __init__(self, *, strategy: str, n_samples: int, world_size: int, node_map: np.ndarray,
                 epochs: int, local_batch: int, seed: int, build_epoch: Callable[[int], EpochPlan],
                 pipeline: Pipeline, prologue: Prologue | None = None, meta: dict | None = None,
                 cache_epochs: int = 2, order: str | None = None, warning: str | None = None,
                 semantics: Semantics | None = None, staged_fraction: float | None = None,
                 read_pattern: str | None = None, max_step_samples: int | None = None,
                 exchange: ExchangeShare | None = None, capacity: Capacity | None = None, peer_tier: int = MEMORY,
                 shared_reads_in_trainer: bool = False):
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"plan of {strategy}: pipeline {pipeline!r}: a Pipeline")
        self.strategy = strategy
        self.n_samples = int(n_samples)
        self.world_size = int(world_size)
        self.node_map = np.asarray(node_map, dtype=np.int64)
        self.epochs = int(epochs)
        self.local_batch = int(local_batch)
        self.seed = int(seed)
        self.prologue = prologue if prologue is not None else Prologue.empty()
        self.meta = dict(meta or {})              # human-readable notes only (module doc)
        self.pipeline = pipeline                  # the loader (``Pipeline``)
        self.order = order                        # the sample order, in words (run.json's ``order``)
        self.warning = warning                    # what the plan could not do as asked (run.json's plan_warning)
        self.semantics = semantics                # the plan's own semantics row (None: its strategy's)
        self.staged_fraction = staged_fraction    # staging beyond capacity: the share of a node's subset staged
        self.read_pattern = read_pattern          # a format's read pattern the plan follows (tfdata, webdataset)
        self.max_step_samples = max_step_samples  # the most samples a rank consumes in one step (None: local_batch)
        self.exchange = exchange                  # background exchange between ranks (pls)
        self.capacity = capacity if capacity is not None else Capacity()
        self.peer_tier = int(peer_tier)           # the tier a peer serves PEER accesses from (simulator option)
        self.shared_reads_in_trainer = bool(shared_reads_in_trainer)   # simulator option: the trainer reads the PFS
        self._build = build_epoch
        self._cache: dict[int, EpochPlan] = {}
        self._cache_epochs = cache_epochs

    def replace(self, **changes) -> Plan:
        """A copy of this plan with the typed fields ``changes`` (``FIELDS``, ``pipeline``, ``prologue``)
        changed; the epochs, ``meta`` (a copy) and everything else carried over. Pure: this plan is unchanged."""
        import copy

        bad = sorted(set(changes) - set(self.FIELDS) - {"pipeline", "prologue"})
        if bad:
            raise TypeError(f"Plan.replace: unknown field(s) {bad}; one of {('pipeline', 'prologue') + self.FIELDS}")
        if "pipeline" in changes and not isinstance(changes["pipeline"], Pipeline):
            raise TypeError(f"plan of {self.strategy}: pipeline {changes['pipeline']!r}: a Pipeline")
        q = copy.copy(self)
        q.meta = dict(self.meta)
        q._cache = dict(self._cache)
        for k, v in changes.items():
            setattr(q, k, v)
        return q

    def facts(self) -> dict:
        """The typed fields (``pipeline`` and ``FIELDS``) by name: what two equal plans share besides epochs."""
        return {k: getattr(self, k) for k in ("pipeline",) + self.FIELDS}

    def with_capacity(self, **figures) -> Plan:
        """``replace(capacity=...)`` with the ``Capacity`` fields ``figures`` changed (the others kept)."""
        return self.replace(capacity=dataclasses.replace(self.capacity, **figures))

    def notes(self, keys: Iterable[str], **figures) -> dict:
        """The notes among ``keys`` this plan has, in ``keys``' order (for reports; nothing decides on them);
        ``figures``: typed values that take a key's place (None: absent)."""
        out = {}
        for k in keys:
            if k in figures:
                if figures[k] is not None:
                    out[k] = figures[k]
            elif k in self.meta:
                out[k] = self.meta[k]
        return out

    @property
    def nodes(self) -> int:
        return int(self.node_map.max()) + 1 if len(self.node_map) else 0

    def epoch(self, e: int) -> EpochPlan:
        if not 0 <= e < self.epochs:
            raise IndexError(f"epoch {e} outside 0..{self.epochs - 1}")
        ep = self._cache.get(e)
        if ep is None:
            ep = self._build(e)
            if len(self._cache) >= self._cache_epochs:
                self._cache.pop(next(iter(self._cache)))
            self._cache[e] = ep
        return ep

    def __iter__(self):
        return (self.epoch(e) for e in range(self.epochs))

    def map_epochs(self, fn: Callable[[EpochPlan], EpochPlan]) -> Plan:
        """This plan with every epoch passed through ``fn`` (pure); everything else (prologue, meta, pipeline,
        every later field) carried over, the epoch cache its own."""
        import copy

        q = copy.copy(self)
        q._cache = {}
        build = self._build

        def mapped(e: int) -> EpochPlan:
            return fn(build(e))

        q._build = mapped
        return q

    def summary(self) -> dict:
        """Counts a dry run prints: samples and steps per epoch, bytes per tier need the sample sizes
        (see ``bytes_by_tier``)."""
        ep0 = self.epoch(0)
        return {
            "strategy": self.strategy, "ranks": self.world_size, "nodes": self.nodes,
            "epochs": self.epochs, "samples": self.n_samples, "local_batch": self.local_batch,
            "steps_per_epoch": ep0.steps, "samples_per_rank_per_epoch": ep0.counts().tolist(),
            "prologue_moves": int(len(self.prologue.sample)),
        }

    def bytes_by_tier(self, sample_nbytes: np.ndarray | int) -> dict[str, int]:
        """Bytes consumed from each tier over all epochs, plus (``peer``) the bytes background transfers move
        between ranks (pls's exchange): a property of the plan."""
        out = np.zeros(len(TIER_NAMES), dtype=np.float64)
        sizes = np.asarray(sample_nbytes)
        for ep in self:
            mask = ep.sample_ids >= 0
            ids = ep.sample_ids[mask]
            w = sizes[ids] if sizes.ndim else np.full(ids.shape, float(sizes))
            out += np.bincount(ep.source[mask], weights=w, minlength=len(TIER_NAMES))[:len(TIER_NAMES)]
            out[PEER] += ep.transfer_bytes(sizes)
        return {name: int(v) for name, v in zip(TIER_NAMES, out)}
