"""Clairvoyant prefetching (HDMLP / NoPFS, docs/STRATEGIES.md): the seed fixes every rank's access stream for all
epochs, so each rank knows how often it will read each sample and when it first reads it. Pure NumPy.

What the plan says, for every rank r:

- **Which samples r caches.** r_k = how many times r accesses sample k over all epochs (the
  DistributedSampler rows of every epoch: the exact global shuffle). The accessed samples, sorted by r_k
  descending (ties, ``tie_break``: ``first-access``, earlier first access first; ``sample-id``, lower sample
  id first, as the HDMLP thesis' reference simulator's stable sort by count does), fill the tiers fastest first: the longest prefix whose
  summed bytes fit ``memory_bytes`` goes to its memory tier, the following ones to its node-local disk tier
  while their summed bytes fit ``local_bytes`` (a prefix: the first that does not fit ends the tier, as
  HDMLP's ``can_add`` does; every sample counts its own size).
- **When a tier fills (fill on first access).** A cached sample is stored (``keep``) by the access that
  first reads it, in the order r first touches its samples; from r's next step on, every later access of it
  reads r's own tier. Nothing is evicted. So a cached sample costs one read from elsewhere, like HDMLP's
  background fill, without a prologue: the fill overlaps training.
- **Where every other access comes from (cheapest source).** An access at (epoch e, step s) whose sample
  r does not hold yet reads a peer's tier when some other rank holds it from an earlier step (possession
  rule), else the shared FS. Peer choice: ranks holding k in memory then are preferred to ranks holding
  it on disk (a disk holder reads it before sending); among the preferred ones (sorted by when they stored
  it, then rank), the one at index (r + t) mod count, t = e·steps + s — deterministic and spread over the
  holders so no single early holder serves everyone.
- The staging buffer of HDMLP is the executor's loader ring, filled in exact access order by
  ``loader_threads`` threads (a ``prefetch`` ``Pipeline``).

Memory: the frequency pass keeps 13 bytes per (rank, sample) pair (counts, first access, tier) for a chunk
of ranks at a time (``TABLE_BUDGET_BYTES``; each chunk recomputes the epochs' permutations); the plan then
keeps only the cached pairs.
"""

from __future__ import annotations

import numpy as np

from .caches import access_table, global_rows
from .plan import LOCAL, MEMORY, NO_TIER, PEER, SHARED, Capacity, EpochPlan, Pipeline, Plan
from .sampler import batch_bounds, distributed_indices, epoch_permutation, samples_per_rank

NEVER = np.iinfo(np.int64).max


def access_frequencies(*, n_samples: int, world_size: int, epochs: int, local_batch: int, seed: int,
                       drop_last: bool = False, drop_last_batch: bool = False, ranks: range | None = None
                       ) -> tuple[np.ndarray, np.ndarray, int]:
    """(counts (R, F) int32: accesses of sample k by rank r over all epochs, first (R, F) int64: the global
    step t = e·steps + s of r's first access of k (``NEVER`` if none), steps per epoch), for the ranks in
    ``ranks`` (default: all W)."""
    W, F = int(world_size), int(n_samples)
    rk = range(W) if ranks is None else ranks
    R = len(rk)
    counts = np.zeros(R * F, np.int32)
    first = np.full(R * F, NEVER, np.int64)
    steps = 0
    for e in range(int(epochs)):
        rows, bounds = global_rows(seed, e, F, W, local_batch, drop_last, drop_last_batch)
        steps = bounds.shape[1] - 1
        a = access_table(rows[rk.start:rk.stop], bounds[rk.start:rk.stop])
        key = a.rank * F + a.sample
        counts += np.bincount(key, minlength=R * F).astype(np.int32, copy=False)
        uk, idx = np.unique(key, return_index=True)          # a is in step order: idx is the first access
        t = e * steps + a.step[idx]
        first[uk] = np.minimum(first[uk], t)
    return counts.reshape(R, F), first.reshape(R, F), steps


TIE_BREAKS = ("first-access", "sample-id")


def assign_tiers(counts: np.ndarray, first: np.ndarray, sizes: np.ndarray, memory_bytes: float,
                 local_bytes: float, tie_break: str = "first-access") -> np.ndarray:
    """(W, F) uint8: the tier each rank caches each sample in (MEMORY, LOCAL or NO_TIER), module doc."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"tie_break {tie_break!r}: choose one of {', '.join(TIE_BREAKS)}")
    W, F = counts.shape
    tier = np.full((W, F), NO_TIER, np.uint8)
    for r in range(W):
        acc = np.nonzero(counts[r])[0]
        tie = first[r, acc] if tie_break == "first-access" else acc
        order = acc[np.lexsort((tie, -counts[r, acc].astype(np.int64)))]
        n_mem = int(np.searchsorted(np.cumsum(sizes[order]), memory_bytes, side="right")) if memory_bytes > 0 else 0
        tier[r, order[:n_mem]] = MEMORY
        rest = order[n_mem:]
        if local_bytes > 0 and len(rest):
            cum = np.cumsum(sizes[rest])
            n_loc = int(np.searchsorted(cum, local_bytes, side="right"))
            tier[r, rest[:n_loc]] = LOCAL
    return tier


METHODS = ("auto", "dense")


def _all_cached_plan(*, F: int, W: int, node_map, epochs: int, local_batch: int, seed: int, sizes: np.ndarray,
                     memory_bytes: float, drop_last: bool, drop_last_batch: bool, meta_common: dict,
                     pipeline: Pipeline) -> Plan | None:
    """The clairvoyant plan when every rank's accessed samples fit its memory tier (then each rank caches all it
    reads, in memory, whatever the tie break: the tiers' prefix is the whole list), else None. The same plan as
    the (rank, sample) tables, costed per sample instead of per (rank, sample) pair: in an epoch a sample is read
    once, or twice where DistributedSampler pads (by two different ranks: the padding repeats a position
    F ≡ p mod W only if W divides F, when there is none), so one pass over the epochs in time order keeps,
    per sample, its holders in the order they stored it (time, rank) and decides every access there and then:
    own tier if its rank holds it already, else the holder at index (rank + t) mod holders among those that
    stored it before step t, else the shared FS; the first access of a (rank, sample) keeps it. Kept per epoch:
    one int per access (-1: own, else the holders before it); per sample: its holders (≤ its accesses).
    Memory: about (2 + 2)·F·epochs bytes (int16 where the world and the epochs allow), nothing per
    (rank, sample) pair; time: linear in the epochs' accesses, not in ranks × samples."""
    if F < 1 or W < 1 or W > F or not memory_bytes > 0 or epochs < 1:
        return None
    rdt = np.int16 if W < 2**15 else np.int32
    b = batch_bounds(samples_per_rank(F, W, drop_last), local_batch, drop_last_batch)
    steps = len(b) - 1
    num = samples_per_rank(F, W, drop_last)
    total = num * W
    reach = int(b[-1]) * W if not drop_last else min(int(b[-1]) * W, total)   # positions accessed: col < b[-1]
    pad = max(0, total - F)
    cdt = np.int16 if 2 * epochs + 2 < 2**15 else np.int32
    width = min(epochs + 1, 8)
    held = np.full((F, width), -1, rdt)   # per sample: its holders in the order they stored it (-1: none yet)
    hc = np.zeros(F, np.int64)            # holders per sample so far
    codes: list[tuple[np.ndarray, np.ndarray]] = []   # per epoch: (main by sample, padding by position - F)
    pdt = np.int32 if F < 2**31 else np.int64
    perms: list[np.ndarray] = []          # the epochs' permutations, drawn once (4 B per access)
    distinct = np.zeros(W)                # bytes of the distinct samples each rank reads
    n_distinct = np.zeros(W, np.int64)
    repeat_keys = []                      # (rank·F + sample) of every access of a sample its rank holds
    pos_all = np.arange(F, dtype=np.int64)
    p_pad = np.arange(F, F + pad, dtype=np.int64)

    col_step = np.searchsorted(b, np.arange(num + 1), side="right") - 1   # the step of every column

    def step_of(p: np.ndarray) -> np.ndarray:
        return col_step[np.minimum(p // W, num)]

    for e in range(int(epochs)):
        perm = epoch_permutation(seed, e, F)
        perms.append(perm.astype(pdt))
        pos = np.empty(F, np.int64)
        pos[perm] = pos_all                              # flat position of every sample's main access
        valid = pos < reach
        r_m = (pos % W).astype(rdt)
        t_m = e * steps + step_of(pos)
        k_d = perm[: pad] if pad else np.zeros(0, np.int64)   # padding accesses: the permutation's head again
        r_d = (p_pad % W).astype(rdt)
        t_d = e * steps + step_of(p_pad)
        v_d = p_pad < reach
        need = int(hc.max()) + 2 if F else 2
        if need > held.shape[1]:
            held = np.concatenate([held, np.full((F, max(need, 2 * held.shape[1]) - held.shape[1]), -1, rdt)], axis=1)
        m = int(hc.max()) if F else 0
        own_m = (held[:, :m] == r_m[:, None]).any(axis=1) if m else np.zeros(F, bool)
        own_d = (held[k_d, :m] == r_d[:, None]).any(axis=1) if m and pad else np.zeros(pad, bool)
        new_m = valid & ~own_m
        new_d = v_d & ~own_d
        cnt_m = hc.copy()
        cnt_d = hc[k_d].copy()
        if pad:   # a sample read twice this epoch: the later access sees the earlier one's fill
            d_first = (t_d < t_m[k_d]) | ((t_d == t_m[k_d]) & (r_d < r_m[k_d]))   # (t, rank) order of the two
            cnt_m[k_d] += (new_d & (t_d < t_m[k_d])).astype(np.int64)
            cnt_d += (new_m[k_d] & (t_m[k_d] < t_d)).astype(np.int64)
        code_m = np.where(own_m, -1, cnt_m).astype(cdt)
        code_d = np.where(own_d, -1, cnt_d).astype(cdt)
        codes.append((code_m, code_d))
        # append the new holders in (time, rank) order: first the earlier of a padded sample's two accesses
        if pad:
            first_d = new_d & d_first
            kk = k_d[first_d]
            held[kk, hc[kk]] = r_d[first_d]
            hc[kk] += 1
        held[new_m, hc[new_m]] = r_m[new_m]
        hc[new_m] += 1
        if pad:
            late_d = new_d & ~d_first
            kk = k_d[late_d]
            held[kk, hc[kk]] = r_d[late_d]
            hc[kk] += 1
        rm, km = r_m[new_m].astype(np.int64), pos_all[new_m]
        distinct += np.bincount(rm, weights=sizes[km], minlength=W)
        n_distinct += np.bincount(rm, minlength=W)
        if pad:
            rd = r_d[new_d].astype(np.int64)
            distinct += np.bincount(rd, weights=sizes[k_d[new_d]], minlength=W)
            n_distinct += np.bincount(rd, minlength=W)
        rep = valid & own_m
        repeat_keys.append(r_m[rep].astype(np.int64) * F + pos_all[rep])
        if pad:
            rd = v_d & own_d
            repeat_keys.append(r_d[rd].astype(np.int64) * F + k_d[rd])
        if (distinct > memory_bytes).any():
            return None     # some rank's samples do not all fit its memory: the tables decide the prefix
    del pos_all
    held = held[:, : max(1, int(hc.max()))].copy()
    top = np.minimum(n_distinct, 1)
    rk = np.concatenate(repeat_keys) if repeat_keys else np.zeros(0, np.int64)
    if len(rk):
        uk, c = np.unique(rk, return_counts=True)
        np.maximum.at(top, uk // F, c + 1)
    del rk, repeat_keys

    def build(e: int) -> EpochPlan:
        # global_rows(seed, e, ...) from the permutation drawn in the pass above
        rows = distributed_indices(perms[e].astype(np.int64), W, drop_last)
        n = rows.shape[1]
        bounds = np.tile(b, (W, 1))
        code_m, code_d = codes[e]
        flat = rows.T.reshape(-1)             # position p = c·W + r
        p = np.arange(len(flat), dtype=np.int64)
        code = np.empty(len(flat), np.int64)
        main = p < F
        code[main] = code_m[flat[main]]
        code[~main] = code_d[p[~main] - F]
        ok = p < reach
        r = p % W
        t = e * steps + step_of(p)
        own = ok & (code < 0)
        has = ok & (code > 0)
        src = np.full(len(flat), SHARED, np.uint8)
        src[own] = MEMORY
        src[has] = PEER
        pr = np.full(len(flat), -1, np.int32)
        kh = flat[has]
        pr[has] = held[kh, (r[has] + t[has]) % code[has]]
        kp = np.full(len(flat), NO_TIER, np.uint8)
        kp[ok & (code >= 0)] = MEMORY
        shape = (n, W)
        return EpochPlan(epoch=e, sample_ids=rows, source=np.ascontiguousarray(src.reshape(shape).T),
                         bounds=bounds, peer=np.ascontiguousarray(pr.reshape(shape).T),
                         keep=np.ascontiguousarray(kp.reshape(shape).T))

    peak_b = distinct.astype(np.int64)
    cap = Capacity(cache_peak_samples=n_distinct.tolist(), cache_peak_bytes=peak_b.tolist(),
                   local_cache_peak_bytes=np.zeros(W, np.int64).tolist())
    meta = {"fill": _fill_text(meta_common["tie_break"]), "tie_break": meta_common["tie_break"],
            "peer_choice": PEER_CHOICE, "drop_last": drop_last, "drop_last_batch": drop_last_batch,
            "memory_bytes_per_rank": meta_common["memory_bytes_per_rank"],
            "local_cache_bytes_per_rank": meta_common["local_cache_bytes_per_rank"],
            "samples_accessed_per_rank": n_distinct.tolist(), "max_access_count_per_rank": top.tolist(),
            "cached_accesses_share_per_rank": [round(float(x), 6) for x in np.minimum(n_distinct, 1)]}
    return Plan(strategy="clairvoyant", n_samples=F, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, meta=meta, pipeline=pipeline,
                order=ORDER, capacity=cap)


ORDER = ("global shuffle (DistributedSampler); each sample from the cheapest source: own tier, a peer's tier, else "
         "the shared FS")
PEER_CHOICE = ("memory holders at the access's step, else disk holders, sorted by (time stored, rank); index "
               "(rank + global step) mod holders")


def _fill_text(tie_break: str) -> str:
    return (f"each rank caches its most-accessed samples (all epochs; ties: "
            f"{'earlier first access' if tie_break == 'first-access' else 'lower sample id'}), memory first, then "
            "node-local disk; a cached sample is stored by its first access and never evicted")


TABLE_BUDGET_BYTES = 512 << 20   # the frequency pass handles this many bytes of (rank, sample) tables at once


def clairvoyant_plan(*, n_samples: int, world_size: int, node_map, epochs: int, local_batch: int, seed: int,
                     sample_nbytes, memory_bytes: float, local_bytes: float = 0.0, drop_last: bool = False,
                     pipeline: Pipeline, drop_last_batch: bool = False,
                     table_budget_bytes: int = TABLE_BUDGET_BYTES, tie_break: str = "first-access",
                     method: str = "auto") -> Plan:
    """The clairvoyant plan (module doc). ``memory_bytes``: bytes each rank's memory tier holds (inf: all);
    ``local_bytes``: bytes each rank may store in the node-local disk tier (0: none). The frequency pass runs
    over chunks of ranks whose (rank, sample) tables fit ``table_budget_bytes`` (same plan for any chunking).
    ``tie_break``: the order among equally often accessed samples (``TIE_BREAKS``, module doc). ``method``:
    ``auto`` takes the per-sample costing (``_all_cached_plan``) where every rank's accessed samples fit its
    memory tier, else the (rank, sample) tables; ``dense``: the tables always (the same plan, slower)."""
    W, F = int(world_size), int(n_samples)
    sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (F,))
    if method not in METHODS:
        raise ValueError(f"method {method!r}: choose one of {', '.join(METHODS)}")
    meta_common = {"tie_break": tie_break, "drop_last": drop_last, "drop_last_batch": drop_last_batch,
                   "memory_bytes_per_rank": float(memory_bytes), "local_cache_bytes_per_rank": float(local_bytes)}
    if method == "auto":
        fast = _all_cached_plan(F=F, W=W, node_map=node_map, epochs=epochs, local_batch=local_batch, seed=seed,
                                sizes=sizes, memory_bytes=memory_bytes, drop_last=drop_last,
                                drop_last_batch=drop_last_batch, meta_common=meta_common, pipeline=pipeline)
        if fast is not None:
            return fast
    chunk = max(1, min(W, int(table_budget_bytes) // max(13 * F, 1)))
    pr_l, pk_l, pt_l, tier_l = [], [], [], []
    accessed, top, share = np.zeros(W, np.int64), np.zeros(W, np.int64), np.zeros(W)
    steps = 0
    for r0 in range(0, W, chunk):
        rk = range(r0, min(W, r0 + chunk))
        counts, first, steps = access_frequencies(n_samples=F, world_size=W, epochs=epochs, local_batch=local_batch,
                                                  seed=seed, drop_last=drop_last, drop_last_batch=drop_last_batch,
                                                  ranks=rk)
        tier = assign_tiers(counts, first, sizes, memory_bytes, local_bytes, tie_break)
        r, k = np.nonzero(tier != NO_TIER)
        pr_l.append(r + r0)
        pk_l.append(k)
        pt_l.append(first[r, k])
        tier_l.append(tier[r, k])
        accessed[rk.start:rk.stop] = (counts > 0).sum(axis=1)
        top[rk.start:rk.stop] = counts.max(axis=1) if F else 0
        share[rk.start:rk.stop] = np.where(tier != NO_TIER, counts, 0).sum(axis=1) / np.maximum(counts.sum(axis=1), 1)
        del counts, first, tier
    pr, pk = np.concatenate(pr_l).astype(np.int64), np.concatenate(pk_l).astype(np.int64)
    pt, ptier = np.concatenate(pt_l), np.concatenate(tier_l).astype(np.uint8)
    # own lookups: cached pairs by key rank·F + sample
    okey = pr * F + pk
    o = np.argsort(okey)
    okey, ofirst, otier = okey[o], pt[o], ptier[o]
    # peer lookups, per tier: pairs sorted by (sample, time stored, rank) — a peer's memory before its disk
    span = epochs * max(steps, 1) + 1
    holders = []
    for code in (MEMORY, LOCAL):
        m = ptier == code
        hkey = pk[m] * span + pt[m]
        h = np.lexsort((pr[m], hkey))
        holders.append((hkey[h], pr[m][h].astype(np.int32)))

    def build(e: int) -> EpochPlan:
        rows, bounds = global_rows(seed, e, F, W, local_batch, drop_last, drop_last_batch)
        a = access_table(rows, bounds)
        shape = rows.shape
        source = np.full(shape, SHARED, np.uint8)
        peer = np.full(shape, -1, np.int32)
        keep = np.full(shape, NO_TIER, np.uint8)
        t = e * steps + a.step
        key = a.rank * F + a.sample
        tr = np.full(len(key), NO_TIER, np.uint8)
        fr = np.full(len(key), NEVER, np.int64)
        if len(okey):
            i = np.minimum(np.searchsorted(okey, key), len(okey) - 1)
            hit = okey[i] == key
            tr[hit], fr[hit] = otier[i[hit]], ofirst[i[hit]]
        cached = tr != NO_TIER
        own = cached & (fr < t)
        source[a.rank[own], a.col[own]] = tr[own]
        fill = np.nonzero(cached & (fr == t))[0]
        if len(fill):        # the first access keeps it (once, if a rank reads it twice in that step)
            _u, i1 = np.unique(key[fill], return_index=True)
            fill = fill[i1]
            keep[a.rank[fill], a.col[fill]] = tr[fill]
        rest = np.nonzero(~own)[0]
        for hkey, hrank in holders:
            if not len(rest) or not len(hkey):
                continue
            base = a.sample[rest] * span
            lo = np.searchsorted(hkey, base, side="left")
            hi = np.searchsorted(hkey, base + t[rest], side="left")   # holders stored at a time < t
            cnt = hi - lo
            has = cnt > 0
            rr = rest[has]
            pick = lo[has] + (a.rank[rr] + t[rr]) % cnt[has]
            source[a.rank[rr], a.col[rr]] = PEER
            peer[a.rank[rr], a.col[rr]] = hrank[pick]
            rest = rest[~has]
        return EpochPlan(epoch=e, sample_ids=rows, source=source, bounds=bounds, peer=peer, keep=keep)

    mem_peak = np.bincount(pr[ptier == MEMORY], minlength=W).astype(np.int64)
    mem_bytes = np.bincount(pr[ptier == MEMORY], weights=sizes[pk[ptier == MEMORY]], minlength=W).astype(np.int64)
    local_peak = np.bincount(pr[ptier == LOCAL], weights=sizes[pk[ptier == LOCAL]], minlength=W).astype(np.int64)
    cap = Capacity(cache_peak_samples=mem_peak.tolist(), cache_peak_bytes=mem_bytes.tolist(),
                   local_cache_peak_bytes=local_peak.tolist())
    meta = {"fill": _fill_text(tie_break), "tie_break": tie_break, "peer_choice": PEER_CHOICE,
            "drop_last": drop_last, "drop_last_batch": drop_last_batch, "memory_bytes_per_rank": float(memory_bytes), "local_cache_bytes_per_rank": float(local_bytes),
            "samples_accessed_per_rank": accessed.tolist(), "max_access_count_per_rank": top.tolist(),
            "cached_accesses_share_per_rank": [round(float(x), 6) for x in share]}
    return Plan(strategy="clairvoyant", n_samples=F, world_size=W, node_map=node_map, epochs=epochs,
                local_batch=local_batch, seed=seed, build_epoch=build, meta=meta, pipeline=pipeline,
                order=ORDER, capacity=cap)


__all__ = ["METHODS", "TIE_BREAKS", "access_frequencies", "assign_tiers", "clairvoyant_plan"]
