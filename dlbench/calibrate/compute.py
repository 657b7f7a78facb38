"""``dlbench calibrate``: measure the real training-step time on the device at hand and write a compute profile.

The step is ``TorchCompute.step`` (transfer, forward, loss, backward, optimizer; synchronized) on a synthetic
batch of the workload's sample shape, filled with finite values (floats uniform in [0, 1), integers in the
label range). ``warmup`` steps run first and are excluded; the figure is the median of ``steps`` measured
compute times (forward+loss+backward+optimizer, transfer excluded and reported beside it), with the sample
standard deviation, min and max.

The profile is a YAML file that ``--compute-profile FILE`` reads back
(``compute.profile.load_compute_profile``); its
``step_time_s``/``batch_size`` are also what a workload file's ``compute:`` entry takes (see the comment
written at its top).
"""

from __future__ import annotations

import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..errors import ConfigError

PROFILE_SCHEMA = "dlbench.compute_profile/1"


def _check_int(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(f"{name}={value!r}: must be an integer >= {lo}")
    return int(value)


def synthetic_batch(workload, batch_size: int, fields, seed: int = 0) -> np.ndarray:
    """A (batch_size, row_nbytes) uint8 batch whose arrays hold finite, in-range values."""
    from ..compute.models import split_rows

    rng = np.random.default_rng(seed)
    row = fields[-1].offset + fields[-1].nbytes
    batch = np.zeros((batch_size, row), dtype=np.uint8)
    views = split_rows(batch, fields, batch_size)
    for f in fields:
        v = views[f.name]
        if v.dtype.kind == "f":
            v[...] = rng.random(v.shape, dtype=np.float32)
        elif f.role == "label":
            v[...] = rng.integers(0, 2, v.shape)
        else:
            v[...] = rng.integers(0, min(255, np.iinfo(v.dtype).max), v.shape)
    return batch


def check_batch_fits(workload, batch_size: int | None) -> None:
    """One synthetic batch of ``--batch-size`` must fit in half the available memory (checked before torch
    starts); a one-line ConfigError naming the largest batch that does."""
    if batch_size is None:
        return
    from ..host import meminfo

    row = max(workload.sample_nbytes, workload.decoded_nbytes)
    need, avail = batch_size * row, meminfo("MemAvailable")
    if avail and need > avail // 2:
        raise ConfigError(f"--batch-size={batch_size}: one batch of {workload.name} at scale {workload.scale} is "
                          f"{need / 2**30:,.1f} GiB, over half the {avail / 2**30:,.1f} GiB available here; use at "
                          f"most {max(1, avail // 2 // row):,}")


def calibrate(workload, batch_size: int | None = None, steps: int = 10, warmup: int = 2, device: str = "auto",
              model: str | None = None, seed: int = 0, threads: int | None = None, precision: str = "fp32") -> dict:
    """Measure the step time of ``workload``'s model; returns the profile mapping (see ``write_profile``)."""
    import torch

    from ..compute.torch_step import TorchCompute, device_name

    batch_size = _check_int("--batch-size", workload.local_batch(batch_size), 1)
    steps = _check_int("--steps", steps, 1)
    warmup = _check_int("--warmup", warmup, 0)
    tc = TorchCompute(workload, batch_size, device=device, seed=seed, model=model, threads=threads,
                      precision=precision)
    try:
        batch = synthetic_batch(workload, batch_size, tc.fields, seed)
        ids = np.arange(batch_size, dtype=np.int64)
        t0 = time.perf_counter()
        for s in range(warmup + steps):
            tc.step(batch, ids, batch_size, None, 0, s)
        tc.drain()   # --overlap: the last steps still on the device
        wall = time.perf_counter() - t0
        times = tc.step_times_s[warmup:]
        transfer = tc.transfer_times_s[warmup:]
        med = statistics.median(times)
        shapes = {f.name: list(f.shape) for f in tc.fields}
        return {
            "schema": PROFILE_SCHEMA,
            "workload": workload.name,
            "scale": workload.scale,
            "shapes": shapes,
            "model": tc.task.name,
            "workload_model": workload.model_name(),
            "parameters": tc.parameters,
            "device": device_name(tc.device),
            "device_type": tc.device.type,
            "torch": str(torch.__version__),
            "threads": torch.get_num_threads() if tc.device.type == "cpu" else None,
            "precision": tc.precision,
            "memory_format": "channels_last" if tc.channels_last else "contiguous",
            "host": platform.node(),
            "measured_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "batch_size": batch_size,
            "steps": steps,
            "warmup": warmup,
            "step_time_s": float(med),
            "step_time_stdev_s": float(statistics.stdev(times)) if len(times) > 1 else 0.0,
            "step_time_min_s": float(min(times)),
            "step_time_max_s": float(max(times)),
            "transfer_time_s": float(statistics.median(transfer)),
            "transfer_exposed_time_s": float(statistics.median(tc.transfer_exposed_times_s[warmup:])),
            "overlap": tc.overlap,
            "wall_time_s": float(wall),
            "step_times_s": [float(t) for t in times],
            "note": "step_time_s = median of forward+loss+backward+optimizer (synchronized), warm-up excluded; "
                    "transfer_time_s (host->device + dtype conversion) is apart",
        }
    finally:
        tc.close()


DEFAULT_PROFILE_DIR = Path("results") / "calibrate"


def default_profile_path(profile: dict, directory: str | Path = DEFAULT_PROFILE_DIR) -> Path:
    """``results/calibrate/<workload>-<device>-b<B>.compute.yaml`` (the results tree, not the current
    directory); a reduced scale, another model and a precision other than fp32 are named:
    ``<workload>-tiny-deepcam_resnet50-cpu-b8-bf16.compute.yaml``."""
    scale = str(profile.get("scale", "full")).split("+")[0]
    tag = "" if scale == "full" else f"-{scale}"
    wl_model = profile.get("workload_model")
    if profile.get("model") and wl_model and profile["model"] != wl_model:
        tag += f"-{profile['model']}"
    prec = profile.get("precision", "fp32")
    ptag = "" if prec == "fp32" else f"-{prec}"
    return Path(directory) / (f"{profile['workload']}{tag}-{profile['device_type']}-b{profile['batch_size']}"
                              f"{ptag}.compute.yaml")


def check_profile_path(path: str | Path | None, flag: str = "--out") -> None:
    """Before measuring (a calibration takes tens of seconds): the profile file ``path`` (None: a file in
    ``DEFAULT_PROFILE_DIR``) can be written: not a directory, and its nearest existing parent is a writable
    directory (the missing ones are created when the profile is written). One line otherwise."""
    import os

    p = Path(path) if path is not None else Path(DEFAULT_PROFILE_DIR) / "x.compute.yaml"
    shown = path if path is not None else f"(default) {DEFAULT_PROFILE_DIR}/"
    if p.is_dir():
        raise ConfigError(f"{flag} {shown}: is a directory; pass a file name (e.g. {p / 'profile.compute.yaml'})")
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {shown}: {parent} is a file, not a directory; choose another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {shown}: {parent} is not writable; choose another path")


def write_profile(profile: dict, path: str | Path) -> Path:
    """Write the profile as YAML (atomically), with a comment showing the workload-file ``compute:`` entry."""
    import os

    import yaml

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    head = (f"# dlbench compute profile: pass back with --compute-profile {p}\n"
            f"# or merge into the workload file, under compute: (accelerator: v100, a100 or h100)\n"
            f"#   <accelerator>: {{step_time_s: {profile['step_time_s']:.6g}, batch_size: {profile['batch_size']}, "
            f"source: \"dlbench calibrate, {profile['device']}, torch {profile['torch']}, "
            f"{profile.get('precision', 'fp32')}\"}}\n")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(head + yaml.safe_dump(profile, sort_keys=False, width=110, default_flow_style=None))
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def format_profile(profile: dict) -> str:
    shapes = ", ".join(f"{k} {'x'.join(map(str, v))}" for k, v in profile["shapes"].items())
    return (f"calibrate {profile['workload']} ({profile['scale']}: {shapes}), model {profile['model']} "
            f"({profile['parameters']:,} parameters)\n"
            f"  device {profile['device']}, torch {profile['torch']}, batch {profile['batch_size']}, "
            f"{profile.get('precision', 'fp32')} ({profile.get('memory_format', 'contiguous')})\n"
            f"  step time: median {profile['step_time_s']:.4f} s, stdev {profile['step_time_stdev_s']:.4f} s, "
            f"min {profile['step_time_min_s']:.4f} s, max {profile['step_time_max_s']:.4f} s "
            f"over {profile['steps']} steps ({profile['warmup']} warm-up excluded)\n"
            f"  transfer (host->device + conversion): median {profile['transfer_time_s']:.4f} s/step"
            + (f", exposed {profile['transfer_exposed_time_s']:.4f} s/step (--overlap {profile.get('overlap')})"
               if "transfer_exposed_time_s" in profile else ""))
