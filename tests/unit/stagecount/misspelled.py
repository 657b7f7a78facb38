"""The tally stage with its hook misspelled (``befor_step``): the class definition raises on import."""

from __future__ import annotations

from dlbench.strategies.stage import Stage


class MisspelledTally(Stage):
    def befor_step(self, view, t: int) -> None:
        pass

    def stats(self) -> dict:
        return {}
