"""`dlbench study --data-dir s3://...`: the dataset generated into the bucket (not a local folder named "s3:"),
the entries' plan-time checks pass before it exists, and each entry's S3 counters are its own (the entries run
in one process: the second used to count the first's GETs too); a sweep's datasets under an s3:// root;
sustain's measured dataset in a bucket."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.s3

STUDY = """\
name: s3study
workload: imagenet
scale: tiny
samples: 8
epochs: 2
batch_size: 4
compute_time_s: 0.001
seed: 0
runs:
  - {strategy: naive}
  - {strategy: naive}
"""


def test_study_over_s3(tmp_path, s3_url):
    from dlbench.storage.s3 import S3Backend

    st = tmp_path / "study.yaml"
    st.write_text(STUDY)
    env = {**__import__("os").environ, "DLBENCH_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "dlbench", "study", st, "--data-dir", s3_url, "--out",
                        tmp_path / "res"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "s3:").exists()
    assert S3Backend(s3_url).exists("dlbench-manifest.json")
    runs = sorted((tmp_path / "res").rglob("run.json"))
    assert len(runs) == 2
    for p in runs:
        s3 = json.loads(p.read_text())["summary"]["s3"]
        assert s3["requests"]["GET"] == 2 * 8 and s3["requests_per_sample"] == 1.0
        assert len(s3["per_rank_requests"]) == 1
    # the study's table (compare's): the S3 column before the last ("shared tier"), GETs/sample and P50/P99 ms
    import re

    lines = r.stdout.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("workload  run"))
    head = re.split(r"\s{2,}", lines[i].strip())
    assert head[-2:] == ["S3 GETs/sample P50/P99 ms", "shared tier"]
    for row in lines[i + 2:i + 4]:
        cell = re.split(r"\s{2,}", row.strip())[-2]
        assert re.fullmatch(r"1 \d+\.\d\d/\d+\.\d\d", cell), row


def test_sweep_over_s3(tmp_path, s3_url):
    """A sweep's datasets under an s3:// root: one prefix per point (was: local folders under "s3:")."""
    from dlbench.storage.s3 import S3Backend

    st = tmp_path / "sweep.yaml"
    st.write_text(STUDY.replace("runs:\n  - {strategy: naive}\n  - {strategy: naive}\n",
                                "runs:\n  - {strategy: naive}\nsweep: {ranks: [1], scaling: strong}\n"))
    env = {**__import__("os").environ, "DLBENCH_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "dlbench", "study", st, "--data-dir", s3_url, "--out",
                        tmp_path / "res"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "s3:").exists()
    name = "imagenet-tiny-F8-seed0"
    assert S3Backend(f"{s3_url}/{name}").exists("dlbench-manifest.json")
    (run,) = (tmp_path / "res").rglob("run.json")
    doc = json.loads(run.read_text())
    assert doc["config"]["data_dir"] == f"{s3_url}/{name}" and doc["summary"]["s3"]["requests"]["GET"] == 16


def test_sustain_measured_dataset_over_s3(tmp_path, s3_url, monkeypatch):
    """sustain --data-dir s3://...: the sample count from the bucket's manifest (was: Manifest.load of the URL as
    a local path, 'no dataset')."""
    from dlbench.data.bucket import generate_to
    from dlbench.errors import ConfigError
    from dlbench.sustain import measured_dataset
    from dlbench.workload import load

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    wl = load("imagenet", scale="tiny", samples=8)
    generate_to(wl, s3_url, seed=0)
    assert measured_dataset(wl, "imagenet", 1, 0, s3_url)[:2] == (s3_url, 8)
    with pytest.raises(ConfigError, match=r"--data-dir s3://.*: 8 samples, fewer than --measure-ranks=4"):
        measured_dataset(wl, "imagenet", 4, 0, s3_url)
