"""``dlbench calibrate-storage``: measure this machine's storage and write a system profile (issue 19).

What is measured (each point ``--repeat`` times; the profile takes the median, ``calibration`` keeps every
value so the spread is on record):

- **t(γ)**, the shared tier's aggregate random-read throughput with γ concurrent readers: every rank runs
  ``threads`` reader threads (γ = ranks × threads), each reading ``request_bytes`` at a random offset of a
  random file of ``--data-dir`` with ``os.pread`` into a page-aligned buffer, for ``slice_s`` seconds; the
  aggregate is all bytes over the slowest reader's time. With ``--cache drop`` (default) every file is
  evicted from the page cache first (``posix_fadvise(DONTNEED)``, one rank per node), so the figure is the
  device's/file system's, not the page cache's; with ``--cache direct`` (default) every read is ``O_DIRECT``
  (page-aligned buffers, offsets and sizes), so even a dataset smaller than the reads of one point is
  measured on the device (a file system without O_DIRECT falls back to ``drop`` with a warning).
- **latency**: the median time of one 4 KiB random read with γ = 1 (cold, as above).
- **client link** b_fs: t(1) (one reader alone).
- **shared tier, write side** (on record under ``calibration.shared_write``; ``dlbench checkpoint --simulate
  --system`` reads it): every rank's ``threads`` threads write new files of 8 MiB (16 MiB pwrites, fsync,
  close) under ``--data-dir`` for ``slice_s``: the aggregate MB/s by writers (ranks × threads), every fsync's
  time; then a durable publish's metadata operations, per operation: a 4 KiB file created, written and
  fsync'd, a rename, the folder's fsync, an unlink. Everything written is removed.
- **local tier** r(p): the same random reads on files written under ``--local-dir``, with p threads; w(p):
  writing them (``pwrite`` + ``fsync``), p threads (the tier's ``write_bandwidth``).
- **memory** r_0(p): a page-aligned memory copy of ``request_bytes`` rows with p threads (NumPy copies release
  the GIL); the staging write rate β is p = 1.
- **network** b_c: an MPI ping-pong of 16 MiB between rank 0 and a rank on another node (or another rank
  on this node when there is one node), under ``mpiexec``/``srun``; absent in a 1-rank run (the profile then
  keeps ``--network-mb-per-s``, stated as not measured).

The mechanisms the model needs beyond bandwidths (issue 19; each optional in a profile):

- **format reader** ``pfs.open_s`` and ``pfs.cached_mb_per_s``: when ``--data-dir`` is a dlbench dataset
  (it has a manifest), up to 64 of its files are read once (page cache warm), then random samples are read
  through the workload's own format reader (``data.formats.open_reader``: h5py for HDF5 files) and the same
  bytes with a bare ``pread``; ``open_s`` = mean reader time − mean pread time (HDF5's open and parse),
  ``cached_mb_per_s`` = the sample bytes over the mean pread time (means: a run sums its reads). Omitted where the reader costs no more
  than its bytes.
- **local tier from the page cache** ``cached_bandwidth``: r(p) of the files just written, not evicted (the
  tier as a node whose files fit its memory reads it); the cold r(p) comes right after.
- **file writes** ``file_write_s`` and ``cached_write_mb_per_s``: one thread stores files of 4 KiB and of
  ``request_bytes`` through dlbench's local tier (create, write without fsync, close, rename), keeps them,
  then removes them (unlink); a line through the two per-file times gives the fixed part and the rate.
- **loader worker start** ``worker_start_s``: a torch DataLoader with one worker process (fork), the time
  from ``iter()`` to the first sample (skipped without torch).
- **loader hand-off** ``loader_batch_s`` and ``loader_worker_batch_s``: dlbench's own prefetch dataset
  (``strategies.prefetch.StepDataset``) over an in-memory reader (no I/O), batches of 8 x ``request_bytes``,
  a 1-worker DataLoader: the trainer's time blocked in ``next()`` per batch while the worker is ahead (a 10 ms
  sleep per step: unpickling the batch, receiving the shared-memory descriptor, mapping it) and the worker's
  extra time per batch (the loader's period per batch with no step, less the same ``__getitem__`` in the
  trainer's process: pickling, the socket, the worker loop). Skipped without torch.
- **page cache** ``page_cache_bytes``: MemAvailable of /proc/meminfo.
- **wake-up latency** ``wake_latency``: how late ``time.sleep(d)`` returns, mean, for d = 0.5, 2, 10 and 50
  ms, every rank at once (a loaded host resumes a waiting thread late: a training step's wait ends late).
- **exchange** ``exchange_mb_per_s`` (under MPI): pls's pattern, 8 messages of ``request_bytes`` each way
  between two ranks through dlbench's comm layer, posted together, a 2 ms sleep (the step), then waited for;
  one rank's send rate over the posting and waiting time.
- **exchange through the stage** ``exchange_sample_s`` (under MPI, with ``--local-dir``): pls's per-step sequence
  measured through ``strategies.stages.exchange.Exchange`` itself with the local file tier: two ranks each hold files of
  ``request_bytes``; a transfers plan moves 8 of them each way per step; per step the stage posts (reads the
  sent files into rows, Isend/Irecv), a sleep of the step's length (10 ms), then completes (wait, write the
  received samples as files, delete the sent ones), while a loader thread reads the next step's 8 samples
  from the same tier as in a run. The mean of post + complete per step, less the bytes
  sent at ``exchange_mb_per_s``, over the samples a rank sends and receives in it (16): the per-sample cost
  beyond the bytes.

Capacities: the memory tier is half of MemTotal, the local tier the free space of ``--local-dir`` (statvfs).
A time budget (``--budget-s``) is split over the points; the total is printed at the end.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import ConfigError, DataError
from ..storage import aligned_empty
from ..storage.pagecache import CacheMode, evict
from ..units import format_bytes

MB = 1e6
LAT_BYTES = 4096


def _files(data_dir: Path, min_bytes: int) -> list[tuple[str, int]]:
    out = []
    for p in sorted(Path(data_dir).rglob("*")):
        try:
            if p.is_file() and not p.is_symlink() and p.stat().st_size >= min_bytes and not p.name.startswith("."):
                out.append((str(p), p.stat().st_size))
        except OSError:
            continue
    return out


def _read_worker(files, fds, nbytes: int, stop_at: float, seed: int, out: list, k: int, lat: list | None) -> None:
    rng = np.random.default_rng(seed)
    buf = aligned_empty(nbytes)
    got = 0
    n = 0
    t0 = time.perf_counter()
    while True:
        i = int(rng.integers(len(files)))
        size = files[i][1]
        off = int(rng.integers(0, max(1, size - nbytes + 1)))
        off -= off % 4096
        a = time.perf_counter()
        got += os.preadv(fds[i], [buf.data], off)
        b = time.perf_counter()
        n += 1
        if lat is not None:
            lat.append(b - a)
        if b >= stop_at:
            break
    out[k] = (got, time.perf_counter() - t0, n)


def read_rate(files, threads: int, nbytes: int, slice_s: float, comm, seed: int, latency: bool = False,
              direct: bool = False):
    """Aggregate MB/s of ``threads`` readers per rank × ranks (barrier-synchronised), and the request latencies
    (rank 0's first thread) when ``latency``. ``direct``: O_DIRECT reads (the page cache bypassed)."""
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fds = [os.open(p, flags) for p, _ in files]
    try:
        out: list = [None] * threads
        lat: list | None = [] if latency else None
        comm.barrier()
        stop_at = time.perf_counter() + slice_s
        th = [threading.Thread(target=_read_worker, args=(files, fds, nbytes, stop_at, seed * 1000 + k + 7919 *
                                                          comm.rank, out, k, lat if k == 0 else None))
              for k in range(threads)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        got = sum(o[0] for o in out)
        dt = max(o[1] for o in out)
        tot_b = comm.allreduce(got, "sum")
        tot_t = comm.allreduce(dt, "max")
        return tot_b / tot_t / MB if tot_t > 0 else 0.0, lat
    finally:
        for fd in fds:
            os.close(fd)


def _copy_rate(threads: int, nbytes: int, slice_s: float) -> float:
    srcs = [aligned_empty(nbytes) for _ in range(threads)]
    dsts = [aligned_empty(nbytes) for _ in range(threads)]
    for s in srcs:
        s[:] = 1
    res = [0] * threads
    stop_at = time.perf_counter() + slice_s

    def work(k):
        n = 0
        while time.perf_counter() < stop_at:
            np.copyto(dsts[k], srcs[k])
            n += 1
        res[k] = n

    t0 = time.perf_counter()
    th = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return sum(res) * nbytes / (time.perf_counter() - t0) / MB


def _write_files(d: Path, threads: int, per_thread: int, nbytes: int) -> tuple[list, float]:
    """``threads`` files of ``per_thread`` bytes written in ``nbytes`` pwrites, fsync'd; (files, MB/s)."""
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / f"calib-{os.getpid()}-{k}.bin" for k in range(threads)]
    buf = aligned_empty(nbytes)
    buf[:] = np.frombuffer(np.random.default_rng(0).bytes(nbytes), np.uint8)

    def work(p):
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            off = 0
            while off < per_thread:
                off += os.pwrite(fd, buf.data, off)
            os.fsync(fd)
        finally:
            os.close(fd)

    t0 = time.perf_counter()
    th = [threading.Thread(target=work, args=(p,)) for p in paths]
    for t in th:
        t.start()
    for t in th:
        t.join()
    dt = time.perf_counter() - t0
    return [(str(p), p.stat().st_size) for p in paths], threads * per_thread / dt / MB


WRITE_FILE_BYTES = 8 << 20     # the shared tier's write side: checkpoint-like files of 8 MiB


def _shared_write(d: Path, threads: int, slice_s: float, file_bytes: int = WRITE_FILE_BYTES) -> tuple[float, list]:
    """Checkpoint writes on the shared tier: ``threads`` threads each write new files of ``file_bytes`` (one
    pwrite per 16 MiB, fsync, close) for ``slice_s`` (at least one file each); (MB/s of all bytes over the
    slowest thread's time, every fsync's seconds). The files are removed."""
    d.mkdir(parents=True, exist_ok=True)
    buf = aligned_empty(file_bytes)
    buf[:] = np.frombuffer(np.random.default_rng(7).bytes(file_bytes), np.uint8)
    done = [0] * threads
    took = [0.0] * threads
    fsyncs: list = []

    def work(k):
        t0 = time.perf_counter()
        n = 0
        while n == 0 or time.perf_counter() - t0 < slice_s:
            p = d / f"calib-w{os.getpid()}-{k}-{n}.bin"
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                off = 0
                while off < file_bytes:
                    off += os.pwrite(fd, buf.data[off:off + (16 << 20)], off)
                a = time.perf_counter()
                os.fsync(fd)
                fsyncs.append(time.perf_counter() - a)
            finally:
                os.close(fd)
            n += 1
        took[k] = time.perf_counter() - t0
        done[k] = n

    try:
        th = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
        for t in th:
            t.start()
        for t in th:
            t.join()
    finally:
        for p in d.glob(f"calib-w{os.getpid()}-*.bin"):
            p.unlink(missing_ok=True)
    return sum(done) * file_bytes / max(took) / MB, fsyncs


def _dir_ops(d: Path, rounds: int = 16) -> dict:
    """A durable publish's metadata operations on the shared tier, per operation (mean): create + write 4 KiB +
    fsync + close (``small_file_s``), rename (``rename_s``), the folder's fsync (``dir_fsync_s``), unlink."""
    d.mkdir(parents=True, exist_ok=True)
    row = np.frombuffer(np.random.default_rng(8).bytes(LAT_BYTES), np.uint8)
    t: dict = {"small_file_s": [], "rename_s": [], "dir_fsync_s": [], "unlink_s": []}
    names = []
    try:
        for k in range(rounds):
            p = d / f"calib-m{os.getpid()}-{k}.tmp"
            a = time.perf_counter()
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.pwrite(fd, memoryview(row.tobytes()), 0)
            os.fsync(fd)
            os.close(fd)
            b = time.perf_counter()
            q = p.with_suffix(".bin")
            os.rename(p, q)
            c = time.perf_counter()
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)
            os.close(dfd)
            e = time.perf_counter()
            names.append(q)
            t["small_file_s"].append(b - a)
            t["rename_s"].append(c - b)
            t["dir_fsync_s"].append(e - c)
        for q in names:
            a = time.perf_counter()
            q.unlink()
            t["unlink_s"].append(time.perf_counter() - a)
    finally:
        for q in d.glob(f"calib-m{os.getpid()}-*"):
            q.unlink(missing_ok=True)
    return {k: float(np.mean(v)) for k, v in t.items()}


def _file_write_cost(d: Path, nbytes: int, slice_s: float, batch: int = 16) -> dict:
    """Per-file seconds of storing a sample as a file and removing it later through dlbench's own local tier
    (``storage.tiers.LocalTier``: create a temporary file, write, close, rename; unlink), one thread, for
    files of 4 KiB and of ``nbytes``: rounds of ``batch`` files of each size stored, kept, then removed (as
    pls keeps a received sample until it sends it on), alternating sizes for ``slice_s`` (at least 5 rounds);
    the mean per file of each size (a run sums them, tail included)."""
    from ..storage.tiers import LocalTier

    tier = LocalTier(d, 0, 1 << 62, check_free=False, subdir=f"w{os.getpid()}")
    rows = {}
    for size in (LAT_BYTES, nbytes):
        rows[size] = aligned_empty(size)
        rows[size][:] = np.frombuffer(np.random.default_rng(size).bytes(size), np.uint8)
    times: dict = {LAT_BYTES: [], nbytes: []}
    try:
        stop_at = time.perf_counter() + slice_s
        while len(times[nbytes]) < 5 or time.perf_counter() < stop_at:
            for size, row in rows.items():
                a = time.perf_counter()
                for k in range(batch):
                    tier.put(k, row)
                tier.clear()
                times[size].append((time.perf_counter() - a) / batch)
    finally:
        tier.clear()
        _remove_tier_dirs(tier)
    return {size: {"rounds": len(v), "files_per_round": batch, "per_file_s": float(np.mean(v)),
                   "median_s": _median(v), "min_s": min(v), "max_s": max(v)} for size, v in times.items()}


def _reader_cost(data_dir: Path, slice_s: float, seed: int) -> dict:
    """A sample's read through the dataset's format reader against a bare pread of the same bytes, files in
    the page cache (module docstring); ``{"skipped": why}`` when ``data_dir`` is not a dlbench dataset."""
    from ..data.formats import open_reader
    from ..data.manifest import Manifest
    from ..data.verify import workload_of

    try:
        m = Manifest.load(data_dir)
        wl = workload_of(m, m.workload)
        reader = open_reader(data_dir, m, wl)
    except (DataError, ConfigError, OSError) as e:  # not a dataset, or one this build cannot read: stated
        return {"skipped": f"{type(e).__name__}: {e}"}
    rng = np.random.default_rng(seed)
    files = rng.permutation(len(m.paths))[:64]
    row = m.sample_nbytes()
    buf = aligned_empty(int(reader.max_row_nbytes) + 4096)
    fds = {}
    try:
        for f in files:      # warm: the whole file once
            fds[int(f)] = os.open(str(Path(data_dir) / m.paths[f]), os.O_RDONLY)
            sz = int(m.nbytes[f])
            off = 0
            while off < sz:
                n = os.preadv(fds[int(f)], [buf.data[:min(len(buf), sz - off)]], off)
                if n <= 0:
                    break
                off += n
        t_reader, t_raw, nb = [], [], []
        stop_at = time.perf_counter() + slice_s
        while True:
            f = int(files[int(rng.integers(len(files)))])
            i = int(m.first[f]) + int(rng.integers(max(1, int(m.count[f]))))
            n = int(min(row[i], len(buf)))
            a = time.perf_counter()
            reader.read_into(i, buf)
            b = time.perf_counter()
            os.preadv(fds[f], [buf.data[:n]], 0)
            c = time.perf_counter()
            t_reader.append(b - a)
            t_raw.append(c - b)
            nb.append(n)
            if c >= stop_at and len(t_reader) >= 20:
                break
    finally:
        for fd in fds.values():
            os.close(fd)
        close = getattr(reader, "close", None)
        if close:
            close()
    return {"layout": m.layout, "reads": len(t_reader),
            "reader_s": {"mean": float(np.mean(t_reader)), "median": _median(t_reader),
                         "p95": float(np.percentile(t_reader, 95))},
            "pread_s": {"mean": float(np.mean(t_raw)), "median": _median(t_raw),
                        "p95": float(np.percentile(t_raw, 95))},
            "sample_bytes": int(np.median(nb))}


def _worker_start(repeat: int) -> list | None:
    """Seconds from a 1-worker torch DataLoader's ``iter()`` to its first sample, ``repeat`` times; None
    without torch."""
    try:
        import torch.utils.data as tud
    except ImportError:
        return None

    class _One(tud.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.zeros(8, dtype=np.uint8)

    out = []
    for _ in range(repeat):
        dl = tud.DataLoader(_One(), batch_size=1, num_workers=1, multiprocessing_context="fork")
        a = time.perf_counter()
        it = iter(dl)
        next(it)
        out.append(time.perf_counter() - a)
        del it
    return out


HANDOFF_BATCH = 8


class _MemReader:
    """An in-memory reader with the executor's ``read_into`` (no I/O): the hand-off is what is left."""

    def __init__(self, nbytes: int):
        self.buf = np.random.default_rng(0).integers(0, 255, (HANDOFF_BATCH, nbytes), dtype=np.uint8)
        self.max_row_nbytes = nbytes

    def read_into(self, i, out):
        out[:] = self.buf[i % HANDOFF_BATCH]
        return self.max_row_nbytes

    def close(self):
        pass


def _loader_handoff(repeat: int, nbytes: int, steps: int = 30, step_s: float = 0.01) -> dict | None:
    """Per batch of ``HANDOFF_BATCH`` x ``nbytes``, ``repeat`` times, through dlbench's prefetch dataset and a
    1-worker DataLoader: ``trainer_s`` (mean time blocked in ``next()`` while the worker is ahead: a
    ``step_s`` sleep per step) and ``worker_s`` (the loader's period per batch with no step, less the
    dataset's own time per batch in this process). None without torch."""
    try:
        import torch.utils.data as tud

        from ..strategies.prefetch import StepDataset, identity_collate
    except ImportError:
        return None

    def dataset():
        return StepDataset(lambda: _MemReader(nbytes), None, nbytes, nbytes, HANDOFF_BATCH, 4)

    idx = [list(range(HANDOFF_BATCH)) for _ in range(steps + 1)]
    trainer, worker = [], []
    for _ in range(repeat):
        ds = dataset()
        ds[idx[0]]
        a = time.perf_counter()
        for ids in idx[1:]:
            ds[ids]
        bare = (time.perf_counter() - a) / steps
        for sleep in (True, False):
            dl = tud.DataLoader(dataset(), sampler=idx, batch_size=None, collate_fn=identity_collate, num_workers=1,
                                prefetch_factor=2, multiprocessing_context="fork")
            it = iter(dl)
            next(it)                    # the worker has started
            time.sleep(0.05)            # and is ahead
            blocked = 0.0
            a = time.perf_counter()
            for _ in range(steps):
                b = time.perf_counter()
                next(it)
                blocked += time.perf_counter() - b
                if sleep:
                    time.sleep(step_s)
            period = (time.perf_counter() - a) / steps
            del it, dl
            if sleep:
                trainer.append(blocked / steps)
            else:
                worker.append(max(period - bare, 0.0))
    return {"batch": HANDOFF_BATCH, "sample_bytes": int(nbytes), "trainer_s": trainer, "worker_s": worker}


WAKE_WAITS_S = (0.0005, 0.002, 0.01, 0.05)


def _wake_latency(comm, slice_s: float) -> dict:
    """Mean lateness of ``time.sleep(d)`` for each d of ``WAKE_WAITS_S``, every rank at once (``slice_s``
    split over the lengths, at least 5 sleeps each); the ranks' mean."""
    out = {}
    for d in WAKE_WAITS_S:
        comm.barrier()
        late: list[float] = []
        stop_at = time.perf_counter() + slice_s / len(WAKE_WAITS_S)
        while len(late) < 5 or time.perf_counter() < stop_at:
            a = time.perf_counter()
            time.sleep(d)
            late.append(time.perf_counter() - a - d)
        v = np.asarray(late)
        out[d] = {"sleeps": len(late), "mean_s": comm.allreduce(float(v.mean()), "sum") / comm.size,
                  "median_s": float(np.median(v)), "p95_s": float(np.percentile(v, 95))}
    return out


def _remove_tier_dirs(tier) -> None:
    """A measured LocalTier's (empty) directory and its parent, where nothing else was left in them."""
    for d in (tier.dir, tier.dir.parent):
        try:
            d.rmdir()
        except OSError:
            pass


def _peer_of_rank0(comm) -> int:
    """The rank rank 0 measures the network with: another node's first rank when there is one, else rank 1."""
    nm = comm.node_map
    return next((r for r in range(comm.size) if nm[r] != nm[0]), 1)


def _pingpong(comm, nbytes: int = 16 << 20, reps: int = 5) -> float | None:
    if comm.size < 2:
        return None
    me, peer = comm.rank, _peer_of_rank0(comm)
    buf = aligned_empty(nbytes)
    best = None
    if me in (0, peer):
        dst = peer if me == 0 else 0
        for _ in range(reps):
            t0 = time.perf_counter()
            if me == 0:
                comm.isend(buf, dst, tag=77).wait()
                comm.irecv(buf, dst, tag=78).wait()
            else:
                comm.irecv(buf, dst, tag=77).wait()
                comm.isend(buf, dst, tag=78).wait()
            dt = (time.perf_counter() - t0) / 2
            best = dt if best is None else min(best, dt)
    rate = nbytes / best / MB if (best and me == 0) else 0.0
    return float(comm.bcast(rate, 0))


def _exchange_stage_cost(comm, nbytes: int, local_dir, parts: int = 8, steps: int = 30,
                         step_s: float = 0.01) -> dict | None:
    """pls's exchange through ``strategies.stages.exchange.Exchange`` with the local file tier, between rank 0 and a
    peer (another node's rank when there is one): each holds ``parts * steps`` files of ``nbytes``; a moving
    transfers plan sends ``parts`` of them each way per step; per step ``post``, a ``step_s`` sleep (the
    step: no MPI call), ``complete``. As in a run, a loader thread reads the next step's ``parts`` samples
    from the same tier (files not exchanged) from each step's start, beside the stage's work. Returns the per-step times of post + complete (sleep left out) as
    ``mean_s``/``median_s``, with ``samples_per_step`` (sent + received by one rank); None with one rank."""
    if comm.size < 2:
        return None
    from types import SimpleNamespace

    from ..plan import LOCAL
    from ..plan.plan import SYNC, EpochPlan, Plan, Transfers
    from ..storage.tiers import LocalTier
    from ..strategies.stages.exchange import Exchange
    from ..strategies.stages.store import SampleStore, Stores
    from ..strategies.stages.view import EpochView
    from ..timeline import Timeline

    me, peer = comm.rank, _peer_of_rank0(comm)
    times: list = []
    if me in (0, peer):
        n = parts * steps
        step = np.repeat(np.arange(steps, dtype=np.int64), parts)
        ids = np.arange(n, dtype=np.int64)
        tr = Transfers.make(np.concatenate([step, step]), np.concatenate([np.zeros(n, np.int64), np.full(n, peer)]),
                            np.concatenate([np.full(n, peer), np.zeros(n, np.int64)]),
                            np.concatenate([ids, ids + n]), tier=LOCAL, move=True)
        W = comm.size
        sid = np.zeros((W, steps), np.int64)
        ep = EpochPlan(epoch=0, sample_ids=sid, source=np.full(sid.shape, LOCAL, np.uint8),
                       bounds=np.tile(np.arange(steps + 1), (W, 1)), transfers=tr)
        plan = Plan(strategy="calibrate", n_samples=2 * n + parts, world_size=W, node_map=np.arange(W), epochs=1,
                    local_batch=1, seed=0, build_epoch=lambda e: ep, pipeline=SYNC)
        tier = LocalTier(local_dir, me, 4 * n * max(nbytes, 4096), check_free=False,
                         subdir=f"dlbench-calibrate-xchg-r{me}")
        store = SampleStore(tier, LOCAL)
        go, stop = threading.Semaphore(0), threading.Event()
        own = list(range(2 * n, 2 * n + parts))      # the loader's samples: held, never exchanged
        buf = aligned_empty(max(nbytes, 4096))

        def loader() -> None:
            while True:
                go.acquire()
                if stop.is_set():
                    return
                for s in own:
                    store.read_into(s, buf)

        th = threading.Thread(target=loader, daemon=True)
        try:
            data = np.ones(nbytes, np.uint8)
            for s in (ids if me == 0 else ids + n).tolist() + own:
                store.put(s, data)
            th.start()
            ctx = SimpleNamespace(comm=comm, rank=me, sample_nbytes=nbytes, n_samples=2 * n + parts,
                                  clock=time.perf_counter_ns, workload=SimpleNamespace(name="calibrate"))
            ex = Exchange(ctx, Stores({LOCAL: store}), Timeline(8 * steps + 16, me))
            view = EpochView(plan, 0, me)
            ex.begin(view)
            for s in range(steps):
                a = time.perf_counter()
                go.release()             # the loader reads the next step's samples meanwhile
                ex.post(view, s)
                a1 = time.perf_counter()
                time.sleep(step_s)       # the step: no MPI call
                a2 = time.perf_counter()
                ex.complete(view, s)
                times.append((a1 - a) + (time.perf_counter() - a2))
            ex.finish(view)
        finally:
            stop.set()
            go.release()
            if th.is_alive():
                th.join()
            store.close()
            tier.close()
            _remove_tier_dirs(tier)
    mean = float(np.mean(times)) if times else 0.0
    return comm.bcast({"parts": parts, "sample_bytes": nbytes, "steps": len(times), "step_s": step_s,
                       "samples_per_step": 2 * parts, "mean_s": mean, "median_s": _median(times)}
                      if me == 0 else None, 0)


def _exchange_rate(comm, nbytes: int, parts: int = 8, slice_s: float = 1.0, step_s: float = 0.002) -> dict | None:
    """pls's exchange pattern between rank 0 and a peer (another node's rank when there is one): each
    posts ``irecv_parts`` and ``isend_parts`` of ``parts`` messages of ``nbytes`` (dlbench's comm layer, one
    message per sample), sleeps ``step_s`` (a training step) and waits for both; repeated for ``slice_s``.
    The time of posting and waiting (the sleep left out) gives one rank's send rate (MB/s, over the mean
    exchange: an epoch sums its exchanges, tail included); None with one rank."""
    if comm.size < 2:
        return None
    me, peer = comm.rank, _peer_of_rank0(comm)
    times: list = []
    if me in (0, peer):
        dst = peer if me == 0 else 0
        snd = [aligned_empty(nbytes) for _ in range(parts)]
        rcv = [aligned_empty(nbytes) for _ in range(parts)]
        for buf in snd + rcv:
            buf[:] = 1
        stop_at = time.perf_counter() + slice_s
        k = 0
        while True:
            a = time.perf_counter()
            rr = comm.irecv_parts(rcv, dst, tag=79)
            sr = comm.isend_parts(snd, dst, tag=79)
            a1 = time.perf_counter()
            time.sleep(step_s)       # the step: no MPI call, so (mpich) no progress
            a2 = time.perf_counter()
            rr.wait()
            sr.wait()
            b = time.perf_counter()
            times.append((a1 - a) + (b - a2))
            k += 1
            # both sides stop together: rank 0 decides and tells the peer with the next exchange's count
            go = np.array([1 if (b < stop_at or k < 5) else 0], dtype=np.int64)
            if me == 0:
                comm.isend(go, dst, tag=80).wait()
            else:
                comm.irecv(go, dst, tag=80).wait()
            if not go[0]:
                break
    mean = float(np.mean(times)) if times else 0.0
    rate = parts * nbytes / mean / MB if mean > 0 else 0.0
    return comm.bcast({"parts": parts, "message_bytes": nbytes, "exchanges": len(times), "mean_s": mean,
                       "median_s": _median(times), "p95_s": float(np.percentile(times, 95)) if times else 0.0,
                       "mb_per_s": rate} if me == 0 else None, 0)


def _median(v):
    return float(statistics.median(v)) if v else 0.0


def check_paths(data_dir: str, out: str) -> None:
    """``calibrate-storage``'s paths, checked before measuring: ``data_dir`` a folder (or an s3:// URL) and
    ``out`` a file path in a writable folder; each a one-line ConfigError."""
    outp = Path(out)
    if not data_dir.startswith("s3://") and not Path(data_dir).is_dir():
        raise ConfigError(f"--data-dir {data_dir}: no such directory")
    if outp.exists() and outp.is_dir():
        raise ConfigError(f"--out {out}: is a folder; give a file path for the profile YAML")
    if not outp.parent.exists() or not os.access(outp.parent, os.W_OK):
        raise ConfigError(f"--out {out}: folder {outp.parent} does not exist or is not writable (checked before "
                          f"measuring)")


def write_system_profile(prof: dict, out: str) -> Path:
    """Check that ``prof`` loads as a system profile, then write it to ``out`` atomically (a temporary file
    renamed into place); a write that fails is a one-line ConfigError naming --out."""
    import yaml

    from ..system import from_dict

    outp = Path(out)
    from_dict(prof, where="calibrate-storage")      # the written profile loads
    tmp = outp.with_name(f".{outp.name}.tmp{os.getpid()}")
    try:
        tmp.write_text("# written by dlbench calibrate-storage; calibration: the raw figures\n"
                       + yaml.safe_dump(prof, sort_keys=False))
        os.replace(tmp, outp)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"--out {out}: cannot write the profile ({e.strerror or e})") from None
    return outp


def calibrate_storage(data_dir, *, comm, local_dir=None, request_bytes: int | None = None,
                      max_threads: int = 8, budget_s: float = 60.0, repeat: int = 3, cache: CacheMode | str = CacheMode.DROP,
                      network_mb_per_s: float = 10000.0, name: str | None = None, echo=print) -> dict:
    """Measure (module docstring) and return the profile as a mapping (``system.from_dict`` reads it)."""
    mode = CacheMode.parse(cache)
    if budget_s <= 0 or not np.isfinite(budget_s):
        raise ConfigError(f"--budget-s {budget_s}: must be a positive number of seconds")
    s3url = str(data_dir) if str(data_dir).startswith("s3://") else None   # an S3 endpoint (storage.s3.probe)
    if s3url is not None:   # --cache then applies to the local tier only (S3 has no client page cache)
        files = []
        sizes = np.array([int(request_bytes or 1 << 20)] * 8)
    else:
        files = _files(Path(data_dir), LAT_BYTES)
    if not files and s3url is None:
        raise ConfigError(f"--data-dir {data_dir}: no regular files of at least {LAT_BYTES} bytes to read")
    sizes = np.array([s for _, s in files]) if s3url is None else sizes
    if request_bytes is None:
        request_bytes = int(min(int(np.median(sizes)), 1 << 20))
    request_bytes = max(LAT_BYTES, (int(request_bytes) // LAT_BYTES) * LAT_BYTES)
    threads = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max_threads] or [1]
    have_local = local_dir is not None
    points = (len(threads) * repeat + 4 + (3 * len(threads) * repeat + 1 if have_local else 0)
              + 2 * len(threads) * repeat)
    slice_s = max(0.05, budget_s / points)
    first_node_rank = comm.rank == min(r for r in range(comm.size) if comm.node_map[r] == comm.node_map[comm.rank])
    raw: dict = {"request_bytes": request_bytes, "slice_s": slice_s, "cache": mode.value, "ranks": comm.size,
                 "nodes": int(len(set(comm.node_map.tolist()))), "files": len(files),
                 "dataset_bytes": int(sizes.sum())}
    t_start = time.perf_counter()
    if mode is CacheMode.DIRECT and s3url is None and not _direct_ok(files[0][0]):
        if echo and comm.rank == 0:
            echo(f"  warning: O_DIRECT is not supported on {data_dir}'s file system: measuring with --cache drop")
        mode = CacheMode.DROP
        raw["cache"] = "drop (O_DIRECT unsupported)"
    policy = mode.policy()   # the shared tier's O_DIRECT reads and the evictions before every point
    direct = policy.shared_direct

    def cold(paths):
        if policy.evict:
            if first_node_rank:
                evict(paths)
            comm.barrier()

    # --- shared tier: t(γ), latency ---
    agg: dict = {}
    if s3url is not None:   # GETs against the endpoint (the probe's own objects)
        from ..storage.s3 import probe

        raw["s3"] = probe(s3url, comm=comm, threads=threads, request_bytes=request_bytes, slice_s=slice_s,
                          repeat=repeat, echo=echo)
        agg = raw["s3"].pop("agg")
        raw["latency_s"] = raw["s3"]["latency_s"]
        raw["dataset_bytes"] = 0
    else:
        cold([p for p, _ in files])
        _, lat = read_rate(files, 1, LAT_BYTES, slice_s, comm, seed=1, latency=True, direct=direct)
        raw["latency_s"] = {"median": _median(lat), "p95": float(np.percentile(lat, 95)) if lat else 0.0,
                            "requests": len(lat or [])}
    for t in threads if s3url is None else ():
        vals = []
        for k in range(repeat):
            cold([p for p, _ in files])
            r, _ = read_rate(files, t, request_bytes, slice_s, comm, seed=10 + k, direct=direct)
            vals.append(r)
        agg[t * comm.size] = vals
        if echo and comm.rank == 0:
            echo(f"  shared tier: {t * comm.size:>3} readers  {_median(vals):>10,.1f} MB/s  "
                 f"({min(vals):,.1f} .. {max(vals):,.1f})")
    raw["shared_mb_per_s"] = {str(k): v for k, v in agg.items()}
    # --- shared tier, write side: checkpoint-like files, fsync, a publish's metadata operations ---
    if s3url is not None:   # an object store's write side is its PUT rate (calibration.s3.put_mb_per_s); the
        # POSIX probe below would write its files under the URL taken as a local path (the cwd's "s3:/...")
        if echo and comm.rank == 0:
            echo("  shared tier, write side: not measured as files (the shared tier is S3: its PUT rate above)")
    else:
        wd = Path(data_dir) / f".dlbench-calibrate-write-r{comm.rank}"
        try:
            wagg: dict = {}
            wfs: list = []
            for t in threads:
                vals = []
                for _ in range(repeat):
                    comm.barrier()
                    mb, fs = _shared_write(wd, t, slice_s)
                    vals.append(comm.allreduce(mb, "sum"))
                    wfs += fs
                wagg[t * comm.size] = vals
                if echo and comm.rank == 0:
                    echo(f"  shared tier: {t * comm.size:>3} writers  {_median(vals):>10,.1f} MB/s  (files of "
                         f"{format_bytes(WRITE_FILE_BYTES, 'MiB', digits=0)}, each fsync'd)")
            ops = _dir_ops(wd)
        finally:
            try:
                wd.rmdir()
            except OSError:
                pass
        raw["shared_write"] = {"file_bytes": WRITE_FILE_BYTES, "mb_per_s": {str(k): v for k, v in wagg.items()},
                               "fsync_s": {"median": _median(wfs), "p99": float(np.percentile(wfs, 99)) if wfs else 0.0,
                                           "count": len(wfs)}, **ops}
        if echo and comm.rank == 0:
            echo(f"  shared tier: fsync of a {format_bytes(WRITE_FILE_BYTES, 'MiB', digits=0)} file {_median(wfs) * 1e3:,.2f} ms (median); "
                 f"small file + fsync {ops['small_file_s'] * 1e3:,.2f} ms, rename {ops['rename_s'] * 1e6:,.0f} us, "
                 f"folder fsync {ops['dir_fsync_s'] * 1e3:,.2f} ms, unlink {ops['unlink_s'] * 1e6:,.0f} us")
    # --- the format reader's own cost (page cache warm) ---
    rc: dict = _reader_cost(Path(data_dir), slice_s, seed=3 + comm.rank) if s3url is None else \
        {"skipped": "the shared tier is S3 (no page cache)"}
    raw["format_reader"] = rc
    open_s = cached = None
    if "skipped" in rc and echo and comm.rank == 0:
        echo(f"  format reader: not measured ({rc['skipped']})")
    if "skipped" not in rc:
        t_rd = comm.allreduce(rc["reader_s"]["mean"], "sum") / comm.size
        t_pr = comm.allreduce(rc["pread_s"]["mean"], "sum") / comm.size
        cached = rc["sample_bytes"] / t_pr / MB if t_pr > 0 else None
        open_s = t_rd - t_pr if t_rd > t_pr else None
        if echo and comm.rank == 0:
            echo(f"  format reader ({rc['layout']}): {t_rd * 1e6:,.1f} us per sample, bare pread {t_pr * 1e6:,.1f} us"
                 f" -> open/parse {((t_rd - t_pr) * 1e6):,.1f} us per file")
    # --- local tier: w(p), r(p) ---
    local_r, local_w, local_c, fw = {}, {}, {}, {}
    fwfit: tuple[float, float] | None = None
    if have_local:
        ld = Path(local_dir) / f"dlbench-calibrate-r{comm.rank}"
        try:
            per = max(request_bytes * 8, int(min(sizes.sum(), 64 << 20)))
            for t in threads:
                wv, rv, cv = [], [], []
                for k in range(repeat):
                    lf, w = _write_files(ld, t, per, request_bytes)
                    wv.append(comm.allreduce(w, "sum"))
                    c, _ = read_rate(lf, t, request_bytes, slice_s, comm, seed=200 + k)   # as written: cached
                    cv.append(c / comm.size)
                    cold([p for p, _ in lf])
                    r, _ = read_rate(lf, t, request_bytes, slice_s, comm, seed=100 + k, direct=direct)
                    rv.append(r / comm.size)       # a node's figure (one rank per node measures its own disk)
                local_w[t], local_r[t], local_c[t] = wv, rv, cv
                if echo and comm.rank == 0:
                    echo(f"  local tier:  {t:>3} threads  read {_median(rv):>10,.1f} MB/s  write "
                         f"{_median(wv) / comm.size:>10,.1f} MB/s  read cached {_median(cv):>10,.1f} MB/s")
            fw = _file_write_cost(ld, request_bytes, slice_s)
        finally:
            for p in ld.glob("calib-*.bin"):
                p.unlink(missing_ok=True)
            try:
                ld.rmdir()
            except OSError:
                pass
        raw["local_read_mb_per_s"] = {str(k): v for k, v in local_r.items()}
        raw["local_read_cached_mb_per_s"] = {str(k): v for k, v in local_c.items()}
        small, big = (comm.allreduce(fw[k]["per_file_s"], "sum") / comm.size for k in (LAT_BYTES, request_bytes))
        raw["local_file_write_s"] = {"bytes": [LAT_BYTES, request_bytes], "per_file_s": [small, big],
                                     "rank0": {str(k): v for k, v in fw.items()}}
        if big > small > 0:
            rate = (request_bytes - LAT_BYTES) / (big - small)
            fixed = small - LAT_BYTES / rate
            if fixed > 0:
                fwfit = (fixed, rate / MB)
            if echo and comm.rank == 0:
                echo(f"  local tier:  file create/write/rename/unlink {fixed * 1e6:,.1f} us per file + "
                     f"{rate / MB:,.1f} MB/s")
        local_w = {k: [x / comm.size for x in v] for k, v in local_w.items()}    # a node's figure, as r(p)
        raw["local_write_mb_per_s"] = {str(k): v for k, v in local_w.items()}
    # --- memory copies ---
    mem = {}
    for t in threads:
        mem[t] = [_copy_rate(t, request_bytes, slice_s) for _ in range(repeat)]
    raw["memory_copy_mb_per_s"] = {str(k): v for k, v in mem.items()}
    # --- wake-up latency ---
    wk = _wake_latency(comm, slice_s)
    raw["wake_latency"] = {str(k): v for k, v in wk.items()}
    if echo and comm.rank == 0:
        echo("  wake-up latency (sleep d ends late by, mean): " + ", ".join(
            f"{d * 1e3:g} ms: {v['mean_s'] * 1e6:,.0f} us" for d, v in wk.items()))
    # --- loader worker start ---
    ws = _worker_start(repeat)
    wmed = comm.allreduce(_median(ws), "max") if ws else None
    raw["worker_start_s"] = ws
    if echo and comm.rank == 0 and wmed:
        echo(f"  loader worker start (fork to first sample): {wmed * 1e3:,.1f} ms")
    # --- loader hand-off (DataLoader worker -> trainer, per batch) ---
    ho = _loader_handoff(repeat, request_bytes)
    raw["loader_handoff"] = ho
    ho_t = ho_w = 0.0   # read only where ho (the hand-off was measured)
    if ho:
        ho_t = comm.allreduce(_median(ho["trainer_s"]), "max")
        ho_w = comm.allreduce(_median(ho["worker_s"]), "max")
    if echo and comm.rank == 0 and ho:
        echo(f"  loader hand-off per batch of {HANDOFF_BATCH} x {request_bytes:,} B: trainer {ho_t * 1e3:,.3f} ms, "
             f"worker {ho_w * 1e3:,.3f} ms")
    # --- network ---
    net = _pingpong(comm)
    raw["network_mb_per_s"] = net
    xr = _exchange_rate(comm, request_bytes, slice_s=slice_s)
    raw["exchange"] = xr
    if echo and comm.rank == 0 and xr:
        echo(f"  network: ping-pong {net:,.1f} MB/s; exchange of {xr['parts']} x {request_bytes:,} B each way "
             f"{xr['mb_per_s']:,.1f} MB/s per rank")
    xs = _exchange_stage_cost(comm, request_bytes, local_dir) if (have_local and xr and xr["mb_per_s"] > 0) else None
    raw["exchange_stage"] = xs
    x_sample = None
    if xs and xr:
        beyond = xs["mean_s"] - xs["parts"] * request_bytes / (xr["mb_per_s"] * MB)
        x_sample = max(beyond, 0.0) / xs["samples_per_step"]
        if echo and comm.rank == 0:
            echo(f"  exchange through the stage (local tier, {xs['parts']} x {request_bytes:,} B each way per step): "
                 f"{xs['mean_s'] * 1e3:,.3f} ms per step -> {x_sample * 1e6:,.1f} us per sample sent or received "
                 f"beyond the bytes")
    raw["elapsed_s"] = time.perf_counter() - t_start

    def curve(d, key):
        return [{key: int(k), "mb_per_s": round(float(max(_median(d[k]), 1e-3)), 3)} for k in sorted(d)]

    mem_total = _meminfo_total()
    profile: dict = {
        "name": name or f"calibrated-{os.uname().nodename}",
        "description": f"measured by dlbench calibrate-storage on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
                       f" ({comm.size} rank(s), cache {mode}, {request_bytes:,} B requests)",
        "network_mb_per_s": round(float(net), 3) if net else float(network_mb_per_s),
        "pfs": {"latency_s": round(raw["latency_s"]["median"], 7),
                "client_link_mb_per_s": round(max(_median(agg[min(agg)]) / comm.size, 1e-3), 3),
                "aggregate": curve(agg, "clients")},
        "staging": {"capacity_bytes": float(mem_total // 4), "threads": int(min(max_threads, os.cpu_count() or 1)),
                    "write_mb_per_s": round(_median(mem[1]), 3), "bandwidth": curve(mem, "threads")},
        "tiers": [{"name": "ram", "kind": "memory", "capacity_bytes": float(mem_total // 2),
                   "threads": int(min(max_threads, os.cpu_count() or 1)), "bandwidth": curve(mem, "threads")}],
        "sources": [f"dlbench calibrate-storage --data-dir {data_dir}" + (f" --local-dir {local_dir}" if have_local
                                                                          else ""),
                    "network: " + ("MPI ping-pong, 16 MiB" if net else "not measured (one rank): the default")],
        "calibration": raw,
    }
    if s3url is not None:   # the shared tier is an object store: the model costs its requests (simulate)
        profile["pfs"]["kind"] = "object_store"
        profile["description"] += f"; shared tier: S3 at {raw['s3']['endpoint']}"
    if open_s:
        profile["pfs"]["open_s"] = round(open_s, 7)
    if cached:
        profile["pfs"]["cached_mb_per_s"] = round(cached, 3)
    if wmed:
        profile["worker_start_s"] = round(wmed, 5)
    if ho:
        profile["loader_batch_s"] = round(ho_t, 7)
        profile["loader_worker_batch_s"] = round(ho_w, 7)
    profile["wake_latency"] = [{"wait_s": d, "late_s": round(max(v["mean_s"], 0.0), 7)} for d, v in wk.items()]
    if xr and xr["mb_per_s"] > 0:
        profile["exchange_mb_per_s"] = round(xr["mb_per_s"], 3)
    if x_sample is not None:
        profile["exchange_sample_s"] = round(x_sample, 7)
    avail = _meminfo("MemAvailable:")
    if avail:
        profile["page_cache_bytes"] = float(avail)
    if have_local:
        free = os.statvfs(local_dir)
        profile["tiers"].append({"name": "disk", "kind": "local", "capacity_bytes": float(free.f_bavail * free.f_frsize),
                                 "threads": int(min(max_threads, os.cpu_count() or 1)),
                                 "bandwidth": curve(local_r, "threads"),
                                 "write_bandwidth": curve(local_w, "threads"),
                                 "cached_bandwidth": curve(local_c, "threads"),
                                 **({"file_write_s": round(fwfit[0], 7),
                                     "cached_write_mb_per_s": round(fwfit[1], 3)} if fwfit else {})})
    return profile


def _direct_ok(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = aligned_empty(LAT_BYTES)
        os.preadv(fd, [buf.data], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _meminfo(key: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _meminfo_total() -> int:
    return _meminfo("MemTotal:") or 8 << 30


__all__ = ["calibrate_storage", "check_paths", "read_rate", "write_system_profile"]
