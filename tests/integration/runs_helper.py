"""Helpers the integration tests share (a module of its own: several conftest.py exist)."""

from pathlib import Path


def run_dir_of(output: str) -> Path:
    """The run folder `dlbench run` printed (its last ``results: DIR`` line)."""
    line = [ln for ln in output.splitlines() if ln.startswith("results: ")][-1]
    return Path(line.split("results: ", 1)[1])
