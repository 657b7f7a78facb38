"""The live progress line of ``dlbench run`` (rank 0 only): epoch, step/steps, the epoch's exposed I/O
share so far and samples/s, drawn with rich on stderr.

It must not perturb what it shows. The runner calls ``step(s, t0, t1, n)`` once per step with the
clock values it already took around ``next()`` (the stall), so the hook reads no clock of its own: per
step it adds two integers and compares ``t1`` with the next refresh deadline. Only when the deadline
has passed (at most ``max_rate_hz`` times a second, 4 by default) does it format and draw the line. No
background thread (rich's auto-refresh is off), nothing per sample. When progress is off the runner's
hook is ``None`` and costs one ``is not None`` test per step. Cost measured by
``benchmarks/progress.py`` (README of that script: per-step cost and redraw count).
"""

from __future__ import annotations

import sys
from typing import TextIO


def wanted(flag: bool | None, streams=(sys.stdout, sys.stderr)) -> bool:
    """``--progress/--no-progress`` if given, else on only when every stream is a terminal."""
    if flag is not None:
        return bool(flag)
    try:
        return all(s is not None and s.isatty() for s in streams)
    except (AttributeError, ValueError):
        return False


class StepProgress:
    """The runner's per-step hook. ``epoch_start(e, steps, t_ns)``, ``step(s, t0_ns, t1_ns, n)``,
    ``epoch_end(e, t_ns)``, ``close()``. ``file``: where to draw (stderr); ``force_terminal``: draw even
    when ``file`` is not a terminal (``--progress``, tests). ``renders`` counts redraws."""

    def __init__(self, epochs: int, *, file: TextIO | None = None, max_rate_hz: float = 4.0,
                 force_terminal: bool | None = None, label: str = ""):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.epochs = int(epochs)
        self.period_ns = int(1e9 / max_rate_hz)
        self.renders = 0
        self.console = Console(file=file or sys.stderr, force_terminal=force_terminal)
        self._p = Progress(
            TextColumn(f"{label}epoch {{task.fields[epoch]}}/{self.epochs}"), BarColumn(bar_width=24),
            MofNCompleteColumn(), TextColumn("steps  exposed I/O {task.fields[share]}  {task.fields[sps]} samples/s"),
            TimeElapsedColumn(), console=self.console, auto_refresh=False, transient=False)
        # started here, not in the first epoch: setting up the live display is kept out of epoch time
        self._p.start()
        self._started = True
        self._task = self._p.add_task("run", total=1, epoch=1, share="-", sps="-")
        self._epoch = 0
        self._steps = 0
        self._t_epoch = 0
        self._stall_ns = 0
        self._samples = 0
        self._next_ns = 0
        self._last_step = -1

    # ---- called by the runner ------------------------------------------------------------------
    def epoch_start(self, epoch: int, steps: int, t_ns: int) -> None:
        self._epoch, self._steps, self._t_epoch = int(epoch), int(steps), int(t_ns)
        self._stall_ns = 0
        self._samples = 0
        self._last_step = -1
        self._next_ns = int(t_ns)  # draw the first step of each epoch

    def step(self, s: int, t0_ns: int, t1_ns: int, n: int) -> None:
        """Hot path: two adds and a comparison unless a redraw is due."""
        self._stall_ns += t1_ns - t0_ns
        self._samples += n
        self._last_step = s
        if t1_ns >= self._next_ns:
            self._next_ns = t1_ns + self.period_ns
            self._draw(t1_ns)

    def epoch_end(self, epoch: int, t_ns: int) -> None:
        self._draw(int(t_ns))

    def close(self) -> None:
        if self._started:
            self._p.stop()
            self._started = False

    # ---- off the hot path ----------------------------------------------------------------------
    def figures(self, now_ns: int) -> dict:
        """What the line shows at ``now_ns``: exposed I/O share of the epoch so far (stall / elapsed), samples/s."""
        el = max(now_ns - self._t_epoch, 1)
        return {"epoch": self._epoch + 1, "step": self._last_step + 1, "steps": self._steps,
                "exposed_io_share": self._stall_ns / el, "samples_per_s": self._samples / (el / 1e9)}

    def _draw(self, now_ns: int) -> None:
        f = self.figures(now_ns)
        self._p.update(self._task, total=max(self._steps, 1), completed=f["step"], epoch=f["epoch"],
                       share=f"{f['exposed_io_share']:.1%}", sps=f"{f['samples_per_s']:,.0f}")
        self._p.refresh()
        self.renders += 1
