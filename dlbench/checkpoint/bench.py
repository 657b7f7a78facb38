"""``dlbench checkpoint``: emulated training steps with checkpoints every N steps, then restores.

Every process emulates one model rank (``models.ranks_to_run``). Per checkpoint: the state is generated
(outside every timed region), ``steps`` emulated compute steps run (sleep), then the save: ``sync`` stalls
until durable; ``async`` stalls for the snapshot and publishes at the first step boundary at which every
rank's writer is done (one allreduce per step while a save is in flight). Restores of the last checkpoint:
``own`` (each rank reads only its slice: range reads), ``cross`` (each rank reads what the rank
``ranks_per_node`` further wrote: another node's files), ``reshard`` (ranks of another TP/PP/DP read the
byte ranges they need), each optionally ``cold`` (files evicted with fadvise, residency checked with mincore)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Interrupted
from ..units import format_bytes
from . import aggregate
from .engine import Saver, dcp_reshard_restore, dcp_restore, execute, load_manifest, needs, placement, read_plan
from .models import LAYOUTS, Model, ranks_to_run


@dataclass
class Config:
    model: Model
    layout: str = "stream"
    mode: str = "sync"
    checkpoints: int = 2
    steps: int = 2               # compute steps before each checkpoint (and after the last)
    compute_time: float = 0.05   # seconds per emulated step
    out: str = "results"
    subset: bool = False
    fsync: bool = True
    seed: int = 0
    restore: tuple[str, ...] = ("own", "cross", "reshard")
    reshard: tuple[int, int, int] | None = None   # (tp, pp, dp) of the resharded restore
    cold: bool = True
    ranks_per_node: int | None = None
    keep: bool = False


def parse_reshard(text: str | None) -> tuple[int, int, int] | None:
    """``--reshard TP,PP,DP`` as a tuple (None: no resharded restore); anything else is a one-line ConfigError."""
    if not text:
        return None
    try:
        tp, pp, dp = (int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--reshard={text!r}: give TP,PP,DP, e.g. 2,1,4") from None
    return tp, pp, dp


def check(cfg: Config) -> None:
    if cfg.layout not in LAYOUTS:
        from ..errors import unknown_choice

        raise unknown_choice("--layout", cfg.layout, LAYOUTS)
    for name, v, lo in (("--checkpoints", cfg.checkpoints, 1), ("--steps", cfg.steps, 0)):
        if not isinstance(v, int) or v < lo:
            raise ConfigError(f"{name}={v!r}: must be an integer >= {lo}")
    if not (cfg.compute_time >= 0 and cfg.compute_time < 3600):
        raise ConfigError(f"--compute-time={cfg.compute_time!r}: must be in [0, 3600) seconds")
    if cfg.reshard is not None:     # checked before anything is written
        _reshard_model(cfg.model, cfg.reshard, 1)
    bad = [r for r in cfg.restore if r not in ("own", "cross", "reshard")]
    if bad:
        raise ConfigError(f"--restore={bad[0]!r}: choose from own, cross, reshard")


def _reshard_model(m: Model, spec: tuple[int, int, int] | None, world: int) -> Model:
    if spec is None:   # default: the TP and DP swapped where that changes something, else DP doubled
        spec = (m.dp, m.pp, m.tp) if m.tp != m.dp else (m.tp, m.pp, m.dp * 2 if m.dp * 2 <= world * 2 else m.dp)
    tp, pp, dp = spec
    if min(tp, pp, dp) < 1 or pp > m.layers:
        raise ConfigError(f"--reshard={tp},{pp},{dp}: TP, PP, DP must be >= 1 and PP <= layers ({m.layers})")
    return replace(m, tp=tp, pp=pp, dp=dp)


def run(cfg: Config, comm) -> dict | None:
    check(cfg)
    m = cfg.model
    ranks = ranks_to_run(m, comm.size, cfg.subset)
    me = ranks[comm.rank]
    clock = time.perf_counter_ns
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    root = Path(comm.bcast(str(Path(cfg.out) / "checkpoint" / f"{m.name}-{cfg.layout}-{cfg.mode}-{stamp}"), 0))
    # the state's memory is checked (Saver) before anything is created on disk
    saver = Saver(comm, m, me, cfg.layout, root / "ckpt", mode=cfg.mode, fsync=cfg.fsync, seed=cfg.seed)
    if comm.rank == 0:
        (root / "ckpt").mkdir(parents=True, exist_ok=True)
    comm.barrier()
    recs: list[dict] = []
    steps_idle: list[float] = []
    steps_busy: list[float] = []
    gen_s = 0.0
    try:
        def step():
            t0 = time.perf_counter()
            if cfg.compute_time:
                time.sleep(cfg.compute_time)
            busy = saver._pending is not None
            if busy and comm.allreduce(1 if saver.done() else 0, op="min"):
                recs.append(_record(saver.finish(clock), clock))
            (steps_busy if busy else steps_idle).append(time.perf_counter() - t0)

        for k in range(cfg.checkpoints):
            gen_s += saver.generate(k)
            saver._last_k = k
            for _ in range(cfg.steps):
                step()
            t0 = clock()
            if saver._pending is not None:      # the previous async save must finish first: a stall
                recs.append(_record(saver.finish(clock), clock))
            rec = saver.begin(k, clock)
            rec["t_stall_start"] = t0
            if cfg.mode == "sync":
                recs.append(_record(saver.finish(clock), clock, stall_end=clock()))
            else:
                rec["t_stall_end"] = clock()
        for _ in range(cfg.steps):
            step()
        if saver._pending is not None:
            recs.append(_record(saver.finish(clock), clock))
    except KeyboardInterrupt as e:
        saver.abandon()
        sig = getattr(e, "signal_name", "SIGINT")
        raise Interrupted(f"interrupted by {sig}: no partial checkpoint published "
                          f"(.incomplete folders removed under {root / 'ckpt'})",
                          143 if sig == "SIGTERM" else 130) from None
    write_bps = saver.nbytes * len(recs) / max(1e-12, sum(r["write_s"] for r in recs))
    gen = {"rank": me, "generation_bytes_per_s": saver.nbytes * cfg.checkpoints / max(gen_s, 1e-12),
           "write_bytes_per_s": write_bps}
    import shutil

    try:
        restores = _restores(cfg, comm, saver, ranks, root / "ckpt" / saver.name(cfg.checkpoints - 1))
    except BaseException:
        if not cfg.keep and comm.rank == 0:     # a failed restore (damaged file) leaves no checkpoint behind
            shutil.rmtree(root / "ckpt", ignore_errors=True)
        raise
    finally:
        saver.close()
    comm.barrier()
    if not cfg.keep and comm.rank == 0:
        shutil.rmtree(root / "ckpt", ignore_errors=True)
    from ..provenance import defeating_warning, preloaded_libraries

    every = comm.gather({"recs": recs, "gen": gen, "restores": restores, "idle": steps_idle,
                         "busy": steps_busy}, root=0)
    if comm.rank != 0:
        return None
    assert every is not None
    per = aggregate.checkpoints([e["recs"] for e in every])
    summ = aggregate.summary(per, [e["recs"] for e in every], [e["gen"] for e in every])
    idle = [s for e in every for s in e["idle"]]
    busy = [s for e in every for s in e["busy"]]
    summ["step_inflation"] = (sum(busy) / len(busy)) / (sum(idle) / len(idle)) if busy and idle else None
    pre = preloaded_libraries()
    w = defeating_warning(pre)
    if w:
        summ["warnings"].append(w)
    from ..storage.pagecache import fs_of

    result = {"schema": "dlbench.checkpoint/1",
              "config": {"model": m.__dict__, "layout": cfg.layout, "mode": cfg.mode, "checkpoints":
                         cfg.checkpoints, "steps": cfg.steps, "compute_time_s": cfg.compute_time,
                         "ranks": comm.size, "model_ranks": ranks, "subset": cfg.subset, "fsync": cfg.fsync},
              "filesystem": fs_of(root)[0], "preloaded": pre, "summary": summ, "per_checkpoint": per,
              "restore": _restore_summary([e["restores"] for e in every]), "definitions": aggregate.DEFINITIONS,
              "folder": str(root)}
    (root / "checkpoint.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def _record(rec: dict | None, clock, stall_end: int | None = None) -> dict:
    assert rec is not None, "a record is made only of a pending checkpoint"
    t0 = rec.get("t_stall_start", rec["t_start"])
    end = stall_end if stall_end is not None else rec.get("t_stall_end", rec["t_snapshot"])
    return {"checkpoint": rec["checkpoint"], "rank": rec["rank"], "bytes": rec["bytes"], "files": rec["files"],
            "stall_s": (end - t0) / 1e9, "durable_s": (rec["t_durable"] - t0) / 1e9,
            "write_s": rec["write_s"], "fsync_s": rec["fsync_s"],
            "fsync_after_write_bytes": rec.get("fsync_after_write_bytes", [])}


def _restores(cfg: Config, comm, saver: Saver, ranks: list[int], folder: Path) -> dict:
    if not cfg.keep and not cfg.restore:
        return {}
    out: dict = {}
    m, me = cfg.model, saver.rank
    rpn = cfg.ranks_per_node or comm.size // max(1, comm.nodes) or 1
    if cfg.layout == "dcp":
        for kind in cfg.restore:
            comm.barrier()
            if kind == "reshard":
                m2 = _reshard_model(m, cfg.reshard, comm.size)
                mine = range(comm.rank, m2.world, comm.size)
                if cfg.cold and comm.rank == 0:
                    from ..storage.pagecache import evict

                    evict([str(p) for p in folder.iterdir()])
                comm.barrier()
                out[kind] = dcp_reshard_restore(saver, folder, ranks, [t for r in mine for t in needs(m2, r)],
                                                cfg.cold) | {"to": {"tp": m2.tp, "pp": m2.pp, "dp": m2.dp},
                                                             "new_ranks": list(mine)}
                continue
            src = me if kind == "own" else ranks[(comm.rank + rpn) % len(ranks)]
            out[kind] = dcp_restore(saver, folder, src, cfg.cold) | {"as_rank": src}
        return out
    man = load_manifest(folder)
    verify = {n: (v[0], v[1]) for n, v in man["files"].items()}
    place = placement(m, ranks, cfg.layout, folder)
    note: dict[str, Any]
    for kind in cfg.restore:
        if kind == "own":
            rp, note = read_plan(place, [t for f in saver.files for t, _ in f.tensors]), {"as_rank": me}
        elif kind == "cross":
            src = ranks[(comm.rank + rpn) % len(ranks)]
            from .engine import file_specs

            rp = read_plan(place, [t for f in file_specs(m, src, cfg.layout) for t, _ in f.tensors])
            note = {"as_rank": src, "ranks_per_node": rpn}
        else:
            m2 = _reshard_model(m, cfg.reshard, comm.size)
            new_ranks = list(range(comm.rank, m2.world, comm.size)) if not cfg.subset else [comm.rank]
            ts = [t for r in new_ranks for t in needs(m2, r)]
            rp = read_plan(place, ts)
            note = {"to": {"tp": m2.tp, "pp": m2.pp, "dp": m2.dp}, "new_ranks": new_ranks}
        comm.barrier()
        if cfg.cold and comm.rank == 0:
            from ..storage.pagecache import evict

            evict([str(p) for p in folder.iterdir()])
        comm.barrier()
        out[kind] = execute(rp, cold=cfg.cold, verify=verify, into=saver.state) | note
    return out


def _restore_summary(per_rank: list[dict]) -> dict:
    out: dict = {}
    for kind in ("own", "cross", "reshard"):
        rs = [r[kind] for r in per_rank if kind in r]
        if not rs:
            continue
        if any("skipped" in r for r in rs):
            out[kind] = {"skipped": rs[0]["skipped"]}
            continue
        slow = max(r["read_s"] for r in rs)
        nbytes = sum(r["bytes"] for r in rs)
        dev = [r.get("device_bytes") for r in rs]
        out[kind] = {"bytes": nbytes, "needed_bytes": sum(r["needed_bytes"] for r in rs),
                     "missing_bytes": sum(r["missing_bytes"] for r in rs), "read_s": slow,
                     "bandwidth_bytes_per_s": nbytes / slow if slow > 0 else None,
                     "requests": sum(r.get("requests") or 0 for r in rs),
                     "resident_before_bytes": sum(r.get("resident_before_bytes") or 0 for r in rs),
                     "device_bytes": None if None in dev else sum(dev),
                     "per_rank": rs}
    return out


def _mib(n: float) -> str:
    return format_bytes(n, "MiB", group=True)


def render(res: dict) -> str:
    s, c = res["summary"], res["config"]
    lines = [f"checkpoint {c['model']['name']} (scale {c['model']['scale']:g}) layout {c['layout']} mode "
             f"{c['mode']} on {c['ranks']} ranks (model ranks {c['model_ranks'][:8]}{'...' if len(c['model_ranks']) > 8 else ''}), "
             f"file system {res['filesystem']}",
             f"  per checkpoint: {_mib(s['bytes_per_checkpoint'])} in {s['files_per_checkpoint']} files",
             f"  stall: mean {s['stall_s']['mean']:.4f} s  max {s['stall_s']['max']:.4f} s;  durable: mean "
             f"{s['durable_s']['mean']:.4f} s  max {s['durable_s']['max']:.4f} s",
             f"  bandwidth (bytes / slowest rank's durable time): {_mib(s['bandwidth_bytes_per_s'])}/s;  "
             f"MLPerf's mean of per-checkpoint rates: {_mib(s['mlperf_mean_of_rates_bytes_per_s'])}/s",
             f"  fsync: {s['fsync_s']['count']} calls, p50 {s['fsync_s']['p50'] * 1e3:.2f} ms  p90 "
             f"{s['fsync_s']['p90'] * 1e3:.2f} ms  p99 {s['fsync_s']['p99'] * 1e3:.2f} ms  max "
             f"{s['fsync_s']['max'] * 1e3:.2f} ms",
             f"  generation / write rate: {s['generation_ratio']:.1f}x" if s["generation_ratio"] else
             "  generation / write rate: n/a"]
    if s.get("step_inflation"):
        lines.append(f"  step-time inflation during async saves: {s['step_inflation']:.3f}x")
    if s["stragglers"]:
        lines.append(f"  stragglers (> {aggregate.STRAGGLER}x the median rank): ranks {s['stragglers']}")
    cross = res["restore"].get("cross", {})
    if any(p.get("as_rank") == c["model_ranks"][i] for i, p in enumerate(cross.get("per_rank", []))):
        lines.append("  NOTE: the cross-node restore read each rank's own files (one node: pass --ranks-per-node K "
                     "to emulate nodes of K ranks)")
    for kind, r in res["restore"].items():
        if "skipped" in r:
            lines.append(f"  restore {kind}: skipped ({r['skipped']})")
            continue
        dev = "n/a" if r["device_bytes"] is None else _mib(r["device_bytes"])
        bw = f"{_mib(r['bandwidth_bytes_per_s'])}/s" if r["bandwidth_bytes_per_s"] else "n/a"
        lines.append(f"  restore {kind}: {_mib(r['bytes'])} in {r['read_s']:.4f} s ({bw}), "
                     + (f"{r['requests']} requests, " if r["requests"] else "read by dcp.load, ") + f"resident before {_mib(r['resident_before_bytes'])}, "
                     f"device {dev}" + (f", missing {r['missing_bytes']:,} B" if r["missing_bytes"] else ""))
    for w in s["warnings"]:
        lines.append(f"  WARNING: {w}")
    lines.append(f"  -> {res['folder']}/checkpoint.json")
    return "\n".join(lines)
