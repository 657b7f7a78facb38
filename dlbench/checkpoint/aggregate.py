"""Aggregation of per-rank checkpoint records into the figures ``dlbench checkpoint`` reports. Pure.

Per checkpoint: the slowest rank's time until durable and ``total bytes / that time`` (the job's checkpoint
bandwidth: bytes over wall time, what a storage system sustains); per rank P50/P99 over checkpoints and
stragglers; and, labelled as such, MLPerf Storage's figure: the mean over checkpoints of per-checkpoint
rates (storage#646: not bytes over time; it weighs fast checkpoints as much as slow ones)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..metrics import CHECKPOINT_GLOSSARY

STRAGGLER = 1.5      # a rank is a straggler when its time until durable > 1.5 x the median rank's
FSYNC_IMPLAUSIBLE_BPS = 20e9   # an fsync that makes >= 1 MiB durable at more than 20 GB/s flushed nothing
GEN_RATIO_MIN = 2.0

DEFINITIONS = CHECKPOINT_GLOSSARY   # the one definition of each figure: metrics.CHECKPOINT_GLOSSARY


def _pct(a, q) -> float:
    return float(np.percentile(np.asarray(a, dtype=float), q)) if len(a) else float("nan")


def checkpoints(records: list[list[dict]]) -> list[dict]:
    """``records[rank]`` = that rank's per-checkpoint records -> one dict per checkpoint."""
    by_k: dict[int, list[dict]] = {}
    for rank_recs in records:
        for r in rank_recs:
            by_k.setdefault(r["checkpoint"], []).append(r)
    out = []
    for k in sorted(by_k):
        rs = by_k[k]
        dur = [r["durable_s"] for r in rs]
        total = sum(r["bytes"] for r in rs)
        slow = max(dur)
        med = float(np.median(dur))
        out.append({"checkpoint": k, "bytes": int(total), "files": int(sum(r["files"] for r in rs)),
                    "stall_s": max(r["stall_s"] for r in rs), "durable_s": slow,
                    "bandwidth_bytes_per_s": total / slow if slow > 0 else float("inf"),
                    "rank_durable_p50_s": med, "rank_durable_p99_s": _pct(dur, 99),
                    "stragglers": sorted(r["rank"] for r in rs if med > 0 and r["durable_s"] > STRAGGLER * med)})
    return out


def summary(per_ckpt: list[dict], records: list[list[dict]], gen: list[dict]) -> dict:
    tot_bytes = sum(c["bytes"] for c in per_ckpt)
    tot_time = sum(c["durable_s"] for c in per_ckpt)
    fs = [s for rank_recs in records for r in rank_recs for s in r["fsync_s"]]
    # only fsyncs issued right after their file's writes (stream, shards): dcp's files are fsync'd after the
    # whole save, when the kernel may legitimately have written them back already
    file_fs = [(b, s) for rank_recs in records for r in rank_recs
               for b, s in zip(r.get("fsync_after_write_bytes", []), r["fsync_s"])]
    implausible = [s for b, s in file_fs if b >= (1 << 20) and s > 0 and b / s > FSYNC_IMPLAUSIBLE_BPS]
    ratios = [g["generation_bytes_per_s"] / g["write_bytes_per_s"] for g in gen if g["write_bytes_per_s"] > 0]
    out: dict[str, Any] = {
        "checkpoints": len(per_ckpt),
        "bytes_per_checkpoint": per_ckpt[0]["bytes"] if per_ckpt else 0,
        "files_per_checkpoint": per_ckpt[0]["files"] if per_ckpt else 0,
        "stall_s": {"mean": float(np.mean([c["stall_s"] for c in per_ckpt])) if per_ckpt else None,
                    "max": max((c["stall_s"] for c in per_ckpt), default=None)},
        "durable_s": {"mean": tot_time / len(per_ckpt) if per_ckpt else None,
                      "max": max((c["durable_s"] for c in per_ckpt), default=None)},
        "bandwidth_bytes_per_s": tot_bytes / tot_time if tot_time > 0 else None,
        "mlperf_mean_of_rates_bytes_per_s": float(np.mean([c["bandwidth_bytes_per_s"] for c in per_ckpt]))
        if per_ckpt else None,
        "fsync_s": {"count": len(fs), "p50": _pct(fs, 50), "p90": _pct(fs, 90), "p99": _pct(fs, 99),
                    "max": max(fs, default=float("nan"))},
        "stragglers": sorted({r for c in per_ckpt for r in c["stragglers"]}),
        "generation_ratio": min(ratios) if ratios else None,
        "warnings": [],
    }
    if implausible:
        out["warnings"].append(f"{len(implausible)} of {len(file_fs)} fsyncs made >= 1 MiB durable faster than "
                               f"{FSYNC_IMPLAUSIBLE_BPS / 1e9:.0f} GB/s (fastest {min(implausible) * 1e6:.0f} us): "
                               f"implausible for durable storage (fsync defeated, or a volatile write cache)")
    if out["generation_ratio"] is not None and out["generation_ratio"] < GEN_RATIO_MIN:
        out["warnings"].append(f"content generation ran at only {out['generation_ratio']:.2f}x the write rate "
                               f"(< {GEN_RATIO_MIN:g}): generated before the timed region here, but a "
                               f"generator this slow would bound an emulator that generates inline")
    return out
