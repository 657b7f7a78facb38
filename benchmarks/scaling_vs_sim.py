"""Measured strong-scaling points against the model's curve for the same profile (issue 19).

    # the same study run at several world sizes (one emulated node per rank), results kept per size
    PYTHONPATH=. python benchmarks/real_vs_sim.py --run 3 --ranks 1 --study S --system me.yaml --keep R1
    PYTHONPATH=. python benchmarks/real_vs_sim.py --run 3 --ranks 2 --study S --system me.yaml --keep R2
    PYTHONPATH=. python benchmarks/scaling_vs_sim.py --results R1/rep* --results R2/rep* [--curve 1,2,4,8,16]

For every row (strategy + options, as real_vs_sim labels it) present at every measured size: the model's
epoch time (mean of epochs 1..) at each node count of ``--curve`` with the runs' own profile, workload, batch,
step time and seed (the dataset is fixed: strong scaling), and the measured median and min at the sizes run.
A measured point is "on the curve" when its median is within ±10 % of the curve's value at its node count
(``--tolerance``); the min is shown next to it (the machine's noise: a shared host stretches the median).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def main() -> None:
    from real_vs_sim import measured, modelled

    from dlbench.results import read_run

    ap = argparse.ArgumentParser()
    ap.add_argument("--results", nargs="+", action="append", required=True,
                    help="results roots of one world size (repeat the flag per size)")
    ap.add_argument("--curve", default="1,2,4,8,16", help="node counts of the modelled curve")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    try:
        curve = sorted({int(x) for x in a.curve.split(",")})
    except ValueError:
        sys.exit(f"scaling_vs_sim: --curve {a.curve!r}: give node counts separated by commas, e.g. 1,2,4")
    if not curve or curve[0] < 1:
        sys.exit(f"scaling_vs_sim: --curve {a.curve!r}: node counts must be >= 1")
    by_size: dict[int, dict[str, list]] = {}
    setups = {}
    for roots in a.results:
        runs = [read_run(f.parent) for r in roots for f in sorted(Path(r).rglob("run.json"))]
        runs = [r for r in runs if not r.get("simulated") and r.get("status", "ok") == "ok"]
        if not runs:
            sys.exit("scaling_vs_sim: no measured run.json under " + ", ".join(roots))
        for r in runs:
            m = measured(r)
            nodes, rpn = m["setup"][6], m["setup"][7]
            if rpn != 1:
                sys.exit(f"scaling_vs_sim: {m['run_dir']}: {rpn} ranks per node; run with --ranks-per-node 1")
            by_size.setdefault(nodes, {}).setdefault(m["label"], []).append(m)
            setups[nodes] = m["setup"]
    base = {k[:6] + k[8:] for k in setups.values()}
    if len(base) != 1:
        sys.exit(f"scaling_vs_sim: the runs differ in more than the world size: {sorted(base)}")
    sizes = sorted(by_size)
    labels = [lb for lb in by_size[sizes[0]] if all(lb in by_size[n] for n in sizes)]
    setup = setups[sizes[0]]
    pts = sorted(set(curve) | set(sizes))
    print(f"{setup[0]}: {setup[2]} samples x {setup[1]:,} B, batch {setup[3]}, step {setup[4]} s, system "
          f"{setup[5]}, {setup[8]} epochs; measured at {sizes} node(s) (1 rank each); epoch 1.. mean, seconds")
    hdr = f"{'run':<30}" + "".join(f"{'sim ' + str(n):>10}" for n in pts) + "".join(
        f"{'real ' + str(n) + ' med/min':>22}{'on?':>5}" for n in sizes)
    print(hdr)
    print("-" * len(hdr))
    out, on, tot = {}, 0, 0
    for lb in labels:
        m0 = by_size[sizes[0]][lb][0]
        sim = {n: modelled(setup[:6] + (n,) + setup[7:], m0["strategy"], m0["options"])["epoch_s"] for n in pts}
        row = {"sim": sim, "real": {}}
        cells = ""
        for n in sizes:
            e = [m["epoch_s"] for m in by_size[n][lb]]
            med, mn = statistics.median(e), min(e)
            ok = abs(med / sim[n] - 1) <= a.tolerance
            on += ok
            tot += 1
            row["real"][n] = {"median": med, "min": min(e), "all": e, "ratio": med / sim[n], "on_curve": ok}
            cells += f"{f'{med:.3f}/{mn:.3f} ({med / sim[n]:.2f})':>22}{'yes' if ok else 'no':>5}"
        out[lb] = row
        print(f"{lb:<30}" + "".join(f"{sim[n]:>10.3f}" for n in pts) + cells)
    print(f"\n{on} of {tot} measured points on the curve (median within ±{a.tolerance:.0%})")
    if a.json:
        Path(a.json).write_text(json.dumps({"sizes": sizes, "curve": pts, "rows": out}, indent=1))


if __name__ == "__main__":
    main()
