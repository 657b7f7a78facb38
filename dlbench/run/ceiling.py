"""The run's own ceiling (``--ceiling-steps``): after the measured epochs, outside every epoch clock, every
rank replays the first steps of the same plan's epoch 0 through a fresh executor of the same strategy and
options (prefetch: the same ``DataLoader`` workers), its shared tier read from memory with no PFS model, no
fault injection, no ``--cache`` eviction and no compute. Memory: the files those steps and the rank's prologue
read, copied to a memory file system (``/dev/shm``) and read through the run's own POSIX path, the same calls
as the measured run's; where there is none with room, ``storage.backend.MemoryBackend`` holding them (its
HDF5 path opens a copy of each file's image, dearer than a POSIX open: the summary names the backend used). The delivery rate of that replay is what
dlbench's own loading path can do on this host; a measured run close to it (headroom = ceiling / measured
samples/s < ``LIMIT_HEADROOM``) may be limited by dlbench, not by the storage or the compute.

The replay starts from a fresh executor: its readers open every file they read, as in a measured run's
first epoch. A measured run whose files all stay open across epochs (a tiny dataset inside a reader's LRU of
open files) reads its later epochs without opens and can exceed the ceiling (headroom < 1): such a run, with
no compute, is limited by dlbench by construction, and the warning says so.

The replay's first step is left out of the rate (it starts the loader threads or the DataLoader's worker
processes and fills the pipeline): ceiling samples/s = samples of steps 1..k, summed over ranks / the slowest
rank's time from step 0's batch to step k's. Files the replay reads are copied into memory up to
``MAX_BYTES`` per rank (every rank agrees: one over it and no rank replays; the summary says why).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..units import format_bytes

if TYPE_CHECKING:
    from ..plan import Plan
    from ..plan.plan import EpochPlan
    from .loop import Loop

DEFAULT_STEPS = 32          # steps replayed after the first (--ceiling-steps)
MAX_BYTES = 512 << 20       # per rank: the most the in-memory copy of the replay's files may take
LIMIT_HEADROOM = 1.25       # a run within 80 % of its ceiling: dlbench itself may be the limit


def truncate(ep: EpochPlan, k: int) -> EpochPlan:
    """Epoch plan ``ep`` cut to its first ``k`` steps (every rank): columns past a rank's k-th step emptied,
    background transfers and evictions of later steps dropped."""
    from ..plan.plan import NO_TIER, Evictions, Transfers

    if k >= ep.steps:
        return ep
    bounds = np.ascontiguousarray(ep.bounds[:, :k + 1])
    n = int(bounds[:, -1].max()) if len(bounds) else 0
    past = np.arange(n)[None, :] >= bounds[:, -1:]
    ids = ep.sample_ids[:, :n].copy()
    ids[past] = -1

    def cut(a, fill):
        if a is None:
            return None
        b = a[:, :n].copy()
        b[past] = fill
        return b

    tr = ep.transfers
    if tr is not None:
        m = tr.step < k
        tr = Transfers(tr.step[m], tr.src[m], tr.dst[m], tr.sample[m], tr.tier, tr.move)
    ev = ep.evictions
    if ev is not None:
        m = ev.step < k
        ev = Evictions(ev.rank[m], ev.step[m], ev.sample[m])
    return dataclasses.replace(ep, sample_ids=ids, source=cut(ep.source, 0), bounds=bounds, peer=cut(ep.peer, -1),
                               keep=cut(ep.keep, NO_TIER), transfers=tr, evictions=ev, chunk=cut(ep.chunk, 1))


def short_plan(plan: Plan, k: int) -> Plan:
    """The plan with one epoch, epoch 0's first ``k`` steps (the prologue unchanged)."""
    q = plan.map_epochs(lambda ep: truncate(ep, k))
    q.epochs = 1
    return q


def files_read(loop: Loop, plan: Plan) -> np.ndarray:
    """Indices (into the manifest's files) of the files this rank's replay reads: its samples of the
    replayed steps and its prologue's reads of the shared tier."""
    from ..plan.plan import SHARED

    r = loop.comm.rank
    ep = plan.epoch(0)
    ids = ep.rank_samples(r)
    pro = plan.prologue
    rows = (pro.rank == r) & (pro.src == SHARED)
    ids = np.concatenate([ids[ids >= 0], pro.sample[rows]]).astype(np.int64)
    return np.unique(loop.manifest.file_index(ids)) if len(ids) else np.zeros(0, np.int64)


def replay(loop: Loop, steps: int) -> dict:
    """Every rank (collective): this rank's replay record, ``{"samples", "seconds", "steps", "bytes_in_memory"}``
    or ``{"skipped": why}`` (the same on every rank)."""
    from ..data.formats import open_reader
    from ..storage.backend import MemoryBackend, PosixBackend
    from ..storage.counters import CounterSet
    from ..storage.pagecache import ReadPolicy, fs_of
    from ..timeline import Timeline

    comm, manifest, data_dir = loop.comm, loop.manifest, loop.data_dir
    if steps <= 0:
        return {"skipped": "--ceiling-steps 0"}
    if data_dir is None:
        return {"skipped": "no dataset folder (a reader given by the caller)"}
    k = min(int(steps) + 1, loop.plan.epoch(0).steps)
    plan = short_plan(loop.plan, k)
    fidx = files_read(loop, plan)
    paths = [manifest.paths[int(f)] for f in fidx]
    cfg = loop.cfg
    if isinstance(cfg.data_dir, str) and cfg.data_dir.startswith("s3://"):
        # the shared tier is a bucket: the replay's objects are fetched through the run's S3 backend, then
        # replayed from memory like any dataset (the ceiling is of dlbench's loading path, the client's own
        # GET ceiling is benchmarks/s3_read_path.py's)
        from ..storage.s3 import S3Backend

        src: Any = S3Backend(cfg.data_dir)     # not the run's backends: its requests stay out of summary.s3
        src.set_sizes(manifest.paths, manifest.nbytes)
    else:
        src = PosixBackend(data_dir)
    data_set = set(manifest.paths)
    # the format's other files (tfrecord's indexes, the manifest): small, read whole
    others = [p for p in src.list() if p not in data_set]
    nbytes = int(np.asarray(manifest.nbytes)[fidx].sum()) + sum(src.size(p) for p in others)
    worst = max(comm.allgather(nbytes))
    if worst > MAX_BYTES:
        return {"skipped": f"the replay's files take {format_bytes(worst, 'MiB', digits=0)} on a rank, over the "
                           f"{format_bytes(MAX_BYTES, 'MiB', digits=0)} its in-memory copy may take"}
    wl = loop.workload
    shm = memory_dir(nbytes * len(comm.node_ranks()))
    copy_dir: Path | None = None
    if shm is not None:
        # the files on a memory file system, read through the run's own POSIX path (module docstring)
        copy_dir = Path(tempfile.mkdtemp(prefix=f"dlbench-ceiling-r{comm.rank}-", dir=shm))
        for p in [*paths, *others]:
            (copy_dir / p).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(src, PosixBackend):
                shutil.copyfile(data_dir / p, copy_dir / p)
            else:
                (copy_dir / p).write_bytes(src.file_image(p))
        backend = f"files copied to {shm} ({fs_of(shm)[0]})"
        root = copy_dir

        def factory() -> Any:
            return open_reader(root, manifest, wl, via=cfg.read_via)
    else:
        mem = MemoryBackend()
        for p in [*paths, *others]:
            mem.files[p] = bytearray(src.file_image(p))
        backend = "storage.backend.MemoryBackend (no writable memory file system with room)"

        def factory() -> Any:
            return open_reader(data_dir, manifest, wl, via=cfg.read_via, storage=mem)

    b = loop.local_batch
    timeline = Timeline(max(1024, (4 + 2 * b) * (k + 1) + 2 * len(plan.prologue.sample) + 64), comm.rank)
    ctx = dataclasses.replace(loop.ctx, reader_factory=factory, timeline=timeline, io_counters=CounterSet(),
                              epochs=1, cache=ReadPolicy())   # keep: no eviction, no O_DIRECT
    clock = ctx.clock
    ex = loop.strategy.executor(ctx, plan, loop.options)
    n = 0
    t_first = t_last = 0
    try:
        ex.start()
        comm.barrier()
        t_first = clock()
        for s, batch in enumerate(ex.epoch(0)):
            if s == 0 and k > 1:
                t_first = clock()      # the rate from step 0's batch on (module docstring)
                continue
            n += batch.n
        t_last = clock()
    finally:
        ex.close()
        if copy_dir is not None:
            shutil.rmtree(copy_dir, ignore_errors=True)
    return {"samples": int(n), "seconds": (t_last - t_first) * 1e-9, "steps": k - 1 if k > 1 else 1,
            "bytes_in_memory": nbytes, "backend": backend}


MEMORY_DIRS = ("/dev/shm",)


def memory_dir(need: int) -> Path | None:
    """A writable folder on a memory-backed file system with ``need`` bytes free (and a quarter to spare),
    else None."""
    from ..storage.pagecache import MEMORY_FS, fs_of

    for d in MEMORY_DIRS:
        p = Path(d)
        try:
            if not (p.is_dir() and os.access(p, os.W_OK) and fs_of(p)[0] in MEMORY_FS):
                continue
            st = os.statvfs(p)
        except OSError:
            continue
        if st.f_bavail * st.f_frsize >= need * 1.25:
            return p
    return None


def summarize(records: list[dict], measured_samples_per_s: float | None) -> dict:
    """Rank 0: run.json's ``summary["ceiling"]`` from every rank's replay record, and the two headline keys
    ``ceiling_samples_per_s`` and ``headroom`` (``metrics.GLOSSARY``)."""
    skipped = next((r["skipped"] for r in records if r.get("skipped")), None)
    if skipped:
        return {"ceiling_samples_per_s": None, "headroom": None,
                "ceiling": {"skipped": skipped, "warning": None}}
    secs = max(float(r["seconds"]) for r in records)
    samples = int(sum(int(r["samples"]) for r in records))
    ceil = samples / secs if secs > 0 else None
    head = ceil / measured_samples_per_s if ceil and measured_samples_per_s else None
    warn = None
    if head is not None and head < LIMIT_HEADROOM:
        warn = (f"measured {measured_samples_per_s:.1f} samples/s is {1 / head:.0%} of dlbench's own ceiling "
                f"({ceil:.1f} samples/s replaying the plan from memory, no compute): dlbench itself may be the "
                f"limit (headroom {head:.2f} < {LIMIT_HEADROOM:g})")
    return {"ceiling_samples_per_s": ceil, "headroom": head,
            "ceiling": {"steps": int(records[0]["steps"]), "samples": samples, "seconds": secs,
                        "backend": sorted({str(r.get("backend")) for r in records}),
                        "bytes_in_memory": int(sum(int(r["bytes_in_memory"]) for r in records)),
                        "limit_headroom": LIMIT_HEADROOM, "warning": warn}}
