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
- **local tier** r(p): the same random reads on files written under ``--local-dir``, with p threads; w(p):
  writing them (``pwrite`` + ``fsync``), p threads (the tier's ``write_bandwidth``).
- **memory** r_0(p): a page-aligned memory copy of ``request_bytes`` rows with p threads (NumPy copies release
  the GIL); the staging write rate β is p = 1.
- **network** b_c: an MPI ping-pong of 16 MiB between rank 0 and a rank on another node (or another rank
  on this node when there is one node), under ``mpiexec``/``srun``; absent in a 1-rank run (the profile then
  keeps ``--network-mb-per-s``, stated as not measured).

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

from ..errors import ConfigError
from . import aligned_empty
from .pagecache import evict

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
                off += os.pwrite(fd, buf, off)
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


def _pingpong(comm, nbytes: int = 16 << 20, reps: int = 5) -> float | None:
    if comm.size < 2:
        return None
    nm = comm.node_map
    me = comm.rank
    other = [r for r in range(comm.size) if nm[r] != nm[0]]
    peer = other[0] if other else 1
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


def _median(v):
    return float(statistics.median(v)) if v else 0.0


def calibrate_storage(data_dir, *, comm, local_dir=None, request_bytes: int | None = None,
                      max_threads: int = 8, budget_s: float = 60.0, repeat: int = 3, cache: str = "drop",
                      network_mb_per_s: float = 10000.0, name: str | None = None, echo=print) -> dict:
    """Measure (module docstring) and return the profile as a mapping (``system.from_dict`` reads it)."""
    if cache not in ("direct", "drop", "keep"):
        raise ConfigError(f"--cache {cache!r}: choose direct, drop or keep")
    if budget_s <= 0 or not np.isfinite(budget_s):
        raise ConfigError(f"--budget-s {budget_s}: must be a positive number of seconds")
    files = _files(Path(data_dir), LAT_BYTES)
    if not files:
        raise ConfigError(f"--data-dir {data_dir}: no regular files of at least {LAT_BYTES} bytes to read")
    sizes = np.array([s for _, s in files])
    if request_bytes is None:
        request_bytes = int(min(int(np.median(sizes)), 1 << 20))
    request_bytes = max(LAT_BYTES, (int(request_bytes) // LAT_BYTES) * LAT_BYTES)
    threads = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max_threads] or [1]
    have_local = local_dir is not None
    points = len(threads) * repeat + 1 + (2 * len(threads) * repeat if have_local else 0) + len(threads) * repeat
    slice_s = max(0.05, budget_s / points)
    first_node_rank = comm.rank == min(r for r in range(comm.size) if comm.node_map[r] == comm.node_map[comm.rank])
    raw: dict = {"request_bytes": request_bytes, "slice_s": slice_s, "cache": cache, "ranks": comm.size,
                 "nodes": int(len(set(comm.node_map.tolist()))), "files": len(files),
                 "dataset_bytes": int(sizes.sum())}
    t_start = time.perf_counter()
    direct = cache == "direct"
    if direct and not _direct_ok(files[0][0]):
        if echo and comm.rank == 0:
            echo(f"  warning: O_DIRECT is not supported on {data_dir}'s file system: measuring with --cache drop")
        direct, cache = False, "drop"
        raw["cache"] = "drop (O_DIRECT unsupported)"

    def cold(paths):
        if cache == "drop":
            if first_node_rank:
                evict(paths)
            comm.barrier()

    # --- shared tier: t(γ), latency ---
    cold([p for p, _ in files])
    _, lat = read_rate(files, 1, LAT_BYTES, slice_s, comm, seed=1, latency=True, direct=direct)
    raw["latency_s"] = {"median": _median(lat), "p95": float(np.percentile(lat, 95)) if lat else 0.0,
                        "requests": len(lat or [])}
    agg = {}
    for t in threads:
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
    # --- local tier: w(p), r(p) ---
    local_r, local_w = {}, {}
    if have_local:
        ld = Path(local_dir) / f"dlbench-calibrate-r{comm.rank}"
        try:
            per = max(request_bytes * 8, int(min(sizes.sum(), 64 << 20)))
            for t in threads:
                wv, rv = [], []
                for k in range(repeat):
                    lf, w = _write_files(ld, t, per, request_bytes)
                    wv.append(comm.allreduce(w, "sum"))
                    cold([p for p, _ in lf])
                    r, _ = read_rate(lf, t, request_bytes, slice_s, comm, seed=100 + k, direct=direct)
                    rv.append(r / comm.size)       # a node's figure (one rank per node measures its own disk)
                local_w[t], local_r[t] = wv, rv
                if echo and comm.rank == 0:
                    echo(f"  local tier:  {t:>3} threads  read {_median(rv):>10,.1f} MB/s  write "
                         f"{_median(wv) / comm.size:>10,.1f} MB/s")
        finally:
            for p in ld.glob("calib-*.bin"):
                p.unlink(missing_ok=True)
            try:
                ld.rmdir()
            except OSError:
                pass
        raw["local_read_mb_per_s"] = {str(k): v for k, v in local_r.items()}
        local_w = {k: [x / comm.size for x in v] for k, v in local_w.items()}    # a node's figure, as r(p)
        raw["local_write_mb_per_s"] = {str(k): v for k, v in local_w.items()}
    # --- memory copies ---
    mem = {}
    for t in threads:
        mem[t] = [_copy_rate(t, request_bytes, slice_s) for _ in range(repeat)]
    raw["memory_copy_mb_per_s"] = {str(k): v for k, v in mem.items()}
    # --- network ---
    net = _pingpong(comm)
    raw["network_mb_per_s"] = net
    raw["elapsed_s"] = time.perf_counter() - t_start

    def curve(d, key):
        return [{key: int(k), "mb_per_s": round(float(max(_median(d[k]), 1e-3)), 3)} for k in sorted(d)]

    mem_total = _meminfo_total()
    profile: dict = {
        "name": name or f"calibrated-{os.uname().nodename}",
        "description": f"measured by dlbench calibrate-storage on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
                       f" ({comm.size} rank(s), cache {cache}, {request_bytes:,} B requests)",
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
    if have_local:
        free = os.statvfs(local_dir)
        profile["tiers"].append({"name": "disk", "kind": "local", "capacity_bytes": float(free.f_bavail * free.f_frsize),
                                 "threads": int(min(max_threads, os.cpu_count() or 1)),
                                 "bandwidth": curve(local_r, "threads"),
                                 "write_bandwidth": curve(local_w, "threads")})
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


def _meminfo_total() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


__all__ = ["calibrate_storage", "read_rate"]
