"""A run's summary, assembled on rank 0 from what every rank gathered (``finish``): the figures of
``metrics`` (one definition of every number, shared with ``simulate``), the plan's facts, the compute's
step time, the page-cache check, ``--cache``'s verdict, the Darshan-style counters and the fault injection;
then the results folder. ``dry_run_summary`` is ``--dry-run``'s: the plan's shape and capacities, nothing
touched.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..units import format_bytes

if TYPE_CHECKING:
    from ..comm import Comm
    from ..workload import Workload
    from .loop import Loop
    from .setup import RunConfig


def finish(cfg: RunConfig, comm: Comm, workload: Workload, manifest: Any, loop: Loop, config_echo: dict,
           run_dir: Path, gathered: list) -> dict:
    """Rank 0: the summary from every rank's gathered record, written to ``run_dir``; returns ``{"run_dir",
    "run"}`` (``run_dir`` None and ``write_error`` when the folder could not be written)."""
    from .. import counters, metrics, results
    from ..plan.quality import order_quality

    if all(g.get("reduced") is not None for g in gathered):
        # every rank reduced its own interval files: summary from the small per-rank figures
        red = sorted((g["reduced"] for g in gathered), key=lambda x: x["rank"])
        summary = metrics.summarize_breakdowns([x["breakdown"] for x in red], red[0]["epoch_ids"],
                                               workload=workload.name, strategy=cfg.strategy, ranks=comm.size,
                                               nodes=comm.nodes)
        tier_io = metrics.merge_tier_io([x["tier_io"] for x in red])
        latency = metrics.merge_read_latency([x["read_latency"] for x in red])
        per_rank: results.SpilledIntervals | list[dict] = results.SpilledIntervals(run_dir)
    else:
        if any(g.get("reduced") is not None for g in gathered):  # mixed: some ranks could not see the folder
            from ..timeline import load_spilled

            for g in gathered:
                if g.get("arrays") is None:
                    g["arrays"] = load_spilled(run_dir, g["reduced"]["rank"])[0]
        arrays: list[dict] = [g["arrays"] for g in gathered]
        summary = metrics.summarize(arrays, workload=workload.name, strategy=cfg.strategy, ranks=comm.size,
                                    nodes=comm.nodes, epochs=cfg.epochs)
        tier_io = metrics.tier_io(arrays)
        latency = metrics.merge_read_latency([metrics.read_latency_rank(a) for a in arrays])
        per_rank = arrays
    summary["semantics"] = (loop.plan.semantics or loop.strategy.semantics).as_dict()
    summary["order"] = loop.plan.order
    summary.update(workload.format.driver().summary_keys(workload))   # a format's own keys (tfrecord_read)
    summary["order_quality"] = order_quality(loop.plan)
    summary["shared_tier"] = loop.system.describe_shared_tier()
    summary["tier_io"] = tier_io
    summary["read_latency"] = latency
    if loop.plan.warning:
        summary["plan_warning"] = loop.plan.warning
    if loop.plan.staged_fraction is not None:   # staging beyond a node's capacity: the share of its subset staged
        summary["staged_fraction"] = loop.plan.staged_fraction
    summary["compute"] = {"mode": cfg.compute, **(gathered[0].get("compute") or {})}
    if cfg.compute == "sleep":
        summary["compute"]["step_time_s"] = config_echo["compute_step_time_s"]
        summary["compute"]["source"] = config_echo["compute_step_time_source"]
        summary["compute"].update(config_echo["compute_step_time"])
    summary["strategy_stats"] = [g["strategy_stats"] for g in gathered]
    summary["verified_samples"] = int(sum(g["verified"] for g in gathered)) if cfg.verify else None
    summary["page_cache"] = page_cache_check(manifest, gathered)
    from ..host import meminfo
    from ..storage import pagecache

    summary["cache"] = pagecache.summarize(loop.cache.policy, [g.get("cache") or {} for g in gathered],
                                           dataset_bytes=int(manifest.sample_nbytes().sum()),
                                           node_mem_bytes=meminfo("MemTotal"))
    residency_check(summary["cache"], [g.get("cache") or {} for g in gathered])
    from ..provenance import defeating_warning

    defeating: dict = {}
    for g in gathered:   # every rank's own process (LD_PRELOAD may differ between ranks)
        defeating.update((g.get("preloaded") or {}).get("defeating") or {})
    summary["preloaded_warning"] = defeating_warning({"defeating": defeating})
    if cfg.cache is not pagecache.CacheMode.KEEP and summary["cache"]["verdict"] == "cold":
        summary["page_cache"]["warning"] = None   # the eviction / O_DIRECT made the reads cold (verdict says so)
    # bookkeeping inside the timed loop: moving >= FLUSH_RECORDS pending records into arrays mid-epoch
    summary["timeline_flush_s"] = [float(g.get("timeline_flush_s", 0.0)) for g in gathered]
    if loop.injection.active:
        worker_retries = sum(((g.get("strategy_stats") or {}).get("worker_io") or {}).get("read_retries", 0)
                             for g in gathered)
        summary["injected"] = {**loop.injection.describe(),
                               "read_retries": int(sum(g.get("read_retries", 0) for g in gathered) + worker_retries)}
    summary["io_counters"] = counters.summarize([g.get("io_counters") or {} for g in gathered])
    if any(g.get("s3") for g in gathered):   # the shared tier is S3: requests, bytes, latency (storage.s3)
        from ..storage.s3 import request_summary

        pfs = loop.system.pfs
        summary["s3"] = request_summary([g["s3"] for g in gathered if g.get("s3")],
                                        int(sum(g.get("delivered_samples", 0) for g in gathered)),
                                        price=pfs.usd_per_million_requests if pfs is not None else None)
        from ..storage.s3 import restate_cache

        restate_cache(summary)
    from ..storage import READ_CALL

    summary["io_counters"]["read_call"] = "lseek+readv" if READ_CALL == "readv" else "preadv (glibc preadv64v2)"
    from .ceiling import summarize as ceiling_summary
    from .evaluate import summarize as eval_summary

    summary["eval"] = eval_summary([g.get("eval") or [] for g in gathered])

    summary.update(ceiling_summary([g.get("ceiling") or {"skipped": "not replayed"} for g in gathered],
                                   summary.get("samples_per_s")))
    from ..dlio import au_verdict

    summary["au_rule"] = au_verdict(summary.get("au"), workload.au_threshold, workload.au_threshold_source)
    try:
        results.write_run(run_dir, config=config_echo, summary=summary, intervals=per_rank, error=None)
    except OSError as e:
        # a full disk (or the folder gone): the figures are measured, keep them on stdout; nothing half-written
        results.remove_run_dir(run_dir)
        doc = {"schema": results.SCHEMA, "status": "ok", "config": config_echo, "summary": summary,
               "error": None, "run_dir": None}
        return {"run_dir": None, "run": doc,
                "write_error": f"--out {cfg.out}: the results could not be written to {run_dir} "
                               f"({e.strerror or e}); nothing was kept there: the summary above is the only "
                               f"record of this run"}
    return {"run_dir": str(run_dir), "run": results.read_run(run_dir)}


EVICTED_AT = 0.1   # resident after the eviction / before it, above which the eviction did not take


def residency_check(cache: dict, ranks: list[dict]) -> None:
    """``--cache drop`` (and ``direct`` with buffered reads): each eviction verified with mincore on the files
    it evicted (``pagecache.resident_bytes``, by the node leaders). Adds to ``cache["evictions"]`` each
    eviction's resident bytes before and after, summed over nodes, and ``cache["residency_warning"]`` when
    pages stayed (a memory-backed file system, a library that intercepts posix_fadvise)."""
    by: dict[int, dict] = {}
    for r in ranks:
        for x in r.get("evictions") or []:
            if "resident_before_bytes" not in x:
                continue
            cur = by.setdefault(int(x["before_epoch"]), {"resident_before_bytes": 0, "resident_after_bytes": 0,
                                                         "resident_total_bytes": 0})
            for k in cur:
                cur[k] += int(x[k])
    cache["residency_warning"] = None
    if not by:
        return
    for ev in cache.get("evictions") or []:
        ev.update(by.get(int(ev["before_epoch"]), {}))
    cache.setdefault("definitions", {})["residency"] = (
        "resident_before_bytes / resident_after_bytes: page-cache bytes of the evicted files (mincore, whole "
        "pages) just before and after the eviction, summed over the node leaders; resident_total_bytes: their "
        "size in pages")
    stayed = [(e, d) for e, d in sorted(by.items())
              if d["resident_after_bytes"] > EVICTED_AT * max(d["resident_before_bytes"], 1)]
    if stayed:
        e, d = stayed[0]
        where = "the prologue" if e < 0 else f"epoch {e}"
        cache["residency_warning"] = (
            f"the eviction did not take: {format_bytes(d['resident_after_bytes'], 'MiB')} of the evicted files' "
            f"{format_bytes(d['resident_before_bytes'], 'MiB')} stayed in the page cache before {where} "
            f"({len(stayed)} of {len(by)} evictions): reads may come from memory")


def page_cache_check(manifest: Any, gathered: list) -> dict:
    """Did the reads reach the device? ``read_bytes`` (/proc/self/io: bytes the block layer fetched for
    this process) against ``rchar`` (bytes returned by read calls). If the dataset fits in memory and
    under 10 % of what was read came from the device, the run measured the page cache, not storage
    (MLPerf Storage asks for a dataset ≥ 5× host memory). Counts the trainer processes only: the DataLoader
    workers' reads are already in them (the kernel adds a child's I/O counters to its parent's when the
    parent reaps it, and the executor has shut its workers down before the trainer's counters are read);
    adding the workers' own figures (``strategy_stats.worker_io``, kept as ``workers_rchar_bytes``) counted
    prefetch's reads twice."""
    from ..host import meminfo

    mem = meminfo("MemTotal")
    ds = int(manifest.sample_nbytes().sum())

    def total(key: str) -> int:
        # the workers are not added: the executor's close() joins (reaps) them before the trainer's last reading,
        # and Linux adds a reaped child's /proc/<pid>/io to its parent's (adding them counted their bytes twice)
        return int(sum(g["io"].get(key, 0) for g in gathered))

    rchar, dev = total("rchar"), total("read_bytes")
    workers_rchar = int(sum(((g.get("strategy_stats") or {}).get("worker_io") or {}).get("rchar", 0)
                            for g in gathered))
    fits = bool(mem and ds < mem)
    from_memory = rchar > 0 and dev < 0.1 * rchar
    warn = None
    if fits and (from_memory or rchar == 0):
        warn = (f"dataset ({format_bytes(ds, 'GiB', digits=2)}) fits in the page cache ({format_bytes(mem, 'GiB')} RAM) "
                f"and {format_bytes(dev, 'MiB')} of {format_bytes(rchar, 'MiB')} read came from the device: I/O figures measure "
                f"memory, not storage (MLPerf Storage asks for a dataset >= 5x RAM)")
    return {"dataset_bytes": ds, "mem_total_bytes": mem, "fits_in_memory": fits, "rchar_bytes": rchar,
            "device_read_bytes": dev, "workers_rchar_bytes": workers_rchar, "warning": warn}


def dry_run_summary(loop: Loop, config_echo: dict) -> dict:
    """What would run: the plan's shape, bytes per tier, capacity checks. Touches nothing."""
    plan = loop.plan
    out = {"config": config_echo, "plan": plan.summary(),
           "bytes_by_tier": plan.bytes_by_tier(loop.ctx.sample_nbytes),
           "semantics": (plan.semantics or loop.strategy.semantics).as_dict(),
           "order": plan.order, "shared_tier": loop.system.describe_shared_tier(),
           "capacity": plan.capacity.summary()}
    return out
