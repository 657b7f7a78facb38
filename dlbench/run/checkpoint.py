"""``--checkpoint-every N``: every N global steps rank 0 writes the workload's checkpoint (its model size) to
the run folder with fsync and every rank waits for it at a barrier; the ``checkpoint`` phase interval, and
rank 0's bytes in its ``checkpoint`` counters."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..timeline import PHASE_ID

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..comm import Comm
    from ..storage.counters import CounterSet, IOCounters
    from ..timeline import Timeline
    from ..workload import Workload

CHUNK_BYTES = 64 << 20   # write_checkpoint's chunk: the counters count one write per chunk


def checkpoint_nbytes(every: int, workload: Workload) -> int:
    """The checkpoint's bytes (the workload's model size); ``--checkpoint-every`` on a workload without one is
    a ConfigError (checked at set-up, before anything runs)."""
    nbytes = int(workload.checkpoint_nbytes() or 0)
    if every and not nbytes:
        raise ConfigError(f"--checkpoint-every={every}: workload {workload.name} gives no model "
                          f"size (model.parameters in its YAML), so the checkpoint size is unknown")
    return nbytes


class Checkpointer:
    """Writes ``nbytes`` into ``directory`` every ``every`` global steps (0: never)."""

    def __init__(self, every: int, nbytes: int, comm: Comm, io: CounterSet, directory: Path,
                 clock: Callable[[], int]):
        self.every, self.nbytes, self.comm, self.io = int(every), int(nbytes), comm, io
        self.directory, self.clock = Path(directory), clock
        self._counters: IOCounters | None = None

    def after_step(self, global_step: int, timeline: Timeline, e: int, s: int) -> None:
        """Called after every step with the steps done so far: writes the checkpoint when one is due."""
        if not self.every or global_step % self.every:
            return
        from ..compute.sleep import write_checkpoint

        comm, clock = self.comm, self.clock
        c0 = clock()
        if comm.rank == 0:  # rank 0 writes; every rank waits for it
            w_s = write_checkpoint(self.directory, self.nbytes, None, e, s, chunk_bytes=CHUNK_BYTES)
            if self._counters is None:
                self._counters = self.io.new("checkpoint")
            self._counters.open()
            self._counters.write(self.nbytes, int(w_s * 1e9), count=-(-self.nbytes // CHUNK_BYTES))
        comm.barrier()
        timeline.add(PHASE_ID["checkpoint"], c0, clock(), e, s, self.nbytes if comm.rank == 0 else 0)
