"""DLIO's evaluation phase (``--dlio-config`` with ``workflow.evaluation``; ``dlio._evaluation`` gives the
settings): after each training epoch DLIO evaluates in, every rank reads its share of the evaluation files and
sleeps ``eval_time`` per evaluation step, as DLIO's ``_eval`` loop does.

The evaluation files are a dataset of their own, as DLIO's ``valid`` folder: the training workload's shapes and
layout under the name ``<workload>-eval`` (so their content differs from the training files') with
``num_files_eval x num_samples_per_file`` samples, in ``<training data dir>-eval-<samples>`` beside the
training data, generated there on first use (every rank takes part). Rank r reads eval samples r, r + W, ...
(DistributedSampler's split, unshuffled), ``floor(samples / W / batch_size_eval)`` steps of
``batch_size_eval`` samples (DLIO's eval step count), through the same PFS model as the training reads.

The whole pass is one ``eval`` interval tagged with the epoch it follows, after that epoch's clock stopped
(``timeline.OUTSIDE_EPOCH``): not in epoch time, AU, ``read_bytes`` or the I/O counters; its bytes ride on the
interval, and the summary's ``eval`` section has the per-epoch seconds, samples and bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..comm import Comm
    from ..timeline import Timeline
    from ..workload import WorkloadSpec
    from .loop import Loop
    from .setup import RunConfig


def due(e: int, after: int, every: int) -> bool:
    """Does DLIO evaluate after 0-based training epoch ``e``? (DLIO counts epochs from 1: ``next_eval_epoch``
    starts at ``eval_after_epoch`` and grows by ``epochs_between_evals``.)"""
    n = e + 1
    return n >= after and (n - after) % every == 0


class Evaluator:
    """One rank's evaluation passes (module docstring)."""

    def __init__(self, settings: dict, reader_factory: Any, eval_samples: int, comm: Comm, seed: int):
        from ..compute.sleep import SleepCompute

        self.s = settings
        self.rank, self.size = comm.rank, comm.size
        self.ids = np.arange(self.rank, eval_samples, self.size, dtype=np.int64)
        b = int(settings["batch_size"])
        self.batch = b
        self.steps = eval_samples // (self.size * b)
        self._factory = reader_factory
        self._reader: Any = None
        self._sleep = SleepCompute(float(settings["step_time_s"]), stdev_s=float(settings["step_stdev_s"]),
                                   seed=seed + 7919, rank=self.rank)
        self.passes: list[dict] = []

    def after_epoch(self, e: int, timeline: Timeline, clock: Any) -> None:
        from ..timeline import PHASE_ID

        if not due(e, int(self.s["after_epoch"]), int(self.s["every"])):
            return
        if self._reader is None:
            self._reader = self._factory()
        reader = self._reader
        buf = np.empty(max(int(reader.max_row_nbytes), 1), dtype=np.uint8)
        b, ids = self.batch, self.ids
        nbytes = samples = 0
        t0 = clock()
        for s in range(self.steps):
            for i in ids[s * b:(s + 1) * b]:
                nbytes += reader.read_into(int(i), buf)
                samples += 1
            w = clock()
            self._sleep.wait_until(w + self._sleep.draw_ns())
        t1 = clock()
        timeline.add(PHASE_ID["eval"], t0, t1, e, -1, nbytes)
        self.passes.append({"after_epoch": e, "eval_s": (t1 - t0) * 1e-9, "steps": self.steps, "samples": samples,
                            "bytes": int(nbytes)})

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def eval_data_dir(train_dir: Path, samples: int) -> Path:
    return train_dir.parent / f"{train_dir.name}-eval-{samples}"


def make_evaluator(cfg: RunConfig, comm: Comm, spec: WorkloadSpec, spec_path: str, loop: Loop,
                   train_dir: Path) -> Evaluator | None:
    """The rank's evaluator for ``cfg.eval`` (None: no evaluation): the evaluation dataset found or generated
    (collective), its reader behind the run's PFS model."""
    import dataclasses

    from .. import workload as wl_mod
    from ..data.formats import open_reader
    from ..data.manifest import Manifest
    from ..errors import DataError
    from ..storage import throttled_factory

    ev = cfg.eval
    if not ev:
        return None
    n = int(ev["samples"])
    espec = dataclasses.replace(spec, name=f"{spec.name}-eval")
    workload = wl_mod.resolve(espec, samples=n, spec_path=spec_path)
    d = eval_data_dir(Path(train_dir), n)
    if not Manifest.exists(d):
        from ..data.generate import generate

        if comm.rank == 0:
            d.parent.mkdir(parents=True, exist_ok=True)
        comm.barrier()
        generate(workload, d, seed=cfg.seed, comm=comm, progress=False)
    manifest = Manifest.load(d)
    if manifest.workload != espec.name or manifest.samples != n or manifest.seed != cfg.seed:
        raise DataError(f"{d}: holds {manifest.describe()}, not the {n} evaluation samples of {espec.name} "
                        f"(seed {cfg.seed}); remove it and run again to generate them")

    def open_eval() -> Any:
        return open_reader(d, manifest, workload, via=cfg.read_via)

    return Evaluator(ev, throttled_factory(open_eval, loop.pfs_model), n, comm, cfg.seed)


def summarize(records: list[list[dict]]) -> dict | None:
    """Rank 0: ``summary["eval"]`` from every rank's passes: per evaluated epoch the slowest rank's seconds,
    samples and bytes summed over ranks. None: no evaluation."""
    if not any(records):
        return None
    by: dict[int, dict] = {}
    for passes in records:
        for p in passes:
            cur = by.setdefault(int(p["after_epoch"]), {"after_epoch": int(p["after_epoch"]), "eval_s": 0.0,
                                                       "steps": int(p["steps"]), "samples": 0, "bytes": 0})
            cur["eval_s"] = max(cur["eval_s"], float(p["eval_s"]))
            cur["samples"] += int(p["samples"])
            cur["bytes"] += int(p["bytes"])
    rows = [by[k] for k in sorted(by)]
    return {"per_epoch": rows, "eval_s": [r["eval_s"] for r in rows],
            "samples": int(sum(r["samples"] for r in rows)), "bytes": int(sum(r["bytes"] for r in rows))}
