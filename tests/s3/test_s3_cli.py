"""`dlbench generate/verify/run --data-dir s3://...` against a real S3 server: the summary's S3 block (one GET
per sample, no HEAD), `report` renders it, --cache drop is refused in one line, a missing dataset is one line,
and the server stopped mid-epoch ends the run with one line naming the object."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.s3
ROOT = Path(__file__).resolve().parents[2]


def dlbench(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300, **kw)


def _run_json(out: str) -> dict:
    line = [ln for ln in out.splitlines() if ln.startswith("results: ")][-1]
    return json.loads((Path(line.split("results: ", 1)[1]) / "run.json").read_text())


def test_generate_verify_run_report_over_s3(tmp_path, s3_url, monkeypatch, cli):
    """generate, verify, report in this process (fewer interpreter starts); the runs in their own (a run's S3
    counters are its process's)."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    g = cli(["generate", "-w", "imagenet", "--scale", "tiny", "--samples", 16, "--data-dir", s3_url,
             "--no-progress"])
    assert g.exit_code == 0, g.output
    v = cli(["verify", "--data-dir", s3_url, "--checksum"])
    assert v.exit_code == 0 and "checksums match" in v.output, v.output
    for strategy in ("naive", "prefetch"):
        r = dlbench("run", "-w", "imagenet", "--data-dir", s3_url, "--strategy", strategy, "--epochs", 2,
                    "--verify", "--compute-time", "0.001", "--out", tmp_path / "res")
        assert r.returncode == 0, r.stderr
        s = _run_json(r.stdout)["summary"]
        s3 = s["s3"]   # prefetch: its DataLoader workers' GETs, shipped with their batches
        assert s3["requests"]["GET"] == 32 and s3["requests"]["HEAD"] == 0 and s3["requests_per_sample"] == 1.0
        assert s3["bytes"]["GET"] == s["read_bytes"] and s3["get_latency_ms"]["p99"] >= s3["get_latency_ms"]["p50"]
        assert "S3 requests" in r.stdout and "GETs per delivered sample" in r.stdout
        assert s["verified_samples"] == 32
    rep = cli(["report", Path([ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1][9:])])
    assert rep.exit_code == 0 and "GETs per delivered sample" in rep.output
    c = dlbench("run", "-w", "imagenet", "--data-dir", s3_url, "--cache", "drop", "--out", tmp_path / "res")
    assert c.returncode != 0 and c.stderr.strip().splitlines()[-1].startswith(
        "dlbench: error: --cache drop: the shared tier is S3") and "Traceback" not in c.stderr
    from dlbench.storage.s3 import S3Backend

    S3Backend(s3_url).remove("n00000000/n00000000_00000000.JPEG")
    v = cli(["verify", "--data-dir", s3_url])
    assert v.exit_code != 0 and f"{s3_url}/n00000000/n00000000_00000000.JPEG: missing" in v.stdout
    m = dlbench("run", "-w", "imagenet", "--data-dir", s3_url + "-none", "--out", tmp_path / "res")
    assert m.returncode != 0 and "no dataset here (dlbench-manifest.json missing)" in m.stderr
    assert "Traceback" not in m.stderr


def test_server_stopped_mid_epoch(tmp_path, weed_path):
    """A server of its own, killed while the run reads: retried with backoff, then one line naming the object;
    exit != 0; the results folder records the error."""
    weed = weed_path
    env = {**os.environ, "DLBENCH_S3_DIR": str(tmp_path / "srv"), "DLBENCH_WEED": weed, "PYTHON": sys.executable,
           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "DLBENCH_DATA_DIR": str(tmp_path / "data")}
    st = subprocess.run(["bash", ROOT / "scripts/s3-local.sh", "start"], env=env, capture_output=True, text=True,
                        timeout=120)
    assert st.returncode == 0, st.stderr
    try:
        for line in st.stdout.splitlines():
            k, _, v = line.removeprefix("export ").partition("=")
            env[k] = v
        url = "s3://dlbench/fault"
        g = dlbench("generate", "-w", "imagenet", "--scale", "tiny", "--samples", 16, "--data-dir", url,
                    "--no-progress", env=env)
        assert g.returncode == 0, g.stderr
        env["DLBENCH_S3_ATTEMPTS"] = "3"
        p = subprocess.Popen([sys.executable, "-m", "dlbench", "run", "-w", "imagenet", "--data-dir", url,
                              "--strategy", "naive", "--epochs", "1000", "--compute-time", "0.05", "--out",
                              tmp_path / "res"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()   # the run has started reading once its results folder exists (not a timed check)
        while not list((tmp_path / "res").rglob("run.json")) and p.poll() is None and time.monotonic() - t0 < 120:
            time.sleep(0.2)
        time.sleep(1.0)
        os.kill(int(env["DLBENCH_S3_PID"]), signal.SIGKILL)
        out, err = p.communicate(timeout=120)
        assert p.returncode not in (0, None)
        last = err.strip().splitlines()[-1]
        assert "Traceback" not in err and "s3://dlbench/fault/" in last and "GET failed after 3 attempt(s)" in last
    finally:
        subprocess.run(["bash", ROOT / "scripts/s3-local.sh", "stop"], env=env, capture_output=True, timeout=60)
