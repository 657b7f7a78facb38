"""Sleep compute accuracy: N steps of a fixed step time, deadline-based (SleepCompute) vs naive
time.sleep, plus the cost of one Timeline record (lists vs preallocated NumPy).

    PYTHONPATH=. python benchmarks/sleep_accuracy.py [--steps 1000] [--step-ms 1.0]

Target: 1,000 × 1 ms = 1.00 s ± 1 % for SleepCompute; naive time.sleep overshoots ~100 µs per call.
The machine is shared: run it a few times and read the median.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dlbench.compute import SleepCompute
from dlbench.timeline import PHASE_ID, Timeline


def run_sleep_compute(steps: int, step_s: float) -> tuple[float, float, dict]:
    sc = SleepCompute(step_s, seed=0, rank=0)
    tl = Timeline(steps + 16)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for s in range(steps):
        sc.step(None, None, 1, tl, 0, s)
    wall = time.perf_counter() - t0
    a = tl.arrays()
    d = (a["end_ns"] - a["start_ns"]) / 1e3 - step_s * 1e6
    gap = (a["start_ns"][1:] - a["end_ns"][:-1]) / 1e3
    det = {"step_err_p50_us": np.percentile(d, 50), "step_err_p99_us": np.percentile(d, 99),
           "step_err_max_us": d.max(), "steps_late_over_50us": int((d > 50).sum()), "gap_mean_us": gap.mean()}
    return wall, (time.process_time() - cpu0) / wall, det


def run_naive(steps: int, step_s: float) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        time.sleep(step_s)
    return time.perf_counter() - t0


def record_cost(n: int = 200_000) -> dict:
    out = {}
    tl = Timeline(16)
    add = tl.add
    a = time.perf_counter_ns()
    best = 1e18
    for _ in range(5):
        tl = Timeline(16)
        add = tl.add
        t0 = time.perf_counter_ns()
        for i in range(n):
            add(3, a, a + 5, 1, i, 4096)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    out["Timeline.add (lists)"] = best
    cap = n
    arrs = [np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.uint8), np.zeros(cap, np.int32),
            np.zeros(cap, np.int32), np.zeros(cap, np.int64), np.zeros(cap, np.uint8)]

    def add_np(p, s, e, ep, st, nb=0, tier=0, _a=arrs, _i=[0]):  # noqa: B006 - bench closure state
        i = _i[0]
        _a[0][i] = s
        _a[1][i] = e
        _a[2][i] = p
        _a[3][i] = ep
        _a[4][i] = st
        _a[5][i] = nb
        _a[6][i] = tier
        _i[0] = i + 1
    best = 1e18
    for _ in range(5):
        add_np.__defaults__[-1][0] = 0
        t0 = time.perf_counter_ns()
        for i in range(n):
            add_np(3, a, a + 5, 1, i, 4096)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    out["preallocated numpy item assignment"] = best
    t0 = time.perf_counter_ns()
    for _ in range(n):
        time.perf_counter_ns()
    out["perf_counter_ns call"] = (time.perf_counter_ns() - t0) / n
    tl = Timeline(16)
    for i in range(n):
        tl.add(PHASE_ID["read"], a, a + 5, 1, i, 4096)
    t0 = time.perf_counter_ns()
    tl.flush()
    out["flush to numpy, per record"] = (time.perf_counter_ns() - t0) / n
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    step_s = a.step_ms / 1e3
    target = a.steps * step_s
    print(f"{a.steps} steps x {a.step_ms} ms (target {target:.3f} s), {a.repeat} repeats")
    for _ in range(a.repeat):
        w, cpu, det = run_sleep_compute(a.steps, step_s)
        n = run_naive(a.steps, step_s)
        print(f"  SleepCompute (deadline): {w:.4f} s ({(w / target - 1):+.2%}), CPU {cpu:.0%} of a core | "
              f"naive time.sleep: {n:.4f} s ({(n / target - 1):+.2%})")
        print("     per step: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                         for k, v in det.items()))
    print("Timeline record cost (ns per record, best of 5 x 200,000):")
    for k, v in record_cost().items():
        print(f"  {k:40s} {v:7.1f}")


if __name__ == "__main__":
    main()
