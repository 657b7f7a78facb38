"""Scaling benchmark of the thesis-rule costing (``rules: thesis``: γ by the thesis-window rule, costed event by
event) on ImageNet-1k (1,281,167 samples, local batch 64) on the HDMLP thesis' system profile.

Part 1: the reference event loop (the test oracle ``tests/unit/thesis_oracle.py``, at most 256 ranks) against the
model's engine (``simulate/fastevents.py``) on the same plan at 64/128/256 nodes x 3 epochs: wall time of each and a check that
every number of the two results agrees within 1e-9 relative (the script exits non-zero otherwise).
Part 2: the model's engine alone at 1,024 nodes x 90 epochs: wall time per strategy, planning included
(``simulate()`` end to end), and the modelled runtime. The machine may be shared: compare figures of one run;
the CPU seconds (``time.process_time``) are less disturbed by other processes than the wall seconds.

    PYTHONPATH=. python benchmarks/thesis_scale.py [--strategies naive,prefetch] [--nodes 64,128,256]
        [--epochs 3] [--big-nodes 1024] [--big-epochs 90] [--skip-reference] [--skip-big]

Measured on the shared 2-core development machine (2026-11-25, load average 3-7, so the CPU seconds are the
figures to compare; one run each): part 1, both engines equal everywhere; at 256 nodes the reference took 26.8 s
(naive) and 28.5 s (prefetch) of CPU, the fast engine 1.2 s and 1.7 s. Part 2 (1,024 nodes x 90 epochs, 115 M
accesses): naive 45.2 s CPU (was 55.9 before the window-read loops), prefetch 79.3 s CPU (was 90.7); peak memory
1.25 GB. What is left is about 0.4 µs (sync) to 0.7 µs (loader threads) per access, in Python: the loader chains
(~45 % of prefetch's time), loading epochs into lists (~27 %), per-(rank, step) scheduling (~18 %), consumption.
Later (branch fastpf, load 1-1.5, one run each): prefetch 64.2-66.4 s CPU after exact cuts to loading, scheduling
and consumption (1,024 x 3 costing 1.50 -> 1.16 s CPU); naive 42.1 s; the chains' γ bisections grow with the epochs (0.19 per
access over 3 epochs, 0.65 over 24), so 90 epochs gain less than 3 (docs/evidence/issue-19.md).
Then (2026-11-25 evening, quiet machine, load < 0.3): the staging buffer's admissions for all ranks at once from
integer byte prefix sums (one searchsorted per step instead of a running sum per rank and step) and the sizes kept
as array('d') per rank (no float object per access at load): prefetch 67.7 -> 53.1 / 50.8 s CPU, naive 34.9 s
CPU; part 1 equal everywhere (256 nodes: reference 27.1 / 28.7 s, fast 0.9 / 1.1 s CPU). The chains' bisections are
now ~55 % of prefetch's time.
Then (2026-12-01, issue 27: the engine split into modules, the per-access cost written once; load 13-15, so
1,024 nodes x 10 epochs, old and new alternated old, new, old, new in one run, CPU seconds of part 2): naive
9.2, 10.2 -> 8.5, 10.0 (new/old 0.95), prefetch 9.4, 9.9 -> 9.0, 9.4 (0.95); the modelled runtimes equal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from dlbench.simulate import Model, fastevents, from_workload, load_profile, simulate
from dlbench.simulate.core import build_plan, policy_of
from dlbench.workload import load as load_workload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "unit"))
import thesis_oracle  # noqa: E402  (the reference loop lives with the tests: dlbench keeps one engine)

OPTIONS = {"prefetch": {"num_workers": 2}, "staging": {"loader_threads": 2, "tier": "local"},
           "clairvoyant": {"loader_threads": 2}, "deepio": {"mode": "ordered", "loader_threads": 2}}


def _same(a, b) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, dict):
            if any(not np.allclose(y[k], x[k], rtol=1e-9, atol=0) for k in x):
                return False
        elif not np.allclose(y, x, rtol=1e-9, atol=0):
            return False
    return True


def reference_vs_fast(prof, wl, strategies, nodes_list, epochs) -> bool:
    print(f"Part 1: reference event loop vs the model's engine, {wl.name} x {epochs} epochs (wall s, costing only)")
    print(f"{'strategy':12s} {'nodes':>6s} {'accesses':>11s} {'plan s':>7s} {'reference s':>12s} {'fast s':>7s} "
          f"{'speed-up':>9s} {'ref cpu s':>10s} {'fast cpu s':>11s} {'runtime s':>10s} {'equal':>6s}")
    ok = True
    model = Model(prof, rules="thesis")
    sizes = wl.sizes(0)
    for nodes in nodes_list:
        for name in strategies:
            t = time.perf_counter()
            plan = build_plan(name, wl=wl, nodes=nodes, ranks_per_node=1, epochs=epochs, seed=0, profile=prof,
                              sizes=sizes, options=OPTIONS.get(name))
            tp = time.perf_counter() - t
            pol = policy_of(name, plan)
            thr = float(plan.pipeline.threads or prof.staging.threads) if pol == "prefetch" else None
            t, c = time.perf_counter(), time.process_time()
            ref = thesis_oracle.cost_events(model, plan, sizes, pol, thr, 0.0)
            tr, cr = time.perf_counter() - t, time.process_time() - c
            t, c = time.perf_counter(), time.process_time()
            new = fastevents.cost_events(model, plan, sizes, pol, thr, 0.0)
            tf, cf = time.perf_counter() - t, time.process_time() - c
            eq = _same(ref, new)
            ok &= eq
            print(f"{name:12s} {nodes:6d} {wl.samples * epochs:11,d} {tp:7.2f} {tr:12.2f} {tf:7.2f} {tr / tf:8.1f}x "
                  f"{cr:10.2f} {cf:11.2f} {float(new[0].sum()):10.1f} {'yes' if eq else 'NO':>6s}", flush=True)
    return ok


def big(prof, wl, strategies, nodes, epochs) -> None:
    print(f"Part 2: the model's engine, {wl.name} x {nodes:,} nodes x {epochs} epochs "
          f"({wl.samples * epochs:,} accesses; simulate() end to end, planning included)")
    print(f"{'strategy':12s} {'wall s':>8s} {'cpu s':>8s} {'runtime s':>12s}")
    tot = [0.0, 0.0]
    for name in strategies:
        row = (name, name, OPTIONS.get(name, {}))
        t, c = time.perf_counter(), time.process_time()
        r = simulate([row], wl=wl, profile=prof, nodes=nodes, epochs=epochs, seed=0, rules="thesis")[name]
        dt, dc = time.perf_counter() - t, time.process_time() - c
        tot[0] += dt
        tot[1] += dc
        print(f"{name:12s} {dt:8.1f} {dc:8.1f} {r['total_time_s']:12.1f}", flush=True)
    print(f"{'total':12s} {tot[0]:8.1f} {tot[1]:8.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--strategies", default="naive,prefetch")
    ap.add_argument("--nodes", default="64,128,256")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--big-nodes", type=int, default=1024)
    ap.add_argument("--big-epochs", type=int, default=90)
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-big", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="imagenet with 8,192 samples (that the script runs)")
    a = ap.parse_args()
    prof = load_profile("hdmlp-thesis")
    wl = from_workload(load_workload("imagenet", scale="full"))
    if a.smoke:
        import dataclasses

        wl = dataclasses.replace(wl, samples=8192)
    strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    ok = True
    if not a.skip_reference:
        ok = reference_vs_fast(prof, wl, strategies, [int(x) for x in a.nodes.split(",")], a.epochs)
    if not a.skip_big:
        big(prof, wl, strategies, a.big_nodes, a.big_epochs)
    if not ok:
        sys.exit("the two engines disagree (see 'equal')")


if __name__ == "__main__":
    main()
