"""SurrogateTrain's headline: bytes read from the shared file system against naive's, from the plan
(``Plan.bytes_by_tier``) and from ``dlbench simulate`` (which costs the same ``Strategy.plan``), on a
simulation study (default: configs/studies/solar-ptychonn.yaml), then the reduction against the buffer
fraction (the curve, since the paper's buffer for its 6.7x is not published).

    PYTHONPATH=. python benchmarks/surrogatetrain_reduction.py [--study FILE] [--fractions 0.25,0.5,...]
        [--no-curve]

Pure: plans and the model, no I/O. Also prints the epoch-order heuristic's cost against the optimum
(Held-Karp) on small cases.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", default="configs/studies/solar-ptychonn.yaml")
    ap.add_argument("--fractions", default="0.1,0.25,0.5,0.75,0.9,0.95,1.0")
    ap.add_argument("--curve-variants", default="default,fifo,no-reorder,no-remap")
    ap.add_argument("--no-curve", action="store_true")
    a = ap.parse_args()

    from dlbench import strategies
    from dlbench.plan.surrogatetrain import exact_vs_heuristic
    from dlbench.simulate import build_plan, load_profile, simulate
    from dlbench.simulate.study import load, workload_of

    st = load(a.study)
    wl = workload_of(st, a.study)
    prof = load_profile(st.system)
    sizes = wl.sizes(st.seed)
    rows = st.entries()
    t0 = time.perf_counter()
    sim = simulate(rows, wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                   seed=st.seed)
    print(f"{st.name}: {wl.name}, F = {wl.samples:,}, {st.nodes * st.ranks_per_node} ranks, local batch "
          f"{wl.local_batch}, {st.epochs} epochs ({time.perf_counter() - t0:.1f} s)")
    head = f"{'row':<28} {'plan shared GB':>14} {'x fewer (plan)':>14} {'x fewer (simulate)':>18} " \
           f"{'sim time (s)':>12} {'local batch':>12} {'imbalance':>9}"
    print(head)
    print("-" * len(head))
    base_plan = base_sim = None
    for label, name, opts in rows:
        plan = build_plan(name, wl=wl, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                          seed=st.seed, profile=prof, sizes=sizes, options=opts)
        shared = plan.bytes_by_tier(np.round(sizes).astype(np.int64))["shared"]
        s_shared = sim[label]["bytes_by_tier"]["shared"]
        if base_plan is None:
            base_plan, base_sim = shared, s_shared
        m = plan.meta
        lb = f"{m['local_batch_min']}-{m['local_batch_max']}" if "local_batch_min" in m else "-"
        imb = f"{m['compute_imbalance']:.1%}" if "compute_imbalance" in m else "-"
        print(f"{label:<28} {shared / 1e9:>14.2f} {base_plan / shared:>14.2f} {base_sim / s_shared:>18.2f} "
              f"{sim[label]['total_time_s']:>12.1f} {lb:>12} {imb:>9}")
    if not a.no_curve:
        st_ = strategies.get("surrogatetrain")
        variants = {"default": {}, "fifo": {"eviction": "fifo"}, "no-reorder": {"reorder": False},
                    "no-remap": {"remap": False}, "no-balance": {"balance": False}}
        chosen = [v for v in a.curve_variants.split(",") if v]
        print(f"\nreduction of shared-FS bytes vs naive against the buffer (aggregate, fraction of the dataset), "
              f"{st.epochs} epochs")
        print(f"{'buffer':>7} " + " ".join(f"{v:>11}" for v in chosen))
        for f in [float(x) for x in a.fractions.split(",")]:
            cells = []
            for v in chosen:
                plan = build_plan("surrogatetrain", wl=wl, nodes=st.nodes, ranks_per_node=st.ranks_per_node,
                                  epochs=st.epochs, seed=st.seed, profile=prof, sizes=sizes,
                                  options={"buffer_fraction": f, **variants[v]})
                cells.append(f"{plan.meta['shared_load_reduction_vs_naive']:>10.2f}x")
            print(f"{f:>7.2f} " + " ".join(cells))
        del st_
    print("\nepoch-order heuristic (NN + 2-opt + or-opt) vs the optimum (Held-Karp), transition costs of real "
          "permutations:")
    print(f"{'E':>3} {'F':>6} {'C':>5} {'seed':>4} {'identity':>9} {'heuristic':>9} {'optimum':>8} {'gap':>6}")
    for E, F, C in ((6, 1000, 400), (8, 1000, 400), (10, 1000, 400), (10, 87632, 43816)):
        for seed in range(2):
            r = exact_vs_heuristic(E, F, C, seed)
            print(f"{E:>3} {F:>6} {C:>5} {seed:>4} {r['identity']:>9} {r['heuristic']:>9} {r['optimum']:>8} "
                  f"{r['heuristic'] / r['optimum'] - 1:>6.2%}")


if __name__ == "__main__":
    main()
