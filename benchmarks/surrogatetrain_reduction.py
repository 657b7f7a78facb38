"""SurrogateTrain's headline: bytes read from the shared file system against naive's, from the plan
(``Plan.bytes_by_tier``) and from ``dlbench simulate`` (which costs the same ``Strategy.plan``), on a
simulation study (default: configs/studies/solar-ptychonn.yaml), then the reduction against the buffer
fraction (the curve, since the paper's buffer for its 6.7x is not published).

    PYTHONPATH=. python benchmarks/surrogatetrain_reduction.py [--study FILE] [--fractions 0.25,0.5,...]
        [--no-curve] [--smoke]

The paper's two claims side by side (SurrogateTrain, SC22 poster: "reduces the amount of data loaded by 6.7x",
"up to 4.7x" data-loading speedup): data loaded = the shared-FS bytes of naive / of each row; data-loading
speedup = naive's data-loading time / the row's, a rank's data-loading time being its I/O-bound time (stall +
barrier + exchange: ``metrics.GLOSSARY["io_bound_share"]``) over the epochs, modelled on the study's system.
``--smoke``: the study's workload at its tiny preset on 2 nodes, 2 epochs, a short curve and the small
heuristic cases (seconds; the test suite's check that the script runs).

Pure: plans and the model, no I/O. Also prints the epoch-order heuristic's cost against the optimum
(Held-Karp) on small cases.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def loading_s(summary: dict) -> float:
    """A simulated row's data-loading time: its I/O-bound time over the epochs, mean over ranks (stall +
    barrier + exchange, the summary's ``io_bound_share`` of its epoch time)."""
    pt = summary["phase_time_s"]
    return float(pt["stall"] + pt["barrier"] + pt["exchange"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", default="configs/studies/solar-ptychonn.yaml")
    ap.add_argument("--fractions", default="0.1,0.25,0.5,0.75,0.9,0.95,1.0")
    ap.add_argument("--curve-variants", default="default,fifo,no-reorder,no-remap")
    ap.add_argument("--no-curve", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny preset, 2 nodes, 2 epochs: that the script runs")
    a = ap.parse_args()

    import dataclasses

    from dlbench import strategies
    from dlbench.plan.surrogatetrain import exact_vs_heuristic
    from dlbench.simulate import build_plan, load_profile, simulate
    from dlbench.study.schema import load_study
    from dlbench.study.simulate import workload_of

    st = load_study(a.study)
    if a.smoke:
        st = dataclasses.replace(st, nodes=2, ranks_per_node=1, epochs=2,
                                 workload={**st.workload, "scale": "tiny"} if "builtin" in st.workload else st.workload)
        a.fractions, a.curve_variants = "0.5,1.0", "default"
    wl = workload_of(st, a.study)
    prof = load_profile(st.system)
    sizes = wl.sizes(st.seed)
    rows = st.entries()
    t0 = time.perf_counter()
    sim = simulate(rows, wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                   seed=st.seed)
    print(f"{st.name}: {wl.name}, F = {wl.samples:,}, {st.nodes * st.ranks_per_node} ranks, local batch "
          f"{wl.local_batch}, {st.epochs} epochs ({time.perf_counter() - t0:.1f} s)")
    head = f"{'row':<28} {'plan shared GiB':>15} {'x fewer (plan)':>14} {'x fewer (simulate)':>18} " \
           f"{'loading (s)':>11} {'loading speedup':>15} {'sim time (s)':>12} {'local batch':>12} {'imbalance':>9}"
    print(head)
    print("-" * len(head))
    base_plan = base_sim = base_load = None
    claims = []
    for label, name, opts, _model in rows:
        plan = build_plan(name, wl=wl, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                          seed=st.seed, profile=prof, sizes=sizes, options=opts)
        shared = plan.bytes_by_tier(np.round(sizes).astype(np.int64))["shared"]
        s_shared = sim[label]["bytes_by_tier"]["shared"]
        load_s = loading_s(sim[label])
        if base_plan is None:
            base_plan, base_sim, base_load = shared, s_shared, load_s
        m = plan.meta
        lb = f"{m['local_batch_min']}-{m['local_batch_max']}" if "local_batch_min" in m else "-"
        imb = f"{m['compute_imbalance']:.1%}" if "compute_imbalance" in m else "-"
        speed = base_load / load_s if load_s > 0 else float("inf")
        print(f"{label:<28} {shared / 2**30:>15.2f} {base_plan / shared:>14.2f} {base_sim / s_shared:>18.2f} "
              f"{load_s:>11.1f} {speed:>14.2f}x {sim[label]['total_time_s']:>12.1f} {lb:>12} {imb:>9}")
        if name == "surrogatetrain":
            claims.append((label, base_sim / s_shared, speed))
    if claims:
        best = max(claims, key=lambda c: c[2])
        first = claims[0]
        print(f"\nthe paper's two claims (SurrogateTrain, SC22: 6.7x less data loaded, up to 4.7x data-loading "
              f"speedup): {first[0]}: {first[1]:.2f}x less data loaded, {first[2]:.2f}x data-loading speedup; best "
              f"speedup of the rows: {best[2]:.2f}x ({best[0]}); data-loading time = I/O-bound time (stall + barrier "
              f"+ exchange) per rank, modelled on {st.system}")
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
    cases = ((6, 1000, 400),) if a.smoke else ((6, 1000, 400), (8, 1000, 400), (10, 1000, 400), (10, 87632, 43816))
    for E, F, C in cases:
        for seed in range(2):
            r = exact_vs_heuristic(E, F, C, seed)
            print(f"{E:>3} {F:>6} {C:>5} {seed:>4} {r['identity']:>9} {r['heuristic']:>9} {r['optimum']:>8} "
                  f"{r['heuristic'] / r['optimum'] - 1:>6.2%}")


if __name__ == "__main__":
    main()
