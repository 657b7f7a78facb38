"""The object-store tier in the model and the S3 probe of calibrate-storage: a profile with ``pfs.kind:
object_store`` makes `simulate` report the plan's GETs (prologue included) and their cost at any node count,
the same GET count a measured run over S3 makes; calibrate-storage measures an S3 endpoint and leaves nothing
behind."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dlbench.errors import ConfigError
from dlbench.system import from_dict

ROOT = Path(__file__).resolve().parents[2]


def _profile(tmp_path, **pfs) -> Path:
    d = yaml.safe_load((ROOT / "configs/systems/local.yaml").read_text())
    d["name"] = "s3-test"
    d["pfs"] = {"latency_s": 0.002, "client_link_mb_per_s": 100.0,
                "aggregate": [{"clients": 1, "mb_per_s": 100.0}, {"clients": 64, "mb_per_s": 3000.0}],
                "kind": "object_store", **pfs}
    p = tmp_path / "s3.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def dlbench(*args, **kw):
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          timeout=300, **kw)


def _summaries(root: Path) -> dict:
    return {json.loads(f.read_text())["summary"]["strategy"]: json.loads(f.read_text())["summary"]
            for f in root.rglob("run.json")}


def test_profile_kind_and_price_checked(tmp_path):
    d = yaml.safe_load(_profile(tmp_path).read_text())
    assert from_dict(d).pfs.kind == "object_store"
    with pytest.raises(ConfigError, match=r"pfs.kind='nfs'.*: choose pfs or object_store"):
        from_dict({**d, "pfs": {**d["pfs"], "kind": "nfs"}})
    with pytest.raises(ConfigError, match=r"pfs.usd_per_million_requests.*needs pfs.kind: object_store"):
        from_dict({**d, "pfs": {**d["pfs"], "kind": "pfs", "usd_per_million_requests": 0.4}})


def test_simulate_costs_requests_at_any_node_count(tmp_path):
    prof = _profile(tmp_path, usd_per_million_requests=0.4)
    r = dlbench("simulate", "--system", prof, "--workload", "imagenet", "--samples", 20000, "--nodes", 64,
                "--strategies", "naive,staging", "--epochs", 2, "--out", tmp_path / "sim")
    assert r.returncode == 0, r.stderr
    s = _summaries(tmp_path / "sim")
    naive, staging = s["naive"]["s3"], s["staging"]["s3"]
    assert naive["requests"]["GET"] == s["naive"]["shared_read_requests"] == s["naive"]["samples"]
    assert naive["cost_usd"] == pytest.approx(naive["requests"]["GET"] / 1e6 * 0.4, abs=1e-6)
    # staging reads each sample once, in its prologue (not in the epochs' shared_read_requests)
    assert s["staging"]["shared_read_requests"] == 0 and staging["requests"]["GET"] == 20000
    assert naive["get_latency_ms"] is None
    plain = tmp_path / "pfs.yaml"
    d = yaml.safe_load(prof.read_text())
    d["pfs"]["kind"] = "pfs"
    d["pfs"].pop("usd_per_million_requests")
    plain.write_text(yaml.safe_dump(d))
    r = dlbench("simulate", "--system", plain, "--workload", "imagenet", "--nodes", 2, "--strategies", "naive",
                "--out", tmp_path / "sim2")
    assert r.returncode == 0 and "s3" not in _summaries(tmp_path / "sim2")["naive"]


@pytest.mark.s3
def test_measured_gets_equal_simulated(s3_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    prof = _profile(tmp_path, usd_per_million_requests=0.4)
    assert dlbench("generate", "-w", "imagenet", "--scale", "tiny", "--samples", 16, "--data-dir", s3_url,
                   "--no-progress").returncode == 0
    for strategy in ("staging",):   # its GETs are in the prologue: the case the epochs' count misses
        r = dlbench("run", "--ceiling-steps", 0, "-w", "imagenet", "--data-dir", s3_url, "--strategy", strategy,
                    "--epochs", 2, "--batch-size", 4, "--compute-time", "0.001", "--out", tmp_path / "res")
        assert r.returncode == 0, r.stderr
        m = dlbench("simulate", "--system", prof, "--workload", "imagenet", "--scale", "tiny", "--samples", 16,
                    "--nodes", 1, "--strategies", strategy, "--epochs", 2, "--batch-size", 4, "--compute-time",
                    "0.001", "--out", tmp_path / f"sim-{strategy}")
        assert m.returncode == 0, m.stderr
        measured = _summaries(tmp_path / "res")[strategy]["s3"]
        modelled = _summaries(tmp_path / f"sim-{strategy}")[strategy]["s3"]
        assert measured["requests"]["GET"] == modelled["requests"]["GET"]


@pytest.mark.s3
def test_calibrate_storage_measures_s3(s3_url, tmp_path):
    out = tmp_path / "p.yaml"
    r = dlbench("calibrate-storage", "--data-dir", s3_url, "-o", out, "--budget-s", "1", "--repeat", "1",
                "--max-threads", "2", "--request-bytes", "65536", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # no POSIX write probe under the URL taken as a local path (it wrote "<cwd>/s3:/bucket/..." and recorded
    # the local disk's rates as the object store's write side)
    assert not (tmp_path / "s3:").exists() and "not measured as files" in r.stdout
    assert "S3 GET:   1 concurrent" in r.stdout and "S3 latency (4 KiB GET, median)" in r.stdout
    d = yaml.safe_load(out.read_text())
    p = from_dict(d).pfs
    assert p.kind == "object_store" and p.latency_s > 0 and [a.clients for a in p.aggregate] == [1, 2]
    assert d["calibration"]["s3"]["put_mb_per_s"] > 0 and len(d["calibration"]["s3"]["get_mb_per_s_by_size"]) == 3
    assert "shared_write" not in d["calibration"]
    from dlbench.storage.s3 import S3Backend

    assert S3Backend(s3_url).list() == []        # every probe object deleted
