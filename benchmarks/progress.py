"""Cost of the live progress line (``dlbench run --progress``), and that it redraws at most ~4×/s.

    PYTHONPATH=. python benchmarks/progress.py [--steps 200000] [--step-ms 1.0] [--repeats 5]

1. Fake clock: N steps of ``step_ms`` each (times made up, nothing sleeps) through ``StepProgress.step``
   drawing into a buffer: redraws counted against the ceiling ``ceil(N · step_ms / 250 ms) + epochs``.
2. Per-step cost of the hook when no redraw is due (``step()`` with a deadline far away) against the bare
   loop overhead of the same Python loop in the same run (``is not None`` test only, what the runner pays
   with progress off), best of ``--repeats``.
3. Cost of one redraw (format + rich refresh into a terminal-like buffer).
Then the share of a step: (per-step cost + redraws per step × redraw cost) / step time.
The machine is shared: run it a few times and read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import io
import math
import time

from dlbench.progress import StepProgress


def fake_clock_redraws(steps: int, step_ns: int, epochs: int = 2) -> tuple[int, int]:
    p = StepProgress(epochs, file=io.StringIO(), force_terminal=True)
    t = 0
    per = steps // epochs
    for e in range(epochs):
        p.epoch_start(e, per, t)
        for s in range(per):
            t0 = t
            t += step_ns // 3          # the stall
            p.step(s, t0, t, 8)
            t += step_ns - step_ns // 3  # compute
        p.epoch_end(e, t)
    p.close()
    ceiling = math.ceil(t / p.period_ns) + 2 * epochs
    return p.renders, ceiling


def per_step_ns(steps: int, repeats: int) -> tuple[float, float]:
    p = StepProgress(1, file=io.StringIO(), force_terminal=True)
    p.epoch_start(0, steps, 0)
    p._next_ns = 1 << 62  # no redraw due: the hot path only
    hook_best = off_best = float("inf")
    for _ in range(repeats):
        off = None
        t0 = time.perf_counter_ns()
        for s in range(steps):
            if off is not None:
                off.step(s, s, s + 1, 8)
        off_best = min(off_best, (time.perf_counter_ns() - t0) / steps)
        on = p
        t0 = time.perf_counter_ns()
        for s in range(steps):
            if on is not None:
                on.step(s, s, s + 1, 8)
        hook_best = min(hook_best, (time.perf_counter_ns() - t0) / steps)
    p.close()
    return hook_best, off_best


def redraw_ns(n: int = 200) -> float:
    p = StepProgress(1, file=io.StringIO(), force_terminal=True)
    p.epoch_start(0, n, 0)
    best = float("inf")
    for i in range(n):
        t0 = time.perf_counter_ns()
        p._draw(10_000_000 * (i + 1))
        best = min(best, time.perf_counter_ns() - t0)
    p.close()
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    step_ns = int(a.step_ms * 1e6)
    renders, ceiling = fake_clock_redraws(a.steps, step_ns)
    sim_s = a.steps * step_ns / 1e9
    print(f"fake clock: {a.steps:,} steps x {a.step_ms} ms = {sim_s:.0f} s simulated: {renders} redraws "
          f"({renders / sim_s:.2f}/s; ceiling {ceiling})")
    hook, off = per_step_ns(a.steps, a.repeats)
    print(f"per step, no redraw due: hook {hook:.0f} ns vs progress off {off:.0f} ns "
          f"(+{hook - off:.0f} ns, ratio {hook / off:.2f})")
    rd = redraw_ns()
    print(f"one redraw: {rd / 1e3:.0f} us (best of 200)")
    per_step = (hook - off) + rd * (renders / a.steps)
    print(f"cost per {a.step_ms} ms step: {per_step:.0f} ns = {per_step / step_ns:.3%} of the step; "
          f"at 4 redraws/s: {4 * rd / 1e9:.3%} of wall time")
    assert renders <= ceiling, (renders, ceiling)


if __name__ == "__main__":
    main()
