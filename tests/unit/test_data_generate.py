import errno
import os

import numpy as np
import pytest

from dlbench import workload as W
from dlbench.data import generate as G
from dlbench.data.manifest import MANIFEST_NAME, Manifest
from dlbench.data.verify import verify
from dlbench.errors import CapacityError, ConfigError, DataError
from dlbench.storage import backend as backend_mod
from dlbench.storage import checksum as CS


def _files(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def _snapshot(d):
    return {p: (d / p).read_bytes() for p in _files(d) if p != MANIFEST_NAME}


@pytest.mark.parametrize("name", ["cosmoflow", "hep_cnn", "ptychonn", "imagenet"])
def test_generate_then_verify_content(tmp_path, name):
    wl = W.load(name, scale="tiny", samples=24)
    res = G.generate(wl, tmp_path / "d", seed=2, progress=False)
    assert res.files_skipped == 0 and res.bytes_written == res.manifest.dataset_nbytes
    assert res.files_written == len(res.manifest.paths) and "MiB/s" in res.line() and "MiB in" in res.line()
    assert verify(tmp_path / "d", content=True) == []
    assert not (tmp_path / "d" / G.TMP_DIR).exists()
    assert not [p for p in _files(tmp_path / "d") if p.endswith(".part")]


def test_rerun_skips_complete_files_and_finishes_the_rest(tmp_path):
    wl = W.load("cosmoflow", scale="tiny")
    d = tmp_path / "d"
    G.generate(wl, d, progress=False)
    before = _snapshot(d)
    (d / "data-00000003.h5").unlink()
    (d / "data-00000005.h5").write_bytes(b"truncated")
    res = G.generate(wl, d, progress=False)
    assert res.files_written == 2 and res.files_skipped == 30
    assert _snapshot(d) == before


def test_disk_full_removes_temporaries_and_rerun_resumes(tmp_path, monkeypatch):
    wl = W.load("hep_cnn", scale="tiny")
    d = tmp_path / "d"
    calls = {"n": 0}
    real = os.pwrite

    def full(fd, data, off):
        calls["n"] += 1
        if calls["n"] > 7:  # 3 writes per file: fails in the third file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, off)

    monkeypatch.setattr(G, "_pwrite", full)
    with pytest.raises(DataError, match="disk full"):
        G.generate(wl, d, progress=False)
    left = _files(d)
    assert not [p for p in left if p.endswith(".part")] and not (d / G.TMP_DIR).exists()
    m = Manifest.load(d, require_complete=False)
    assert not m.complete and len(m.paths) == 4
    with pytest.raises(DataError, match="did not complete"):
        Manifest.load(d)
    # every file that exists under its final name is complete
    for p, b in zip(m.paths, m.nbytes):
        if (d / p).exists():
            assert (d / p).stat().st_size == b
    monkeypatch.setattr(G, "_pwrite", real)
    res = G.generate(wl, d, progress=False)
    assert res.files_written + res.files_skipped == 4 and res.files_written >= 1
    assert verify(d, content=True) == []


def test_shared_file_disk_full_then_complete(tmp_path, monkeypatch):
    wl = W.load("ptychonn", scale="tiny")
    d = tmp_path / "d"
    monkeypatch.setattr(G, "_pwrite", lambda fd, data, off: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(DataError, match="disk full"):
        G.generate(wl, d, progress=False)
    assert _files(d) == [MANIFEST_NAME]
    monkeypatch.undo()
    G.generate(wl, d, progress=False)
    assert verify(d, content=True) == []


def test_shared_file_resumes_from_done_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(G, "CHUNK_BYTES", 12 * 1024 * 16)  # 16 samples per chunk: 16 chunks
    wl = W.load("ptychonn", scale="tiny")
    d = tmp_path / "d"
    G._prepare(wl, d.absolute(), 0, False)  # an interrupted run: skeleton and done map, no data
    part = d / "train.h5.part"
    done = d / G.TMP_DIR / "train.h5.done"
    assert part.exists() and done.read_bytes() == b"\0" * 16
    done.write_bytes(b"\1" * 8 + b"\0" * 8)  # pretend the first 8 chunks were written: they are skipped
    res = G.generate(wl, d, progress=False)
    assert res.bytes_written == Manifest.load(d).nbytes[0] - 128 * wl.sample_nbytes
    assert not part.exists() and (d / "train.h5").exists()
    problems = verify(d, content=True)  # the skipped chunks hold no data: content check catches it
    assert len(problems) == 128 and "sample 0 " in problems[0]


def test_refuses_other_dataset_unless_forced(tmp_path):
    d = tmp_path / "d"
    G.generate(W.load("hep_cnn", scale="tiny"), d, seed=1, progress=False)
    with pytest.raises(DataError, match="another seed"):
        G.generate(W.load("hep_cnn", scale="tiny"), d, seed=2, progress=False)
    with pytest.raises(DataError, match="another dataset"):
        G.generate(W.load("cosmoflow", scale="tiny"), d, seed=1, progress=False)
    with pytest.raises(DataError, match="another dataset"):
        G.generate(W.load("hep_cnn", scale="tiny", samples=65), d, seed=1, progress=False)
    res = G.generate(W.load("cosmoflow", scale="tiny"), d, seed=1, force=True, progress=False)
    assert res.files_written == 32
    assert not [p for p in _files(d) if p.startswith("block-")]


def test_refuses_non_empty_foreign_dir(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(DataError, match="not empty"):
        G.generate(W.load("hep_cnn", scale="tiny"), tmp_path, progress=False)
    G.generate(W.load("hep_cnn", scale="tiny"), tmp_path, force=True, progress=False)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_bad_dirs_and_values(tmp_path, monkeypatch):
    wl = W.load("hep_cnn", scale="tiny")
    with pytest.raises(ConfigError, match="parent directory"):
        G.generate(wl, tmp_path / "no" / "d", progress=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        G.generate(wl, tmp_path / "file", progress=False)
    with pytest.raises(ConfigError, match="--seed"):
        G.generate(wl, tmp_path / "d", seed=-1, progress=False)
    with pytest.raises(ConfigError, match="files is more than"):
        G.generate(W.load("imagenet", samples=10**9), tmp_path / "d", progress=False)
    monkeypatch.setattr(G.shutil, "disk_usage", lambda p: type("U", (), {"free": 1000})())
    with pytest.raises(CapacityError, match="GB free"):
        G.generate(wl, tmp_path / "d2", progress=False)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_dir(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            G.generate(W.load("hep_cnn", scale="tiny"), ro / "d", progress=False)
    finally:
        ro.chmod(0o700)


def test_same_bytes_for_every_chunking(tmp_path, monkeypatch):
    wl = W.load("hep_cnn", scale="tiny")
    G.generate(wl, tmp_path / "a", progress=False)
    monkeypatch.setattr(G, "CHUNK_BYTES", 3 * wl.sample_nbytes)
    G.generate(wl, tmp_path / "b", progress=False)
    assert _snapshot(tmp_path / "a") == _snapshot(tmp_path / "b")
    assert np.array_equal(Manifest.load(tmp_path / "a").nbytes, Manifest.load(tmp_path / "b").nbytes)


def test_unwritable_dir_reported(tmp_path, monkeypatch):
    """As root every dir is writable: simulate a read-only data dir through os.access."""
    d = tmp_path / "d"
    d.mkdir()
    real = os.access
    monkeypatch.setattr(G.os, "access", lambda p, mode: False if str(p) == str(d) else real(p, mode))
    with pytest.raises(ConfigError, match="not writable"):
        G.generate(W.load("hep_cnn", scale="tiny"), d, progress=False)
    assert not any(d.iterdir())


class _ShortReads:
    """A raw file whose ``readinto`` returns at most 13 bytes a call (a file system returning short reads)."""

    def __init__(self, path):
        self.fh = open(path, "rb", buffering=0)

    def readinto(self, mv):
        return self.fh.readinto(memoryview(mv)[:13])

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.fh.close()


def test_file_checksum_short_read_not_multiple_of_8(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 1000, dtype=np.uint8).tobytes())
    want = CS.file_checksum(p)
    words = np.frombuffer(p.read_bytes() + bytes(-1000 % 8), dtype="<u8")
    assert want == (int(words.sum(dtype=np.uint64)) + 1000) % (1 << 64)
    monkeypatch.setattr(CS, "open", lambda path, mode, buffering: _ShortReads(path), raising=False)
    assert CS.file_checksum(p) == want
    assert CS.file_checksum(p, bytearray(64)) == want  # a buffer smaller than the file: several full blocks


def test_cleanup_failed_keeps_checksum_records_rerun_writes_only_missing(tmp_path, monkeypatch):
    wl = W.load("cosmoflow", scale="tiny", samples=24)
    d = tmp_path / "d"
    real = G._Writer.write_file
    calls = {"n": 0}

    def full_after_10(self, f):
        calls["n"] += 1
        if calls["n"] > 10:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, f)

    monkeypatch.setattr(G._Writer, "write_file", full_after_10)
    with pytest.raises(DataError, match="disk full"):
        G.generate(wl, d, progress=False)
    assert not (d / G.TMP_DIR).exists() and not [p for p in _files(d) if p.endswith(".part")]
    done = {p: (d / p).stat().st_mtime_ns for p in Manifest.load(d, require_complete=False).paths if (d / p).exists()}
    assert len(done) == 10
    monkeypatch.setattr(G._Writer, "write_file", real)
    res = G.generate(wl, d, progress=False)
    assert (res.files_written, res.files_skipped) == (14, 10)
    assert {p: (d / p).stat().st_mtime_ns for p in done} == done  # not written again
    assert verify(d, content=True) == []


def test_checksum_of_written_pieces_equals_the_file_read_back(tmp_path):
    """The checksum generate records from the bytes it wrote (``_PIECES``: pieces at any offset, any length)
    equals ``file_checksum`` of the file read back; pieces that leave a gap or overlap give None (read back)."""
    rng = np.random.default_rng(3)
    for size in (1, 7, 8, 9, 100, 4099):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        cuts = sorted({0, size, *rng.integers(0, size + 1, 4).tolist()})
        pieces = [(a, b - a, CS.piece_words(memoryview(data)[a:b], a)) for a, b in zip(cuts, cuts[1:])]
        p = tmp_path / f"f{size}"
        p.write_bytes(data)
        assert CS.pieces_sum(pieces[::-1], size) == CS.file_checksum(p) == CS.sum64(data)
        if len(pieces) > 1:
            assert CS.pieces_sum(pieces[1:], size) is None                   # a gap at the start
            assert CS.pieces_sum(pieces + pieces[:1], size) is None          # a byte written twice
        assert CS.pieces_sum(pieces, size + 1) is None                        # short of the file's size


@pytest.mark.parametrize("name,read_back", [("cosmoflow", False), ("ptychonn", False), ("imagenet", False),
                                            ("unet3d", True)])
def test_recorded_checksums_are_the_files(tmp_path, name, read_back, monkeypatch):
    """Every file's recorded sum64 is its bytes' (``verify --checksum`` reads them back); the formats that write
    every byte through ``_write_all`` are summed in memory (no read-back of the .part file), NPZ (zipfile writes
    to the descriptor itself) is read back."""
    reads = []
    real = CS.file_checksum
    monkeypatch.setattr(backend_mod, "file_checksum", lambda path, buf=None: reads.append(path) or real(path, buf))
    wl = W.load(name, scale="tiny", samples=12)
    res = G.generate(wl, tmp_path / "d", seed=1, progress=False)
    assert bool([r for r in reads if str(r).endswith(".part")]) == read_back
    for rel, want in zip(res.manifest.paths, res.manifest.sum64):
        assert real(tmp_path / "d" / rel) == want
    assert verify(tmp_path / "d", checksum=True) == []
