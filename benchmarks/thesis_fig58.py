"""The HDMLP thesis' environment evaluation (its Section 5.2.3, Tables 5.5/5.6 and Fig. 5.8): Scenario 3
(configs/studies/hdmlp-thesis-s3.yaml: F = 300,000 samples of normal(2 MB, 0.2 MB), 5 epochs, 4 nodes) costed
with the HDMLP policy (that study's HDMLP row) on environments that differ in the node-local storage only:

- no node-local storage at all: the naive policy ("fetched from the PFS when needed without any buffering");
- a staging buffer of 1, 2 or 4 GB and nothing else;
- a 4 GB staging buffer plus RAM of 0/10/20/40 GB (the profile's memory curve, r(2) = 21,164 MB/s) and a
  storage device of 0/20/40/80 GB read at r(2) = 100 MB/s (the thesis gives the 2-thread rate only; both
  tiers have 2 threads, and the thesis rules read a tier at its r(threads)).

Published values: the thesis' text (baseline 30,275.72 s; lower bound 7,655.47 s; staging 1/2/4 GB "all 9,947
seconds") and the labels of its Fig. 5.8 (the 4 x 4 grid, one decimal; Tables 5.5/5.6 give the RAM-only and
storage-only points with two). The thesis gives no figures for the staging sizes one by one beyond "9,947".

    PYTHONPATH=. python benchmarks/thesis_fig58.py [--reduce K] [--seed S]

``--reduce K`` divides F and every capacity by K (a quick look; no published figures at that size). The full
grid costs 19 HDMLP/naive rows at F = 300,000 (about 10-15 s each on the shared development machine).
Prints a table: point, dlbench's runtime, the published one, the gap; exits 1 if any point is off by more
than 3 %.

Measured (2026-11-25, shared 2-core machine, seed 0, full size, one run, 85 s in all): every point within
2.32 % of the published one. No local storage (naive) 30,266.20 s (-0.03 %), lower bound 7,652.50 (-0.04 %),
staging only 1/2/4 GB 9,941.98 / 9,941.33 / 9,940.49 (-0.05 to -0.07 %). Grid, dlbench (gap to Fig. 5.8):
  storage / RAM      0 GB              10 GB             20 GB             40 GB
  0 GB         9,940.49 (-0.07)   9,605.03 (+0.53)  9,335.04 (+1.03)  8,784.20 (+1.99)
  20 GB        9,622.29 (+0.45)   9,293.84 (+0.89)  8,998.04 (+1.22)  8,435.99 (+2.26)
  40 GB        9,341.66 (+0.90)   9,005.36 (+1.35)  8,703.70 (+1.79)  8,173.82 (+1.97)
  80 GB        8,863.70 (+1.84)   8,538.97 (+1.86)  8,291.05 (+2.32)  7,851.36 (+2.26)
dlbench is the slower everywhere a tier caches, and the gap grows with the cached share. Traced
(docs/evidence/issue-19.md, "HDMLP S4 +2.1 % and the Fig. 5.8 grid"): the reference simulator, transcribed and
fed dlbench's own order and sizes, gives 9,221.34 / 8,604.20 / 7,785.86 / 8,671.49 s for (RAM, storage) = (10,
20) / (20, 40) / (40, 80) / (40, 0) GB: dlbench +0.8 to +1.3 % above it, the reference itself +0.1 to +1.4 %
above the published labels (the thesis's own draw). The first part is the reference's γ test on its unsorted
read logs (the tier fills are logged out of time order): with dlbench's reduction of that test (latest logged
start >= t) the reference gives 9,303.90 / 7,942.21 s (dlbench -0.1 / -1.1 %).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from dlbench.simulate import load_profile, simulate
from dlbench.study.schema import load_study
from dlbench.study.simulate import workload_of
from dlbench.system import ThreadPoint, TierSpec

STUDY = "configs/studies/hdmlp-thesis-s3.yaml"
GB = 1e9
RAM_GB = (0, 10, 20, 40)
STORAGE_GB = (0, 20, 40, 80)
# Fig. 5.8's labels: rows = storage device GB, columns = RAM GB
PUBLISHED_GRID = {
    0: (9947.0, 9554.47, 9239.67, 8613.13),     # Table 5.5 (RAM only); 0 GB RAM: the 4 GB staging point
    20: (9579.53, 9212.1, 8889.2, 8249.8),      # 20 GB storage: Table 5.6 for 0 GB RAM
    40: (9257.99, 8885.5, 8550.5, 8015.7),
    80: (8703.59, 8382.7, 8102.9, 7678.2),
}
PUBLISHED_OTHER = {"no local storage (naive)": 30275.72, "lower bound": 7655.47,
                   "staging 1 GB": 9947.0, "staging 2 GB": 9947.0, "staging 4 GB": 9947.0}
STORAGE_RATE = (ThreadPoint(threads=2, mb_per_s=100.0),)


def environment(base, opts: dict, *, staging_gb: float, ram_gb: float, storage_gb: float, reduce: int):
    """(profile, HDMLP's options) of one environment. Without RAM the memory tier stays with 1 byte (a cache
    of 0 bytes would mean "the profile's default", unbounded without a memory tier)."""
    ram_b = ram_gb * GB / reduce if ram_gb else 1.0
    ram = next(t for t in base.tiers if t.kind == "memory")
    tiers = [dataclasses.replace(ram, capacity_bytes=ram_b)]
    if storage_gb:
        tiers.append(TierSpec(name="storage", kind="local", capacity_bytes=storage_gb * GB / reduce, threads=2,
                              bandwidth=STORAGE_RATE))
    prof = dataclasses.replace(base, tiers=tuple(tiers),
                               staging=dataclasses.replace(base.staging, capacity_bytes=staging_gb * GB))
    return prof, {**opts, "cache_capacity": ram_b, "local_cache_capacity": storage_gb * GB / reduce}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reduce", type=int, default=1, help="divide F and the capacities by this (>= 1)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.reduce < 1:
        ap.error(f"--reduce={a.reduce}: must be >= 1")
    st = load_study(STUDY)
    wl = workload_of(st)
    wl = dataclasses.replace(wl, samples=wl.samples // a.reduce)
    base = load_profile(st.system)
    hdmlp = next(e for e in st.entries() if e[0] == "HDMLP")
    label, strat, opts, model = hdmlp

    def cost(name, prof, row):
        t0 = time.perf_counter()
        r = simulate([row], wl=wl, profile=prof, nodes=st.nodes, epochs=st.epochs, seed=a.seed, rules=st.rules)
        return r[row[0]]["total_time_s"], time.perf_counter() - t0

    points = []   # (name, profile, row, published)
    pub = a.reduce == 1
    plain, _ = environment(base, opts, staging_gb=4, ram_gb=0, storage_gb=0, reduce=a.reduce)
    points.append(("no local storage (naive)", plain, ("naive", "naive", {}), PUBLISHED_OTHER["no local storage (naive)"]))
    points.append(("lower bound", plain, ("lowerbound", "lowerbound", {}), PUBLISHED_OTHER["lower bound"]))
    for sg in (1, 2):
        prof, o = environment(base, opts, staging_gb=sg, ram_gb=0, storage_gb=0, reduce=a.reduce)
        points.append((f"staging {sg} GB", prof, (label, strat, o, model), PUBLISHED_OTHER[f"staging {sg} GB"]))
    for sto in STORAGE_GB:
        for i, ram in enumerate(RAM_GB):
            prof, o = environment(base, opts, staging_gb=4, ram_gb=ram, storage_gb=sto, reduce=a.reduce)
            points.append((f"staging 4 GB, RAM {ram} GB, storage {sto} GB", prof, (label, strat, o, model),
                           PUBLISHED_GRID[sto][i]))
    print(f"HDMLP thesis Fig. 5.8 environments on Scenario 3 (F = {wl.samples:,}, seed {a.seed}"
          f"{'' if pub else f', reduced / {a.reduce}: no published figures'})")
    print(f"{'environment':44s} {'dlbench_s':>10s} {'published_s':>11s} {'gap_%':>7s} {'wall_s':>6s}")
    worst = 0.0
    for name, prof, row, p in points:
        t, wall = cost(name, prof, row)
        gap = (t / p - 1) * 100 if pub else float("nan")
        worst = max(worst, abs(gap)) if pub else worst
        print(f"{name:44s} {t:10.2f} {p if pub else float('nan'):11.2f} {gap:7.2f} {wall:6.1f}")
    if pub:
        print(f"largest gap: {worst:.2f} %")
    return 1 if pub and worst > 3.0 else 0


if __name__ == "__main__":
    sys.exit(main())
