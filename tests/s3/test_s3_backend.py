"""The S3 backend against a real S3 server (SeaweedFS, tests/s3/conftest.py): the backend calls, and
generate -> verify -> read of every format with the data as objects, byte for byte the POSIX generation; one
GET per sample and no HEAD on the read path; the errors a user meets, each one line."""

import os

import numpy as np
import pytest

from dlbench.data.content import expected_row
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.storage.checksum import sum64
from dlbench.storage.s3 import S3Backend, S3Error, parse_url
from dlbench.workload import load as load_workload

pytestmark = pytest.mark.s3


def test_parse_url():
    assert parse_url("s3://b/p/q/") == ("b", "p/q") and parse_url("s3://b") == ("b", "")
    from dlbench.errors import ConfigError

    for bad in ("s3://", "s3://b/../x", "file:///x"):
        with pytest.raises(ConfigError, match="s3://BUCKET|not an s3"):
            parse_url(bad)


def test_backend_calls(s3_url):
    b = S3Backend(s3_url)
    h = b.open("d/x.part", write=True)
    assert b.pwrite(h, np.arange(10, dtype=np.uint8), 0) == 10
    assert b.pwrite(h, b"\xff\xfe", 20) == 2     # past the end: a hole of zeros
    b.close(h)
    assert b.list() == []                          # nothing in the bucket before the rename (the PUT)
    b.rename("d/x.part", "d/x")
    assert not b.exists("d/x.part") and b.exists("d/x") and b.size("d/x") == 22
    assert b.list() == ["d/x"] and b.list("e") == []
    buf = np.zeros(8, dtype=np.uint8)
    h = b.open("d/x")
    assert b.pread_into(h, buf, 6) == 8 and buf.tolist() == [6, 7, 8, 9, 0, 0, 0, 0]
    assert b.pread_into(h, buf, 18) == 4 and buf[:4].tolist() == [0, 0, 255, 254]   # short at the end
    b.close(h)
    assert b.file_image("d/x")[20:] == b"\xff\xfe"
    b.remove("d/x")
    assert not b.exists("d/x")
    with pytest.raises(FileNotFoundError):
        b.open("d/x")
    with pytest.raises(ValueError):
        b.open("../escape")


def test_unput_spool_removed_with_the_backend(s3_url):
    import gc

    b = S3Backend(s3_url)
    h = b.open("z.part", write=True)
    b.pwrite(h, b"abc", 0)
    path = h.path
    assert os.path.exists(path)
    del b, h
    gc.collect()
    assert not os.path.exists(path)


def test_read_path_requests(s3_url):
    """A whole-object read is one plain GET, a partial one one ranged GET, a header read of a small object then
    its data read one GET together; no HEAD when the size is known."""
    b = S3Backend(s3_url)
    h = b.open("o.part", write=True)
    b.pwrite(h, bytes(range(256)) * 512, 0)         # 128 KiB
    b.rename("o.part", "o")
    b.set_sizes(["o"], [131072])
    b.reset_stats()
    k = b.keys(["o"])[0]
    assert k == "o"
    out = np.zeros(131072, dtype=np.uint8)
    r = b.open_read(k)
    assert b.preadv(r, [out[:1000], out[1000:]], 0) == 131072 and out[:256].tolist() == list(range(256))
    assert b.preadv(r, [out[:10]], 300) == 10 and out[:10].tolist() == list(range(44, 54))
    assert b.pread(r, 4, 0) == bytes([0, 1, 2, 3]) and b.preadv(r, [out[:16]], 16) == 16   # one GET for both
    assert out[:16].tolist() == list(range(16, 32))
    st = b.stats()
    assert st["requests"] == {"GET": 3, "PUT": 0, "HEAD": 0, "LIST": 0, "DELETE": 0}
    assert st["bytes"]["GET"] == 131072 * 2 + 10 and len(st["get_ns"]) == 3 == len(st["ttfb_ns"])
    assert all(t >= f > 0 for t, f in zip(st["get_ns"], st["ttfb_ns"]))


def _npy_workload(tmp_path, spf: int):
    import yaml

    p = tmp_path / f"npy{spf}.yaml"
    p.write_text(yaml.safe_dump({"name": f"npy{spf}", "layout": "npy", "samples": 8, "batch_size": 2,
                                 "samples_per_file": spf,
                                 "arrays": [{"name": "x", "shape": [16, 8], "dtype": "float32", "role": "data"}]}))
    return load_workload(str(p), samples=8)


def _tfrecord_workload(read: str):
    pytest.importorskip("crc32c")
    from dlbench.config import from_mapping
    from dlbench.workload import WorkloadSpec, resolve

    return resolve(from_mapping(WorkloadSpec, {
        "name": "tfr", "layout": "tfrecord", "samples": 8, "batch_size": 2, "samples_per_file": 4,
        "arrays": [{"name": "x", "shape": [300], "dtype": "uint8", "role": "data"}], "tfrecord": {"read": read}},
        where="test"))


@pytest.mark.parametrize("name,via", [("cosmoflow", "auto"), ("hep_cnn", "auto"), ("ptychonn", "library"),
                                      ("imagenet", "auto"), ("npy1", "pread"), ("npy4", "library"),
                                      ("unet3d", "library"), ("unet3d", "pread"), ("tfrecord-indexed", "auto")])
def test_generate_verify_read_over_s3(tmp_path, s3_url, name, via):
    """generate -> verify -> read with the data files as objects (manifest and records in the control folder):
    the same bytes as a generation on disk, nothing else in the bucket, a re-run skips every object, the
    format's reader reads every sample as expected, a flipped byte and a missing object are found."""
    from dlbench.data.formats import aligned_empty, open_reader

    if name.startswith("npy"):
        wl = _npy_workload(tmp_path, int(name[3:]))
    elif name.startswith("tfrecord"):
        wl = _tfrecord_workload(name.split("-")[1])
    else:
        wl = load_workload(name, scale="tiny", samples=8)
    disk = tmp_path / "disk"
    generate(wl, disk, seed=2)
    st = S3Backend(s3_url)
    ctl = tmp_path / "ctl"
    res = generate(wl, ctl, seed=2, storage=st)
    m = Manifest.load(ctl)
    md = Manifest.load(disk)
    assert (m.paths, m.nbytes.tolist(), m.sum64) == (md.paths, md.nbytes.tolist(), md.sum64)
    assert res.files_written == len(m.paths)
    on_disk = sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.is_file()
                     and p.name != "dlbench-manifest.json")
    assert st.list() == on_disk                        # the same objects (tfrecord: its index), no .part left
    for p in m.paths:
        assert st.file_image(p) == (disk / p).read_bytes()
    assert verify(ctl, content=True, storage=st) == []
    again = generate(wl, ctl, seed=2, storage=S3Backend(s3_url))     # a re-run finds every object complete
    assert again.files_written == 0 and again.files_skipped == len(m.paths)
    rd = S3Backend(s3_url)
    rd.set_sizes(m.paths, m.nbytes)
    with open_reader(ctl, m, wl, storage=rd, via=via) as r:
        out = aligned_empty(r.max_row_nbytes)
        assert all(np.array_equal(out[:r.read_into(i, out)], expected_row(wl, 2, i)) for i in range(wl.samples))
    s = rd.stats()
    assert s["requests"]["HEAD"] == 0 and s["requests"]["GET"] >= 1
    if name in ("npy1", "imagenet"):                   # one object per sample: one GET per sample
        assert s["requests"]["GET"] == wl.samples
    last = st.file_image(m.paths[-1])
    bad = bytearray(last)
    bad[len(bad) // 2] ^= 0xFF
    h = st.open(m.paths[-1] + ".part", write=True)
    st.pwrite(h, bad, 0)
    st.rename(m.paths[-1] + ".part", m.paths[-1])
    assert sum64(st.file_image(m.paths[-1])) != m.sum64[-1]
    problems = verify(ctl, checksum=True, storage=st)
    assert len(problems) == 1 and m.paths[-1] in problems[0]
    st.remove(m.paths[0])
    assert any(p.endswith(f"{m.paths[0]}: missing") for p in verify(ctl, storage=st))


def test_errors_one_line(s3_url, monkeypatch):
    b = S3Backend(s3_url)
    with pytest.raises(FileNotFoundError) as e:
        b.file_image("nothing")
    assert e.value.filename == f"{s3_url}/nothing"
    with pytest.raises(S3Error, match=r"^s3://no-such-bucket-x/k: bucket 'no-such-bucket-x' does not exist at "):
        S3Backend("s3://no-such-bucket-x").file_image("k")
    import dlbench.storage.s3 as s3mod

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setattr(s3mod, "_CLIENT", [-1, None])    # the process's client, made again with these
    with pytest.raises(S3Error, match=r": GET refused: the credentials were not accepted .*AWS_ACCESS_KEY_ID"):
        S3Backend(s3_url).file_image("k")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")     # nothing listens: retried, then one line
    monkeypatch.setenv("DLBENCH_S3_ATTEMPTS", "2")
    monkeypatch.setattr(s3mod, "_CLIENT", [-1, None])
    b = S3Backend(s3_url)
    with pytest.raises(S3Error, match=r"/k: GET failed after 2 attempt\(s\) over .* s: .*") as e:
        b.file_image("k")
    assert "\n" not in str(e.value) and b.retries == 1 and b.requests["GET"] == 2


def test_fork_gets_its_own_client(s3_url):
    """A forked child (a DataLoader worker) makes its own client and reads through it."""
    b = S3Backend(s3_url)
    h = b.open("f.part", write=True)
    b.pwrite(h, b"abc", 0)
    b.rename("f.part", "f")
    parent = b.client
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ok = b.file_image("f") == b"abc" and b.client is not parent
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1" and b.client is parent


class _SlowDownClient:
    """The error path only: a client whose first ``fails`` GETs answer 503 SlowDown (SeaweedFS cannot be made to
    throttle), then the real client's answer."""

    def __init__(self, real, fails: int):
        self.real, self.fails = real, fails

    def get_object(self, *a):
        from s3torchconnectorclient._mountpoint_s3_client import S3Exception

        if self.fails:
            self.fails -= 1
            raise S3Exception("Service error: SlowDown: Please reduce your request rate. (503)")
        return self.real.get_object(*a)


def test_slowdown_is_retried_and_counted(s3_url):
    b = S3Backend(s3_url)
    h = b.open("s.part", write=True)
    b.pwrite(h, b"xyz", 0)
    b.rename("s.part", "s")
    b.reset_stats()
    b._client = _SlowDownClient(b.client, 2)
    assert b.file_image("s") == b"xyz"
    assert (b.retries, b.throttled, b.requests["GET"]) == (2, 2, 3)
    b._client = _SlowDownClient(b._client.real, 10)
    with pytest.raises(S3Error, match=r"^s3://.*/s: GET failed after 5 attempt\(s\) over .* SlowDown"):
        b.file_image("s")
    assert b.throttled == 2 + 4


def test_failed_generation_leaves_no_partial_object_and_resumes(tmp_path, s3_url, monkeypatch):
    """A generation that fails after two objects: the bucket holds those two complete objects and the
    (incomplete) manifest, nothing else; the same command again writes only what is missing."""
    import json

    from dlbench.data import generate as gen_mod
    from dlbench.data.bucket import generate_to
    from dlbench.errors import DataError

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    wl = load_workload("imagenet", scale="tiny", samples=6)
    real = gen_mod._Writer.write_file
    calls = []

    def failing(self, f):
        calls.append(f)
        if len(calls) == 3:
            raise OSError(28, "No space left on device", "x")
        return real(self, f)
    monkeypatch.setattr(gen_mod._Writer, "write_file", failing)
    with pytest.raises(DataError, match="2 of 6 files complete"):
        generate_to(wl, s3_url, seed=1)
    st = S3Backend(s3_url)
    left = st.list()
    assert len(left) == 3 and "dlbench-manifest.json" in left and not any(p.endswith(".part") for p in left)
    assert json.loads(st.file_image("dlbench-manifest.json"))["complete"] is False
    monkeypatch.setattr(gen_mod._Writer, "write_file", real)
    res = generate_to(wl, s3_url, seed=1)
    assert (res.files_written, res.files_skipped) == (4, 2)
    assert json.loads(st.file_image("dlbench-manifest.json"))["complete"] is True


def test_hdf5_shared_over_s3_needs_one_process(s3_url):
    from dlbench.data.bucket import generate_to
    from dlbench.errors import ConfigError

    class TwoRanks:
        size, rank = 2, 0

    with pytest.raises(ConfigError, match="hdf5_shared is one object that several ranks cannot write"):
        generate_to(load_workload("ptychonn", scale="tiny", samples=8), s3_url, comm=TwoRanks())


def test_hdf5_image_limit(tmp_path, s3_url, monkeypatch):
    """An HDF5 object above DLBENCH_S3_H5_IMAGE_MAX is refused in one line (not loaded whole into memory)."""
    from dlbench.data.formats import aligned_empty, open_reader
    from dlbench.errors import ConfigError

    wl = load_workload("hep_cnn", scale="tiny", samples=8)
    st = S3Backend(s3_url)
    generate(wl, tmp_path / "ctl", seed=0, storage=st)
    m = Manifest.load(tmp_path / "ctl")
    monkeypatch.setenv("DLBENCH_S3_H5_IMAGE_MAX", "1000")
    rd = S3Backend(s3_url)
    rd.set_sizes(m.paths, m.nbytes)
    with pytest.raises(ConfigError, match=r"an HDF5 file over S3 is read as a file image .* more than "
                                          r"DLBENCH_S3_H5_IMAGE_MAX=1,000"):
        with open_reader(tmp_path / "ctl", m, wl, storage=rd) as r:
            r.read_into(0, aligned_empty(r.max_row_nbytes))
