"""What the MPI benchmarks share (imported as ``_bench``: a script's own folder is on ``sys.path``)."""


class NoCompute:
    """A compute stage that does nothing and records nothing: the runner's loop measures data delivery only."""

    def step(self, *args) -> None:
        pass

    def close(self) -> None:
        pass
