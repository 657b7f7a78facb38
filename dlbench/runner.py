"""The measured run's public names, where the CLI, the studies, the tests and the benchmarks import them.

The code lives in ``dlbench/run/``, one module per job (docs/architecture.md, "The run"):

- ``run/setup.py``       ``RunConfig``, the option checks, the dataset (``resolve_dataset``);
- ``run/loop.py``        ``Loop``: one rank's set-up (contexts, plan, counters) and its epoch loop;
- ``run/cache.py``       ``--cache keep|drop|direct`` around the loop (evictions, per-epoch device bytes);
- ``run/checkpoint.py``  ``--checkpoint-every``;
- ``run/verify_host.py`` ``--verify``;
- ``run/summary.py``     the summary on rank 0, ``--dry-run``'s summary, the page-cache check;
- ``run/driver.py``      ``run(cfg, comm)``: the above in order, the results folder, failures.
"""

from __future__ import annotations

from .run.driver import TIMELINE_BUFFER, run
from .run.loop import Loop
from .run.setup import (
    ACCELERATORS,
    RunConfig,
    check_compute,
    check_compute_options,
    check_seconds,
    data_dir_tag,
    default_data_dir,
    default_local_dir,
    resolve_dataset,
    sleep_step_time,
)
from .run.summary import dry_run_summary, page_cache_check
from .stop import Terminated  # the CLI's name for it

__all__ = ["ACCELERATORS", "Loop", "RunConfig", "TIMELINE_BUFFER", "Terminated", "check_compute",
           "check_compute_options", "check_seconds", "data_dir_tag", "default_data_dir", "default_local_dir",
           "dry_run_summary", "page_cache_check", "resolve_dataset", "run", "sleep_step_time"]
