"""The Plan: for every epoch, rank and step, which samples a rank consumes and which tier each comes
from, plus background traffic (staging before epoch 0, exchanges between ranks). Pure: built from
(manifest size, world layout, seed, epochs, batch, strategy options) with NumPy; no files, MPI or clocks.

Epochs are built on demand (``plan.epoch(e)``) so a plan for 1.28 M samples × 2,048 nodes × 90 epochs
never needs all epochs in memory at once; every process builds the same arrays from the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# tier codes used in plans (uint8)
SHARED, LOCAL, MEMORY, PEER = 0, 1, 2, 3
TIER_NAMES = ("shared", "local", "memory", "peer")


@dataclass(frozen=True)
class EpochPlan:
    """One epoch. ``sample_ids[r, bounds[r, s]:bounds[r, s+1]]`` are rank r's samples at step s, in the
    order it consumes them; ``source`` (same shape, uint8 tier code) says where each comes from. Rows
    shorter than the widest are padded with -1. ``extras`` holds strategy-specific arrays (exchange
    lists, ...)."""

    epoch: int
    sample_ids: np.ndarray      # int64 (W, n_max)
    source: np.ndarray          # uint8 (W, n_max)
    bounds: np.ndarray          # int64 (W, steps + 1)
    extras: dict = field(default_factory=dict)

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


@dataclass(frozen=True)
class Prologue:
    """Background traffic before epoch 0 (staging): rank ``rank[i]`` moves sample ``sample[i]`` from tier
    ``src[i]`` to tier ``dst[i]`` (PEER as src: received from ``peer[i]``)."""

    rank: np.ndarray
    sample: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    peer: np.ndarray

    @staticmethod
    def empty() -> Prologue:
        z = np.zeros(0, dtype=np.int64)
        return Prologue(z, z, z.astype(np.uint8), z.astype(np.uint8), z)


class Plan:
    """A strategy's whole plan. ``epoch(e)`` calls the strategy's pure epoch builder (cached for the
    most recent epochs). ``meta`` holds the inputs and the strategy's declared semantics."""

    def __init__(self, *, strategy: str, n_samples: int, world_size: int, node_map: np.ndarray,
                 epochs: int, local_batch: int, seed: int, build_epoch: Callable[[int], EpochPlan],
                 prologue: Prologue | None = None, meta: dict | None = None, cache_epochs: int = 2):
        self.strategy = strategy
        self.n_samples = int(n_samples)
        self.world_size = int(world_size)
        self.node_map = np.asarray(node_map, dtype=np.int64)
        self.epochs = int(epochs)
        self.local_batch = int(local_batch)
        self.seed = int(seed)
        self.prologue = prologue if prologue is not None else Prologue.empty()
        self.meta = dict(meta or {})
        self._build = build_epoch
        self._cache: dict[int, EpochPlan] = {}
        self._cache_epochs = cache_epochs

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
        """Bytes consumed from each tier over all epochs (a property of the plan)."""
        out = np.zeros(len(TIER_NAMES), dtype=np.float64)
        sizes = np.asarray(sample_nbytes)
        for ep in self:
            mask = ep.sample_ids >= 0
            ids = ep.sample_ids[mask]
            w = sizes[ids] if sizes.ndim else np.full(ids.shape, float(sizes))
            out += np.bincount(ep.source[mask], weights=w, minlength=len(TIER_NAMES))[:len(TIER_NAMES)]
        return {name: int(v) for name, v in zip(TIER_NAMES, out)}
