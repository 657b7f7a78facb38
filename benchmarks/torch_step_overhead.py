"""Per-step overhead of the overlapped torch step (``--overlap on``, compute/ring.py) on CPU against the
synchronous step (``--overlap off``, the path CPU runs take by default), in one run, A and B alternated.

    PYTHONPATH=. python benchmarks/torch_step_overhead.py [--workload hep_cnn] [--batch 4] [--steps 20] [--rounds 5]

Two figures:

1. bookkeeping: ``StepPipeline.step`` + ``collect`` with a host backend and empty copy/compute callables against
   calling the two callables directly (µs per step): what the ring, events and filing add per step.
2. the whole ``TorchCompute.step`` on the workload's tiny model, overlap on vs off (ms per step, median of the
   rounds' per-step means; ratio on/off). On a CPU there is nothing to overlap: the ratio shows the new path
   costs the CPU nothing measurable (the torch step dominates).

The machine is shared: the ratio of alternated rounds is the figure to read, not the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def bookkeeping_us(steps: int, rounds: int) -> tuple[float, float]:
    from dlbench.compute.ring import HostBackend, StepPipeline

    def copy_convert(src):
        return src

    def compute(inputs):
        pass

    def fill(j):
        return j

    def direct():
        for _ in range(steps):
            compute(copy_convert(None))

    def piped():
        pipe = StepPipeline(HostBackend(), slots=3)
        add = [].append
        for k in range(steps):
            pipe.step(pinned_source=False, fill=fill, source=None, copy_convert=copy_convert, compute=compute,
                      epoch=0, step=k, nbytes=0)
            pipe.collect(add)

    a, b = [], []
    for _ in range(rounds):   # alternated
        t = time.perf_counter()
        direct()
        a.append(time.perf_counter() - t)
        t = time.perf_counter()
        piped()
        b.append(time.perf_counter() - t)
    return min(a) / steps * 1e6, min(b) / steps * 1e6


def torch_step_ms(workload: str, batch: int, steps: int, rounds: int) -> dict:
    from dlbench import workload as W
    from dlbench.compute.torch_step import TorchCompute
    from dlbench.timeline import Timeline

    wl = W.load(workload, scale="tiny")
    tcs = {ov: TorchCompute(wl, batch, device="cpu", seed=0, overlap=ov) for ov in ("off", "on")}
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 256, (batch, tcs["off"].row_nbytes), dtype=np.uint8)
    ids = np.arange(batch)
    per: dict[str, list[float]] = {"off": [], "on": []}
    for tc in tcs.values():   # warm-up
        tc.step(rows, ids, batch, None, 0, 0)
        tc.drain()
    for r in range(rounds):
        for ov in (("off", "on") if r % 2 == 0 else ("on", "off")):
            tc = tcs[ov]
            tl = Timeline(4 * steps + 16)
            t = time.perf_counter()
            for s in range(steps):
                tc.step(rows, ids, batch, tl, 0, s)
            tc.drain(tl)
            per[ov].append((time.perf_counter() - t) / steps * 1e3)
    for tc in tcs.values():
        tc.close()
    off, on = statistics.median(per["off"]), statistics.median(per["on"])
    return {"off_ms": off, "on_ms": on, "ratio": on / off}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="hep_cnn")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--book-steps", type=int, default=20000)
    args = ap.parse_args(argv)
    d, p = bookkeeping_us(args.book_steps, args.rounds)
    print(f"bookkeeping per step (host backend, empty copy/compute, best of {args.rounds}): "
          f"direct {d:.2f} us, pipeline {p:.2f} us, added {p - d:.2f} us")
    t = torch_step_ms(args.workload, args.batch, args.steps, args.rounds)
    print(f"TorchCompute.step on CPU, {args.workload} tiny, batch {args.batch}, {args.steps} steps x {args.rounds} "
          f"rounds alternated (median of round means): overlap off {t['off_ms']:.3f} ms, on {t['on_ms']:.3f} ms, "
          f"ratio on/off {t['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
