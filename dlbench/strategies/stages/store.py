"""``SampleStore``: one own tier (memory slab or node-local files) with a reference count per sample id, so a
sample held twice (DistributedSampler padding, a pinned send) is stored once and removed with its last reference; a
condition lets a loader thread wait for a sample the trainer is about to store. ``Stores``: the rank's own tiers by
plan tier code, and where each held sample lives."""

from __future__ import annotations

import threading

import numpy as np

from ...errors import RunError
from ..stage import ClosingStage

WAIT_TIMEOUT_S = 120.0   # a loader waiting this long for a sample the plan says is held: a plan/executor bug


class Stopped(RunError):
    """A wait given up because the loader is stopping (an error elsewhere, the end of the epoch)."""


class SampleStore(ClosingStage):
    """One own tier with a reference count per sample id. Thread-safe: the trainer (peer sends, pins), the
    fill thread (puts, evictions) and loader threads (pinned reads) share it; a reference count change and
    the tier operation it implies happen under one lock, so a slot is never freed or reused while a read or a
    send still uses it."""

    def __init__(self, tier, code: int, cond: threading.Condition | None = None):
        self.tier, self.code = tier, code
        self.refs: dict[int, int] = {}
        self.foreign: set[int] = set()    # held through a store shared with other ranks: theirs to delete
        self.reads = 0
        self.read_bytes = 0
        self.cond = cond or threading.Condition(threading.RLock())

    def __contains__(self, sid) -> bool:
        return int(sid) in self.refs

    def put(self, sid: int, row) -> int:
        """One more reference to ``sid``, storing ``row`` if it is new. The tier write (a file on the local
        tier) is made outside the store's lock, so loader reads and peer sends of other samples go on meanwhile:
        there is one putter (the fill thread, or the trainer), the tier has its own lock, and nobody reads
        ``sid`` before its reference is counted (readers wait for it)."""
        with self.cond:
            r = self.refs.get(sid, 0)
            if r:
                self.refs[sid] = r + 1
                return 0
        n = self.tier.put(sid, row)
        with self.cond:
            self.refs[sid] = self.refs.get(sid, 0) + 1
            self.cond.notify_all()
        return n

    def put_many(self, items) -> int:
        """``put`` for several (sid, row) pairs; a tier with ``put_many`` stores the new ones in one go."""
        new: list = []
        extra: dict[int, int] = {}
        with self.cond:          # references to samples held already (or twice in ``items``): counted now
            for sid, row in items:
                if sid in self.refs:
                    self.refs[sid] += 1
                elif sid in extra:
                    extra[sid] += 1
                else:
                    extra[sid] = 1
                    new.append((sid, row))
        if not new:
            return 0
        many = getattr(self.tier, "put_many", None)
        if many is not None:
            total = many(new)
        else:
            total = 0
            for sid, row in new:
                total += self.tier.put(sid, row)
        with self.cond:
            for sid, k in extra.items():
                self.refs[sid] = self.refs.get(sid, 0) + k
            self.cond.notify_all()
        return total

    def pin(self, sid: int) -> bool:
        """One more reference to ``sid`` if it is held (a send in flight from its slot: an eviction meanwhile
        cannot free it); False if it is not held."""
        with self.cond:
            r = self.refs.get(sid)
            if r is None:
                return False
            self.refs[sid] = r + 1
            return True

    def pin_many(self, sids: list) -> bool:
        """``pin`` for every sample of ``sids`` under one lock, all or none: False (nothing pinned) if one of
        them is not held."""
        with self.cond:
            refs = self.refs
            for sid in sids:
                if sid not in refs:
                    return False
            for sid in sids:
                refs[sid] += 1
            return True

    def release_many(self, sids: list) -> None:
        """``release`` for every sample of ``sids`` under one lock."""
        with self.cond:
            refs = self.refs
            for sid in sids:
                r = refs[sid] - 1
                if r:
                    refs[sid] = r
                else:
                    self._drop(sid)

    def share(self, sids) -> int:
        """Count the samples of ``sids`` another rank of this store's storage group stored (a node-local
        directory shared by the node's ranks) as held: readable here, never deleted by this rank (its store
        is the other rank's to clear). Returns how many were not held already."""
        k = 0
        with self.cond:
            for sid in sids:
                if sid not in self.refs:
                    self.refs[sid] = 1
                    self.foreign.add(sid)
                    k += 1
            self.cond.notify_all()
        return k

    def _drop(self, sid: int) -> None:
        """The last reference to ``sid`` went (under ``cond``): delete it from the tier unless another rank
        stored it."""
        del self.refs[sid]
        if self.foreign and sid in self.foreign:
            self.foreign.discard(sid)
        else:
            self.tier.delete(sid)

    def adopt(self, sid: int) -> None:
        """Count a sample written into the tier directly (``tier.reserve``) as stored."""
        with self.cond:
            if sid in self.refs:
                raise KeyError(f"sample {sid} adopted twice")
            self.refs[sid] = 1
            self.cond.notify_all()

    def release(self, sid: int) -> None:
        with self.cond:
            r = self.refs[sid] - 1
            if r:
                self.refs[sid] = r
            else:
                self._drop(sid)

    def read_into(self, sid: int, out: np.ndarray) -> int:
        n = self.tier.read_into(sid, out)
        self.reads += 1
        self.read_bytes += n
        return n

    def read_pinned(self, sid: int, out: np.ndarray, *, wait: bool, timeout: float = WAIT_TIMEOUT_S,
                    stop=None) -> int:
        """Read a sample while holding a reference, so an eviction meanwhile cannot free its slot; ``wait``:
        until the sample is stored (a fill in another thread), else it must be held now. ``stop()``: give up
        waiting (raises ``Stopped``) once it is true (the loader is ending or a fill failed); whoever sets it
        notifies ``cond``."""
        with self.cond:
            if sid not in self.refs:
                if not wait:
                    raise KeyError(sid)
                if stop is None:
                    ok = self.cond.wait_for(lambda: sid in self.refs, timeout)
                else:
                    ok = self.cond.wait_for(lambda: sid in self.refs or stop(), timeout)
                    if sid not in self.refs and stop():
                        raise Stopped(f"stopped while waiting for sample {sid}")
                if not ok:
                    raise RunError(f"sample {sid} never reached the {('shared', 'local', 'memory')[self.code]} "
                                   f"tier although the plan reads it from there (waited {timeout:.0f} s)")
            self.refs[sid] += 1
        try:
            return self.read_into(sid, out)
        finally:
            self.release(sid)

    def clear(self) -> None:
        with self.cond:
            for sid in list(self.refs):
                self.refs[sid] = 1
                self.release(sid)

    def close(self) -> None:
        """Drop every sample held (the tier's slots or files)."""
        self.clear()

    def stats(self) -> dict:
        """``reads``/``bytes``: reads of this tier (loader, peer sends from the local tier); ``held``: samples now."""
        return {"reads": self.reads, "bytes": self.read_bytes, "held": len(self.refs)}


class Stores(ClosingStage):
    """The rank's own tiers by plan tier code (MEMORY, LOCAL)."""

    def __init__(self, stores: dict[int, SampleStore]):
        self.by_code = dict(stores)

    def __getitem__(self, code: int) -> SampleStore:
        st = self.by_code.get(int(code))
        if st is None:
            raise RunError(f"the plan uses tier {('shared', 'local', 'memory', 'peer')[int(code)]} but this rank "
                           f"has no store for it")
        return st

    def holder(self, sid: int) -> SampleStore | None:
        for st in self.by_code.values():
            if sid in st.refs:
                return st
        return None

    def release(self, sid: int) -> None:
        st = self.holder(sid)
        if st is None:
            raise RunError(f"the plan evicts sample {sid}, which this rank does not hold")
        st.release(sid)

    def clear(self) -> None:
        for st in self.by_code.values():
            st.clear()

    def close(self) -> None:
        self.clear()

    def stats(self) -> dict:
        """Each tier's ``SampleStore.stats()`` by tier name, with the tier's own counters (``writes``,
        ``write_bytes``, ``deletes``, ``capacity_bytes``)."""
        out = {}
        for code, st in self.by_code.items():
            ts = st.tier.stats() if hasattr(st.tier, "stats") else {}
            out[("shared", "local", "memory")[code]] = {
                **st.stats(), **{k: ts.get(k, 0) for k in ("writes", "write_bytes", "deletes", "capacity_bytes")}}
        return out


__all__ = ["SampleStore", "Stores", "Stopped", "WAIT_TIMEOUT_S"]
