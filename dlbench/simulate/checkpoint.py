"""Checkpoints at any node count, modelled (pure: arithmetic on the model's per-rank bytes; no I/O).

A checkpoint of a model (``dlbench.checkpoint.models``) on ``nodes`` nodes of ``ranks_per_node`` ranks (rank r
on node r // ranks_per_node, as a launcher places them): every node writes its ranks' bytes (uneven under
ZeRO-1: the nodes of data-parallel rank 0 write the model states too) through one client link, while the
shared file system's aggregate write curve t(γ) is shared by the γ nodes that write. A node writes at
``min(link, t(γ) / γ)``; the checkpoint is durable when the slowest node is done, plus every rank's files'
per-file cost (create, fsync) in series on that rank. Bandwidth = all bytes / that time: the same definition
as a measured checkpoint (``dlbench.checkpoint.aggregate``: bytes / the slowest rank's time until durable).

Young/Daly: with a checkpoint costing the training ``C`` seconds (its stall) and a job MTBF of ``M`` = MTBF
per accelerator / accelerators, the interval that maximises goodput is ``T = sqrt(2 C M)`` (Young's first
order; Daly's higher-order correction matters only when C approaches M) and the fraction of time left for
training is about ``1 - C / T - (T / 2 + R) / M`` (R: the restart's cost, the restore)."""

from __future__ import annotations

import math

import numpy as np

from ..checkpoint.models import Model, rank_bytes, rank_files
from ..errors import ConfigError

GiB = 1 << 30


def parse_curve(text: str) -> list[tuple[float, float]]:
    """``"1:10,8:60,64:200"`` -> [(clients, GB/s)], increasing clients; one line naming the bad entry."""
    pts = []
    for part in (p for p in str(text).split(",") if p.strip()):
        try:
            c, bw = part.split(":")
            pts.append((float(c), float(bw)))
        except ValueError:
            raise ConfigError(f"--write-curve entry {part!r}: give CLIENTS:GB_PER_S, e.g. 1:10,8:60,64:200") from None
    if not pts or any(c < 1 or not math.isfinite(b) or b <= 0 for c, b in pts):
        raise ConfigError(f"--write-curve={text!r}: needs entries CLIENTS:GB_PER_S with clients >= 1 and "
                          f"bandwidth > 0")
    pts.sort()
    return pts


def aggregate(curve: list[tuple[float, float]], clients: float) -> float:
    """t(γ) in bytes/s: linear between the points, flat beyond the last."""
    xs = [c for c, _ in curve]
    ys = [b * 1e9 for _, b in curve]
    return float(np.interp(clients, xs, ys))


def cost(m: Model, nodes: int, ranks_per_node: int, curve: list[tuple[float, float]], link_gbps: float,
         file_s: float = 0.0, layout: str = "shards") -> dict:
    """One checkpoint of ``m`` (its full job: TP*PP*DP ranks) on ``nodes`` nodes."""
    if nodes * ranks_per_node != m.world:
        raise ConfigError(f"--nodes={nodes} x --ranks-per-node={ranks_per_node} = {nodes * ranks_per_node}: "
                          f"{m.name}'s job has {m.world} ranks (TP {m.tp} x PP {m.pp} x DP {m.dp})")
    per_rank = np.array([rank_bytes(m, r) for r in range(m.world)], dtype=float)
    files = np.array([len(rank_files(m, r, layout)) for r in range(m.world)], dtype=float)
    return {"model": m.name, **cost_ranks(per_rank, files, nodes, ranks_per_node, curve, link_gbps, file_s)}


def cost_ranks(per_rank, files, nodes: int, ranks_per_node: int, curve: list[tuple[float, float]],
               link_gbps: float, file_s: float = 0.0) -> dict:
    """One checkpoint whose rank r writes ``per_rank[r]`` bytes in ``files[r]`` files (``cost``'s model)."""
    per_rank = np.asarray(per_rank, dtype=float)
    files = np.asarray(files, dtype=float)
    per_node = per_rank.reshape(nodes, ranks_per_node).sum(axis=1)
    writers = int((per_node > 0).sum())
    rate = min(link_gbps * 1e9, aggregate(curve, writers) / max(1, writers))
    t_bytes = per_node.max() / rate
    t = t_bytes + float((files * file_s).max())
    total = float(per_rank.sum())
    return {"nodes": nodes, "ranks": int(per_rank.size), "bytes": total, "writing_nodes": writers,
            "node_bytes_max": float(per_node.max()), "node_bytes_min": float(per_node.min()),
            "node_rate_bytes_per_s": rate, "durable_s": t, "bandwidth_bytes_per_s": total / t,
            "files": int(files.sum())}


def from_calibration(profile) -> tuple[float, float, str]:
    """(node link GB/s, per-file s, what) from a profile of ``dlbench calibrate-storage`` (its write side, on
    record under ``calibration.shared_write``): the link is the best measured aggregate write rate divided by
    the nodes that measured it, the per-file cost a 4 KiB file's create + write + fsync + close."""
    cal = (getattr(profile, "calibration", None) or {}).get("shared_write")
    if not cal:
        raise ConfigError(f"--system {getattr(profile, 'name', profile)}: no calibration.shared_write (run "
                          f"dlbench calibrate-storage of this release to measure the write side)")
    nodes = max(1, int((profile.calibration or {}).get("nodes", 1)))
    best = max(float(np.median(v)) for v in cal["mb_per_s"].values()) / nodes
    return best / 1e3, float(cal["small_file_s"]), (f"from {profile.name}: node link {best / 1e3:.3f} GB/s "
                                                     f"(best measured write rate per node), "
                                                     f"{cal['small_file_s'] * 1e3:.2f} ms per file")


def write_side(profile, curve_text: str | None = None) -> tuple[float, float, list[tuple[float, float]], str]:
    """(node link GB/s, per-file s, aggregate write curve, what) of a system profile's write side: link and
    per-file cost from its ``calibration.shared_write`` (``from_calibration``); the aggregate curve is
    ``curve_text`` (CLIENTS:GB_PER_S,...) where given, else the aggregate rate calibrate-storage measured on
    its nodes, flat beyond them (a file system's scaling is not measured by one node)."""
    link, file_s, what = from_calibration(profile)
    if curve_text:
        return link, file_s, parse_curve(curve_text), what + f"; aggregate write curve {curve_text}"
    nodes = max(1, int((profile.calibration or {}).get("nodes", 1)))
    return link, file_s, [(float(nodes), link * nodes)], (what + f"; aggregate {link * nodes:.3f} GB/s as "
                                                                 f"measured on {nodes} node(s), flat beyond "
                                                                 f"(--write-curve gives a file system's curve)")


def run_ranks(nbytes: int, world: int, model: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, files) per rank of one checkpoint of ``dlbench run --checkpoint-every``
    (``dlbench.run.checkpoint.Checkpointer``): rank 0 writes ``nbytes`` in one file, or, for an LLM
    (``model``: ``get_model``'s keywords, DLIO's model.*), every rank its DeepSpeed shards, DP = world / (TP x PP)."""
    if model is None:
        b, f = np.zeros(world), np.zeros(world)
        b[0], f[0] = float(nbytes), 1.0
        return b, f
    from ..checkpoint.models import get_model

    mp = model["tp"] * model["pp"]
    if world % mp:
        raise ConfigError(f"model.parallelism: tensor {model['tp']} x pipeline {model['pp']} = {mp} does not "
                          f"divide the {world} ranks")
    m = get_model(None, dp=world // mp, **model)
    return (np.array([rank_bytes(m, r) for r in range(world)], dtype=float),
            np.array([len(rank_files(m, r, "shards")) for r in range(world)], dtype=float))


def run_schedule(per_rank, files, *, nodes: int, ranks_per_node: int, steps_per_epoch: list[int], every: int,
                 first: int, curve: list[tuple[float, float]], link_gbps: float, file_s: float,
                 what: str = "") -> dict:
    """A run's checkpoint schedule, costed: the global steps at which ``dlbench run --checkpoint-every`` writes
    one (``dlbench.checkpoint.schedule.due``), each costing ``cost_ranks``'s durable time on every rank (a sync
    save: every rank waits at the barrier), per epoch. The simulated summary's ``checkpoint`` phase."""
    from ..checkpoint.schedule import due

    steps, epoch_of, g = [], [], 0
    for e, n in enumerate(steps_per_epoch):
        for _ in range(int(n)):
            g += 1
            if due(g, every, first):
                steps.append(g)
                epoch_of.append(e)
    one = cost_ranks(per_rank, files, nodes, ranks_per_node, curve, link_gbps, file_s)
    per_epoch = np.bincount(np.asarray(epoch_of, dtype=int), minlength=len(steps_per_epoch)) * one["durable_s"]
    return {"count": len(steps), "steps": steps, "bytes_per_checkpoint": int(one["bytes"]),
            "bytes": int(one["bytes"]) * len(steps), "files_per_checkpoint": int(np.asarray(files).sum()),
            "durable_s": one["durable_s"], "bandwidth_bytes_per_s": one["bandwidth_bytes_per_s"],
            "time_s": one["durable_s"] * len(steps), "per_epoch_s": per_epoch.tolist(), "write_side": what}


def young_daly(c_s: float, mtbf_accel_h: float, accelerators: int, restart_s: float = 0.0) -> dict:
    """The checkpoint interval and goodput of a job of ``accelerators`` whose checkpoint stalls it ``c_s``."""
    if not (mtbf_accel_h > 0 and math.isfinite(mtbf_accel_h)):
        raise ConfigError(f"--mtbf-hours={mtbf_accel_h!r}: must be > 0 (MTBF of one accelerator, hours)")
    m = mtbf_accel_h * 3600.0 / max(1, accelerators)
    if c_s <= 0:
        return {"job_mtbf_s": m, "interval_s": None, "goodput": None}
    t = math.sqrt(2.0 * c_s * m)
    good = max(0.0, 1.0 - c_s / t - (t / 2.0 + restart_s) / m)
    return {"job_mtbf_s": m, "interval_s": float(t), "goodput": float(good)}


def table(rows: list[dict], mlperf_gib_s: dict[str, float] | None = None) -> str:
    mlperf_gib_s = mlperf_gib_s or {}
    lines = [f"{'model':<12} {'nodes':>5} {'ranks':>5} {'GiB':>9} {'max node GiB':>12} {'durable s':>9} "
             f"{'GiB/s':>8} {'MLPerf v3.0 median GiB/s':>25}"]
    for r in rows:
        ref = mlperf_gib_s.get(r["model"])
        lines.append(f"{r['model']:<12} {r['nodes']:>5} {r['ranks']:>5} {r['bytes'] / GiB:>9,.0f} "
                     f"{r['node_bytes_max'] / GiB:>12,.1f} {r['durable_s']:>9.2f} "
                     f"{r['bandwidth_bytes_per_s'] / GiB:>8.1f} {ref if ref is not None else '':>25}")
    return "\n".join(lines)


def simulated_checkpoints(every: int, write_curve: str | None, *, study: str | None, workload_args: tuple | None,
                          profile, nodes: int, ranks_per_node: int, first: int = 0):
    """``simulate --checkpoint-every``: a function of the steps per epoch -> the run's checkpoint schedule
    costed (``run_schedule``), or None without it. ``workload_args``: (workload, scale, samples) whose model
    size the checkpoint has."""
    from ..config import check_counts

    if write_curve is not None and not every:
        raise ConfigError(f"--write-curve={write_curve}: only with --checkpoint-every N (N > 0)")
    if first and not every:
        raise ConfigError(f"--checkpoint-first={first}: only with --checkpoint-every N (N > 0)")
    if not every:
        return None
    check_counts(("--checkpoint-every", every, 1, 2**62), ("--checkpoint-first", first, 0, 2**62))
    if study or workload_args is None:
        raise ConfigError(f"--checkpoint-every={every}: not with --study (pass --system/--workload/--nodes)")
    from ..checkpoint.schedule import checkpoint_nbytes
    from ..workload import load as load_workload

    workload, scale, samples = workload_args
    nbytes = checkpoint_nbytes(every, load_workload(workload, scale=scale, samples=samples))
    link, file_s, curve, what = write_side(profile, write_curve)
    per_rank, files = run_ranks(nbytes, nodes * ranks_per_node)

    def cost(steps_per_epoch):
        return run_schedule(per_rank, files, nodes=nodes, ranks_per_node=ranks_per_node,
                            steps_per_epoch=steps_per_epoch, every=every, first=first, curve=curve, link_gbps=link,
                            file_s=file_s, what=what)

    return cost


def simulate_checkpoint(m: Model, *, nodes: int | None, ranks_per_node: int | None, write_curve: str | None,
                        link_gbps: float, link_given: bool, file_s: float | None, system: str | None, layout: str,
                        mtbf_hours: float | None) -> list[str]:
    """``checkpoint --simulate``: one checkpoint of the full job costed on ``nodes`` (default: its ranks /
    ``ranks_per_node``, 8) against ``write_curve``; a ``system`` profile's measured write side gives the link
    (unless ``link_given``) and the per-file cost (unless given). The lines to print: the profile's figures,
    the table, the Young/Daly interval with ``mtbf_hours``."""
    if not write_curve:
        raise ConfigError("--simulate needs --write-curve CLIENTS:GB/S,... (the shared file system's aggregate "
                          "write bandwidth by writing nodes)")
    lines = []
    rpn = ranks_per_node or 8
    if system:
        from ..system import load as load_profile

        link_cal, file_cal, what = from_calibration(load_profile(system))
        if not link_given:
            link_gbps = link_cal
        file_s = file_cal if file_s is None else file_s
        lines.append(what)
    row = cost(m, nodes or -(-m.world // rpn), rpn, parse_curve(write_curve), link_gbps,
               0.0 if file_s is None else file_s, "shards" if layout == "dcp" else layout)
    lines.append(table([row]))
    if mtbf_hours is not None:
        yd = young_daly(row["durable_s"], mtbf_hours, m.world)
        lines.append(f"Young/Daly (sync: stall = durable {row['durable_s']:.2f} s, job MTBF "
                     f"{yd['job_mtbf_s'] / 3600:.1f} h): interval {yd['interval_s'] / 60:.1f} min, goodput "
                     f"{yd['goodput']:.4f}")
    return lines


def young_daly_line(res: dict, mtbf_hours: float, world: int) -> str:
    """The Young/Daly interval and goodput of the full job, its checkpoint cost the measured mean stall."""
    stall = res["summary"]["stall_s"]["mean"]
    yd = young_daly(stall, mtbf_hours, world)
    return (f"Young/Daly for the full job ({world} accelerators, MTBF {mtbf_hours:g} h each; C = the "
            f"measured mean stall {stall:.4f} s): interval {yd['interval_s']:.1f} s, goodput {yd['goodput']:.4f}")
