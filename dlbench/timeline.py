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
growth (amortised); the lists are flushed into the store at every ``mark_epoch`` (outside epoch time)
and, mid-epoch, only when ``max(capacity, FLUSH_RECORDS)`` records are pending (one ``len`` check per
``add``; the time of such flushes is kept in ``hot_flush_ns`` and reported as ``timeline_flush_s``).

Bounded memory (``spill_dir``): the runner gives every timeline a folder (the run folder). The store then
never grows: when it is full its records are appended to ``intervals-rank<r>-p<pid>-t<thread>.rec``
(packed ``RECORD`` rows) and it starts over, so a timeline holds at most ``capacity`` records in its store
plus ``max(capacity, FLUSH_RECORDS)`` pending ones however long the run. ``finish()`` writes what is left and a sidecar ``....json`` (rank, thread, pid, wall offset, epoch
bounds, record count); ``load_spilled`` reads the files back (memory-mapped). Without ``spill_dir`` the store
doubles as needed (tests, tools).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from pathlib import Path

PHASES = ("read", "decode", "transfer", "exchange", "stage", "compute", "checkpoint", "stall", "barrier", "plan",
          "verify", "evict", "transfer_exposed", "transfer_overlapped", "eval")
# ``transfer`` is the whole host-to-device copy and conversion; ``transfer_exposed`` the part of it the compute
# waited for (all of it without --overlap), ``transfer_overlapped`` the rest (hidden behind the previous step's
# compute): the two split ``transfer`` in time
# phases recorded outside the epoch clock (reported apart, not a share of epoch time): ``plan`` is the build
# of epoch e's plan, done by the runner before epoch e's clock starts; ``evict`` (``--cache drop``) the page
# cache eviction before epoch e (and, tagged 0 too, before the prologue), with the barrier that follows it;
# ``eval`` DLIO's evaluation after epoch e (``run.evaluate``: its files read, its step time slept)
OUTSIDE_EPOCH = ("plan", "evict", "eval")
PHASE_ID = {name: i for i, name in enumerate(PHASES)}

clock_ns = time.perf_counter_ns

# record fields: name -> dtype (the order of Timeline's lists)
FIELDS = (("start_ns", np.int64), ("end_ns", np.int64), ("phase", np.uint8), ("epoch", np.int32),
          ("step", np.int32), ("nbytes", np.int64), ("tier", np.uint8))
RECORD = np.dtype([(name, np.dtype(dt).newbyteorder("<")) for name, dt in FIELDS])  # packed, 34 B on disk
SPILL_SUFFIX = ".rec"
FLUSH_RECORDS = 1 << 18   # pending records that force a flush mid-epoch (≈ 25 MB of Python lists)


class Timeline:
    """Intervals of one thread of one rank.

    ``add(phase_id, start_ns, end_ns, epoch, step, nbytes=0, tier=0)`` records one interval;
    ``mark_epoch(epoch, start_ns, end_ns, samples=0)`` records an epoch's bounds (epoch time = end −
    start) and how many samples this rank consumed in it; ``arrays()`` returns trimmed arrays.
    Epoch −1 is the prologue (staging before epoch 0), as TimeLogger's set-up epoch.
    """

    def __init__(self, capacity: int = 4096, rank: int = 0, thread: int = 0, spill_dir=None,
                 flush_records: int | None = None):
        self.rank = int(rank)
        self.thread = int(thread)
        self.pid = os.getpid()
        self.wall_offset_ns = time.time_ns() - time.perf_counter_ns()
        self._cap = max(int(capacity), 16)
        # pending records are moved into the store at every mark_epoch (between epochs, outside the epoch's
        # time) and, mid-epoch, only when this many are pending: a flush costs ~150-200 ns per record
        # (measured here), so it must not run on every few steps inside the timed loop
        self._flush_at = max(self._cap, FLUSH_RECORDS if flush_records is None else int(flush_records))
        self.hot_flush_ns = 0    # time spent in mid-epoch flushes (inside the timed loop; reported)
        self._n = 0
        self._store = {name: np.zeros(self._cap, dtype=dt) for name, dt in FIELDS}
        self._epochs: dict[int, list[int]] = {}
        self.spill_path: Path | None = None
        self.spilled = 0         # records written to spill_path so far
        if spill_dir is not None:
            from pathlib import Path

            base = f"intervals-rank{self.rank}-p{self.pid}-t{self.thread}"
            self.spill_path = Path(spill_dir) / (base + SPILL_SUFFIX)
            self.spill_path.write_bytes(b"")
        self._reset_lists()

    def sibling(self, thread: int, capacity: int | None = None) -> Timeline:
        """A timeline for another thread (or worker) of this rank, spilling to the same folder."""
        return Timeline(capacity or self._cap, self.rank, thread,
                        spill_dir=self.spill_path.parent if self.spill_path is not None else None,
                        flush_records=self._flush_at)

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
        ls = self._l_start
        ls.append(start_ns)
        self._l_end.append(end_ns)
        self._l_phase.append(phase_id)
        self._l_epoch.append(epoch)
        self._l_step.append(step)
        self._l_nbytes.append(nbytes)
        self._l_tier.append(tier)
        if len(ls) >= self._flush_at:
            t0 = time.perf_counter_ns()
            self.flush()
            self.hot_flush_ns += time.perf_counter_ns() - t0

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
        return self.spilled + self._n + len(self._l_start)

    def _spill_file(self) -> Path:
        if self.spill_path is None:
            raise RuntimeError("a timeline without a spill folder has no spill file")   # a caller's bug
        return self.spill_path

    def _spill(self) -> None:
        """Append the store's records to the spill file and empty the store."""
        if self._n == 0:
            return
        rec = np.empty(self._n, dtype=RECORD)
        for name, _ in FIELDS:
            rec[name] = self._store[name][:self._n]
        with open(self._spill_file(), "ab") as f:
            f.write(rec.tobytes())
        self.spilled += self._n
        self._n = 0

    def flush(self) -> None:
        """Move the pending records into the NumPy store (with a spill folder: writing the store out when
        it is full; without: doubling its capacity)."""
        k = len(self._l_start)
        if k == 0:
            return
        need = self._n + k
        if need > self._cap and self.spill_path is not None:
            self._spill()
            if k > self._cap:  # more pending than the store holds: straight to the file, in store-sized parts
                lists = (self._l_start, self._l_end, self._l_phase, self._l_epoch, self._l_step, self._l_nbytes,
                         self._l_tier)
                for a in range(0, k, self._cap):
                    b = min(k, a + self._cap)
                    for (name, dt), lst in zip(FIELDS, lists):
                        self._store[name][:b - a] = np.asarray(lst[a:b], dtype=dt)
                    self._n = b - a
                    self._spill()
                self._reset_lists()
                return
            need = k
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

    def finish(self) -> dict:
        """Spilling timelines: write the remaining records and the sidecar JSON; returns the sidecar."""
        import json

        self.flush()
        self._spill()
        spill = self._spill_file()
        meta = {"rank": self.rank, "thread": self.thread, "pid": self.pid, "wall_offset_ns": self.wall_offset_ns,
                "records": self.spilled, "file": spill.name,
                "epochs": [[e, *v] for e, v in sorted(self._epochs.items())]}
        side = spill.with_suffix(".json")
        tmp = side.with_name("." + side.name + ".tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, side)
        return meta

    def arrays(self) -> dict:
        """Trimmed copies: the FIELDS arrays, ``thread`` (int32 per record), epoch bounds
        (``epochs`` int32, ``epoch_start_ns``/``epoch_end_ns`` int64, ``epoch_samples`` int64, sorted
        by epoch) and scalars ``rank``, ``pid``, ``wall_offset_ns``. A spilling timeline's records are
        read back from its file (what a failed run records; a finished run reads the files instead)."""
        self.flush()
        out = {name: self._store[name][:self._n].copy() for name, _ in FIELDS}
        if self.spilled:
            disk = np.fromfile(self._spill_file(), dtype=RECORD, count=self.spilled)
            for name, dt in FIELDS:
                out[name] = np.concatenate([disk[name].astype(dt), out[name]])
        n = len(out["start_ns"])
        out["thread"] = np.full(n, self.thread, dtype=np.int32)
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


def load_spilled(folder, rank: int | None = None) -> list[dict]:
    """The spilled timelines of a run folder (``rank``: that rank only), merged per rank into
    ``Timeline.arrays()``-like dicts, ordered by rank. Records are memory-mapped from the files when a rank
    has a single timeline (no copy), concatenated otherwise."""
    import json
    from pathlib import Path

    folder = Path(folder)
    by_rank: dict[int, list[tuple[int, dict]]] = {}
    pat = f"intervals-rank{rank}-*.json" if rank is not None else "intervals-rank*.json"
    for side in sorted(folder.glob(pat)):
        meta = json.loads(side.read_text())
        n = int(meta["records"])
        path = folder / meta["file"]
        rec = np.memmap(path, dtype=RECORD, mode="r", shape=(n,)) if n else np.zeros(0, dtype=RECORD)
        a: dict[str, np.ndarray | int] = {name: rec[name] for name, _ in FIELDS}
        a["thread"] = np.full(n, int(meta["thread"]), dtype=np.int32)
        eps = meta.get("epochs") or []
        a["epochs"] = np.array([e[0] for e in eps], dtype=np.int32)
        a["epoch_start_ns"] = np.array([e[1] for e in eps], dtype=np.int64)
        a["epoch_end_ns"] = np.array([e[2] for e in eps], dtype=np.int64)
        a["epoch_samples"] = np.array([e[3] for e in eps], dtype=np.int64)
        a["rank"], a["pid"], a["wall_offset_ns"] = int(meta["rank"]), int(meta["pid"]), int(meta["wall_offset_ns"])
        by_rank.setdefault(int(meta["rank"]), []).append((int(meta["thread"]), a))
    out = []
    for r in sorted(by_rank):
        # the trainer (thread 0) first: merge takes rank, pid and wall offset from the first part
        parts = [a for _t, a in sorted(by_rank[r], key=lambda x: x[0])]
        out.append(parts[0] if len(parts) == 1 else Timeline.merge(parts))
    return out


def spilled_ranks(folder) -> list[int]:
    """Ranks that have spilled timelines in ``folder``."""
    import json
    from pathlib import Path

    return sorted({int(json.loads(p.read_text())["rank"]) for p in Path(folder).glob("intervals-rank*.json")})


def empty_arrays(rank: int = 0) -> dict:
    """An arrays dict with no records (what a rank that recorded nothing contributes)."""
    return Timeline(16, rank=rank).arrays()
