"""DLIO configs with ``storage: {storage_type: s3, storage_root: BUCKET, storage_options: {...}}``: translated to
``--data-dir s3://BUCKET/<dataset.data_folder>`` and the AWS_* variables, generated on first use, and run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlbench.dlio import load
from dlbench.errors import ConfigError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
BASE = ["~workload.model.model_size", "++workload.workflow.checkpoint=False", "++workload.dataset.num_files_train=8",
        "++workload.dataset.record_length_bytes=4096", "++workload.train.epochs=2",
        "++workload.train.computation_time=0.001", "++workload.reader.batch_size=2",
        "++workload.reader.read_threads=1", "++workload.dataset.record_length_bytes_stdev=512"]


def test_storage_section_translates():
    t = load(FIX / "unet3d_a100.yaml", [*BASE, "++workload.storage.storage_type=s3",
                                        "++workload.storage.storage_root=bkt", "++workload.dataset.data_folder=./d/u",
                                        "++workload.storage.storage_options={endpoint_url: 'http://h:1', "
                                        "region: r1, access_key_id: a, secret_access_key: s}"])
    assert t.run["data_dir"] == "s3://bkt/d/u"
    assert t.run["storage_env"] == {"AWS_ENDPOINT_URL": "http://h:1", "AWS_REGION": "r1", "AWS_ACCESS_KEY_ID": "a",
                                    "AWS_SECRET_ACCESS_KEY": "s"}
    assert load(FIX / "unet3d_a100.yaml", BASE).run["data_dir"] is None          # local_fs: --data-dir
    with pytest.raises(ConfigError, match=r"storage.storage_type='gcs': dlbench reads local_fs or s3"):
        load(FIX / "unet3d_a100.yaml", [*BASE, "++workload.storage.storage_type=gcs"])
    with pytest.raises(ConfigError, match=r"storage.storage_root=None: with storage_type s3 it names the bucket"):
        load(FIX / "unet3d_a100.yaml", [*BASE, "++workload.storage.storage_type=s3"])
    with pytest.raises(ConfigError, match=r"storage.storage_options.retries=3 \(dlbench's S3 backend reads"):
        load(FIX / "unet3d_a100.yaml", [*BASE, "++workload.storage.storage_type=s3", "++workload.storage.storage_root=b",
                                        "++workload.storage.storage_options={retries: 3}"])


@pytest.mark.s3
def test_dlio_config_over_s3_runs(s3_url, tmp_path, monkeypatch):
    """The endpoint from the config's storage_options (not the environment); generated on first use."""
    import os

    ep = os.environ["AWS_ENDPOINT_URL"]
    env = {**os.environ, "DLBENCH_DATA_DIR": str(tmp_path / "data")}
    env.pop("AWS_ENDPOINT_URL")
    bucket, prefix = s3_url[5:].split("/", 1)
    r = subprocess.run([sys.executable, "-m", "dlbench", "run", "--dlio-config", FIX / "unet3d_a100.yaml", *BASE,
                        "++workload.storage.storage_type=s3", f"++workload.storage.storage_root={bucket}",
                        "--ceiling-steps", "0", f"++workload.dataset.data_folder={prefix}",
                        f"++workload.storage.storage_options={{endpoint_url: '{ep}'}}", "-o", tmp_path / "res",
                        "--no-progress"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1]
    doc = json.loads((Path(line.split("results: ", 1)[1]) / "run.json").read_text())
    assert doc["config"]["data_dir"] == s3_url     # the bucket, not the local control folder
    s3 = doc["summary"]["s3"]
    assert s3["requests"]["GET"] == doc["summary"]["samples"] and s3["requests_per_sample"] == 1.0
