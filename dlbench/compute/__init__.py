"""Compute emulation per training step: sleep (``sleep.py``) and real torch models (``models.py``).

A compute object has ``.step(batch, sample_ids, n, timeline, epoch, step)`` and ``.close()`` and records
its own phases on the timeline (docs/architecture.md contract 6)."""

from .sleep import SleepCompute, write_checkpoint

__all__ = ["SleepCompute", "write_checkpoint"]
