"""Scaling benchmark of ``dlbench simulate`` itself (issue 31): per strategy, the CPU seconds and the peak memory of
costing ImageNet-1k (1,281,167 samples, local batch 64) on the HDMLP thesis' system profile for E epochs at 256,
1,024 and 4,096 nodes, so the growth with nodes and samples is visible (it should be linear or better in
nodes x epochs, never in nodes x samples).

Every (strategy, nodes) case runs in a fresh child process (``simulate()`` end to end: the size check with the
profile, planning, costing, the summary; no results folder), which reports its own CPU seconds
(``time.process_time``) and peak resident memory (``ru_maxrss``); a case past ``--cpu-limit`` CPU seconds is
stopped (RLIMIT_CPU) and shown as such, one refused by the size check shows its one-line reason. The machine may
be shared: the CPU seconds are the figures to compare (wall seconds are shown too).

    PYTHONPATH=. python benchmarks/sim_scale.py [--strategies naive,clairvoyant] [--nodes 256,1024,4096]
        [--epochs 90] [--rules thesis] [--cpu-limit 300] [--smoke]

``--smoke``: a tiny synthetic workload (2,000 samples, batch 4) at 2/4/8 nodes x 2 epochs, every strategy: what the
test suite runs (tests/unit/test_simulate_scale.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

STRATEGIES = ("naive", "prefetch", "staging", "local", "pls", "lbann", "clairvoyant", "locality", "deepio",
              "surrogatetrain")


def one(strategy: str, nodes: int, epochs: int, rules: str | None, smoke: bool) -> dict:
    """Cost one case in this process; returns its figures (run by the child)."""
    from dlbench.errors import DlbenchError
    from dlbench.simulate import SimWorkload, from_workload, load_profile, simulate
    from dlbench.simulate.core import check_size, prologue_rows
    from dlbench.workload import load as load_workload

    prof = load_profile("hdmlp-thesis")
    if smoke:
        wl = SimWorkload("tiny", 2_000, 4, "lognormal", 1.1e5, 4e4, step_time_s=0.01)
    else:
        wl = from_workload(load_workload("imagenet", scale="full"), default_step=prof.compute_mb_per_s is None)
    t, c = time.perf_counter(), time.process_time()
    out: dict = {"strategy": strategy, "nodes": nodes, "epochs": epochs, "samples": wl.samples}
    try:
        check_size(wl, nodes, 1, prologue=prologue_rows([strategy], wl, nodes, 1, profile=prof))
        s = simulate([strategy], wl=wl, profile=prof, nodes=nodes, epochs=epochs, seed=0, rules=rules,
                     na_rows=True)[strategy]
        ep = s.get("epoch_time_s")
        out["epoch_s"] = (sum(ep) / len(ep) if ep else None) if isinstance(ep, list) else ep
        out["not_applicable"] = s.get("not_applicable")
        out["notes"] = s.get("model_notes") or []
    except DlbenchError as e:
        out["refused"] = str(e)
    out["cpu_s"] = time.process_time() - c
    out["wall_s"] = time.perf_counter() - t
    out["peak_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return out


def run_case(strategy: str, nodes: int, epochs: int, rules: str | None, smoke: bool, cpu_limit: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", strategy, str(nodes), str(epochs),
           rules or "", "1" if smoke else "0"]

    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit, cpu_limit + 5))

    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    if p.returncode == 0 and last.startswith("{"):
        return json.loads(last)
    return {"strategy": strategy, "nodes": nodes, "epochs": epochs, "stopped": True,
            "cpu_s": float(cpu_limit), "wall_s": time.perf_counter() - t, "peak_gb": ru.ru_maxrss * 1024 / 1e9,
            "error": (p.stderr.strip().splitlines() or ["(no output)"])[-1][:200] if p.returncode not in (-24, 152)
            else f"stopped at {cpu_limit} s CPU"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--nodes", default=None, help="comma-separated (default 256,1024,4096; --smoke: 2,4,8)")
    ap.add_argument("--epochs", type=int, default=None, help="default 90 (--smoke: 2)")
    ap.add_argument("--rules", default=None, help="the model's rule set (default: the profile's; thesis: event-driven)")
    ap.add_argument("--cpu-limit", type=int, default=300, help="CPU seconds per case before it is stopped")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite's run)")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        s, n, e, rules, smoke = a.child
        print(json.dumps(one(s, int(n), int(e), rules or None, smoke == "1")))
        return 0
    nodes = [int(x) for x in (a.nodes or ("2,4,8" if a.smoke else "256,1024,4096")).split(",")]
    epochs = a.epochs or (2 if a.smoke else 90)
    names = [s.strip() for s in a.strategies.split(",") if s.strip()]
    print(f"dlbench simulate, {'tiny synthetic (2,000 samples)' if a.smoke else 'imagenet (1,281,167 samples)'} x "
          f"{epochs} epochs, hdmlp-thesis, rules {a.rules or 'default'}; one child process per case")
    print(f"{'strategy':15s} {'nodes':>6s} {'CPU s':>8s} {'wall s':>8s} {'peak GB':>8s} {'CPU / prev':>10s} "
          f"{'epoch s (model)':>16s}  note")
    bad = False
    for s in names:
        prev = None
        for n in nodes:
            r = run_case(s, n, epochs, a.rules, a.smoke, a.cpu_limit)
            grow = f"{r['cpu_s'] / prev:9.2f}x" if prev and not r.get("stopped") else f"{'':>10s}"
            note = r.get("refused") or r.get("not_applicable") or r.get("error") or ""
            bad |= bool(r.get("stopped") or r.get("refused") or r.get("error"))
            ep = r.get("epoch_s")
            print(f"{s:15s} {n:6d} {r['cpu_s']:8.1f} {r['wall_s']:8.1f} {r['peak_gb']:8.2f} {grow} "
                  f"{'' if ep is None else f'{ep:16.4f}':>16s}  {note}", flush=True)
            prev = None if r.get("stopped") else r["cpu_s"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
