"""What the benchmarks share (imported as ``_bench``: a script's own folder is on ``sys.path``)."""

import time


def best_of(fn, repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls of ``fn()`` (s): the machine is shared, the minimum is the
    least disturbed figure."""
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


class NoCompute:
    """A compute stage that does nothing and records nothing: the runner's loop measures data delivery only."""

    def step(self, *args) -> None:
        pass

    def close(self) -> None:
        pass
