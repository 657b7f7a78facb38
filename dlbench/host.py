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
    """``$DLBENCH_DATA_DIR``, default ``~/.cache/dlbench/data``: the root of default dataset folders. With no
    usable home (``HOME`` empty or relative: a batch system's stripped environment, ``HOME=""``) there is no
    default: one line asking for DLBENCH_DATA_DIR or --data-dir (before, datasets went to ``/.cache`` or to a
    ``.cache`` folder under whatever the current directory was)."""
    env = os.environ.get("DLBENCH_DATA_DIR")
    if env:
        return Path(env)
    home = os.environ.get("HOME")
    if home is None:
        try:
            home = str(Path.home())
        except (RuntimeError, KeyError):   # no HOME and no passwd entry
            home = ""
    if not home or not os.path.isabs(home) or home == "/":
        from .errors import ConfigError

        raise ConfigError(f"HOME={home!r}: not a usable home folder for the default dataset root "
                          f"(~/.cache/dlbench/data); allowed: an absolute HOME other than /, or set "
                          f"DLBENCH_DATA_DIR=DIR (or pass --data-dir) to say where datasets go")
    return Path(home) / ".cache" / "dlbench" / "data"
