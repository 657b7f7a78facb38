"""The formats built against the backend interface, on a real S3 server: webdataset (read: stream, each shard one
sequential GET; read: indexed, one ranged GET per sample) beside the same run on POSIX, the token datasets
(mmap_indexed_binary, indexed_binary), and a shard larger than the client's part size (a multipart PUT) written,
read back, and a generation that fails in the middle of that multipart PUT leaving no object, then resuming."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.s3

WDS = """\
name: wdss3
layout: webdataset
samples_per_file: {spf}
arrays:
  - {{name: x, shape: {shape}, dtype: float32, role: data}}
  - {{name: cls, shape: [1], dtype: int64, role: label}}
samples: {samples}
batch_size: {batch}
compute: {{}}
webdataset: {{read: {read}, shuffle_buffer: 8, initial: 2, shard_shuffle: 2}}
"""
TOK = """\
name: tok{tag}
layout: {layout}
samples_per_file: 64
arrays:
  - {{name: tokens, shape: [256], dtype: uint16, role: data}}
samples: 24
batch_size: 4
compute: {{}}
"""


def dlbench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "dlbench", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=300)


def _run(spec, data_dir, out, strategy="naive", epochs=2, *extra) -> dict:
    r = dlbench("run", "--ceiling-steps", 0, "-w", spec, "--data-dir", data_dir, "-s", strategy, "-e", epochs,
                "--verify", "--compute-time", "0.001", "--no-progress", "--out", out, *extra)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("results: ")][-1]
    return json.loads((Path(line.split("results: ", 1)[1]) / "run.json").read_text())["summary"]


def test_webdataset_over_s3_beside_posix(tmp_path, s3_url, monkeypatch, cli):
    """The same shards in the bucket and on disk (byte for byte); read: stream reads each shard with one GET per
    epoch, the same bytes the POSIX run reads, in the same order; read: indexed makes one ranged GET per sample."""
    from dlbench.storage.s3 import S3Backend

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    specs = {}
    for read in ("stream", "indexed"):
        specs[read] = tmp_path / f"{read}.yaml"
        specs[read].write_text(WDS.format(spf=8, shape="[4, 16]", samples=40, batch=4, read=read))
    posix = tmp_path / "wds"
    for d in (s3_url, posix):     # generate and verify in this process (a run's S3 counters: in its own)
        g = cli(["generate", "-w", specs["stream"], "--data-dir", d, "--no-progress"])
        assert g.exit_code == 0, g.output
    v = cli(["verify", "--data-dir", s3_url, "--checksum"])
    assert v.exit_code == 0 and "checksums match" in v.output, v.output
    shards = sorted(p.name for p in posix.glob("shard-*.tar"))
    st = S3Backend(s3_url)
    assert sorted(x for x in st.list() if x.endswith(".tar")) == shards == [f"shard-{f:06d}.tar" for f in range(5)]
    for name in shards:
        assert st.file_image(name) == (posix / name).read_bytes()
    shard_bytes = sum((posix / n).stat().st_size for n in shards)

    s3s = _run(specs["stream"], s3_url, tmp_path / "res")
    pos = _run(specs["stream"], posix, tmp_path / "res")
    assert s3s["webdataset_read"] == pos["webdataset_read"] == "stream"
    assert s3s["order"] == pos["order"] and s3s["order"].startswith("webdataset stream")
    assert s3s["order_quality"] == pos["order_quality"]
    assert s3s["read_bytes"] == pos["read_bytes"] and s3s["verified_samples"] == pos["verified_samples"] == 80
    req = s3s["s3"]["requests"]
    assert req["GET"] == 2 * 5 and req["HEAD"] == 0          # one sequential GET per shard per epoch, no HEAD
    assert s3s["s3"]["bytes"]["GET"] == 2 * shard_bytes == \
        pos["io_counters"]["by_class"]["shared"]["POSIX_BYTES_READ"]
    assert "s3" not in pos or not pos["s3"]
    # no client page cache over S3: no "warm"/"cold" verdict from /proc/self/io (it counts no GET), no
    # "I/O figures measure memory" warning
    assert s3s["cache"]["verdict"] == "unknown" and "the shared tier is S3" in s3s["cache"]["verdict_line"]
    assert s3s["page_cache"]["warning"] is None and "--cache drop" not in s3s["cache"]["mlperf"]["line"]

    idx = _run(specs["indexed"], s3_url, tmp_path / "res")
    assert idx["webdataset_read"] == "indexed" and idx["verified_samples"] == 80
    assert idx["s3"]["requests"]["GET"] == 80 and idx["s3"]["requests_per_sample"] == 1.0   # ranged GETs
    assert idx["s3"]["bytes"]["GET"] < s3s["s3"]["bytes"]["GET"]        # the members' span, not whole shards


@pytest.mark.parametrize("layout", ["mmap_indexed_binary", "indexed_binary"])
def test_token_formats_over_s3(tmp_path, s3_url, monkeypatch, layout, cli):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    spec = tmp_path / "tok.yaml"
    spec.write_text(TOK.format(tag=layout.split("_")[0], layout=layout))
    g = cli(["generate", "-w", spec, "--data-dir", s3_url, "--no-progress"])
    assert g.exit_code == 0, g.output
    v = cli(["verify", "--data-dir", s3_url, "--content"])
    assert v.exit_code == 0 and "content match" in v.output, v.output
    s = _run(spec, s3_url, tmp_path / "res", "naive", 1)
    assert s["verified_samples"] == 24 and s["s3"]["requests"]["HEAD"] == 0
    # one ranged GET of the .bin object per sample, plus the index object's read(s) at open
    assert 24 <= s["s3"]["requests"]["GET"] <= 24 + 3
    assert s["s3"]["bytes"]["GET"] >= 24 * 512


BIG = 2 * 4 * 1024 * 1024 + 8 * 1024      # two samples of 4 MiB + 8 KiB: one shard over the 8 MiB part size


def _big_spec(tmp_path) -> Path:
    p = tmp_path / "big.yaml"
    p.write_text(WDS.format(spf=2, shape="[1026, 1024]", samples=2, batch=1, read="stream"))
    return p


def _uploads(url: str) -> list[str]:
    """The keys of the bucket's open multipart uploads under the URL's prefix (ListMultipartUploads, signed
    by curl as scripts/s3-local.sh does)."""
    import os
    import re

    bucket, _, prefix = url[5:].partition("/")
    r = subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                        f"{os.environ['AWS_ACCESS_KEY_ID']}:{os.environ['AWS_SECRET_ACCESS_KEY']}",
                        f"{os.environ['AWS_ENDPOINT_URL'].rstrip('/')}/{bucket}?prefix={prefix}&uploads="],  # sorted: curl signs the query as given
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "ListMultipartUploadsResult" in r.stdout, r.stdout + r.stderr
    return re.findall(r"<Key>([^<]*)</Key>", r.stdout)


class _FailingWriter:
    """The real multipart upload, broken off after its first part: the connection drops (the client's error)."""

    def __init__(self, real, after: int):
        self.real, self.after, self.sent = real, after, 0

    def write(self, b):
        from s3torchconnectorclient._mountpoint_s3_client import S3Exception

        if self.sent >= self.after:
            raise S3Exception("Client error: connection reset by peer")
        self.sent += len(b)
        return self.real.write(b)

    def close(self):
        return self.real.close()


class _Client:
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def put_object(self, bucket, key, *a):
        w = self.real.put_object(bucket, key, *a)
        return _FailingWriter(w, 8 << 20) if key.endswith(".tar") else w


def test_multipart_failure_leaves_no_object_then_resumes_and_reads_back(tmp_path, s3_url, monkeypatch):
    """A shard larger than the client's part size. Its upload fails after its first 8 MiB part went to the
    server (every attempt): the generation stops with one line naming the object; the bucket holds no shard
    (an incomplete multipart upload is no object) and no spool is left on disk. The same generation again PUTs
    it in parts (its ETag says how many); verify --checksum passes; a run reads it back with one GET."""
    from dlbench.data.bucket import generate_to
    from dlbench.errors import DataError
    from dlbench.storage import s3 as s3mod
    from dlbench.workload import load as load_workload

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool))
    monkeypatch.setenv("DLBENCH_S3_ATTEMPTS", "2")
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    wl = load_workload(str(_big_spec(tmp_path)))
    real = s3mod.process_client()
    monkeypatch.setattr(s3mod, "process_client", lambda: _Client(real))
    with pytest.raises(DataError) as ei:
        generate_to(wl, s3_url, seed=0)
    msg = str(ei.value)
    assert "\n" not in msg and "shard-000000.tar" in msg and "PUT failed after 2 attempt(s)" in msg, msg
    st = s3mod.S3Backend(s3_url)
    assert st.list() == ["dlbench-manifest.json"]            # no shard, whole or half
    import time

    t0 = time.monotonic()     # the client aborts a dropped upload in the background: wait for it (not timed)
    while _uploads(s3_url) and time.monotonic() - t0 < 20:
        time.sleep(0.1)
    assert _uploads(s3_url) == []                             # no multipart upload left open (its parts)
    assert json.loads(st.file_image("dlbench-manifest.json"))["complete"] is False
    assert list(spool.iterdir()) == []                        # the local spool file went too
    monkeypatch.setattr(s3mod, "process_client", lambda: real)
    res = generate_to(wl, s3_url, seed=0)
    assert (res.files_written, res.files_skipped) == (1, 0)
    size = st.size("shard-000000.tar")
    assert size > real.part_size == 8 << 20 and size >= BIG
    etag = st._head(st.key("shard-000000.tar")).etag.strip('"')
    assert etag.endswith("-2"), etag                         # a multipart upload of two parts
    v = dlbench("verify", "--data-dir", s3_url, "--checksum")
    assert v.returncode == 0 and "checksums match" in v.stdout, v.stdout + v.stderr
    s = _run(tmp_path / "big.yaml", s3_url, tmp_path / "res", "naive", 1)
    assert s["s3"]["requests"]["GET"] == 1 and s["s3"]["bytes"]["GET"] == size and s["verified_samples"] == 2
