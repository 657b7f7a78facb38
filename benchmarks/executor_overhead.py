"""Per-sample overhead of the executors on naive's plan (issue 16: one executor for every plan).

In one process, on an in-memory reader (``CopyReader``: a 4 KiB memcpy per sample, no file system, so what is
left is the executor's own bookkeeping), naive's plan (every sample from the shared tier, one request per sample,
synchronously) is carried out by:

  (a) ``sync_read_epoch``: the bare per-sample loop (read_into + one timeline interval per sample), what
      naive's own executor was before the redesign;
  (b) ``PlannedExecutor`` inline (0 loader threads): the one executor every planned strategy runs on;
  (c) ``PlannedExecutor`` with 1 and 2 loader threads reading ahead (window 2);
  (d) issue 30's pinned batch ring, inline and with 2 threads: the ring allocated through ``batch_memory`` (here
      plain page-aligned memory: no GPU) and every batch held by the consumer (``Batch.hold``) with a copy that
      has completed: what the hand-off (hold, poll, settle, release) adds per step on the CPU.

Printed: µs per delivered sample (median of --repeat) and the difference to (a). Rounds alternate, so load
from other processes hits every variant alike.

    PYTHONPATH=. python benchmarks/executor_overhead.py [--samples 4096] [--batch 32] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

ROW = 4096


class _Copied:
    """A device copy that has completed (``Ring.hold``'s argument)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


COPIED = _Copied()


class CopyReader:
    """A SampleReader whose read is one 4 KiB memcpy (the executors' bookkeeping dominates)."""

    max_row_nbytes = ROW
    supports_runs = False

    def __init__(self):
        self.src = np.arange(ROW, dtype=np.uint8)

    def read_into(self, i: int, out) -> int:
        out[:ROW] = self.src
        return ROW

    def close(self) -> None:
        return None


def make_ctx(samples: int, batch: int):
    from types import SimpleNamespace

    from dlbench.comm import SerialComm
    from dlbench.data.registry import get_format
    from dlbench.strategies import RunContext
    from dlbench.timeline import Timeline

    wl = SimpleNamespace(name="copy", layout="hdf5_per_sample", decoded_nbytes=ROW, sample_nbytes=ROW,
                         format=get_format("hdf5_per_sample"))
    sizes = np.full(samples, ROW, np.int64)
    return RunContext(workload=wl, n_samples=samples, sample_nbytes=sizes, world_size=1, rank=0,
                      node_map=np.zeros(1, np.int64), seed=0, epochs=1, local_batch=batch, comm=SerialComm(),
                      timeline=Timeline(1 << 18, 0), reader_factory=CopyReader)


def one(variant: str, samples: int, batch: int) -> float:
    from dlbench.plan import SHARED
    from dlbench.storage import aligned_rows
    from dlbench.strategies.localcopy import set_pipeline
    from dlbench.strategies.naive import shared_tier_plan, sync_read_epoch
    from dlbench.strategies.planned import PlannedExecutor

    ctx = make_ctx(samples, batch)
    plan = shared_tier_plan("naive", ctx, False)
    if variant == "bare loop":
        reader = ctx.reader_factory()
        rows = aligned_rows(batch, reader.max_row_nbytes)
        t0 = time.perf_counter_ns()
        n = sum(b.n for b in sync_read_epoch(ctx, plan, 0, rows, reader.read_into, SHARED))
        t1 = time.perf_counter_ns()
        reader.close()
    else:
        threads = {"planned inline": 0, "planned 1 thread": 1, "planned 2 threads": 2, "held inline": 0,
                   "held 2 threads": 2}[variant]
        ex = PlannedExecutor(ctx, set_pipeline(plan, threads, 2 if threads else 0), capacity_bytes={},
                             fill_thread=False)
        held = variant.startswith("held")
        if held:
            ex.batch_memory(aligned_rows)
        ex.start()
        t0 = time.perf_counter_ns()
        n = 0
        for b in ex.epoch(0):
            if held:
                b.hold(COPIED)
            n += b.n
        t1 = time.perf_counter_ns()
        ex.close()
    assert n == samples, (variant, n)
    return (t1 - t0) / 1e3 / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=32768)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    variants = ["bare loop", "planned inline", "planned 1 thread", "planned 2 threads", "held inline",
                "held 2 threads"]
    res: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(a.repeat):
        for v in variants:
            res[v].append(one(v, a.samples, a.batch))
    base = statistics.median(res["bare loop"])
    print(f"naive's plan, {a.samples} samples of {ROW} B (memcpy reader), batch {a.batch}, "
          f"median of {a.repeat}")
    print(f"{'executor':<20}{'us/sample':>11}{'vs bare':>10}{'(min..max)':>20}")
    for v in variants:
        m = statistics.median(res[v])
        print(f"{v:<20}{m:>11.2f}{m - base:>+10.2f}{f'({min(res[v]):.2f}..{max(res[v]):.2f})':>20}")


if __name__ == "__main__":
    main()
