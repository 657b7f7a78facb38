"""The same DLIO workload config through DLIO 2.0.0 and through ``dlbench run --dlio-config``, on this machine, in
one invocation (issue 18): files, bytes and samples per epoch of both (they must match), and samples/s of both.

    PYTHONPATH=. python benchmarks/dlio_side_by_side.py [--dlio-venv /tmp/dliovenv] [--config FILE]...
        [--repeat 3] [--work DIR] [--keep] [++workload.KEY=VALUE]...

Default configs (``benchmarks/dlio_configs``): ``hdf5_small.yaml`` (256 samples of 64 KiB, 4 per HDF5 file),
``hdf5_quirks.yaml`` (100 one-sample files of 100,000 B, batch 8) and ``hdf5_noshuffle.yaml`` (DLIO's default
``sample_shuffle: off``; dlbench runs it with ``--allow-unsupported``, as ``--allow-unsupported`` does for every
``--config``), ``npz_small.yaml`` (64 one-sample npz files of 64 KiB) and ``tfrecord_small.yaml`` (8 TFRecord
files of 16 records of 64 KiB, DLIO's TensorFlow loader), each skipped in one line by a dlbench without the
layout. DLIO 2.0.0's own schema (``model: NAME``,
``dataset.record_length``; a config in the later spelling ``record_length_bytes`` is refused: DLIO 2.0.0 ignores
that key). ``++workload.KEY=VALUE`` overrides go to both tools. A config whose format dlbench does not read yet
(npz, npy, tfrecord before the format registry has them) says so in one line and the next config runs.

DLIO 2.0.0 lives in its own venv (its pins clash with dlbench's). Build it once (CPU only; ~1.5 GB):

    python3 -m venv /tmp/dliovenv
    /tmp/dliovenv/bin/pip install --no-deps dlio-benchmark==2.0.0
    /tmp/dliovenv/bin/pip install "hydra-core>=1.3.2" "omegaconf>=2.2.0" numpy "h5py>=3.11.0" "pandas>=1.5.1" \\
        "psutil>=5.9.8" "mpi4py>=3.1.4" mpich "Pillow>=9.3.0" "PyYAML>=6.0.0"
    /tmp/dliovenv/bin/pip install torch==2.13.0 tensorflow-cpu     # 2.0.0 imports tensorflow at start
    /tmp/dliovenv/bin/pip install pydftracer==1.0.2                # 2.0.0 cannot start without it (its fallback
                                                                   # decorators are broken), and it is the tracer
(``--no-deps`` because the wheel also requires nvidia-dali-cuda110, torchaudio and torchvision, which the CPU
path never imports; ``mpich`` is the PyPI MPI that gives the venv its ``mpirun``.)

What each tool runs (``--work``, default a temporary folder, removed unless ``--keep``):

1. DLIO generates its dataset (``++workload.workflow.generate_data=True ++workload.workflow.train=False``, with
   ``generation_buffer_size`` = one file's records: DLIO's default 2 GiB buffer makes it draw 2 GiB of random
   numbers per file), dlbench its own (a first ``dlbench run --dlio-config``, not measured).
2. Counting runs, each tool under dftracer (DLIO: its own pydftracer, ``DFTRACER_ENABLE=1``; dlbench: the
   ``libdftracer_preload.so`` of the dftracer wheel in this Python, with ``DLBENCH_READ_CALL=readv``, which
   dftracer intercepts). The POSIX calls on the dataset's files are binned by epoch (DLIO: its
   per_epoch_stats.json start/end; dlbench: its timelogger.csv): files read, and the distinct bytes of the
   samples' data read (for HDF5: inside the files' datasets, each byte once): these must match. Opens, read calls,
   all bytes read and libhdf5's own metadata reads are shown, not compared (each tool's read path). Samples per epoch:
   DLIO's steps per epoch (its ``0_output.json``) x batch; dlbench's ``summary.samples_per_epoch``.
3. ``--repeat`` timed rounds, untraced, DLIO then dlbench each round: samples/s per epoch as each tool reports it
   (DLIO: steps x batch / its block time; dlbench: samples / slowest rank's epoch time). The median over the
   rounds is printed, with every round's figures. Warm page cache for both (the datasets are small).

DLIO 2.0.0 figures stated rather than matched (the output says which apply to the run):

- ``train_io_mean_MB_per_second`` is samples/s x ``record_length`` / 2^20: nominal. It is not the bytes read:
  DLIO writes int(sqrt(record_length))^2 B per record, and its HDF5 reader opens and closes the file for every
  sample (read_type on_demand), so libhdf5 re-reads the file's metadata each time and its sieve buffer reads
  past a small record to the dataset's end (x2.5 the records' bytes with 4 KiB records, 4 per file). The table
  gives the MB/s of the bytes the trace saw over DLIO's own epoch times next to DLIO's figure.
- Its PyTorch path does not shuffle with its default ``sample_shuffle: off``: every epoch reads the samples in
  file order (``dlio_sampler``; ``file_shuffle`` is not used by its index sampler). With ``sample_shuffle: seed``
  it does shuffle: ``dlio_sampler`` re-seeds NumPy with ``train.seed`` (not seed + epoch: ``seed_change_epoch`` is
  not read there) and shuffles the previous epoch's order again, in place. The trace shows which: each epoch's
  data reads are checked against file order and against the first epoch's order. dlbench always reads a new
  seeded permutation per epoch, so the unshuffled config (``hdf5_noshuffle.yaml``) runs dlbench with
  ``--allow-unsupported``.
- Its PyTorch loader drops the last partial batch (``drop_last=True``, floor(N / batch / ranks) steps); dlbench's
  translation of a DLIO config drops it too (prefetch ``--drop-last-batch``), so samples per epoch match; a
  difference there is flagged as known only in case an older dlbench (which read the short last batch) ran.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the default configs, each with whether dlbench runs it with --allow-unsupported
CONFIGS = [(ROOT / "benchmarks" / "dlio_configs" / "hdf5_small.yaml", False),
           (ROOT / "benchmarks" / "dlio_configs" / "hdf5_quirks.yaml", False),
           (ROOT / "benchmarks" / "dlio_configs" / "hdf5_noshuffle.yaml", True),
           (ROOT / "benchmarks" / "dlio_configs" / "npz_small.yaml", False),
           (ROOT / "benchmarks" / "dlio_configs" / "tfrecord_small.yaml", False)]
BUILD = ("python3 -m venv V && V/bin/pip install --no-deps dlio-benchmark==2.0.0 && V/bin/pip install hydra-core "
         "omegaconf numpy h5py pandas psutil mpi4py mpich Pillow PyYAML pydftracer==1.0.2 torch==2.13.0 "
         "tensorflow-cpu (see this script's docstring)")

OPEN_CALLS = frozenset(("open", "open64", "openat", "openat64", "__open_2", "__open64_2", "fopen", "fopen64"))
READ_AT_CALLS = frozenset(("pread", "pread64", "preadv", "preadv64", "preadv2", "preadv64v2"))
READ_POS_CALLS = frozenset(("read", "readv", "fread", "__read_chk"))
SEEK_CALLS = frozenset(("lseek", "lseek64"))
UNIT_S = {"US": 1e-6, "NS": 1e-9, "MS": 1e-3, "S": 1.0}


class Refused(Exception):
    """A config or setup that cannot be compared: one line, no traceback."""


class NotYet(Refused):
    """A config whose format this dlbench does not read yet: skipped (the exit status does not change)."""


# ---- pure: DLIO's and dlbench's outputs, traces, the comparison ------------------------------------------------

def _utc(ts: str) -> float:
    """DLIO's utcnow() string (``%Y-%m-%dT%H:%M:%S.%f``, UTC) as a Unix time."""
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def parse_dlio_output(summary: dict, per_epoch_stats: dict, rank0_output: dict, batch: int) -> dict:
    """DLIO 2.0.0's output folder (``summary.json``, ``per_epoch_stats.json``, ``0_output.json`` of rank 0) as
    {epochs, steps_per_epoch, samples_per_epoch (rank 0's steps x batch x ranks), samples_per_s (per epoch,
    DLIO's train_throughput_samples_per_second), nominal_MB_per_s (DLIO's train_io_mean_MB_per_second),
    au_percent, windows (per epoch (start, end) Unix times), num_files_train, num_samples_per_file}."""
    m = summary.get("metric") or {}
    ranks = int(summary.get("num_accelerators") or 1)
    epochs = sorted(int(k) for k in rank0_output if k.isdigit())
    steps = []
    for e in epochs:
        proc = rank0_output[str(e)].get("proc") or {}
        if isinstance(proc, dict):
            steps.append(sum(len(v) for k, v in proc.items() if k.startswith("block")))
        else:   # DLIO replaces the dict by a list when a block key is missing (statscounter.batch_processed)
            steps.append(len(proc))
    windows = []
    for e in epochs:
        st = per_epoch_stats.get(str(e)) or {}
        windows.append((_utc(st["start"]), _utc(st["end"])) if "start" in st and "end" in st else None)
    return {"epochs": len(epochs), "steps_per_epoch": steps, "samples_per_epoch": [s * batch * ranks for s in steps],
            "samples_per_s": [float(x) for x in m.get("train_throughput_samples_per_second", [])],
            "nominal_MB_per_s": float(m.get("train_io_mean_MB_per_second", float("nan"))),
            "au_percent": [float(x) for x in m.get("train_au_percentage", [])], "windows": windows,
            "num_files_train": summary.get("num_files_train"),
            "num_samples_per_file": summary.get("num_samples_per_file")}


def parse_dlbench_run(run: dict, timelog_rows) -> dict:
    """A dlbench run (``run.json`` and the rows of ``timelogger.csv``) as {epochs, samples_per_epoch, samples_per_s
    (per epoch: samples / slowest rank's epoch time), epoch_time_s, read_bytes_per_epoch (dlbench's own
    counter: the samples' bytes), au_percent, windows (per epoch: first start to last end of its timeline
    rows)}."""
    s = run["summary"]
    spe = [int(x) for x in s.get("samples_per_epoch") or []]
    tmax = [float(x) for x in s.get("epoch_time_max_s") or []]
    spans: dict[int, list] = {}
    for row in timelog_rows:
        try:
            e, t0, t1 = int(row[0]), float(row[4]), float(row[5])
        except (ValueError, IndexError):
            continue
        sp = spans.setdefault(e, [t0, t1])
        sp[0], sp[1] = min(sp[0], t0), max(sp[1], t1)
    ids = s.get("epoch_ids") or sorted(spans)
    return {"epochs": len(spe), "samples_per_epoch": spe,
            "samples_per_s": [n / t if t > 0 else 0.0 for n, t in zip(spe, tmax)], "epoch_time_s": tmax,
            "read_bytes_per_epoch": [int(x) for x in s.get("read_bytes_per_epoch") or []],
            "au_percent": [100.0 * float(a) for a in s.get("au_per_epoch") or []],
            "windows": [tuple(spans[e]) if e in spans else None for e in ids]}


def _lines(path: Path):
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            yield from f
    except (EOFError, OSError):   # a gzip stream cut short by a process that was killed: keep what was read
        return


def trace_calls(lines, root: str) -> list[tuple]:
    """The POSIX opens and reads of files under ``root`` in dftracer trace lines (pydftracer 1.x: ``args.fname``;
    dftracer 2.x: ``args.fhash`` + ``FH`` metadata lines; ``[``/``,`` wrappers of old traces tolerated), as
    ``(t_s, pid, tid, kind, path, offset, nbytes)`` with kind ``open`` or ``read`` (failed calls dropped), sorted
    by time. Offsets of ``read``/``readv`` come from the thread's opens, ``lseek`` returns and earlier reads."""
    root = os.path.normpath(root) + os.sep
    names: dict[str, str] = {}
    unit = 1e-6
    raw = []
    for line in lines:
        line = line.strip().rstrip(",")
        if not line.startswith("{"):
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        a = e.get("args") or {}
        if e.get("cat") == "dftracer":
            if e.get("name") == "FH":
                names[str(a.get("value"))] = str(a.get("name"))
            elif e.get("name") == "CM" and a.get("name") == "time_metric":
                unit = UNIT_S.get(str(a.get("value")), unit)
            continue
        if e.get("cat") not in ("POSIX", "STDIO"):
            continue
        raw.append(e)
    out = []
    pos: dict[tuple, int] = {}
    for e in sorted(raw, key=lambda e: int(e.get("ts") or 0)):
        a = e.get("args") or {}
        path = a.get("fname") or names.get(str(a.get("fhash")))
        if not path or not os.path.normpath(path).startswith(root):
            continue
        name, pid, tid = e.get("name"), int(e.get("pid") or 0), int(e.get("tid") or 0)
        try:
            ret = int(a.get("ret")) if a.get("ret") is not None else None
        except ValueError:
            ret = None
        t = int(e.get("ts") or 0) * unit
        key = (pid, tid, path)
        if name in OPEN_CALLS:
            if ret is None or ret >= 0:
                pos[key] = 0
                out.append((t, pid, tid, "open", path, 0, 0))
        elif name in SEEK_CALLS:
            if ret is not None and ret >= 0:
                pos[key] = ret
        elif name in READ_AT_CALLS or name in READ_POS_CALLS:
            if ret is None or ret < 0:
                continue
            if name in READ_AT_CALLS:
                off = int(a.get("offset") or 0)
            else:
                off = pos.get(key, 0)
                pos[key] = off + ret
            out.append((t, pid, tid, "read", path, off, ret))
    return out


def in_regions(regions, off: int, n: int) -> bool:
    """Whether the read (off, n) lies inside one of the sorted (offset, nbytes) data regions."""
    for r0, rn in regions:
        if r0 <= off and off + max(n, 1) <= r0 + rn:
            return True
    return False


def per_epoch_io(calls, windows, regions_of=None) -> dict:
    """The calls binned by epoch window: per epoch {files (distinct files read), opens, reads, bytes, data_bytes
    and metadata_bytes (HDF5: inside / outside the file's data regions, ``regions_of(path)``; None: not split),
    order (the data reads' (file, offset) in time order), split (whether data regions were known),
    distinct_data_bytes (the data reads' bytes, each byte once)}; ``outside``: the same for calls in no window."""
    def blank():
        return {"files": set(), "opens": 0, "reads": 0, "bytes": 0, "data_bytes": 0, "metadata_bytes": 0,
                "split": False, "order": [], "ranges": {}}

    bins = [blank() for _ in windows]
    outside = blank()
    cache: dict = {}
    for t, _pid, _tid, kind, path, off, n in calls:
        b = outside
        for i, w in enumerate(windows):
            if w is not None and w[0] <= t <= w[1]:
                b = bins[i]
                break
        if kind == "open":
            b["opens"] += 1
            continue
        b["files"].add(path)
        b["reads"] += 1
        b["bytes"] += n
        regions = None
        if regions_of is not None:
            if path not in cache:
                cache[path] = regions_of(path)
            regions = cache[path]
        if regions is not None:
            b["split"] = True   # data regions known (HDF5): data and libhdf5's metadata apart
        if regions is None or in_regions(regions, off, n):
            b["data_bytes"] += n
            b["order"].append((os.path.basename(path), off))
            b["ranges"].setdefault(path, []).append((off, off + n))
        else:
            b["metadata_bytes"] += n
    for b in [*bins, outside]:
        b["files"] = len(b["files"])
        b["distinct_data_bytes"] = sum(union_length(r) for r in b.pop("ranges").values())
    return {"epochs": bins, "outside": outside}


def union_length(ranges) -> int:
    """Bytes covered by the [start, end) ranges (overlaps counted once)."""
    total, end = 0, None
    for a, b in sorted(ranges):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def order_repeats(bins) -> list:
    """Per epoch after the first: whether its data reads came in the first epoch's order (None: no reads)."""
    if not bins or not bins[0]["order"]:
        return []
    first = bins[0]["order"]
    return [b["order"] == first if b["order"] else None for b in bins[1:]]


def in_file_order(bins) -> list:
    """Per epoch: whether its data reads came in file order (file name, then offset: no shuffle; None: no reads)."""
    return [b["order"] == sorted(b["order"]) if b["order"] else None for b in bins]


def median(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def compare(t: dict, dlio: dict, dlio_io: dict, dlb: dict, dlb_io: dict, dlio_rounds: list, dlb_rounds: list) -> dict:
    """The side-by-side of one config: ``t`` is dlbench's reading of the config ({samples, batch, epochs,
    record_length, samples_per_file, files}); ``dlio``/``dlb`` the counting runs (parse_*), ``*_io`` their
    per-epoch traced I/O (per_epoch_io), ``*_rounds`` the timed runs' parse_* results. Returns {rows: [(figure,
    DLIO, dlbench, verdict)], notes: [str], mismatches: [str]}: verdict ``same``, ``differs (known: ...)`` for a
    DLIO 2.0.0 behaviour this script documents, or ``DIFFERS`` (a mismatch nobody explained)."""
    rows, notes, bad = [], [], []
    N, B, L = t["samples"], t["batch"], t["record_length"]
    side = int(math.isqrt(int(L)))
    rec_dlio = side * side
    drop = N % B != 0
    square = rec_dlio == int(L)

    def row(fig, a, b, known=None):
        if a == b:
            v = "same"
        elif known:
            v = f"differs (known: {known})"
        else:
            v = "DIFFERS"
            bad.append(f"{fig}: DLIO {a} vs dlbench {b}")
        rows.append((fig, a, b, v))

    n_ep = max(dlio["epochs"], dlb["epochs"])
    row("epochs", dlio["epochs"], dlb["epochs"])
    row("files in the dataset", t["dlio_files_on_disk"], t["dlbench_files_on_disk"])
    for e in range(n_ep):
        de = dlio_io["epochs"][e] if e < len(dlio_io["epochs"]) else None
        be = dlb_io["epochs"][e] if e < len(dlb_io["epochs"]) else None
        sd = dlio["samples_per_epoch"][e] if e < len(dlio["samples_per_epoch"]) else None
        sb = dlb["samples_per_epoch"][e] if e < len(dlb["samples_per_epoch"]) else None
        row(f"epoch {e}: samples", sd, sb, "DLIO's PyTorch loader drops the last partial batch" if drop else None)
        row(f"epoch {e}: files read", de and de["files"], be and be["files"],
            "DLIO skips the samples of its dropped batch" if drop else None)
        if de and be:
            known = []
            if drop:
                known.append("dropped batch")
            if not square:
                known.append(f"DLIO writes {side}x{side}={rec_dlio:,} B records, not {int(L):,}")
            row(f"epoch {e}: dataset bytes read (distinct)", de["distinct_data_bytes"], be["distinct_data_bytes"],
                "; ".join(known) or None)
            key = "bytes read: in datasets / HDF5 metadata" if de["split"] else "bytes read (all calls)"
            rows.append((f"epoch {e}: {key}", f"{de['data_bytes']} / {de['metadata_bytes']}" if de["split"]
                         else de["bytes"], f"{be['data_bytes']} / {be['metadata_bytes']}" if be["split"]
                         else be["bytes"], "not compared (each tool's own read path)"))
            rows.append((f"epoch {e}: opens / read calls", f"{de['opens']} / {de['reads']}",
                         f"{be['opens']} / {be['reads']}", "not compared (each tool's own read path)"))
    amp = [(d["data_bytes"], d["distinct_data_bytes"], d["split"]) for d in dlio_io["epochs"]
           if d["distinct_data_bytes"]]
    if amp and any(a > b for a, b, _s in amp):
        a, b, split = amp[0]
        notes.append(f"DLIO's reads inside the dataset's data were {a:,} B for {b:,} B distinct in epoch 0 "
                     f"(x{a / b:.2f}): libhdf5 reads past the record (its sieve buffer, up to 64 KiB to the dataset's "
                     f"end) on every per-sample open, and re-reads the file's metadata" if split else
                     f"DLIO read {a:,} B of the dataset's files for {b:,} B distinct in epoch 0 (x{a / b:.2f}: "
                     f"some bytes more than once)")
    if dlb.get("read_bytes_per_epoch") and dlb_io["epochs"] and dlb_io["epochs"][0]["split"]:
        # HDF5: dlbench's own counter is the bytes of the samples it read, which the trace's data regions hold
        own = dlb["read_bytes_per_epoch"]
        traced = [b["data_bytes"] for b in dlb_io["epochs"]]
        if own != traced:
            bad.append(f"dlbench's own read_bytes_per_epoch {own} != the trace's data bytes {traced}")
    fo_d, fo_b = in_file_order(dlio_io["epochs"]), in_file_order(dlb_io["epochs"])
    rows.append(("epochs read in file order (unshuffled)", ", ".join(map(_yn, fo_d)) or "-",
                 ", ".join(map(_yn, fo_b)) or "-", "not compared (sample order: see notes)"))
    rep_d, rep_b = order_repeats(dlio_io["epochs"]), order_repeats(dlb_io["epochs"])
    if rep_d or rep_b:
        rows.append(("later epochs read in epoch 0's order", ", ".join(map(_yn, rep_d)) or "-",
                     ", ".join(map(_yn, rep_b)) or "-", "not compared (sample order: see notes)"))
    # samples/s: the timed rounds' per-epoch figures, median over rounds
    for e in range(n_ep):
        a = median([r["samples_per_s"][e] for r in dlio_rounds if e < len(r["samples_per_s"])])
        b = median([r["samples_per_s"][e] for r in dlb_rounds if e < len(r["samples_per_s"])])
        rows.append((f"epoch {e}: samples/s (median of {len(dlio_rounds)})", f"{a:.1f}", f"{b:.1f}",
                     "timing: each tool's own definition"))
    nominal = median([r["nominal_MB_per_s"] for r in dlio_rounds])
    all_b = [d["bytes"] for d in dlio_io["epochs"]]
    distinct = [d["distinct_data_bytes"] for d in dlio_io["epochs"]]

    def rate(byts):
        """MB/s as DLIO averages: the mean over epochs of the epoch's bytes / its block time (= DLIO's samples
        / its samples/s), median over the timed rounds."""
        per_round = []
        for r in dlio_rounds:
            xs = [byts[e] / (dlio["samples_per_epoch"][e] / r["samples_per_s"][e]) / 2**20
                  for e in range(min(len(byts), len(r["samples_per_s"]), len(dlio["samples_per_epoch"])))
                  if r["samples_per_s"][e] > 0 and dlio["samples_per_epoch"][e] > 0]
            if xs:
                per_round.append(sum(xs) / len(xs))
        return median(per_round)

    rows.append(("DLIO MB/s: its figure / dataset bytes read / all bytes read",
                 f"{nominal:.2f} / {rate(distinct):.2f} / {rate(all_b):.2f}", "-",
                 "DLIO's figure is samples/s x record_length"))
    notes.append(f"DLIO's train_io_mean_MB_per_second ({nominal:.2f}) is samples/s x record_length ({int(L):,} B) / "
                 f"2^20, not bytes read: its records are {rec_dlio:,} B (int(sqrt(record_length))^2); over the same "
                 f"epoch times the trace's distinct dataset bytes give {rate(distinct):.2f} MB/s and all the bytes "
                 f"it read ({_mb(sum(all_b))} MB in {dlio['epochs']} epochs, re-reads and any HDF5 metadata "
                 f"included) {rate(all_b):.2f} MB/s")
    if fo_d and all(fo_d):
        notes.append("DLIO 2.0.0's PyTorch path read every epoch in file order: it does not shuffle "
                     f"(reader.sample_shuffle {t.get('sample_shuffle', 'off')!r}; file_shuffle is not used by its "
                     "index sampler); dlbench read a seeded permutation"
                     + (" (run with --allow-unsupported: dlbench does not emulate unshuffled reads)"
                        if not any(fo_b) else ""))
    elif any(rep_d):
        notes.append("DLIO 2.0.0's PyTorch path read a later epoch in the first epoch's order")
    if t.get("unsupported"):
        notes.append(f"dlbench ran with --allow-unsupported, without: {'; '.join(t['unsupported'])}")
    if drop:
        notes.append(f"{N} samples in batches of {B}: DLIO reads {N // B * B} per epoch (drop_last=True, "
                     f"floor(N/B) steps); dlbench read {', '.join(map(str, dlb['samples_per_epoch']))} per epoch "
                     f"(its DLIO translation drops the last partial batch too: --drop-last-batch)")
    return {"rows": rows, "notes": notes, "mismatches": bad}


def _yn(v):
    return "-" if v is None else ("yes" if v else "no")


def _mb(b) -> str:
    return f"{b / 1e6:.2f}"


def render(name: str, cmp: dict) -> str:
    w0 = max(len(r[0]) for r in cmp["rows"])
    w1 = max(8, *(len(str(r[1])) for r in cmp["rows"]))
    w2 = max(8, *(len(str(r[2])) for r in cmp["rows"]))
    out = [f"== {name}", f"{'figure':<{w0}}  {'DLIO 2.0.0':>{w1}}  {'dlbench':>{w2}}  verdict"]
    for fig, a, b, v in cmp["rows"]:
        out.append(f"{fig:<{w0}}  {str(a):>{w1}}  {str(b):>{w2}}  {v}")
    out += [f"note: {n}" for n in cmp["notes"]]
    out += [f"MISMATCH: {m}" for m in cmp["mismatches"]]
    return "\n".join(out)


# ---- running the tools ----------------------------------------------------------------------------------------

def check_venv(venv: Path) -> None:
    for exe in ("dlio_benchmark", "mpirun", "python"):
        if not (venv / "bin" / exe).exists():
            raise Refused(f"--dlio-venv {venv}: no DLIO 2.0.0 there (bin/{exe} missing); build it: "
                          f"{BUILD.replace('V', str(venv))}")


def preload_library() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("dftracer")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("lib64", "lib"):
            p = Path(base) / sub / "libdftracer_preload.so"
            if p.is_file():
                return p
    return None


def _run(cmd, env, log: Path, what: str, timeout: int) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    log.write_text(r.stdout + "\n--- stderr ---\n" + r.stderr)
    if r.returncode != 0:
        errs = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip() and "HYDRA_FULL_ERROR" not in ln]
        last = next((ln for ln in reversed(errs) if re.match(r"\s*[\w.]+(Error|Exception)\b", ln)), None) or next(
            (ln for ln in reversed(errs) if "error" in ln.lower()), errs[-1] if errs else "")
        raise Refused(f"{what} failed (exit {r.returncode}): {last.strip()[:300]} (log: {log})")
    return r


TFRECORD2IDX = """#!{python}
# DALI's tfrecord2idx: one line "offset length" per record of a TFRecord file
import struct, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as idx:
    while True:
        start = f.tell()
        head = f.read(8)
        if len(head) < 8:
            break
        n = struct.unpack("<q", head)[0]
        f.seek(4 + n + 4, 1)
        idx.write(f"{{start}} {{f.tell() - start}}\\n")
"""


class DLIO:
    def __init__(self, venv: Path, cfg: Path, overrides, work: Path, translation, record_length: float):
        self.venv, self.work = venv, work
        self.name = cfg.stem
        self.cfgdir = work / "dlio-config"
        (self.cfgdir / "workload").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cfg, self.cfgdir / "workload" / f"{self.name}.yaml")
        self.data = work / "dlio-data"
        self.overrides = list(overrides)
        t = translation
        # DLIO's generators fill a buffer of generation_buffer_size / record_length records per file (2 GiB default)
        self.gen_buffer = int(t.workload["samples_per_file"]) * int(record_length) + 1
        self.batch = int(t.run["batch_size"])
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DFTRACER_", "LD_PRELOAD"))}
        self.env.update(TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
        # DLIO 2.0.0's TFRecord generator runs DALI's `tfrecord2idx` after each file (an index DALI's readers use):
        # DALI is CUDA-only, so a copy of its few lines goes on DLIO's PATH
        tools = work / "dlio-tools"
        tools.mkdir(parents=True, exist_ok=True)
        (tools / "tfrecord2idx").write_text(TFRECORD2IDX.format(python=venv / "bin" / "python"))
        (tools / "tfrecord2idx").chmod(0o755)
        self.env["PATH"] = f"{tools}{os.pathsep}{self.env.get('PATH', '')}"

    def _cmd(self, out: Path, *extra):
        return [self.venv / "bin" / "mpirun", "-np", "1", self.venv / "bin" / "dlio_benchmark",
                f"--config-dir={self.cfgdir}", f"workload={self.name}", *self.overrides,
                f"++workload.dataset.data_folder={self.data}", f"++workload.output.folder={out}",
                "hydra.run.dir=" + str(out / "hydra"), *extra]

    def generate(self):
        out = self.work / "dlio-gen"
        _run(self._cmd(out, "++workload.workflow.generate_data=True", "++workload.workflow.train=False",
                       f"++workload.dataset.generation_buffer_size={self.gen_buffer}"),
             self.env, self.work / "dlio-gen.log", "DLIO generate", 1800)

    def train(self, tag: str, trace: bool) -> tuple[dict, list]:
        out = self.work / f"dlio-{tag}"
        env = dict(self.env)
        if trace:
            env.update(DFTRACER_ENABLE="1", DFTRACER_INC_METADATA="1")
        _run(self._cmd(out), env, self.work / f"dlio-{tag}.log", f"DLIO train ({tag})", 1800)
        doc = parse_dlio_output(json.loads((out / "summary.json").read_text()),
                                json.loads((out / "per_epoch_stats.json").read_text()),
                                json.loads((out / "0_output.json").read_text()), self.batch)
        calls = []
        if trace:
            lines = (ln for p in sorted(out.glob("*.pfw*")) for ln in _lines(p))
            calls = trace_calls(lines, str(self.data / "train"))
        return doc, calls

    def files_on_disk(self) -> int:
        return sum(1 for p in (self.data / "train").rglob("*") if p.is_file())


class Dlbench:
    def __init__(self, cfg: Path, overrides, work: Path, allow_unsupported: bool = False):
        self.cfg, self.overrides, self.work = cfg, list(overrides), work
        self.allow = ["--allow-unsupported"] if allow_unsupported else []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DFTRACER_", "LD_PRELOAD"))}
        self.env.update(DLBENCH_DATA_DIR=str(work / "dlbench-data"),
                        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.data_dir: Path | None = None

    def train(self, tag: str, trace: bool) -> tuple[dict, list]:
        env = dict(self.env)
        cmd = [sys.executable, "-m", "dlbench.cli", "run", "--dlio-config", self.cfg, *self.overrides,
               "-o", self.work / "dlbench-results", "--no-progress", *self.allow]
        tdir = self.work / f"dlbench-trace-{tag}"
        if trace:
            lib = preload_library()
            if lib is None:
                raise Refused("dlbench's counting run needs dftracer's libdftracer_preload.so (pip install dftracer) "
                              "in the Python that runs this script")
            tdir.mkdir(parents=True, exist_ok=True)
            env.update(LD_PRELOAD=str(lib), DFTRACER_ENABLE="1", DFTRACER_INIT="PRELOAD",
                       DFTRACER_LOG_FILE=str(tdir / "trace"), DFTRACER_DATA_DIR=str(self.data_dir),
                       DFTRACER_INC_METADATA="1", DLBENCH_READ_CALL="readv")
        r = _run(cmd, env, self.work / f"dlbench-{tag}.log", f"dlbench run ({tag})", 1800)
        res = [ln.split("results: ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("results: ")]
        if not res:
            raise Refused(f"dlbench run ({tag}) printed no results folder (log: {self.work / f'dlbench-{tag}.log'})")
        rd = Path(res[-1])
        run = json.loads((rd / "run.json").read_text())
        self.data_dir = Path(run["config"]["data_dir"])
        with open(rd / "timelogger.csv", newline="") as f:
            rows = list(csv.reader(f))[1:]
        doc = parse_dlbench_run(run, rows)
        calls = []
        if trace:
            lines = (ln for p in sorted(tdir.glob("*.pfw*")) for ln in _lines(p))
            calls = trace_calls(lines, str(self.data_dir))
        return doc, calls

    def files_on_disk(self) -> int:
        """The dataset's files (its manifest's; index files beside them, as tfrecord's, are not counted)."""
        from dlbench.data.manifest import Manifest

        return sum(1 for p in Manifest.load(self.data_dir).paths if (self.data_dir / p).is_file())


def hdf5_regions(path):
    if not path.endswith((".h5", ".hdf5")):
        return None
    from dlbench.importers_dftracer import data_regions

    return data_regions(path)


def side_by_side(cfg: Path, overrides, venv: Path, work: Path, repeat: int, log=print,
                 allow_unsupported: bool = False) -> dict:
    from dlbench import dlio as D
    from dlbench import workload as W
    from dlbench.config import load_yaml
    from dlbench.errors import ConfigError

    try:
        raw = D.apply_overrides(load_yaml(str(cfg), "DLIO config"), list(overrides))
    except ConfigError as e:
        raise Refused(str(e)) from None
    ds = raw.get("dataset") or {}
    if "record_length_bytes" in ds or "record_length" not in ds:
        raise Refused(f"{cfg}: dataset.record_length must be set (DLIO 2.0.0's key; it ignores record_length_bytes "
                      f"and would write records of its 64 KiB default)")
    fmt = str(ds.get("format", "tfrecord")).lower()
    layouts = getattr(W, "LAYOUTS", None)
    if layouts is not None and fmt != "hdf5" and D.LAYOUT_OF.get(fmt, fmt) not in layouts:
        raise NotYet(f"{cfg.name}: format {fmt} (dlbench layout {D.LAYOUT_OF.get(fmt, fmt)}) is not readable by "
                     f"this dlbench yet")
    try:
        t = D.load(str(cfg), list(overrides), allow_unsupported=allow_unsupported)
    except ConfigError as e:
        raise Refused(f"dlbench refuses {cfg.name}: {e}") from None
    record_length = float(ds["record_length"])
    work.mkdir(parents=True, exist_ok=True)
    dl, db = DLIO(venv, cfg, overrides, work, t, record_length), Dlbench(cfg, overrides, work, allow_unsupported)
    log(f"[{cfg.name}] DLIO generates its dataset ...")
    dl.generate()
    log(f"[{cfg.name}] dlbench generates its dataset (a first run, not measured) ...")
    db.train("warmup", trace=False)
    log(f"[{cfg.name}] counting runs under dftracer ...")
    dlio_doc, dlio_calls = dl.train("count", trace=True)
    dlb_doc, dlb_calls = db.train("count", trace=True)
    dlio_io = per_epoch_io(dlio_calls, dlio_doc["windows"], hdf5_regions)
    dlb_io = per_epoch_io(dlb_calls, dlb_doc["windows"], hdf5_regions)
    dlio_rounds, dlb_rounds = [], []
    for i in range(repeat):
        log(f"[{cfg.name}] timed round {i + 1}/{repeat} ...")
        dlio_rounds.append(dl.train(f"t{i}", trace=False)[0])
        dlb_rounds.append(db.train(f"t{i}", trace=False)[0])
    spec = {"samples": int(t.workload["samples"]), "batch": int(t.run["batch_size"]),
            "epochs": int(t.run["epochs"]), "record_length": record_length,
            "sample_shuffle": str((raw.get("reader") or {}).get("sample_shuffle", "off")),
            "unsupported": list(t.unsupported),
            "samples_per_file": int(t.workload["samples_per_file"]),
            "dlio_files_on_disk": dl.files_on_disk(), "dlbench_files_on_disk": db.files_on_disk()}
    cmp = compare(spec, dlio_doc, dlio_io, dlb_doc, dlb_io, dlio_rounds, dlb_rounds)
    cmp["raw"] = {"spec": spec, "dlio": dlio_doc, "dlbench": dlb_doc, "dlio_rounds": dlio_rounds,
                  "dlbench_rounds": dlb_rounds,
                  "dlio_io": _jsonable(dlio_io), "dlbench_io": _jsonable(dlb_io)}
    return cmp


def _jsonable(io: dict) -> dict:
    def one(b):
        return {k: v for k, v in b.items() if k != "order"} | {"data_reads_in_order": len(b["order"])}

    return {"epochs": [one(b) for b in io["epochs"]], "outside": one(io["outside"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dlio-venv", type=Path, default=Path("/tmp/dliovenv"),
                    help="venv with dlio-benchmark 2.0.0 (see the docstring to build it)")
    ap.add_argument("--config", type=Path, action="append", help="DLIO workload YAML (repeatable)")
    ap.add_argument("--repeat", type=int, default=3, help="timed rounds (median reported)")
    ap.add_argument("--work", type=Path, default=None, help="working folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the working folder")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    ap.add_argument("--allow-unsupported", action="store_true",
                    help="run dlbench on --config files with DLIO settings it does not emulate (said in the output)")
    args, rest = ap.parse_known_args(argv)
    bad = [a for a in rest if not a.lstrip("+~").startswith("workload.")]
    if bad:
        print(f"dlio_side_by_side: argument {bad[0]!r}: expected ++workload.KEY=VALUE overrides", file=sys.stderr)
        return 2
    if args.repeat < 1:
        print(f"dlio_side_by_side: --repeat={args.repeat}: must be >= 1", file=sys.stderr)
        return 2
    try:
        check_venv(args.dlio_venv)
    except Refused as e:
        print(f"dlio_side_by_side: {e}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    configs = [(c, args.allow_unsupported) for c in args.config] if args.config else CONFIGS
    work = args.work or Path(tempfile.mkdtemp(prefix="dlio_side_by_side-"))
    status, everything = 0, {}
    try:
        for cfg, allow in configs:
            if not cfg.is_file():
                print(f"dlio_side_by_side: --config {cfg}: no such file", file=sys.stderr)
                status = 2
                continue
            try:
                cmp = side_by_side(cfg, rest, args.dlio_venv, work / cfg.stem, args.repeat,
                                   log=lambda m: print(m, file=sys.stderr, flush=True), allow_unsupported=allow)
            except Refused as e:
                print(f"== {cfg.name}\n{'skipped' if isinstance(e, NotYet) else 'not compared'}: {e}", flush=True)
                if not isinstance(e, NotYet):
                    status = status or 1
                continue
            print(render(cfg.name, cmp), flush=True)
            everything[cfg.name] = {k: v for k, v in cmp.items()}
            if cmp["mismatches"]:
                status = 1
    finally:
        if args.json:
            args.json.write_text(json.dumps(everything, indent=1, default=str))
        if args.keep or args.work:
            print(f"work folder kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
