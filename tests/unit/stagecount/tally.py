"""``BatchTally``: per step, the samples of the batch and a checksum of its rows (each sample's CRC-32 of its
stored bytes, summed), read from the ring slot once the step's data is in place (it runs after the loader and
the peer stage: ``before_step`` is called on the stages in order). Per-step work only: one hook call per step."""

from __future__ import annotations

import zlib

import numpy as np

from dlbench.strategies.stage import Stage
from dlbench.strategies.stages.ring import Ring
from dlbench.strategies.stages.view import EpochView


class BatchTally(Stage):
    def __init__(self, ring: Ring, sample_nbytes, n_samples: int) -> None:
        self.ring = ring
        self.sizes = np.broadcast_to(np.asarray(sample_nbytes, dtype=np.int64), (n_samples,)).tolist()
        self.samples: list[int] = []          # per step, all epochs
        self.epoch_sums: list[int] = []       # per epoch: the sum of its samples' CRC-32s

    def begin(self, view: EpochView) -> None:
        self._sum = 0

    def before_step(self, view: EpochView, t: int) -> None:
        b0, b1 = int(view.bounds[t]), int(view.bounds[t + 1])
        rows, sizes = self.ring[t], self.sizes
        for j, sid in enumerate(view.ids[b0:b1].tolist()):
            self._sum += zlib.crc32(rows[j, :sizes[sid]].data)
        self.samples.append(b1 - b0)

    def finish(self, view: EpochView) -> None:
        self.epoch_sums.append(self._sum)

    def stats(self) -> dict:
        return {"samples_per_step": list(self.samples), "epoch_crc_sums": list(self.epoch_sums)}
