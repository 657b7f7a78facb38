"""Measured epoch times of a run study against ``dlbench simulate``'s model of the same plans (issue 9).

    # run the study N times (mpiexec -n 2 ... --ranks-per-node 1, into temporary folders), then compare
    PYTHONPATH=. python benchmarks/real_vs_sim.py --run 3 [--study configs/studies/cache-comparison.yaml]
    # 1 rank, the study run with another profile (e.g. one `dlbench calibrate-storage` wrote), results kept
    PYTHONPATH=. python benchmarks/real_vs_sim.py --run 2 --ranks 1 --system me.yaml --keep /tmp/me/res \
        --json /tmp/me/out.json     # --json also holds each row's phases per epoch, real and modelled
    # or read results roots a study already wrote (one per repeat)
    PYTHONPATH=. python benchmarks/real_vs_sim.py --results /tmp/me/study1 /tmp/me/study2

For every measured run (read from its run.json: strategy, resolved options, epochs, local batch, the sleep
step time, system profile, sample count and sizes, nodes and ranks per node) the model costs the same
configuration with ``dlbench.simulate.simulate``: the plan ``Strategy.plan`` returns for those options (so
the same cache capacity, loader threads and mode), priced with the profile's PFS, tiers and network. Rows
with the same label (strategy + options that differ from the defaults, as the study's table names them)
are repeats: the measured figure is their median, with min..max.

Columns: ``epoch 0`` measured and modelled (caches and pipelines fill; staging-like prologues are not in
it), ``epoch 1..`` = the mean of epochs 1.. (steady state; epoch 0 left out as warm-up), real / sim of
epochs 1.., and ``bytes`` = whether the run's bytes by tier over all epochs (shared / memory+local /
peer, summed over ranks) equal the plan's (the model costs the plan; a mismatch means the executor did
something else). The lower bound (everything in memory at t = 0, compute only) is printed for reference.
``--sim-system PROFILE`` adds a column costed with another profile (e.g. one that states the copy bandwidth
or reader count differently) next to the runs' own.

With ``--run`` the study runs with a private table of the emulated PFS's readers (``$DLBENCH_PFS_STATE``
in the temporary folder, unless set): γ is machine-wide by design, so any other dlbench job reading through
the same profile on this machine would otherwise slow these runs down. Do the same when running the study
by hand on a shared machine (``DLBENCH_PFS_STATE=$(mktemp -d) mpiexec ...``).

Figures on this machine, per strategy, 1 and 2 ranks, laptop-pfs and calibrated profiles, with the mechanisms
behind every row outside ±10 %: docs/evidence/issue-19-real-vs-sim.md. A profile `dlbench calibrate-storage`
writes carries the figures of the mechanisms the model prices (page-cache curve of the local tier, the format
reader's per-file cost, file writes, worker start, the exchange rate, the host's wake-up latency): calibrate on
the machine that runs the study, right before it. The same runs at several world sizes against the model's
curve: benchmarks/scaling_vs_sim.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_study(study: str, n: int, tmp: Path, local_dir: Path, ranks: int = 2) -> list[Path]:
    """``mpiexec -n RANKS python -m dlbench.cli study STUDY --ranks-per-node 1`` n times; the results roots."""
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or "mpiexec"
    roots = []
    for k in range(n):
        out = tmp / f"rep{k}"
        cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "dlbench.cli", "study", study, "--ranks-per-node", "1",
               "--local-dir", str(local_dir), "--out", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        if r.returncode != 0:
            sys.exit(f"real_vs_sim: study run {k} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-400:]}")
        print(f"# study repeat {k + 1}/{n}: done (load average {os.getloadavg()[0]:.1f})", file=sys.stderr)
        roots.append(out)
    return roots


def sample_bytes(spec: dict) -> int:
    return int(sum(int(np.prod(a["shape"])) * np.dtype(a["dtype"]).itemsize for a in spec["arrays"]))


def measured(run: dict) -> dict:
    from dlbench.report import run_label as _label

    s, cfg = run["summary"], run["config"]
    ep = s["epoch_time_s"]
    io = (s.get("tier_io") or {}).get("epochs", {})

    def b(t):
        return int((io.get(t) or {}).get("bytes", 0))

    return {"label": _label(run), "strategy": cfg["strategy"], "options": cfg["options"], "epoch0_s": ep[0],
            "phases": phases_per_epoch(s), "run_dir": str(run["run_dir"]),
            "epoch_s": sum(ep[1:]) / len(ep[1:]) if len(ep) > 1 else ep[0],
            "bytes": (b("shared"), b("memory") + b("local"), b("peer")),
            "setup": (cfg["workload"], sample_bytes(cfg["workload_spec"]), int(cfg["workload_spec"]["samples"]),
                      int(cfg["local_batch"]), float(cfg["compute_step_time_s"]), cfg["system"], int(cfg["nodes"]),
                      int(cfg["ranks"]) // int(cfg["nodes"]), int(cfg["epochs"]), int(cfg["seed"]))}


PHASES_SHOWN = ("read", "decode", "stall", "exchange", "compute", "barrier")


def phases_per_epoch(summary: dict) -> dict:
    """The summary's phase times (mean over ranks, summed over epochs) per epoch, and the prologue."""
    n = max(1, int(summary.get("epochs") or len(summary["epoch_time_s"])))
    ph = summary.get("phase_time_s") or {}
    return {**{k: float(ph.get(k, 0.0)) / n for k in PHASES_SHOWN}, "prologue": float(summary["prologue_time_s"])}


def modelled(setup, strategy: str, options: dict, system: str | None = None) -> dict:
    """``system``: cost with this profile instead of the runs' (``--sim-system``)."""
    from dlbench.simulate import SimWorkload, load_profile, simulate

    name, nbytes, samples, batch, step, run_system, nodes, rpn, epochs, seed = setup
    system = system or run_system
    wl = SimWorkload(name, samples, batch, "fixed", float(nbytes), step_time_s=step)
    s = simulate([("x", strategy, dict(options))], wl=wl, profile=load_profile(system), nodes=nodes,
                 ranks_per_node=rpn, epochs=epochs, seed=seed)["x"]
    ep = s["epoch_time_s"]
    # accesses' bytes, summed over ranks over all epochs, with background moves (pls's exchange) under peer: as a
    # run's (one definition, metrics.GLOSSARY)
    t = s["bytes_by_tier"]
    return {"epoch0_s": ep[0], "epoch_s": sum(ep[1:]) / len(ep[1:]) if len(ep) > 1 else ep[0],
            "bytes": (round(t["shared"]), round(t["memory"] + t["local"]), round(t["peer"])),
            "notes": s.get("model_notes") or [], "phases": phases_per_epoch(s)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", nargs="*", default=[], help="results roots of a study (one per repeat)")
    ap.add_argument("--run", type=int, default=0, help="run the study this many times first (into a temp dir)")
    ap.add_argument("--study", default="configs/studies/cache-comparison.yaml")
    ap.add_argument("--sim-system", default=None,
                    help="also cost every run with this system profile (name or YAML path): column 'alt'")
    ap.add_argument("--ranks", type=int, default=2, help="with --run: mpiexec -n RANKS (one emulated node each)")
    ap.add_argument("--system", default=None,
                    help="with --run: run the study with this system profile (name or YAML path) instead of its own")
    ap.add_argument("--keep", default=None, help="with --run: copy the study's results roots into this folder")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.ranks < 1:
        sys.exit(f"real_vs_sim: --ranks {a.ranks}: must be >= 1")
    from dlbench.results import read_run

    tmp = Path(tempfile.mkdtemp(prefix="dlbench-real-vs-sim-"))
    try:
        roots = [Path(r) for r in a.results]
        if a.run:
            # a private table of the emulated PFS's readers: other dlbench jobs on this machine using the same
            # profile would otherwise count in γ (it is machine-wide by design)
            os.environ.setdefault("DLBENCH_PFS_STATE", str(tmp / "pfs"))
            (Path(os.environ["DLBENCH_PFS_STATE"])).mkdir(parents=True, exist_ok=True)
            study = a.study
            if a.system:
                import yaml

                doc = yaml.safe_load(Path(a.study).read_text())
                doc["system"] = str(Path(a.system).resolve()) if Path(a.system).exists() else a.system
                study = str(tmp / Path(a.study).name)
                Path(study).write_text(yaml.safe_dump(doc, sort_keys=False))
            roots += run_study(study, a.run, tmp, tmp / "local", a.ranks)
        if not roots:
            sys.exit("real_vs_sim: give --results ROOT... or --run N")
        runs = [read_run(f.parent) for r in roots for f in sorted(Path(r).rglob("run.json"))]
        runs = [r for r in runs if not r.get("simulated") and r.get("status", "ok") == "ok"]
        rows: dict[str, list[dict]] = {}
        for r in sorted(runs, key=lambda r: r["run_dir"]):
            m = measured(r)
            rows.setdefault(m["label"], []).append(m)
        if a.keep and a.run:
            for r in roots:
                shutil.copytree(r, Path(a.keep) / r.name, dirs_exist_ok=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not rows:
        sys.exit("real_vs_sim: no measured run.json under " + ", ".join(map(str, roots)))
    setups = {m["setup"] for ms in rows.values() for m in ms}
    if len(setups) != 1:
        sys.exit(f"real_vs_sim: the runs differ in setup (workload, sizes, batch, step, system, world, epochs, "
                 f"seed): {sorted(setups)}")
    setup = setups.pop()
    lb = modelled(setup, "lowerbound", {})
    name, nbytes, samples, batch, step, system, nodes, rpn, epochs, seed = setup
    steps = -(-samples // (nodes * rpn) // batch)
    print(f"{name}: {samples} samples x {nbytes:,} B, local batch {batch}, {nodes} nodes x {rpn} rank(s), "
          f"{epochs} epochs, sleep {step} s/step ({steps} steps: compute alone {steps * step:.3f} s/epoch), "
          f"system {system}; model lower bound {lb['epoch_s']:.3f} s/epoch; {len(roots)} repeat(s), "
          f"load average now {os.getloadavg()[0]:.1f}" + (f"; alt: the model with {a.sim_system}" if a.sim_system else ""))
    hdr = (f"{'run':<46}{'n':>3}{'real ep0':>10}{'sim ep0':>9}{'real ep1..':>11}{'(min..max)':>16}{'sim ep1..':>10}"
           f"{'real/sim':>9}" + (f"{'alt ep1..':>10}{'real/alt':>9}" if a.sim_system else "") + "  bytes")
    print(hdr)
    print("-" * len(hdr))
    out = {"setup": dict(zip(("workload", "sample_bytes", "samples", "local_batch", "step_s", "system", "nodes",
                              "ranks_per_node", "epochs", "seed"), setup)),
           "lowerbound_epoch_s": lb["epoch_s"], "rows": {}}
    for label, ms in rows.items():
        sim = modelled(setup, ms[0]["strategy"], ms[0]["options"])
        e1 = [m["epoch_s"] for m in ms]
        e0 = statistics.median(m["epoch0_s"] for m in ms)
        real = statistics.median(e1)
        same = all(m["bytes"] == sim["bytes"] for m in ms)
        alt = modelled(setup, ms[0]["strategy"], ms[0]["options"], a.sim_system) if a.sim_system else None
        alt_col = f"{alt['epoch_s']:>10.3f}{real / alt['epoch_s']:>9.2f}" if alt else ""
        diff = "" if same else f" real {ms[0]['bytes']} plan {sim['bytes']}"
        print(f"{label:<46}{len(ms):>3}{e0:>10.3f}{sim['epoch0_s']:>9.3f}{real:>11.3f}"
              f"{f'({min(e1):.3f}..{max(e1):.3f})':>16}{sim['epoch_s']:>10.3f}{real / sim['epoch_s']:>9.2f}{alt_col}  "
              f"{'same' if same else 'DIFFER'}{diff}")
        out["rows"][label] = {"real_epoch0_s": e0, "sim_epoch0_s": sim["epoch0_s"], "real_epoch_s": real,
                              "real_epoch_s_all": e1, "sim_epoch_s": sim["epoch_s"],
                              "ratio": real / sim["epoch_s"], "bytes_real": ms[0]["bytes"],
                              "bytes_plan": sim["bytes"], "model_notes": sim["notes"],
                              "real_phases_per_epoch": {k: statistics.median(m["phases"][k] for m in ms)
                                                        for k in ms[0]["phases"]},
                              "sim_phases_per_epoch": sim["phases"],
                              **({"alt_epoch_s": alt["epoch_s"], "alt_system": a.sim_system} if alt else {})}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
