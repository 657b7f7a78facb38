"""A dataset at an ``s3://`` URL (``--data-dir s3://bucket/prefix``): the local control folder that the rest of
dlbench treats as the data dir, the manifest's master copy in the bucket (the object
``<prefix>/dlbench-manifest.json``: fetched by every ``run``/``verify``, published after a generation, complete or
not, so a re-run anywhere resumes), and ``dlbench generate`` into the bucket through the S3 backend
(``dlbench.storage.s3.S3Backend``: the storage layer below, which knows nothing of datasets)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigError
from ..host import data_root
from ..storage.s3 import NoDataset, S3Backend, endpoint, parse_url
from .generate import generate
from .manifest import MANIFEST_NAME


def control_dir(url: str) -> Path:
    """The local folder that holds an S3 dataset's manifest and the generator's records:
    ``$DLBENCH_DATA_DIR/s3/<endpoint>/<bucket>/<prefix>`` (the manifest's master copy is the object
    ``<prefix>/dlbench-manifest.json``, fetched from the bucket by every ``run``/``verify``)."""
    bucket, prefix = parse_url(url)
    ep = re.sub(r"[^A-Za-z0-9.-]+", "_", (endpoint() or "aws").split("://")[-1]).strip("_")
    return data_root() / "s3" / ep / bucket / (prefix or "_root")


def _manifest_backend(url: str) -> S3Backend:
    return S3Backend(url)


def fetch_manifest(url: str, *, required: bool = True) -> Path:
    """The bucket's manifest copied into the control folder (returned). ``required``: a bucket without one is
    a DataError naming the generate command; else the control folder's stale copy is removed."""
    ctl = control_dir(url)
    ctl.mkdir(parents=True, exist_ok=True)
    try:
        img = _manifest_backend(url).file_image(MANIFEST_NAME)
    except FileNotFoundError:
        if required:
            raise NoDataset(f"--data-dir {url}: no dataset here ({MANIFEST_NAME} missing); run `dlbench generate "
                            f"--workload W --data-dir {url}` first") from None
        (ctl / MANIFEST_NAME).unlink(missing_ok=True)
        return ctl
    tmp = ctl / (MANIFEST_NAME + ".part")
    tmp.write_bytes(img)
    os.replace(tmp, ctl / MANIFEST_NAME)
    return ctl


def publish_manifest(url: str, ctl: Path) -> None:
    """The control folder's manifest PUT into the bucket (after a generation, complete or not)."""
    src = ctl / MANIFEST_NAME
    if src.is_file():
        _manifest_backend(url)._put_file(_manifest_backend(url).key(MANIFEST_NAME), str(src))


def generate_to(workload, url: str, **kw):
    """``dlbench generate --data-dir s3://...``: the objects written through the backend, the manifest
    published to the bucket (also after a failure, so a re-run anywhere resumes)."""
    comm = kw.get("comm")
    size = comm.size if comm is not None else 1
    if workload.layout == "hdf5_shared" and size > 1:
        raise ConfigError(f"--data-dir {url}: layout hdf5_shared is one object that several ranks cannot write "
                          "in parts; generate it with one process")
    ctl: Path | None = None
    if comm is None or comm.rank == 0:
        ctl = fetch_manifest(url, required=False)
    ctl = comm.bcast(ctl) if comm is not None else ctl
    assert ctl is not None
    st = S3Backend(url, spool_dir=None)
    try:
        return generate(workload, ctl, storage=st, **kw)
    finally:
        if comm is None or comm.rank == 0:
            publish_manifest(url, ctl)
