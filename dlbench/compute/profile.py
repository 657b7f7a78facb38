"""A compute profile (YAML, written by ``dlbench calibrate``: ``dlbench.calibrate.compute``) read back for
``dlbench run --compute-profile FILE``: the measured step time and the batch it was measured at."""

from __future__ import annotations

import math
from pathlib import Path

from ..errors import ConfigError


def load_compute_profile(path: str | Path) -> tuple[float, int, dict]:
    """Read a profile written by ``dlbench calibrate``: ``(step_time_s, batch_size, meta)`` where ``meta`` is
    the whole mapping. One-line ConfigError naming the file and key on anything missing or invalid."""
    from ..config import load_yaml

    data = load_yaml(path, "compute profile")
    for key in ("step_time_s", "batch_size"):
        if key not in data:
            raise ConfigError(f"compute profile '{path}': missing key '{key}' (write one with dlbench calibrate)")
    st, b = data["step_time_s"], data["batch_size"]
    from ..config import MAX_BATCH, MAX_STEP_TIME_S

    if isinstance(st, bool) or not isinstance(st, (int, float)) or not math.isfinite(st) or not 0 <= st <= MAX_STEP_TIME_S:
        raise ConfigError(f"compute profile '{path}': step_time_s={st!r}: must be a number of seconds from 0 to "
                          f"{MAX_STEP_TIME_S:g}")
    if isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BATCH:
        raise ConfigError(f"compute profile '{path}': batch_size={b!r}: must be an integer from 1 to {MAX_BATCH:,}")
    return float(st), int(b), data
