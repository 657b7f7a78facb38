"""``dlbench sustain``: MLPerf Storage's question, per loading strategy — the largest number of emulated
accelerators this storage keeps at AU >= the workload's threshold.

1. **Measured**: ``dlbench run`` at 1..K ranks on this machine (``mpiexec -n k``), the workload's own format and
   the accelerator's step time; AU and shared-tier bytes are read from each run's run.json. The measured
   dataset has the preset's sample shapes and at least K × batch × ``MEASURE_STEPS`` samples (a preset with
   fewer, e.g. unet3d's tiny 8 samples at batch 7, is grown: ``measured_samples``; generated once under the
   data root's ``sustain/`` folder and said so in the output), so every measured world runs.
2. **Calibrated**: the shared tier of the system profile is fitted to the measured points. The profile's PFS
   curve (latency, client link b_fs, aggregate t(γ)) is scaled by one factor s (a profile without a PFS
   section: a flat curve, one bandwidth shared by all readers, starting at 1000 MB/s): s is chosen on a
   log grid (1e-3..1e3, 121 points) to minimise Σ (AU_model(k) − AU_measured(k))² over the measured k,
   modelled as they ran (1 node, k ranks, the measured dataset's sample count); among equally good s (within 1e-4 of the best loss) the smallest
   is taken — the least bandwidth consistent with the measurements, so the extrapolation is conservative
   when the measured points are compute-bound (then the fit is a lower bound on the storage, said so).
3. **Modelled**: ``dlbench simulate``'s model (``simulate.simulate``) with the calibrated profile at N
   accelerators (``ranks_per_node`` per node): N doubles until AU < threshold, then bisection; each
   modelled world has the model-scale dataset, grown to at least ``MODEL_STEPS`` steps per rank and epoch
   (samples = max(dataset, N × batch × MODEL_STEPS)), as MLPerf Storage grows its dataset with the accelerators
   (>= 5x host memory). A strategy that cannot run in a world (a tier too small) sustains nothing there.

Every row says measured or modelled. Bandwidth per accelerator = shared-tier bytes per second of epoch time
divided by the accelerators, printed in MiB/s (2^20 B/s) as MLPerf Storage reports it. The bandwidth an
accelerator needs at the AU threshold (``need_bytes_per_s``): threshold × batch × mean sample bytes / step time
(at AU = threshold a step of ``step time`` computes in every ``step time / threshold`` seconds). The pure parts (fit, search) take the measuring/costing functions as arguments.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .errors import ConfigError
from .units import format_bytes

MODEL_STEPS = 16
AU_NOISE = 0.03        # run-to-run noise of a measured AU (repeats of one tiny sustain: ±1-2 % AU, note 18)
MEASURE_STEPS = 4      # steps per rank and epoch of the measured run at the most ranks, at least
SCALE_GRID = np.logspace(-3, 3, 121)


@dataclasses.dataclass
class Point:
    accelerators: int
    au: float
    samples_per_s: float
    shared_bytes_per_s: float
    kind: str                                      # measured | modelled
    run_dir: str | None = None
    note: str = ""

    @property
    def bytes_per_s_per_accelerator(self) -> float:
        return self.shared_bytes_per_s / self.accelerators if self.accelerators else 0.0


MIB = 2**20


def need_bytes_per_s(wl, accelerator: str, threshold: float) -> tuple[float, str]:
    """(bytes/s one accelerator reads at AU = ``threshold``, how): threshold × batch × mean sample bytes / step
    time, with the workload's step time for ``accelerator`` (``Workload.choose_step_time``) at its batch."""
    ch = wl.choose_step_time(accelerator)
    need = threshold * ch.batch_size * wl.sample_nbytes / ch.step_time_s
    how = (f"{threshold:.0%} x {ch.batch_size} x {wl.sample_nbytes:,} B / {ch.step_time_s:g} s "
           f"({ch.source})")
    return need, how


def measured_samples(preset_samples: int, ranks: int, batch: int, steps: int = MEASURE_STEPS) -> int:
    """Samples of the measured runs' dataset: the preset's, grown to at least ``ranks × batch × steps`` so that
    the run at the most ranks has ``steps`` full batches per rank (a rank's share below its batch is refused)."""
    return max(int(preset_samples), int(ranks) * int(batch) * int(steps))


def fit_scale(tagged: list[tuple[str, Point]], model_au_of) -> tuple[float, float, bool]:
    """The shared-tier scale s: the smallest s of the grid within 1e-4 of the least Σ (AU_model − AU_measured)²
    over (strategy, measured point) pairs, ``model_au_of(strategy, ranks, s)`` costing each with its strategy.
    Returns (s, rms AU error, identified): identified is False when more bandwidth fits as well, or when the
    compute-only model (the grid's largest s) is within the run-to-run AU noise (``AU_NOISE``, rms) of the
    measured points: they are compute-bound, their few % of AU lost is as likely non-I/O overhead (worker
    start-up, first-step stall) as storage, and s is a lower bound."""
    if not tagged:
        raise ConfigError("sustain: no measured point to calibrate the model on")
    losses = np.array([sum((model_au_of(st, p.accelerators, sc) - p.au) ** 2 for st, p in tagged)
                       for sc in SCALE_GRID])
    best = float(losses.min())
    i = int(np.nonzero(losses <= best + 1e-4)[0][0])
    compute_only_rms = math.sqrt(float(losses[-1]) / len(tagged))
    identified = bool(losses[-1] > best + 1e-4) and compute_only_rms > AU_NOISE
    return float(SCALE_GRID[i]), math.sqrt(best / len(tagged)), identified


def largest_sustained(cost: Callable[[int], Point], threshold: float, start: int, limit: int) -> tuple[int, list]:
    """The largest N in [start, limit] with AU(N) >= threshold (doubling from ``start``, then bisection), and
    every costed point. 0 when even ``start`` misses it."""
    pts = {}

    def au(n):
        if n not in pts:
            pts[n] = cost(n)
        return pts[n].au

    if au(start) < threshold:
        return 0, [pts[start]]
    lo, hi = start, None
    n = start
    while n < limit:
        n = min(2 * n, limit)
        if au(n) >= threshold:
            lo = n
        else:
            hi = n
            break
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if au(mid) >= threshold:
                lo = mid
            else:
                hi = mid
    return lo, [pts[k] for k in sorted(pts)]


def with_checkpoints(cost: Callable[[int], Point], checkpoint_s: float, mtbf_h: float) -> Callable[[int], Point]:
    """``cost`` with checkpoints included: the AU at n accelerators times the goodput of checkpointing at the
    Young/Daly interval (``simulate.checkpoint.young_daly``: a checkpoint stalls the job ``checkpoint_s``, its
    MTBF is ``mtbf_h`` per accelerator / n), so more accelerators fail more often and lose more to checkpoints."""
    from .simulate.checkpoint import young_daly

    def f(n: int) -> Point:
        p = cost(n)
        g = young_daly(checkpoint_s, mtbf_h, p.accelerators)["goodput"]
        g = 1.0 if g is None else g
        return dataclasses.replace(p, au=p.au * g, note=(p.note + "; " if p.note else "") +
                                   f"AU x {g:.4f} checkpoint goodput")
    return f


def _at_any_n(p: Point) -> Callable[[int], Point]:
    """A measured point as a cost function: the same point at any n (what ``with_checkpoints`` wraps)."""
    return lambda n: p


def scaled_profile(profile, s: float):
    """The profile with its shared tier scaled by s (no PFS section: a flat 1000 MB/s × s curve)."""
    from .system import ClientPoint, PfsSpec

    pfs = profile.pfs or PfsSpec(latency_s=0.0, client_link_mb_per_s=1000.0,
                                 aggregate=(ClientPoint(clients=1, mb_per_s=1000.0),))
    new = PfsSpec(latency_s=pfs.latency_s / s, client_link_mb_per_s=pfs.client_link_mb_per_s * s,
                  aggregate=tuple(ClientPoint(clients=p.clients, mb_per_s=p.mb_per_s * s) for p in pfs.aggregate))
    return dataclasses.replace(profile, pfs=new)


def describe_pfs(profile) -> str:
    p = profile.pfs
    agg = ", ".join(f"{c.clients}:{c.mb_per_s:.0f}" for c in p.aggregate)
    return f"latency {p.latency_s * 1e3:.3g} ms, client link {p.client_link_mb_per_s:.0f} MB/s, t(γ) MB/s {{{agg}}}"


def model_point(*, strategy: str, wl, accelerator: str, profile, n: int, ranks_per_node: int, epochs: int,
                seed: int, options: dict | None = None, full_samples: int | None = None,
                min_steps: int = MODEL_STEPS) -> Point:
    """One modelled world of n accelerators (``simulate``'s model): ``full_samples`` grown to at least
    ``min_steps`` steps per rank (0: exactly ``full_samples``, a measured world as it ran)."""
    from .simulate.core import from_workload, simulate

    rpn = min(ranks_per_node, n)
    nodes = -(-n // rpn)
    n = nodes * rpn
    sw = from_workload(wl, accelerator=accelerator)
    # the workload's dataset (staging and caches depend on its size), at least MODEL_STEPS steps per rank
    samples = max(int(full_samples or 0), n * sw.local_batch * min_steps)
    sw = dataclasses.replace(sw, samples=samples)
    from .errors import CapacityError

    try:
        s = simulate([strategy], wl=sw, profile=profile, nodes=nodes, ranks_per_node=rpn, epochs=epochs, seed=seed,
                     options={strategy: dict(options or {})})[strategy]
    except CapacityError as e:   # the strategy cannot run in this world: it sustains nothing here
        return Point(n, 0.0, 0.0, 0.0, "modelled", note=f"cannot run: {e}")
    # bytes are summed over ranks (the shared definitions, metrics.GLOSSARY), the prologue's copy included
    shared = float(s["bytes_by_tier"].get("shared", 0.0)) + float(s["prologue_bytes_by_tier"].get("shared", 0.0))
    t = s["total_time_s"]
    # AU as measured_point counts it (and MLPerf Storage): compute over the whole time, the prologue included
    au = float(s["phase_time_s"]["compute"]) / t if t else 0.0
    return Point(n, au, float(s["samples_per_s"]), shared / t if t else 0.0, "modelled")


def measured_point(run: dict, run_dir: str) -> Point:
    """A measured point from a run.json document. AU as the model counts it (and MLPerf Storage: compute over
    the whole benchmark time): compute / (epochs + prologue), so staging's copy before epoch 0 counts;
    shared-tier bytes include the prologue's."""
    s = run["summary"]
    epochs_s = float(sum(s.get("epoch_time_s") or []))
    pro = float(s.get("prologue_time_s") or 0.0)
    au = float(s["au"]) * epochs_s / (epochs_s + pro) if epochs_s + pro > 0 else 0.0
    shared = float((s.get("bytes_by_tier") or {}).get("shared", s.get("read_bytes", 0)))
    shared += float((s.get("prologue_bytes_by_tier") or {}).get("shared", 0))
    t = float(s.get("total_time_s") or 0.0)
    samples = float(s.get("samples") or 0)
    return Point(int(s["ranks"]), au, samples / t if t else float(s["samples_per_s"]), shared / t if t else 0.0,
                 "measured", run_dir)


def render(rows: list[dict]) -> str:
    """The sustain table: one block per strategy."""
    out = []
    if rows:
        r0 = rows[0]
        out.append(f"storage calibration (all strategies' measured points): shared tier x{r0['scale']:.3g} of "
                   f"{r0['base_profile']} -> {r0['calibrated_pfs']}; rms AU error {r0['fit_rms_au']:.3f}"
                   + ("" if r0["identified"] else f" (the measured points are not I/O-bound: compute-only AU fits "
                                                  f"them within the run-to-run noise of {AU_NOISE:.0%}; the fitted "
                                                  f"bandwidth is a lower bound, the modelled answers conservative; "
                                                  f"measure larger samples, e.g. --scale small, to bound them)"))
        if r0.get("measured_dataset"):
            out.append(f"measured runs: {r0['measured_dataset']}")
    for r in rows:
        out.append(f"strategy {r['strategy']}: {r['workload']}/{r['accelerator']}, AU threshold "
                   f"{r['threshold']:.0%} ({r['threshold_source']}); largest sustained at scale "
                   f"{r['sustained_scale']}: {r['sustained']} accelerators ({r['sustained_kind']}); measured at "
                   f"scale {r['measured_scale']}: {r['measured_passing']} pass; model rms AU error here "
                   f"{r['fit_rms_au_strategy']:.3f}")
        if r.get("need_bytes_per_s_per_accelerator") is not None:
            out.append(f"  an accelerator needs {format_bytes(r['need_bytes_per_s_per_accelerator'], 'MiB', group=True)}/s at the AU "
                       f"threshold ({r.get('need_how', '')})")
        out.append(f"  {'accel':>6}  {'kind':<9} {'scale':<6} {'AU':>6}  {'samples/s':>10}  {'shared MiB/s':>12}  "
                   f"{'MiB/s per accel':>15}")
        for p in r["points"]:
            out.append(f"  {p['accelerators']:>6}  {p['kind']:<9} {p['scale']:<6} {p['au']:>6.1%}  "
                       f"{p['samples_per_s']:>10.1f}  {p['shared_bytes_per_s'] / MIB:>12.1f}  "
                       f"{p['bytes_per_s_per_accelerator'] / MIB:>15.2f}"
                       + (f"  ({p['note'][:120]})" if p.get("note") else ""))
    return "\n".join(out)


# --- orchestration (subprocesses, files): the CLI's `dlbench sustain` ------------------------------------------

def _mpiexec() -> str | None:
    import shutil
    import sys
    from pathlib import Path

    cand = Path(sys.executable).parent / "mpiexec"
    return str(cand) if cand.exists() else shutil.which("mpiexec")


def measure(*, workload: str, strategy: str, accelerator: str, ranks: int, epochs: int, system: str, out: str,
            seed: int, scale: str | None, data_dir: str | None, options: dict, timeout_s: float = 3600) -> Point:
    """``dlbench run`` at ``ranks`` ranks in a subprocess (mpiexec -n ranks; one rank: plain), its run.json read."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    cmd = [sys.executable, "-m", "dlbench.cli", "run", "--workload", workload, "--strategy", strategy,
           "--accelerator", accelerator, "--epochs", str(epochs), "--system", system, "--out", out,
           "--seed", str(seed), "--no-progress"]
    if scale:
        cmd += ["--scale", scale]
    if data_dir:
        cmd += ["--data-dir", data_dir]
    from .strategies import option_args

    cmd += option_args(strategy, options)
    env = dict(os.environ)
    if ranks > 1:
        exe = _mpiexec()
        if exe is None:
            raise ConfigError(f"--measure-ranks={ranks}: mpiexec not found (pip install 'dlbench[mpi]'); "
                              f"pass --measure-ranks 1")
        cmd = [exe, "-n", str(ranks), *cmd]
        env.pop("DLBENCH_NO_MPI", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise ConfigError(f"sustain: the measured run at {ranks} rank(s) failed (exit {r.returncode}): {tail[0]}")
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")]
    if not line:
        raise ConfigError(f"sustain: the measured run at {ranks} rank(s) printed no results folder")
    rd = line[-1].split("results: ", 1)[1]
    return measured_point(json.loads((Path(rd) / "run.json").read_text()), rd)


def measured_dataset(wl, workload: str, ranks: int, seed: int, data_dir: str | None, echo=None):
    """The measured runs' dataset: (data_dir or None for run's default, its samples, a note for the output).
    ``--data-dir`` given: its manifest's samples, refused in one line when the run at ``ranks`` ranks cannot
    have a full batch per rank. Otherwise the preset's; where that is under ``measured_samples`` the preset is
    grown (same sample shapes) into ``<data root>/sustain/<workload>[-<tag>]-<scale>-F<n>-seed<seed>``,
    generated here on first use."""
    from . import workload as W

    batch = int(wl.batch_size)
    if data_dir:
        from .data.manifest import Manifest

        if str(data_dir).startswith("s3://"):   # a bucket: its manifest fetched (dlbench.data.bucket)
            from .data.bucket import fetch_manifest

            n = int(Manifest.load(fetch_manifest(str(data_dir))).samples)
        else:
            n = int(Manifest.load(data_dir).samples)
        if n < ranks * batch:
            raise ConfigError(f"--data-dir {data_dir}: {n} samples, fewer than --measure-ranks={ranks} x batch "
                              f"{batch}; generate at least {measured_samples(n, ranks, batch)} samples or leave "
                              f"--data-dir out (sustain then grows the preset)")
        return data_dir, n, ""
    n = measured_samples(wl.samples, ranks, batch)
    if n == wl.samples:
        return None, n, ""
    from .data.generate import generate
    from .data.manifest import Manifest
    from .host import data_root
    from .run.setup import data_dir_tag

    grown = W.load(workload, scale=wl.scale, samples=n)
    tag = data_dir_tag(grown.spec_path, grown)
    d = data_root() / "sustain" / (f"{wl.name}{'-' + tag if tag else ''}-{wl.scale}"
                                   f"-F{n}-seed{seed}")
    note = (f"{wl.name}'s {wl.scale} preset has {wl.samples} samples, fewer than {ranks} rank(s) x batch {batch} x "
            f"{MEASURE_STEPS} steps: grown to {n} samples of the preset's shapes in {d}")
    if echo:
        echo(f"measured dataset: {note}")
    if not Manifest.exists(d):
        d.parent.mkdir(parents=True, exist_ok=True)
        generate(grown, d, seed=seed, progress=False)
    return d, n, note


def checkpoint_arg(mtbf_h: float | None, gbps: float | None) -> tuple[float, float] | None:
    """``--checkpoint-mtbf-hours`` and ``--checkpoint-gbps`` as ``sustain``'s ``checkpoint`` (``(GB/s, MTBF h)``),
    None when neither is given; one of them alone, or a value <= 0, is a one-line ConfigError."""
    if mtbf_h is None and gbps is None:
        return None
    if mtbf_h is None or gbps is None or not (mtbf_h > 0 and gbps > 0):
        raise ConfigError(f"--checkpoint-mtbf-hours={mtbf_h} --checkpoint-gbps={gbps}: give both, each > 0")
    return (gbps, mtbf_h)


def sustain(*, workload: str, accelerator: str, strategies: list[str], system: str = "local", measure_ranks: int = 2,
            epochs: int = 2, scale: str | None = None, model_scale: str = "full", data_dir: str | None = None,
            out: str = "results", seed: int = 0, ranks_per_node: int | None = None, max_accelerators: int = 4096,
            options: dict | None = None, echo=None, checkpoint: tuple[float, float] | None = None) -> list[dict]:
    """Measure, calibrate and model each strategy (module docstring); rows for ``render``. ``checkpoint``:
    ``(link GB/s, MTBF h per accelerator)``: the workload's checkpoint (its model size, written by one rank
    at that rate) included in every point's AU (``with_checkpoints``)."""
    from . import workload as W
    from .system import load as load_profile

    if measure_ranks < 1 or max_accelerators < 1 or epochs < 1:
        raise ConfigError(f"--measure-ranks={measure_ranks}, --max-accelerators={max_accelerators}, "
                          f"--epochs={epochs}: each must be >= 1")
    measured_wl = W.load(workload, scale=scale)
    full_wl = W.load(workload, scale=model_scale)
    measured_wl.choose_step_time(accelerator)          # no step time for it: one line before any run
    threshold = full_wl.au_threshold
    if threshold is None:
        raise ConfigError(f"workload {full_wl.name}: no AU threshold (none published); add au_threshold to its "
                          f"YAML to ask how many accelerators sustain it")
    base = load_profile(system)
    ckpt_s = None
    if checkpoint is not None:
        nbytes = full_wl.checkpoint_nbytes()
        if not nbytes:
            raise ConfigError(f"--checkpoint-mtbf-hours: workload {full_wl.name} gives no model size "
                              f"(model.parameters in its YAML), so its checkpoint cannot be costed")
        ckpt_s = nbytes / (checkpoint[0] * 1e9)
    rpn = ranks_per_node or measure_ranks
    same_scale = measured_wl.scale == full_wl.scale and measured_wl.samples == full_wl.samples
    data_dir, n_measured, dataset_note = measured_dataset(measured_wl, workload, measure_ranks, seed, data_dir,
                                                          echo)
    meas: dict[str, list[Point]] = {}
    for strategy in strategies:
        opts = dict((options or {}).get(strategy, {}))
        meas[strategy] = []
        for k in range(1, measure_ranks + 1):
            if echo:
                echo(f"measuring {strategy} at {k} rank(s) ...")
            meas[strategy].append(measure(workload=workload, strategy=strategy, accelerator=accelerator, ranks=k,
                                          epochs=epochs, system=system, out=out, seed=seed,
                                          scale=measured_wl.scale,
                                          data_dir=str(data_dir) if data_dir else None, options=opts))

    def model_au_of(strategy, k, s):
        return model_point(strategy=strategy, wl=measured_wl, accelerator=accelerator, profile=scaled_profile(base, s),
                           n=k, ranks_per_node=k, epochs=epochs, seed=seed,
                           options=dict((options or {}).get(strategy, {})), full_samples=n_measured,
                           min_steps=0).au

    # one storage: one scale fitted to every strategy's measured points (each point costed with its strategy)
    s, rms, identified = fit_scale([(st, p) for st in strategies for p in meas[st]], model_au_of)
    prof = scaled_profile(base, s)
    need, need_how = need_bytes_per_s(full_wl, accelerator, threshold)
    rows = []
    for strategy in strategies:
        opts = dict((options or {}).get(strategy, {}))
        mp = meas[strategy]
        if ckpt_s is not None:
            assert checkpoint is not None
            mp = [with_checkpoints(_at_any_n(p), ckpt_s, checkpoint[1])(p.accelerators) for p in mp]
        rms_st = math.sqrt(sum((model_au_of(strategy, p.accelerators, s) - p.au) ** 2 for p in meas[strategy])
                           / len(mp))   # the fit: data loading only
        passing = max((p.accelerators for p in mp if p.au >= threshold), default=0)

        def model_cost(n: int, strategy: str = strategy, opts: dict = opts) -> Point:
            return model_point(strategy=strategy, wl=full_wl, accelerator=accelerator, profile=prof, n=n,
                               ranks_per_node=rpn, epochs=epochs, seed=seed, options=opts,
                               full_samples=full_wl.samples)

        cost: Callable[[int], Point] = model_cost
        if ckpt_s is not None:
            assert checkpoint is not None
            cost = with_checkpoints(model_cost, ckpt_s, checkpoint[1])

        def cost_nodes(m, cost=cost):   # worlds of whole nodes (rpn accelerators each)
            return cost(m * rpn)

        top = max(1, max_accelerators // rpn)
        if same_scale and all(p.au >= threshold for p in mp):
            m0 = measure_ranks // rpn + 1
            m, modelled = largest_sustained(cost_nodes, threshold, m0, top) if m0 <= top else (0, [])
            sustained, kind = (m * rpn, "modelled") if m else (passing, "measured")
        elif same_scale:
            modelled, sustained, kind = [], passing, "measured"
        else:
            m, modelled = largest_sustained(cost_nodes, threshold, 1, top)
            sustained, kind = m * rpn, "modelled"
        rows.append({"strategy": strategy, "workload": full_wl.name, "accelerator": accelerator,
                     "threshold": threshold, "threshold_source": full_wl.au_threshold_source or "workload",
                     "need_bytes_per_s_per_accelerator": need, "need_how": need_how,
                     "sustained": sustained, "sustained_kind": kind, "sustained_scale": full_wl.scale,
                     "measured_passing": passing, "measured_scale": measured_wl.scale,
                     "measured_samples": n_measured, "measured_dataset": dataset_note,
                     "scale": s, "fit_rms_au": rms, "fit_rms_au_strategy": rms_st, "identified": identified,
                     "base_profile": base.name, "calibrated_pfs": describe_pfs(prof),
                     "points": [{**dataclasses.asdict(p), "scale": measured_wl.scale if p.kind == "measured"
                                 else full_wl.scale, "bytes_per_s_per_accelerator": p.bytes_per_s_per_accelerator}
                                for p in [*mp, *modelled]]})
    return rows
