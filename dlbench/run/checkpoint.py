"""``--checkpoint-every N``: a schedule on the checkpoint engine (``dlbench.checkpoint.engine``). At global
step ``first`` (default N; DLIO's ``checkpoint_after_epoch`` sets it) and every N steps after, rank 0 writes
the workload's checkpoint (its model size) as one durable file (or, for a DLIO config with an LLM shape,
``model.num_layers`` / ``model.transformer.*`` / ``model.parallelism.*``, every rank writes its DeepSpeed
shards as DLIO sizes them, data parallelism = ranks / (TP x PP); for DLIO 2.0.0's ``checkpoint.type`` /
``optimization_groups`` / ``num_layers`` / ``layer_parameters``, the writing ranks write DLIO 2.0.0's model,
optimizer and layer files: ``dlio2_files``): incompressible content generated before the
phase starts, written into ``checkpoints/ckpt_NNNN.incomplete/``, fsync'd with its folder, published by
rename (a disk-full failure publishes nothing and says so in one line), then removed (``dlbench checkpoint
--keep`` keeps checkpoints); every rank waits at a barrier. The ``checkpoint`` phase interval covers the
write until published, and rank 0's bytes are in its ``checkpoint`` counters."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoint.schedule import due
from ..errors import ConfigError
from ..timeline import PHASE_ID
from ..units import format_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..checkpoint.engine import FileSpec, Saver
    from ..comm import Comm
    from ..storage.counters import CounterSet, IOCounters
    from ..timeline import Timeline

CHUNK_BYTES = 64 << 20   # the write request: the counters count one write per chunk


def dlio2_files(spec: dict, rank: int) -> list[FileSpec]:
    """The files DLIO 2.0.0 (``BaseCheckpointing.checkpoint``) writes on ``rank`` per checkpoint, from the spec
    ``dlbench.dlio`` translates: nothing unless ``rank`` writes (``all_ranks``: every rank; ``rank_zero``: rank 0);
    ``model-R.pt`` (``model_size`` int8 elements, if > 0); ``optimizer-R.pt`` (each optimization group g > 0
    as two tensors of g elements plus one "combined" tensor of their sum: 3 x sum bytes, if any group is given);
    and, when ``rank`` % pipeline parallelism == 0, one ``layer-L-R.pt`` of sum(layer_parameters > 0) bytes per
    layer, ``num_layers`` layers (+ tensor parallelism when it is > 1). DLIO names them ``-{epoch}-{step}-R``:
    dlbench's ``ckpt_NNNN`` folder carries the checkpoint instead. Raw tensor bytes (no pickle framing)."""
    from ..checkpoint.engine import FileSpec

    if spec["type"] == "rank_zero" and rank != 0:
        return []
    sizes = []
    if spec["model_size"] > 0:
        sizes.append((f"model-{rank}.pt", spec["model_size"]))
    groups = [g for g in spec["optimization_groups"] if g > 0]
    if spec["optimization_groups"] and groups:
        sizes.append((f"optimizer-{rank}.pt", 3 * sum(groups)))
    layer = sum(p for p in spec["layer_parameters"] if p > 0)
    if rank % spec["pp"] == 0 and layer and spec["num_layers"] > 0:
        total = spec["num_layers"] + (spec["tp"] if spec["tp"] > 1 else 0)
        sizes += [(f"layer-{i}-{rank}.pt", layer) for i in range(total)]
    out, pos = [], 0
    for name, n in sizes:
        out.append(FileSpec(name, pos, n, []))
        pos += n
    return out


class Checkpointer:
    """Writes ``nbytes`` into ``directory``/checkpoints on the schedule (``every`` 0: never)."""

    def __init__(self, every: int, nbytes: int, comm: Comm, io: CounterSet, directory: Path,
                 clock: Callable[[], int], first: int = 0, model: dict | None = None):
        self.every, self.first, self.nbytes, self.comm, self.io = int(every), int(first), int(nbytes), comm, io
        self.model = model
        self.directory, self.clock = Path(directory), clock
        self._counters: IOCounters | None = None
        self._saver: Saver | None = None
        self._k = 0

    def _engine(self) -> Saver:
        if self._saver is None:
            from ..checkpoint.engine import FileSpec, Saver

            if self.model is not None and "type" in self.model:   # DLIO 2.0.0's model/optimizer/layer files
                self._saver = Saver(self.comm, None, self.comm.rank, "stream", self.directory / "checkpoints",
                                    chunk=CHUNK_BYTES, files=dlio2_files(self.model, self.comm.rank))
            elif self.model is not None:   # an LLM: every rank writes its DeepSpeed shards as DLIO sizes them
                from ..checkpoint.models import get_model

                kw = dict(self.model)
                mp = kw["tp"] * kw["pp"]
                if self.comm.size % mp:
                    raise ConfigError(f"model.parallelism: tensor {kw['tp']} x pipeline {kw['pp']} = {mp} does not "
                                      f"divide the {self.comm.size} ranks")
                model = get_model(None, dp=self.comm.size // mp, **kw)
                self._saver = Saver(self.comm, model, self.comm.rank, "shards", self.directory / "checkpoints",
                                    chunk=CHUNK_BYTES)
            else:
                files = [FileSpec("model_states.pt", 0, self.nbytes, [])] if self.comm.rank == 0 else []
                self._saver = Saver(self.comm, None, self.comm.rank, "stream", self.directory / "checkpoints",
                                    chunk=CHUNK_BYTES, files=files)
            if self.comm.rank == 0:
                (self.directory / "checkpoints").mkdir(parents=True, exist_ok=True)
                free = shutil.disk_usage(self.directory).free
                if self._saver.nbytes > free:
                    # refused before writing: it would fill the disk (and every other writer on it) first
                    from ..errors import OutputError

                    raise OutputError(f"checkpoint: disk full: {self._saver.nbytes:,} bytes do not fit in "
                                      f"{self.directory} ({format_bytes(free, 'MiB', group=True)} free); free space there, or pass "
                                      f"--checkpoint-every 0")
        return self._saver

    def after_step(self, global_step: int, timeline: Timeline, e: int, s: int) -> None:
        """Called after every step with the steps done so far: writes the checkpoint when one is due."""
        if not due(global_step, self.every, self.first):
            return
        saver, comm, clock = self._engine(), self.comm, self.clock
        k = self._k
        self._k += 1
        saver.generate(k)                  # before the phase: the content of this checkpoint
        c0 = clock()
        try:
            saver.begin(k, clock)
            rec = saver.finish(clock)
        finally:
            if comm.rank == 0:
                shutil.rmtree(self.directory / "checkpoints", ignore_errors=True)
        mine = saver.nbytes          # this rank's bytes (rank 0's one file, or its shards)
        if rec is not None and mine:
            if self._counters is None:
                self._counters = self.io.new("checkpoint")
            for _ in saver.files:
                self._counters.open()
            self._counters.write(mine, int(rec["write_s"] * 1e9),
                                 count=sum(-(-f.nbytes // CHUNK_BYTES) for f in saver.files))
        comm.barrier()
        timeline.add(PHASE_ID["checkpoint"], c0, clock(), e, s, mine)
