"""``--verify``: the run checks what it delivers, as a phase of its own (``verify``) inside the epoch, between
stall and compute. Every batch must be the plan's step, in order, with every row's bytes equal to what the
generator wrote for that sample; at the end of an epoch every rank must have had exactly its samples and,
across ranks, every sample as often as the plan says."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import RunError

if TYPE_CHECKING:
    from ..plan import Plan
    from ..strategies.base import Batch, RunContext
    from ..workload import Workload


class Verifier:
    """--verify: every delivered batch is the plan's step, in order, and every row's bytes equal what the
    generator wrote for that sample (JPEGs: the decode of the generated file)."""

    def __init__(self, workload: Workload, seed: int, ctx: RunContext):
        self.workload, self.seed, self.ctx = workload, seed, ctx
        # a format whose read sample is not a stored row (fmt_indexed's Megatron sample index) says what it reads
        self.expected_row = workload.format.driver().expected_read_row
        self.count = 0
        self.decode = workload.format.decoder(workload)   # the format's decode step, or None
        if self.decode is not None:
            self.tmp = np.empty(workload.decoded_nbytes, dtype=np.uint8)
        self.seen: list[np.ndarray] = []

    def check(self, plan: Plan, e: int, s: int, batch: Batch) -> None:
        want = plan.epoch(e).step_samples(self.ctx.rank, s)
        got = np.asarray(batch.ids[:batch.n])
        if not np.array_equal(want, got):
            raise RunError(f"--verify: epoch {e} step {s} rank {self.ctx.rank}: delivered samples "
                           f"{got[:8].tolist()}... differ from the plan's {want[:8].tolist()}...")
        for j, i in enumerate(got.tolist()):
            exp = self.expected_row(self.workload, self.seed, i)
            if self.decode is not None:
                n = self.decode(exp, len(exp), self.tmp)
                exp = self.tmp if n is None else self.tmp[:n]   # rows of varying size (tfrecord) say how long
            row = batch.rows[j, :len(exp)]
            if len(exp) > batch.rows.shape[1] or not np.array_equal(row, exp):
                raise RunError(f"--verify: epoch {e} step {s} rank {self.ctx.rank}: sample {i}'s bytes "
                               f"differ from what the generator wrote")
            self.count += 1
        self.seen.append(got)

    def end_epoch(self, plan: Plan, e: int) -> None:
        got = np.concatenate(self.seen) if self.seen else np.zeros(0, np.int64)
        self.seen = []
        want = plan.epoch(e).rank_samples(self.ctx.rank)
        if not np.array_equal(np.sort(got), np.sort(want)):
            missing = np.setdiff1d(want, got)
            raise RunError(f"--verify: epoch {e} rank {self.ctx.rank}: samples missing "
                           f"{missing[:8].tolist()} or duplicated")
        if self.ctx.comm is not None:
            counts = np.bincount(got, minlength=plan.n_samples).astype(np.int64)
            total = self.ctx.comm.allreduce(counts, op="sum")
            exp = np.zeros(plan.n_samples, np.int64)
            ep = plan.epoch(e)
            np.add.at(exp, ep.sample_ids[ep.sample_ids >= 0], 1)
            if not np.array_equal(total, exp):
                bad = np.nonzero(total != exp)[0]
                raise RunError(f"--verify: epoch {e}: samples {bad[:8].tolist()} delivered "
                               f"{total[bad[:8]].tolist()} times across ranks, plan says {exp[bad[:8]].tolist()}")
