"""When ``--checkpoint-every N`` writes a checkpoint: at global step ``first`` (0: N) and every N steps after.
The one schedule that the run (``dlbench.run.checkpoint``) follows and the simulator (``dlbench.simulate.
checkpoint.run_schedule``) costs, in the checkpoint package below both."""

from __future__ import annotations


def due(global_step: int, every: int, first: int = 0) -> bool:
    """Whether a checkpoint is due after ``global_step`` steps: at ``first`` (0: ``every``), then every
    ``every`` steps."""
    first = first or every
    return bool(every) and global_step >= first and (global_step - first) % every == 0
