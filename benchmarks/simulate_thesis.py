"""Benchmark of the thesis-rule costing (event-driven, ``rules: thesis``) on the HDMLP thesis' Scenario 2
(4 nodes x 150,000 samples x 10 epochs = 1.5 M accesses): wall time per row, the modelled runtime, the
published one and the gap; the same rows under the default (vectorised) rules as the reference timing in the
same run. The machine may be shared: compare the two columns, not absolute seconds across runs.

    PYTHONPATH=. python benchmarks/simulate_thesis.py [--study configs/studies/hdmlp-thesis-s2.yaml] [--seed 0]
"""

from __future__ import annotations

import argparse
import time

from dlbench.simulate import load_profile, simulate
from dlbench.study.schema import load_study
from dlbench.study.simulate import workload_of


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--study", default="configs/studies/hdmlp-thesis-s2.yaml")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--smoke", action="store_true", help="1/100 of the samples, 1 epoch (that the script runs)")
    a = ap.parse_args()
    st = load_study(a.study)
    wl = workload_of(st, where=a.study)
    if a.smoke:   # the published runtimes are for the full study: the gap column is not comparable then
        import dataclasses

        st = dataclasses.replace(st, epochs=1, published_runtime_s={})
        wl = dataclasses.replace(wl, samples=max(wl.samples // 100, st.nodes * st.ranks_per_node * wl.local_batch))
    prof = load_profile(st.system)
    seed = st.seed if a.seed is None else a.seed
    print(f"{st.name}: {st.nodes} nodes x {wl.samples:,} samples x {st.epochs} epochs, seed {seed}")
    print(f"{'row':36s} {'thesis s':>9s} {'wall s':>7s} {'published':>10s} {'gap %':>7s} {'default s':>10s} {'wall s':>7s}")
    tot = [0.0, 0.0]
    for row in st.entries():
        label = row[0]
        t = time.perf_counter()
        r = simulate([row], wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node, epochs=st.epochs,
                     seed=seed, rules=st.rules)[label]["total_time_s"]
        dt = time.perf_counter() - t
        t = time.perf_counter()
        try:
            d = simulate([row[:3]], wl=wl, profile=prof, nodes=st.nodes, ranks_per_node=st.ranks_per_node,
                         epochs=st.epochs, seed=seed, rules="default")[label]["total_time_s"]
        except Exception:  # a model option that needs the thesis rules
            d = float("nan")
        dd = time.perf_counter() - t
        tot[0] += dt
        tot[1] += dd
        pub = st.published_runtime_s.get(label)
        gap = f"{100 * (r / pub - 1):+7.2f}" if pub else " " * 7
        print(f"{label:36s} {r:9.1f} {dt:7.2f} {pub or '':>10} {gap} {d:10.1f} {dd:7.2f}")
    print(f"{'total wall':36s} {'':9s} {tot[0]:7.2f} {'':10s} {'':7s} {'':10s} {tot[1]:7.2f}")


if __name__ == "__main__":
    main()
