"""Set-up of a run, before any rank measures anything: the run's configuration (``RunConfig``), the checks
of the compute options, and the dataset (``resolve_dataset``: the workload and its manifest, generating the
tiny preset on first use). The workload spec is loaded once per run (``run.driver.run``) and handed to
every check here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..config import check_seconds
from ..errors import ConfigError, DataError, unknown_choice
from ..storage.pagecache import CacheMode
from ..units import format_bytes

if TYPE_CHECKING:
    from ..comm import Comm
    from ..data.manifest import Manifest
    from ..workload import Workload, WorkloadSpec

ACCELERATORS = ("v100", "a100", "h100")


@dataclass
class RunConfig:
    workload: str = "cosmoflow"
    scale: str | None = None
    samples: int | None = None
    strategy: str = "naive"
    options: dict = field(default_factory=dict)
    data_dir: str | None = None
    epochs: int = 3
    batch_size: int | None = None
    seed: int = 0
    out: str = "results"
    compute: str = "sleep"                 # sleep | torch
    accelerator: str | None = None         # None: a100 where published, else a measured entry (Workload.choose_step_time)
    precision: str = "fp32"                # torch compute: fp32 | bf16 | fp16 (sleep: the measured entry's)
    overlap: str = "auto"                  # torch compute: auto | on | off (copies on a side stream)
    compute_time_s: float | None = None
    compute_stdev_s: float = 0.0
    compute_profile: str | None = None
    device: str = "auto"
    model: str | None = None
    barrier: bool = False
    checkpoint_every: int = 0
    checkpoint_first: int = 0              # the first checkpoint's global step (0: checkpoint_every); DLIO's checkpoint_after_epoch
    checkpoint_model: dict | None = None   # an LLM checkpoint (dlbench.checkpoint.models.get_model's keywords; DLIO's model.*)
    verify: bool = False
    ranks_per_node: int | None = None
    dry_run: bool = False
    system: str = "local"                  # system profile: name in configs/systems or a YAML path
    local_dir: str | None = None           # node-local storage root (default: default_local_dir())
    inject: tuple = ()                     # --inject KIND=VALUE (dlbench.storage.inject)
    cache: CacheMode = CacheMode.KEEP      # --cache keep|drop|direct (dlbench.storage.pagecache; a string: parsed)
    read_via: str = "auto"                 # --read-via auto|library|pread (formats.open_reader)
    ceiling_steps: int = 32                # --ceiling-steps: the replay from memory after the epochs (run.ceiling)
    eval: dict | None = None               # DLIO's evaluation phase (--dlio-config: dlio.Translation.run["eval"])
    generate_s3: bool = False              # an s3:// data dir from a DLIO config: generated on first use

    def __post_init__(self) -> None:
        self.cache = CacheMode.parse(self.cache)   # the CLI and a study give the option's string: parsed once here

    def validate(self) -> RunConfig:
        """The settings' checks before any MPI work, in one place (``dlbench run`` calls it once): the
        accelerator, the counts, the seconds, ``--inject`` and the system profile; each a one-line
        ConfigError naming the flag. The strategy's own options are checked where they are parsed
        (``strategies.parse_options``), the dataset and the compute options when the run starts."""
        from ..config import MAX_BATCH, MAX_EPOCHS, MAX_RANKS_PER_NODE, check_counts
        from ..storage.inject import parse as parse_injection
        from ..system import load as load_profile

        if self.accelerator is not None and self.accelerator not in ACCELERATORS:
            raise unknown_choice("accelerator", self.accelerator, ACCELERATORS)
        check_counts(("--epochs", self.epochs, 1, MAX_EPOCHS), ("--batch-size", self.batch_size, 1, MAX_BATCH),
                     ("--checkpoint-every", self.checkpoint_every, 0, 2**62),
                     ("--ranks-per-node", self.ranks_per_node, 1, MAX_RANKS_PER_NODE))
        for name, val in (("--compute-time", self.compute_time_s), ("--compute-stdev", self.compute_stdev_s)):
            if val is not None:
                check_seconds(name, val)  # inf, nan, 1e308, < 0: one line
        parse_injection(self.inject)  # a bad --inject: one line before any MPI work
        load_profile(self.system)     # a bad profile: one line before any MPI work
        return self


PLAN_BYTES_PER_SAMPLE = 64   # a rank's plan and per-sample arrays: ids, tiers, sizes, the cached epochs (estimate)


def plan_size_error(samples: int, ranks_on_node: int, name: str, available: int) -> str | None:
    """Every rank holds the whole plan (every rank's accesses) and per-sample arrays: about
    ``PLAN_BYTES_PER_SAMPLE`` per sample per rank of a node. Over 80 % of ``available`` (MemAvailable), one
    line naming the sample count (a DLIO config's 4.2e9-sample dlrm file was a numpy MemoryError); else None."""
    est = PLAN_BYTES_PER_SAMPLE * int(samples) * max(1, int(ranks_on_node))
    if not available or est <= 0.8 * available:
        return None
    return (f"workload {name}: {int(samples):,} samples: planning them needs about {format_bytes(est, 'GiB')} on this "
            f"node ({PLAN_BYTES_PER_SAMPLE} B per sample per rank, {ranks_on_node} rank(s) here); "
            f"{format_bytes(available, 'GiB')} available; use fewer samples (--scale, or a DLIO config's "
            f"num_files_train x num_samples_per_file)")


def default_local_dir() -> Path:
    """``$TMPDIR/dlbench-local`` (each run uses its own ``run-<tag>/node<k>`` under it)."""
    import tempfile

    return Path(tempfile.gettempdir()) / "dlbench-local"


def default_data_dir(workload: str, scale: str, seed: int, tag: str = "") -> Path:
    """``$DLBENCH_DATA_DIR/<workload>[-<tag>]-<scale>-seed<seed>``; ``$DLBENCH_DATA_DIR`` defaults to
    ``~/.cache/dlbench/data``. ``tag`` (``data_dir_tag``) tells a user's YAML apart from a built-in of the
    same name."""
    from ..host import data_root

    return data_root() / f"{Path(workload).name}{'-' + tag if tag else ''}-{scale}-seed{seed}"


def data_dir_tag(spec_path: str, workload) -> str:
    """'' for a built-in workload file; for a user's YAML ``user-<hash>``, the hash (12 hex digits of
    SHA-256) taken over the resolved data-defining spec (``manifest.spec_of``): a user YAML whose ``name:``
    equals a built-in's never lands on the built-in's default dataset, and editing its shapes gives a new
    dataset while editing its step times does not."""
    import hashlib
    import json

    from ..config import resource_dir
    from ..data.manifest import spec_of

    try:
        builtin = Path(spec_path).resolve() == (resource_dir("workloads") / f"{workload.name}.yaml").resolve()
    except OSError:
        builtin = False
    if builtin:
        return ""
    h = hashlib.sha256(json.dumps(spec_of(workload), sort_keys=True, default=str).encode()).hexdigest()
    return f"user-{h[:12]}"


def check_compute_options(cfg: RunConfig, workload_name: str | None = None) -> None:
    """Compute options that would be ignored or contradict each other are errors (before any data is
    generated): --compute-time/--compute-profile/--compute-stdev with --compute torch (the real step is
    measured, not emulated), --compute-time with --compute-profile, and a profile calibrated for another
    workload."""
    if cfg.compute == "torch":
        for flag, val in (("--compute-time", cfg.compute_time_s), ("--compute-profile", cfg.compute_profile),
                          ("--compute-stdev", cfg.compute_stdev_s or None)):
            if val is not None:
                raise ConfigError(f"{flag}={val}: conflicts with --compute torch (the real model's step is "
                                  f"measured, not emulated); drop {flag} or use --compute sleep")
    if cfg.compute_time_s is not None and cfg.compute_profile:
        raise ConfigError(f"--compute-time={cfg.compute_time_s} and --compute-profile={cfg.compute_profile} "
                          f"conflict: both set the sleep step time; pass one of them")
    if cfg.compute_profile and workload_name is not None:
        from ..compute.profile import load_compute_profile

        _t, _b, meta = load_compute_profile(cfg.compute_profile)
        prof_wl = meta.get("workload")
        if prof_wl is not None and str(prof_wl) != workload_name:
            raise ConfigError(f"--compute-profile={cfg.compute_profile}: calibrated for workload '{prof_wl}', "
                              f"not '{workload_name}'; calibrate this one with `dlbench calibrate --workload "
                              f"{workload_name}`")


def sleep_step_time(cfg: RunConfig, workload, local_batch: int) -> tuple[float, str, dict]:
    """Sleep compute's step time at ``local_batch``: ``(seconds, source line, record)``. ``--compute-time``
    first, then ``--compute-profile``, then the workload's figure for ``--accelerator`` (default: a100 where
    published, else a measured entry; see ``Workload.choose_step_time``)."""
    if cfg.compute_time_s is not None:
        t = check_seconds("--compute-time", cfg.compute_time_s)
        return t, f"--compute-time {t:g}", {"kind": "flag"}
    if cfg.compute_profile:
        from ..compute.profile import load_compute_profile

        t, b, meta = load_compute_profile(cfg.compute_profile)
        prec = getattr(cfg, "precision", "fp32")
        if meta.get("precision", "fp32") != prec:
            raise ConfigError(f"--precision={prec}: --compute-profile {cfg.compute_profile} was calibrated in "
                              f"{meta.get('precision', 'fp32')}; pass --precision {meta.get('precision', 'fp32')} "
                              f"or a profile from `dlbench calibrate --precision {prec}`")
        return t * local_batch / b, (f"profile {cfg.compute_profile} ({t:g} s at batch {b}, scaled linearly to "
                                     f"batch {local_batch})"), {"kind": "profile", "device": meta.get("device")}
    ch = workload.choose_step_time(cfg.accelerator, cfg.model, getattr(cfg, "precision", "fp32"))
    return ch.scaled(local_batch), ch.describe(local_batch), {
        "kind": ch.kind, "accelerator": ch.accelerator, "model": ch.model, "reference_step_time_s": ch.step_time_s,
        "reference_batch_size": ch.batch_size, "default": cfg.accelerator is None}


def check_compute(cfg: RunConfig, spec: WorkloadSpec, spec_path: str) -> None:
    """Every compute option checked before anything is generated or written: the step-time source of sleep
    compute (accelerator, profile, --compute-time), or torch's device, model and precision. ``spec``: the
    run's workload spec (``workload.load_spec``), loaded once by the caller."""
    from .. import workload as wl_mod

    if cfg.compute not in ("sleep", "torch"):
        raise ConfigError(f"--compute={cfg.compute}: choose one of sleep, torch")
    check_seconds("--compute-stdev", cfg.compute_stdev_s)
    if cfg.compute_time_s is not None:
        check_seconds("--compute-time", cfg.compute_time_s)
    workload = wl_mod.resolve(spec, spec_path=spec_path)
    if cfg.compute == "sleep":
        from ..compute.torch_step import PRECISIONS

        if cfg.overlap != "auto":
            raise ConfigError(f"--overlap={cfg.overlap}: applies to --compute torch (host-to-device copies); "
                              f"sleep compute has none")

        if cfg.precision not in PRECISIONS:
            raise unknown_choice("precision", cfg.precision, PRECISIONS)
        sleep_step_time(cfg, workload, workload.local_batch(cfg.batch_size))
        return
    from ..compute.models import model_name_for
    from ..compute.torch_step import check_precision, resolve_overlap

    model_name_for(workload, cfg.model)
    resolve_overlap(cfg.overlap, check_precision(cfg.precision, cfg.device))


class VirtualManifest:
    """What --dry-run plans against when the dataset does not exist yet (mean sample sizes)."""

    def __init__(self, workload, seed: int):
        from ..config import to_dict

        self.workload, self.seed, self.samples = workload.name, seed, workload.samples
        self.spec = {**to_dict(workload), "note": "dataset not generated yet: sizes are the workload's mean"}
        self._nbytes = workload.sample_nbytes

    def sample_nbytes(self) -> np.ndarray:
        return np.full(self.samples, self._nbytes, dtype=np.int64)


def resolve_dataset(cfg: RunConfig, comm: Comm, spec: WorkloadSpec, path: str, *,
                    generate_if_missing: bool = True,
                    locks: list | None = None) -> tuple[Workload, Manifest | VirtualManifest, Path]:
    """The workload (``spec`` resolved at the dataset's scale) and its dataset's manifest; with no
    --data-dir, generate the tiny preset in the default location on first use. ``spec``, ``path``: the
    run's workload spec and its file (``workload.load_spec``), loaded once by the caller. Every rank takes
    the dataset's read lock (``data.generate.ReadLock``: `generate` refuses to replace it while the run
    reads it) before checking it, appended to ``locks`` for the caller to release."""
    from .. import workload as wl_mod
    from ..data.manifest import Manifest

    if cfg.data_dir is not None and str(cfg.data_dir).startswith("s3://"):
        return _resolve_s3(cfg, comm, spec, path)
    explicit = cfg.data_dir is not None
    scale = cfg.scale or ("tiny" if not explicit and cfg.samples is None else None)
    if cfg.data_dir is not None:
        data_dir = Path(cfg.data_dir)
    else:
        tag = data_dir_tag(path, wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path))
        data_dir = default_data_dir(spec.name, scale or "custom", cfg.seed, tag)
    if not Manifest.exists(data_dir) and cfg.dry_run:
        workload = wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path)
        return workload, VirtualManifest(workload, cfg.seed), data_dir
    # rank 0's view decides whether to generate (a rank that sees another file system fails the checks below)
    if not explicit and comm.bcast(not Manifest.exists(data_dir)):
        if not generate_if_missing:
            raise DataError(f"no dataset at {data_dir}; run `dlbench generate --workload {cfg.workload} "
                            f"--data-dir {data_dir}`")
        from ..data.generate import generate

        workload = wl_mod.resolve(spec, scale=scale, samples=cfg.samples, spec_path=path)
        err: BaseException | None = None
        if comm.rank == 0:
            try:
                data_dir.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                err = DataError(f"{data_dir.parent}: cannot create the default dataset folder there: "
                                f"{e.strerror or e}; set DLBENCH_DATA_DIR or pass --data-dir")
        comm.settle(err)
        if comm.rank == 0:  # first use: say what is written where (a bar on a terminal), and what it took
            _say(f"dlbench: first use of {workload.name} ({workload.scale}, seed {cfg.seed}): generating its dataset "
                 f"of {workload.samples:,} samples, {format_bytes(workload.dataset_nbytes, 'MiB', group=True)}, in {data_dir} "
                 f"(--data-dir DIR uses another)")
        res = generate(workload, data_dir, seed=cfg.seed, comm=comm, progress=None if comm.rank == 0 else False)
        if comm.rank == 0:
            _say(f"dlbench: {res.line()}")
    try:  # every rank's own view of the dataset; any rank's failure stops every rank (no collective here)
        if not cfg.dry_run and data_dir.is_dir():
            from ..data.generate import ReadLock

            lock = ReadLock(data_dir)
            if locks is not None:
                locks.append(lock)
        workload, manifest = _check_dataset(cfg, spec, path, data_dir)
        err = None
    except Exception as e:  # noqa: BLE001 - re-raised on every rank by settle
        err = e
    comm.settle(err)
    from ..data.verify import check_regular_files

    check_regular_files(data_dir, manifest, comm)  # a FIFO hung the run in open(); a symlink loop: traceback
    return workload, manifest, data_dir


def _say(line: str) -> None:
    import sys

    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except OSError:  # a closed or full stderr does not stop the run
        pass


def _check_dataset(cfg: RunConfig, spec: WorkloadSpec, path: str, data_dir: Path) -> tuple[Workload, Manifest]:
    """The dataset at ``data_dir`` is there, of this workload and seed, and described by ``spec``."""
    from ..data.manifest import Manifest

    if not data_dir.exists():
        raise DataError(f"--data-dir {data_dir}: no such directory; create a dataset with "
                        f"`dlbench generate --workload {cfg.workload} --data-dir {data_dir}`")
    manifest = Manifest.load(data_dir)
    if manifest.workload != spec.name:
        raise DataError(f"--data-dir {data_dir} holds a dataset of workload '{manifest.workload}', not "
                        f"'{spec.name}'; generate one with `dlbench generate --workload {cfg.workload} "
                        f"--data-dir NEW_DIR`")
    if cfg.seed != manifest.seed:
        raise DataError(f"--seed={cfg.seed}: the dataset at {data_dir} was generated with seed {manifest.seed}; "
                        f"pass --seed {manifest.seed} or generate another dataset")
    return _check_spec_matches(cfg, spec, path, manifest, data_dir), manifest


def _resolve_s3(cfg: RunConfig, comm: Comm, spec: WorkloadSpec, path: str) -> tuple[Workload, Manifest | VirtualManifest, Path]:
    """``--data-dir s3://bucket/prefix``: the bucket's manifest fetched into the dataset's control folder
    (``data.bucket.control_dir``), which ``Loop`` gets as its data dir (the reads go to the bucket)."""
    from ..data.bucket import control_dir, fetch_manifest
    from ..data.manifest import Manifest
    from ..storage.s3 import NoDataset, check_cache

    url = str(cfg.data_dir)
    check_cache(cfg.cache, url)
    res: tuple = ("ok", None)
    if comm.rank == 0:
        try:
            res = ("ok", str(fetch_manifest(url)))
        except NoDataset as e:
            res = ("missing", str(e))
        except DataError as e:
            res = ("error", str(e))
    res = comm.bcast(res)
    if res[0] == "missing" and cfg.dry_run:   # as on POSIX: a dry run (a study's checks) before the generation
        from .. import workload as wl_mod

        workload = wl_mod.resolve(spec, scale=cfg.scale, samples=cfg.samples, spec_path=path)
        return workload, VirtualManifest(workload, cfg.seed), control_dir(url)
    if res[0] != "ok" and cfg.generate_s3 and not cfg.dry_run:   # DLIO's generate-on-first-use
        from .. import workload as wl_mod
        from ..data.bucket import generate_to

        generate_to(wl_mod.resolve(spec, scale=cfg.scale, samples=cfg.samples, spec_path=path), url, seed=cfg.seed,
                    comm=comm, progress=False)
        res = comm.bcast(("ok", str(fetch_manifest(url))) if comm.rank == 0 else None)
    if res[0] != "ok":
        raise DataError(res[1])
    ctl = Path(res[1])
    manifest = Manifest.load(ctl)
    if manifest.workload != spec.name:
        raise DataError(f"--data-dir {url} holds a dataset of workload '{manifest.workload}', not '{spec.name}'")
    if cfg.seed != manifest.seed:
        raise DataError(f"--seed={cfg.seed}: the dataset at {url} was generated with seed {manifest.seed}; "
                        f"pass --seed {manifest.seed}")
    return _check_spec_matches(cfg, spec, path, manifest, ctl), manifest, ctl


def _check_spec_matches(cfg: RunConfig, spec: WorkloadSpec, path: str, manifest: Manifest,
                        data_dir: Path) -> Workload:
    """The workload the user named must describe the dataset found: same data-defining spec (arrays,
    shapes, dtypes, layout, counts) at the manifest's scale. Before, a user YAML named like a built-in ran
    on the built-in's data with the built-in's shapes, silently. Returns that workload: the spec resolved at
    the manifest's scale and sample count (what ``data.verify.workload_of`` gives for a matching manifest,
    without loading the YAML again)."""
    from .. import workload as wl_mod
    from ..data.manifest import spec_of

    scale = manifest.scale.split("+")[0] if manifest.scale else None
    try:
        w = wl_mod.resolve(spec, scale=scale if scale in wl_mod.SCALES else None, samples=manifest.samples,
                           spec_path=path)
        want = spec_of(w)
    except ConfigError as e:
        raise DataError(f"--workload {cfg.workload} ({path}) does not describe the dataset at {data_dir}: "
                        f"{e}") from None
    have = manifest.spec or {}
    diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if diff:
        raise DataError(f"--workload {cfg.workload} ({path}) does not describe the dataset at {data_dir}: "
                        f"{', '.join(diff)} differ from what it was generated with; generate this workload's "
                        f"dataset with `dlbench generate --workload {cfg.workload} --data-dir NEW_DIR` (or leave "
                        f"--data-dir out: a user YAML gets its own default dataset)")
    return w
