"""Darshan-style I/O counters: names, layout and the pure aggregation (no I/O, no MPI, no clocks).

Every process keeps, per *file class* (``shared``: the dataset dir; ``local``: node-local copies;
``memory``: the in-process memory tier; ``checkpoint``), one flat vector of integers laid out as
``COUNTERS`` (``dlbench.storage.counters`` records into it on the read path). Names and meanings are
Darshan's POSIX and H5D modules':

- ``POSIX_OPENS``: files opened (an HDF5 file read with ``pread`` counts twice: the HDF5 handle and the
  descriptor dlbench keeps beside it); ``POSIX_READS`` / ``POSIX_BYTES_READ``: read calls and their bytes;
- ``POSIX_SIZE_READ_*``: the access-size histogram, Darshan's buckets (``DARSHAN_BUCKET_INC``: a read of
  s bytes falls in 0_100 if s <= 100, 100_1K if s <= 1024, 1K_10K if s <= 10240, ... 1G_PLUS above 2^30);
- ``POSIX_SEQ_READS``: reads at an offset past the last byte read before in the same file
  (``offset > last_byte_read``); ``POSIX_CONSEC_READS``: reads that start right after it
  (``offset == last_byte_read + 1``). As in Darshan, ``last_byte_read`` starts at 0 per file and is kept
  across re-opens by the same process, so a file's first read at offset 0 is neither;
- ``POSIX_MAX_BYTE_READ``: the highest byte offset read in any file of the class;
- ``POSIX_F_READ_TIME``: cumulative seconds in read calls; ``POSIX_F_MAX_READ_TIME``: the slowest single
  read (s). Internally nanoseconds; reported in seconds;
- ``POSIX_WRITES`` / ``POSIX_BYTES_WRITTEN`` / ``POSIX_F_WRITE_TIME``: writes (staging copies, checkpoints);
- ``H5D_OPENS`` / ``H5D_READS`` / ``H5D_BYTES_READ``: HDF5 dataset opens and ``H5Dread`` calls. Rows that
  dlbench reads with ``pread`` at a contiguous dataset's offset (the default for shared/blocks layouts)
  are POSIX reads, not H5D reads — as Darshan would see them;
- ``H5F_OPENS``: HDF5 files opened (``H5Fopen``, Darshan's H5F module). libhdf5 reads the file's metadata
  (superblock, object headers, heaps) with its own ``pread`` calls inside ``H5Fopen``/``H5Dopen``; dlbench
  cannot see them (h5py calls the library, which reads on its own), so they are NOT in ``POSIX_READS`` /
  ``POSIX_BYTES_READ``: those count the data dlbench (or ``H5Dread`` for it) reads. A POSIX tracer sees
  them: under dftracer (tests/tracer), an ``H5Fopen`` of a dlbench skeleton costs 9 reads, 3,024 B of
  metadata, and a re-open in a process that still holds the file open costs none (libhdf5 shares the
  open file). ``dlbench import dftracer`` counts them from a trace.

Aggregation: counters add over files, processes and ranks, except the ``MAX_KEYS`` (maximum).
"""

from __future__ import annotations

BUCKETS = ("POSIX_SIZE_READ_0_100", "POSIX_SIZE_READ_100_1K", "POSIX_SIZE_READ_1K_10K",
           "POSIX_SIZE_READ_10K_100K", "POSIX_SIZE_READ_100K_1M", "POSIX_SIZE_READ_1M_4M",
           "POSIX_SIZE_READ_4M_10M", "POSIX_SIZE_READ_10M_100M", "POSIX_SIZE_READ_100M_1G",
           "POSIX_SIZE_READ_1G_PLUS")
# upper bounds (inclusive) of the first nine buckets: bisect_left(BUCKET_EDGES, s) is the bucket of s
BUCKET_EDGES = (100, 1024, 10240, 102400, 1 << 20, 4 << 20, 10 << 20, 100 << 20, 1 << 30)

COUNTERS: tuple[str, ...] = ("POSIX_OPENS", "POSIX_READS", "POSIX_BYTES_READ", *BUCKETS, "POSIX_SEQ_READS", "POSIX_CONSEC_READS",
            "POSIX_MAX_BYTE_READ", "POSIX_F_READ_TIME", "POSIX_F_MAX_READ_TIME", "POSIX_WRITES",
            "POSIX_BYTES_WRITTEN", "POSIX_F_WRITE_TIME", "H5D_OPENS", "H5D_READS", "H5D_BYTES_READ", "H5F_OPENS")
# memory-mapped reads (the token datasets' numpy.memmap reader, dlbench/data/fmt_indexed.py): copies out of a map
# bypass read calls, so they are counted apart: copies and bytes, the minor/major page faults the copies took
# (getrusage around each copy) and the bytes the process fetched from the block device (/proc/self/io read_bytes)
MMAP_COUNTERS = ("MMAP_READS", "MMAP_BYTES_READ", "MMAP_MINOR_FAULTS", "MMAP_MAJOR_FAULTS", "MMAP_DEVICE_BYTES_READ")
COUNTERS = (*COUNTERS, *MMAP_COUNTERS)
IDX = {k: i for i, k in enumerate(COUNTERS)}
N = len(COUNTERS)
MAX_KEYS = ("POSIX_MAX_BYTE_READ", "POSIX_F_MAX_READ_TIME")
TIME_KEYS = ("POSIX_F_READ_TIME", "POSIX_F_MAX_READ_TIME", "POSIX_F_WRITE_TIME")  # ns inside, s outside
CLASSES = ("shared", "local", "memory", "checkpoint")

NOTE = ("Darshan-style counters of dlbench's own I/O, per file class (shared = the dataset dir, local = "
        "node-local copies, memory = the in-process memory tier, checkpoint), per rank; DataLoader workers' "
        "reads included. Reads are counted per read call (one per array of a sample); HDF5's own metadata "
        "reads are not seen (H5F_OPENS counts the opens that cause them; a POSIX tracer such as dftracer counts them: `dlbench import dftracer`); H5D_READS counts H5Dread calls only (rows read with pread at a contiguous "
        "dataset's offset are POSIX reads); memory-tier reads are copies, with no offsets (no SEQ/CONSEC); files that are not samples (the dataset's "
        "manifest, the local dir's write probe) are not counted. "
        "Times in seconds; with an emulated PFS (--system with pfs) read times include the modelled wait.")

_MAX_I = tuple(IDX[k] for k in MAX_KEYS)
_TIME_I = tuple(IDX[k] for k in TIME_KEYS)


def zeros() -> list[int]:
    return [0] * N


def combine(vectors) -> list[int]:
    """Several raw vectors (ints, times in ns) into one: sums, and maxima for ``MAX_KEYS``."""
    out = zeros()
    for v in vectors:
        if len(v) != N:
            raise ValueError(f"a counter vector has {len(v)} entries, expected {N}")
        for i in range(N):
            out[i] = max(out[i], int(v[i])) if i in _MAX_I else out[i] + int(v[i])
    return out


def to_named(vec) -> dict:
    """A raw vector as ``{COUNTER: value}``, times in seconds (floats), everything else ints."""
    return {k: (int(vec[i]) / 1e9 if i in _TIME_I else int(vec[i])) for i, k in enumerate(COUNTERS)}


def from_named(d: dict) -> list[int]:
    """The inverse of ``to_named`` (missing counters are 0)."""
    return [int(round(float(d.get(k, 0) or 0) * 1e9)) if i in _TIME_I else int(d.get(k, 0) or 0)
            for i, k in enumerate(COUNTERS)]


def summarize(per_rank: list[dict]) -> dict:
    """``per_rank``: for every rank, ``{class: raw vector}`` (already combined over the rank's processes).
    Returns the run.json block ``{"by_class", "by_rank", "by_rank_class", "slowest_rank", "buckets", "note"}``:
    by_class over all ranks (classes with no activity left out), by_rank over all classes of each rank,
    by_rank_class each rank's classes apart (``[{class: counters}]``, classes with no activity left out), and
    the rank with the largest cumulative read time."""
    classes = [c for c in CLASSES if any(c in r for r in per_rank)]
    classes += sorted({c for r in per_rank for c in r} - set(classes))
    by_class = {}
    for c in classes:
        v = combine(r[c] for r in per_rank if c in r)
        if any(v):
            by_class[c] = to_named(v)
    by_rank = [to_named(combine(r.values()) if r else zeros()) for r in per_rank]
    by_rank_class = [{c: to_named(combine([v])) for c, v in sorted(r.items()) if any(v)} for r in per_rank]
    slowest = None
    if by_rank:
        r = max(range(len(by_rank)), key=lambda k: by_rank[k]["POSIX_F_READ_TIME"])
        slowest = {"rank": r, "POSIX_F_READ_TIME": by_rank[r]["POSIX_F_READ_TIME"]}
    return {"by_class": by_class, "by_rank": by_rank, "by_rank_class": by_rank_class, "slowest_rank": slowest,
            "buckets": list(BUCKETS),
            "note": NOTE}


def bucket_label(name: str) -> str:
    """``POSIX_SIZE_READ_100K_1M`` -> ``100K_1M``."""
    return name.rsplit("READ_", 1)[-1]
