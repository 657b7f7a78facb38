"""Benchmark of `dlbench simulate` itself: 2,048 nodes × 1,281,167 samples (ImageNet sizes, seeded
lognormal) × 90 epochs, naive and prefetch, on the HDMLP thesis profile. Goal: < 60 s each, bounded
memory (the plan is built one epoch at a time). Reports wall time and peak RSS.

    PYTHONPATH=. python benchmarks/simulate.py [--nodes 2048] [--epochs 90] [--strategies naive,prefetch]
"""

from __future__ import annotations

import argparse
import resource
import time

from dlbench.simulate import from_workload, load_profile, simulate
from dlbench.workload import load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--strategies", default="naive,prefetch")
    a = ap.parse_args()
    wl = from_workload(load("imagenet", scale="full"))
    prof = load_profile("hdmlp-thesis")
    print(f"{a.nodes} nodes x {wl.samples:,} samples x {a.epochs} epochs, local batch {wl.local_batch}")
    for name in a.strategies.split(","):
        t = time.perf_counter()
        r = simulate([name], wl=wl, profile=prof, nodes=a.nodes, epochs=a.epochs)[name]
        dt = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:10s} wall {dt:7.2f} s   peak RSS so far {rss:7.1f} MiB   modelled total "
              f"{r['total_time_s']:,.1f} s  exposed I/O {r['exposed_io_share']:.3f}")


if __name__ == "__main__":
    main()
