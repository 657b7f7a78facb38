"""Issue 30's GPU check: real torch compute with overlapped host-to-device copies against the sleep emulation of the
same calibrated step, on one CUDA GPU. Run through ``benchmarks/gpu_check.sh`` (one command, from a source tree):

    PYTHONPATH=. python benchmarks/gpu_check.py [--out results/gpu_check] [--shm /dev/shm/dlbench-gpu-check]

Needs torch with CUDA, h5py, click, rich, pyyaml, pillow, numpy; pytest only for step 1 (skipped, and said so,
without it); no MPI, no package registry. Steps:

1. the CUDA unit tests (``-m gpu``) of the overlapped path, precisions and the step;
2. fp16 step with the flat gradient bucket against plain per-parameter gradients (resnet50 b64, cosmoflow b4):
   the ~40 % of issue 30 and its fix;
3. ``calibrate`` cosmoflow, imagenet (resnet50) and deepcam at full scale in fp32 and bf16;
4. cosmoflow small generated on /dev/shm; naive, prefetch (4 workers, with and without --pin-memory), staging
   and clairvoyant (4 loader threads), 3 epochs each: ``--compute torch`` (``--overlap on``), the same with
   ``--overlap off`` (the synchronous copy dlbench had before), and sleep compute with the fp32 profile just
   calibrated;
5. one table: AU torch (on / off) vs emulated, exposed and overlapped transfer shares, the batches copied straight
   from the loader's pinned memory vs through a staging slot (``h2d_sources``), and the step times against
   the workload files' H100 figures (measured and DLIO's published one).

The bar (issue 30): every strategy's real-compute AU within 3 points of its emulated AU; exposed transfer < 2 %
of the epoch wherever the loader keeps up (stall < 5 % of the epoch). Budget: under 6 minutes on one H100.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STRATEGIES = [
    ("naive", []),
    ("prefetch w4", ["--strategy", "prefetch", "--num-workers", "4"]),
    ("prefetch w4 pin", ["--strategy", "prefetch", "--num-workers", "4", "--pin-memory"]),
    ("staging t4", ["--strategy", "staging", "--loader-threads", "4"]),
    ("clairvoyant t4", ["--strategy", "clairvoyant", "--loader-threads", "4"]),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cuda_tests() -> str:
    try:
        import pytest  # noqa: F401
    except ImportError:
        return "not run: pytest is not installed on this machine"
    files = ["tests/unit/test_overlap_ring.py", "tests/unit/test_pinned_ring.py", "tests/unit/test_torch_compute.py",
             "tests/unit/test_precision.py"]
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *files],
                       cwd=ROOT, capture_output=True, text=True)
    tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["(no output)"]
    if r.returncode != 0:
        print(r.stdout[-4000:], r.stderr[-2000:])
    return f"exit {r.returncode}: {tail[0]}"


def grad_bucket_check(device: str = "cuda", scale: str = "full", steps: int = 20,
                      workload: str = "cosmoflow") -> list[dict]:
    """fp16 (and fp32) median step with the flat bucket of strided views vs plain gradients, same model and
    batch, synchronous copies (the step alone)."""
    import numpy as np

    from dlbench import workload as W
    from dlbench.compute.torch_step import TorchCompute

    out = []
    cases = (("imagenet", 64), ("cosmoflow", 4)) if device == "cuda" else ((workload, 2),)
    for name, batch in cases:
        wl = W.load(name, scale=scale)
        for precision in (("fp32", "fp16") if device == "cuda" else ("fp32",)):
            row = {"workload": name, "batch": batch, "precision": precision}
            for gb in ("flat", "plain"):
                tc = TorchCompute(wl, batch, device=device, seed=0, precision=precision, overlap="off",
                                  grad_bucket=gb)
                rows = np.random.default_rng(0).integers(0, 256, (batch, tc.row_nbytes), dtype=np.uint8)
                ids = np.arange(batch)
                for s in range(steps):
                    tc.step(rows, ids, batch, None, 0, s)
                row[gb] = float(np.median(tc.step_times_s[steps // 4:]))
                tc.close()
            row["flat_over_plain"] = row["flat"] / row["plain"]
            out.append(row)
            log(f"grad bucket {name} b{batch} {precision}: flat {row['flat'] * 1e3:.1f} ms, plain "
                f"{row['plain'] * 1e3:.1f} ms ({row['flat_over_plain']:.2f}x)")
    return out


def calibrations(out: Path, device: str = "cuda", scale: str = "full", steps: int = 15,
                 workload: str = "cosmoflow") -> dict:
    from dlbench import workload as W
    from dlbench.calibrate.compute import calibrate, write_profile

    prof = {}
    names = ("cosmoflow", "imagenet", "deepcam") if device == "cuda" else ()
    for name in (*names, *((workload,) if workload not in names else ())):
        wl = W.load(name, scale=scale)
        for precision in (("fp32", "bf16") if device == "cuda" else ("fp32",)):
            p = calibrate(wl, steps=steps, warmup=3 if steps > 3 else 0, device=device, precision=precision,
                          batch_size=None if device == "cuda" else 2)
            path = out / f"{name}-{scale}-{device}-{precision}.compute.yaml"
            write_profile(p, path)
            prof[(name, precision)] = (p, path)
            log(f"calibrate {name} {precision}: step {p['step_time_s'] * 1e3:.1f} ms at batch {p['batch_size']}, "
                f"transfer {p['transfer_time_s'] * 1e3:.2f} ms, exposed {p['transfer_exposed_time_s'] * 1e3:.2f} ms")
    return prof


def dlbench(args: list[str], log_to: Path | None = None) -> int:
    """One dlbench command in this process (no second torch import); returns its exit code. Its printout
    goes to ``log_to`` (the run's own report stays out of the check's table)."""
    import contextlib

    from dlbench.cli import main

    try:
        with contextlib.ExitStack() as st:
            if log_to is not None:
                f = st.enter_context(open(log_to, "w"))
                st.enter_context(contextlib.redirect_stdout(f))
                st.enter_context(contextlib.redirect_stderr(f))
            main.main(args=[str(a) for a in args], standalone_mode=False)
        return 0
    except SystemExit as e:
        return int(e.code or 0)
    except Exception:  # noqa: BLE001 - reported in the table, the check goes on
        traceback.print_exc()
        return 1


def one_run(label: str, args: list[str], out: Path) -> dict | None:
    d = out / label.replace(" ", "_")
    shutil.rmtree(d, ignore_errors=True)
    t = time.perf_counter()
    d.mkdir(parents=True)
    rc = dlbench(["run", *args, "--out", d], log_to=d / "dlbench-run.log")
    found = sorted(d.rglob("run.json"))
    if rc != 0 or not found:
        log(f"{label}: FAILED (exit {rc}); its output: {d / 'dlbench-run.log'}")
        return None
    s = json.loads(found[-1].read_text())["summary"]
    log(f"{label}: AU {s['au']:.1%}, stall {s['exposed_io_share']:.1%}, "
        f"exposed H2D {(s.get('phase_share') or {}).get('transfer_exposed', 0):.1%} ({time.perf_counter() - t:.0f} s)")
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/gpu_check")
    ap.add_argument("--shm", default="/dev/shm/dlbench-gpu-check")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--workload", default="cosmoflow", help="the workload of the strategy runs")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="the check's plumbing on a CPU (tiny data, 2 strategies, 1 calibration): the test suite's "
                         "smoke test; measures nothing about a GPU")
    args = ap.parse_args(argv)
    import torch

    smoke = args.cpu_smoke
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False); nothing measured")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    gpu = torch.cuda.get_device_name(0) if not smoke else "cpu (smoke)"
    log(f"device {gpu}, torch {torch.__version__}")
    res: dict = {"device": gpu, "torch": str(torch.__version__)}
    res["cuda_tests"] = "skipped" if args.skip_tests or smoke else cuda_tests()
    log(f"CUDA tests: {res['cuda_tests']}")
    scale_cal = "tiny" if smoke else "full"
    res["grad_bucket"] = grad_bucket_check(device, scale_cal, 4 if smoke else 20, args.workload)
    prof = calibrations(out, device, scale_cal, 2 if smoke else 15, args.workload)
    res["calibrate"] = {f"{n} {p}": {"step_time_s": v[0]["step_time_s"], "batch_size": v[0]["batch_size"],
                                      "transfer_time_s": v[0]["transfer_time_s"],
                                      "transfer_exposed_time_s": v[0]["transfer_exposed_time_s"]}
                        for (n, p), v in prof.items()}
    data = Path(args.shm)
    scale_run = "tiny" if smoke else "small"
    wname = args.workload
    few = ["--samples", 8] if smoke else []
    rc = dlbench(["generate", "--workload", wname, "--scale", scale_run, "--data-dir", data, "--no-progress", *few],
                 log_to=out / "generate.log")
    if rc != 0:
        print(f"gpu_check: generating {wname} {scale_run} in {data} failed (exit {rc}); see {out / 'generate.log'}")
        return 1
    log(f"{wname} {scale_run} in {data}")
    base = ["--workload", wname, "--scale", scale_run, "--data-dir", data, "--epochs",
            1 if smoke else args.epochs, "--no-progress", *(["--batch-size", 2] if smoke else [])]
    profile = prof[(wname, "fp32")][1]
    rows = []
    for label, sargs in (STRATEGIES[:1] if smoke else STRATEGIES):
        r = {"strategy": label}
        r["torch"] = one_run(f"{label} torch", [*base, *sargs, "--compute", "torch", "--device", device,
                                                "--overlap", "on"], out)
        r["torch_off"] = one_run(f"{label} torch-off", [*base, *sargs, "--compute", "torch", "--device", device,
                                                        "--overlap", "off"], out)
        r["sleep"] = one_run(f"{label} sleep", [*base, *sargs, "--compute-profile", profile], out)
        rows.append(r)
    shutil.rmtree(data, ignore_errors=True)
    res["runs"] = rows
    (out / "gpu_check.json").write_text(json.dumps(res, indent=1, default=str))
    print()
    print(table(rows, res, prof, scale_cal))
    log(f"total {time.perf_counter() - t0:.0f} s; figures in {out / 'gpu_check.json'}")
    failed = [k for r in rows for k in ("torch", "torch_off", "sleep") if r[k] is None]
    return 1 if failed else 0


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.1f}"


def _sources(summary) -> str:
    """Batches copied to the device straight from the loader's pinned memory / through a staging slot (torch,
    --overlap on): staging and clairvoyant read into a pinned batch ring, so none should be staged."""
    src = ((summary or {}).get("compute") or {}).get("h2d_sources")
    return "-" if not src else f"{src.get('pinned', 0)}/{src.get('staged', 0)}"


def table(rows, res, prof, scale: str = "full") -> str:
    from dlbench import workload as W

    head = ("strategy", "AU torch %", "AU torch off %", "AU emulated %", "|torch-emu| pts", "stall %",
            "H2D exposed %", "H2D overlapped %", "off: H2D exposed %", "batches loader/staged", "bar")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in rows:
        t, o, s = r["torch"], r["torch_off"], r["sleep"]
        ps = (t or {}).get("phase_share") or {}
        po = (o or {}).get("phase_share") or {}
        diff = abs(t["au"] - s["au"]) * 100 if t and s else None
        keeps_up = t is not None and t["exposed_io_share"] < 0.05
        ok = (diff is not None and diff <= 3 and (not keeps_up or ps.get("transfer_exposed", 1) < 0.02))
        lines.append(" | ".join([r["strategy"], _pct(t and t["au"]), _pct(o and o["au"]), _pct(s and s["au"]),
                                 "-" if diff is None else f"{diff:.1f}", _pct(t and t["exposed_io_share"]),
                                 _pct(ps.get("transfer_exposed")), _pct(ps.get("transfer_overlapped")),
                                 _pct(po.get("transfer_exposed")), _sources(t), "PASS" if ok else "FAIL"]))
    lines.append("")
    lines.append("step times on this GPU (calibrate, median) vs the workload files' H100 figures:")
    for (name, precision), (p, _path) in prof.items():
        wl = W.load(name, scale=scale)
        b = p["batch_size"]
        ref = [f"h100 measured: {m.step_time_s * b / m.batch_size * 1e3:.1f} ms"
               for m in wl.measured if m.accelerator == "h100" and m.precision == precision and not m.model
               or m.model == p.get("model") and m.accelerator == "h100" and m.precision == precision]
        pub = wl.compute.get("h100")
        if precision == "fp32" and pub is not None:
            ref.append(f"DLIO published: {pub.step_time_s * b / pub.batch_size * 1e3:.1f} ms")
        lines.append(f"  {name} b{b} {precision}: {p['step_time_s'] * 1e3:.1f} ms; " + ("; ".join(ref) or "-"))
    lines.append("")
    lines.append("step with the flat gradient bucket vs plain gradients (median; issue 30: fp16 resnet50 36.9 vs 25.8 ms):")
    for g in res["grad_bucket"]:
        lines.append(f"  {g['workload']} b{g['batch']} {g['precision']}: flat {g['flat'] * 1e3:.1f} ms, plain "
                     f"{g['plain'] * 1e3:.1f} ms ({g['flat_over_plain']:.2f}x)")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
