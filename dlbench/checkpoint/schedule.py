"""When ``--checkpoint-every N`` writes a checkpoint (at global step ``first`` (0: N) and every N steps after)
and how large it is (``checkpoint_nbytes``: the workload's model size). The one schedule that the run (``dlbench.run.checkpoint``) follows and the simulator (``dlbench.simulate.
checkpoint.run_schedule``) costs, in the checkpoint package below both."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..workload import Workload


def due(global_step: int, every: int, first: int = 0) -> bool:
    """Whether a checkpoint is due after ``global_step`` steps: at ``first`` (0: ``every``), then every
    ``every`` steps."""
    first = first or every
    return bool(every) and global_step >= first and (global_step - first) % every == 0


def checkpoint_nbytes(every: int, workload: Workload) -> int:
    """The checkpoint's bytes (the workload's model size); ``--checkpoint-every`` on a workload without one is
    a ConfigError (checked at set-up, before anything runs)."""
    nbytes = int(workload.checkpoint_nbytes() or 0)
    if every and not nbytes:
        raise ConfigError(f"--checkpoint-every={every}: workload {workload.name} gives no model "
                          f"size (model.parameters in its YAML), so the checkpoint size is unknown")
    return nbytes
