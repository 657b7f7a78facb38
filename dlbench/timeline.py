"""Per-rank event buffers: phase intervals recorded on the hot path, turned into arrays afterwards.

A ``Timeline`` belongs to one thread of one rank. Each record is one interval of one phase
(``PHASES``) with its epoch, step, byte count and, for reads, the tier the bytes came from
(``dlbench.plan`` tier codes: 0 = shared, the default). Times are ``time.perf_counter_ns()`` values;
``wall_offset_ns`` (``time.time_ns() - perf_counter_ns()`` at creation) lets traces line ranks up.

Recording cost. ``add`` appends seven ints to seven plain Python lists; ``arrays()`` / ``mark_epoch``
move them into preallocated NumPy arrays (capacity doubled when full). Measured on the project machine
(loaded, 2 vCPU, Python 3.11, ``benchmarks``-style micro-benchmark, 200,000 records, best of 5):
list appends ≈ 350 ns per record, item assignment into seven preallocated NumPy arrays ≈ 790 ns, one
tuple append ≈ 410 ns, ``array.array.extend`` ≈ 850 ns. Lists win because NumPy item assignment
converts each Python int through the scalar machinery. No logging, no allocation beyond the list
growth (amortised), and the lists are flushed at every ``mark_epoch`` so memory stays bounded by one
epoch of records.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

PHASES = ("read", "decode", "transfer", "exchange", "stage", "compute", "checkpoint", "stall", "barrier", "plan",
          "verify")
# phases recorded outside the epoch clock (reported apart, not a share of epoch time): ``plan`` is the build
# of epoch e's plan, done by the runner before epoch e's clock starts
OUTSIDE_EPOCH = ("plan",)
PHASE_ID = {name: i for i, name in enumerate(PHASES)}

clock_ns = time.perf_counter_ns

# record fields: name -> dtype (the order of Timeline's lists)
FIELDS = (("start_ns", np.int64), ("end_ns", np.int64), ("phase", np.uint8), ("epoch", np.int32),
          ("step", np.int32), ("nbytes", np.int64), ("tier", np.uint8))


class Timeline:
    """Intervals of one thread of one rank.

    ``add(phase_id, start_ns, end_ns, epoch, step, nbytes=0, tier=0)`` records one interval;
    ``mark_epoch(epoch, start_ns, end_ns, samples=0)`` records an epoch's bounds (epoch time = end −
    start) and how many samples this rank consumed in it; ``arrays()`` returns trimmed arrays.
    Epoch −1 is the prologue (staging before epoch 0), as TimeLogger's set-up epoch.
    """

    def __init__(self, capacity: int = 4096, rank: int = 0, thread: int = 0):
        self.rank = int(rank)
        self.thread = int(thread)
        self.pid = os.getpid()
        self.wall_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._cap = max(int(capacity), 16)
        self._n = 0
        self._store = {name: np.zeros(self._cap, dtype=dt) for name, dt in FIELDS}
        self._epochs: dict[int, list[int]] = {}
        self._reset_lists()

    def _reset_lists(self) -> None:
        self._l_start: list[int] = []
        self._l_end: list[int] = []
        self._l_phase: list[int] = []
        self._l_epoch: list[int] = []
        self._l_step: list[int] = []
        self._l_nbytes: list[int] = []
        self._l_tier: list[int] = []

    # ---- hot path ------------------------------------------------------------------------------
    def add(self, phase_id: int, start_ns: int, end_ns: int, epoch: int, step: int, nbytes: int = 0,
            tier: int = 0) -> None:
        """Record one interval (≈ 350 ns; no NumPy, no logging)."""
        self._l_start.append(start_ns)
        self._l_end.append(end_ns)
        self._l_phase.append(phase_id)
        self._l_epoch.append(epoch)
        self._l_step.append(step)
        self._l_nbytes.append(nbytes)
        self._l_tier.append(tier)

    def mark_epoch(self, epoch: int, start_ns: int, end_ns: int, samples: int = 0) -> None:
        """Epoch bounds (first call for an epoch sets them; a later one widens them) and samples
        consumed by this rank. Also flushes the record lists into the arrays."""
        cur = self._epochs.get(int(epoch))
        if cur is None:
            self._epochs[int(epoch)] = [int(start_ns), int(end_ns), int(samples)]
        else:
            cur[0] = min(cur[0], int(start_ns))
            cur[1] = max(cur[1], int(end_ns))
            cur[2] += int(samples)
        self.flush()

    # ---- off the hot path ----------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n + len(self._l_start)

    def flush(self) -> None:
        """Move the pending records into the NumPy store (doubling its capacity if full)."""
        k = len(self._l_start)
        if k == 0:
            return
        need = self._n + k
        if need > self._cap:
            cap = self._cap
            while cap < need:
                cap *= 2
            for name, dt in FIELDS:
                new = np.zeros(cap, dtype=dt)
                new[:self._n] = self._store[name][:self._n]
                self._store[name] = new
            self._cap = cap
        lists = (self._l_start, self._l_end, self._l_phase, self._l_epoch, self._l_step, self._l_nbytes,
                 self._l_tier)
        for (name, dt), lst in zip(FIELDS, lists):
            self._store[name][self._n:need] = np.asarray(lst, dtype=dt)
        self._n = need
        self._reset_lists()

    def arrays(self) -> dict:
        """Trimmed copies: the FIELDS arrays, ``thread`` (int32 per record), epoch bounds
        (``epochs`` int32, ``epoch_start_ns``/``epoch_end_ns`` int64, ``epoch_samples`` int64, sorted
        by epoch) and scalars ``rank``, ``pid``, ``wall_offset_ns``."""
        self.flush()
        out = {name: self._store[name][:self._n].copy() for name, _ in FIELDS}
        out["thread"] = np.full(self._n, self.thread, dtype=np.int32)
        eps = sorted(self._epochs)
        out["epochs"] = np.array(eps, dtype=np.int32)
        out["epoch_start_ns"] = np.array([self._epochs[e][0] for e in eps], dtype=np.int64)
        out["epoch_end_ns"] = np.array([self._epochs[e][1] for e in eps], dtype=np.int64)
        out["epoch_samples"] = np.array([self._epochs[e][2] for e in eps], dtype=np.int64)
        out["rank"] = self.rank
        out["pid"] = self.pid
        out["wall_offset_ns"] = self.wall_offset_ns
        return out

    @staticmethod
    def merge(parts: Sequence[Timeline | dict]) -> dict:
        """Merge several threads of one rank (Timelines or their ``arrays()``) into one arrays dict.
        Records are concatenated (sorted by start); an epoch's bounds are the widest over the parts
        that marked it and its samples their sum. Rank, pid and wall offset come from the first."""
        arrs = [p.arrays() if isinstance(p, Timeline) else p for p in parts]
        if not arrs:
            return empty_arrays()
        out: dict = {}
        for name, dt in (*FIELDS, ("thread", np.int32)):
            out[name] = np.concatenate([np.asarray(a.get(name, np.zeros(0)), dtype=dt) for a in arrs])
        order = np.argsort(out["start_ns"], kind="stable")
        for name in (*(f for f, _ in FIELDS), "thread"):
            out[name] = out[name][order]
        bounds: dict[int, list[int]] = {}
        for a in arrs:
            for e, s, t, n in zip(a.get("epochs", ()), a.get("epoch_start_ns", ()), a.get("epoch_end_ns", ()),
                                  a.get("epoch_samples", np.zeros(len(a.get("epochs", ())), np.int64))):
                cur = bounds.get(int(e))
                if cur is None:
                    bounds[int(e)] = [int(s), int(t), int(n)]
                else:
                    cur[0], cur[1], cur[2] = min(cur[0], int(s)), max(cur[1], int(t)), cur[2] + int(n)
        eps = sorted(bounds)
        out["epochs"] = np.array(eps, dtype=np.int32)
        out["epoch_start_ns"] = np.array([bounds[e][0] for e in eps], dtype=np.int64)
        out["epoch_end_ns"] = np.array([bounds[e][1] for e in eps], dtype=np.int64)
        out["epoch_samples"] = np.array([bounds[e][2] for e in eps], dtype=np.int64)
        for k in ("rank", "pid", "wall_offset_ns"):
            out[k] = int(arrs[0].get(k, 0))
        return out


def empty_arrays(rank: int = 0) -> dict:
    """An arrays dict with no records (what a rank that recorded nothing contributes)."""
    return Timeline(16, rank=rank).arrays()
