"""This machine's facts and default paths, read in one place: ``meminfo`` (a /proc/meminfo entry) and
``data_root`` (where generated datasets go by default)."""

from __future__ import annotations

import os
from pathlib import Path


def meminfo(key: str, path: str | os.PathLike = "/proc/meminfo") -> int:
    """``key``'s value in bytes from /proc/meminfo (``MemTotal``, ``MemAvailable``, ...); 0 when the file
    or the key is missing (not Linux) or unreadable."""
    try:
        with open(path) as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == key:
                    return int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def data_root() -> Path:
    """``$DLBENCH_DATA_DIR``, default ``~/.cache/dlbench/data``: the root of default dataset folders."""
    return Path(os.environ.get("DLBENCH_DATA_DIR") or Path.home() / ".cache" / "dlbench" / "data")
