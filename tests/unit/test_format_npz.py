"""Format npz (dlbench/data/fmt_npz.py): archives np.savez writes (DLIO keys x and y, stored members), np.load and
local-header+pread readers, record sizes, verify catches damage."""
import io
import time
import zipfile

import numpy as np
import pytest
import yaml

from dlbench import workload as W
from dlbench.data import fmt_npz
from dlbench.data.content import expected_row
from dlbench.data.formats import aligned_empty, open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.errors import DataError

SPEC = {"name": "tnpz", "layout": "npz", "samples": 10, "batch_size": 2, "samples_per_file": 3,
        "arrays": [{"name": "x", "shape": [1000], "dtype": "uint8", "role": "data"},
                   {"name": "y", "shape": [1], "dtype": "int64", "role": "label"}],
        "record_size": {"kind": "normal", "mean_bytes": 4000, "std_bytes": 1000, "min_bytes": 1, "max_bytes": 8000}}


def wl(tmp_path, **over):
    spec = {k: v for k, v in {**SPEC, **over}.items() if v is not None}
    p = tmp_path / f"w{len(list(tmp_path.glob('w*.yaml')))}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return W.load(str(p))


@pytest.fixture(params=[(3, True), (1, True), (4, False)], ids=["blocks-var", "one-var", "blocks-fixed"])
def data(request, tmp_path):
    spf, var = request.param
    w = wl(tmp_path, samples_per_file=spf, record_size=SPEC["record_size"] if var else None)
    d = tmp_path / "d"
    generate(w, d, seed=5)
    return w, d, Manifest.load(d)


def test_archives_are_what_np_savez_writes(data, monkeypatch):
    w, d, m = data
    # np.savez stamps members with the local time; dlbench with 1980-01-01 (deterministic bytes): the same here
    monkeypatch.setattr(zipfile.time, "localtime", lambda *a: time.struct_time((1980, 1, 1, 0, 0, 0, 1, 1, -1)))
    sizes = m.sample_nbytes()
    for f, p in enumerate(m.paths):
        raw = (d / p).read_bytes()
        assert len(raw) == m.nbytes[f]
        with np.load(d / p) as z:
            assert z.files == ["x", "y"]                                 # DLIO's keys
            x, y = z["x"], z["y"]
        bio = io.BytesIO()
        np.savez(bio, x=x, y=y)
        assert bio.getvalue() == raw                                     # byte for byte np.savez's archive
        with zipfile.ZipFile(d / p) as zf:
            assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        k = int(m.count[f])
        xs = x.reshape(k, -1) if w.samples_per_file > 1 else x.reshape(1, -1)
        ys = y.reshape(k, -1) if w.samples_per_file > 1 else y.reshape(1, -1)
        for j in range(k):
            i = int(m.first[f]) + j
            row = np.concatenate([xs[j].view(np.uint8), ys[j].view(np.uint8)])
            assert np.array_equal(row, expected_row(w, 5, i)) and row.size == sizes[i]


def test_pread_path_returns_np_load_bytes(data):
    w, d, m = data
    got = {}
    for via in ("auto", "pread"):
        r = open_reader(d, m, w, via=via)
        assert type(r).__name__ == {"auto": "NpzLoadReader", "pread": "NpzPreadReader"}[via]
        out = aligned_empty(r.max_row_nbytes)
        got[via] = []
        for i in (7, 0, 3, 9, 1, 2, 8, 4, 6, 5):
            n = r.read_into(i, out)
            got[via].append(out[:n].copy())
        r.close()
    for a, b in zip(got["auto"], got["pread"]):
        assert np.array_equal(a, b)
    assert sum(len(a) for a in got["pread"]) == int(m.sample_nbytes().sum())


def test_sizes_planned_from_the_zip_layout_match_zipfile():
    """zip_nbytes equals what np.savez writes, including the ZIP64 central-directory fields past 2 GiB offsets
    (computed, not written: a member's header offset beyond the limit)."""
    for shapes in ([(5,)], [(3, 7), (3, 1)], [(1,)] * 3):
        arrays = {f"a{k}": np.zeros(s, np.int64) for k, s in enumerate(shapes)}
        bio = io.BytesIO()
        np.savez(bio, **arrays)
        members = [(n + ".npy", fmt_npz.npy.npy_header(a.dtype, a.shape), a.nbytes) for n, a in arrays.items()]
        assert fmt_npz.zip_nbytes(members) == len(bio.getvalue())
    big = [("x.npy", b"\0" * 128, 3 << 30), ("y.npy", b"\0" * 128, 8)]
    small = [("x.npy", b"\0" * 128, 1 << 20), ("y.npy", b"\0" * 128, 8)]
    # x over ZIP64_LIMIT: +16+4 in x's central entry, +8+4 for y's offset, + the zip64 end records
    assert fmt_npz.zip_nbytes(big) - fmt_npz.zip_nbytes(small) == (3 << 30) - (1 << 20) + 20 + 12 + 76


def test_verify_catches_damage(data):
    w, d, m = data
    assert verify(d, workload=w, content=True) == []
    p = d / m.paths[0]
    raw = bytearray(p.read_bytes())
    raw[200] ^= 0xFF                     # inside x's data
    p.write_bytes(bytes(raw))
    # the checksum names it (a member smaller than zipfile's 4 KiB read: the structure check's CRC-32 already)
    assert any("checksum" in x or "Bad CRC-32" in x for x in verify(d, workload=w, checksum=True))
    # --content reads with np.load, which checks the member's CRC-32: the damage is named either way
    assert any("Bad CRC-32 for file 'x.npy'" in x for x in verify(d, workload=w, content=True))
    r = open_reader(d, m, w, via="pread")                   # the pread path has no CRC: the bytes differ
    out = aligned_empty(r.max_row_nbytes)
    assert not all(np.array_equal(out[:r.read_into(i, out)], expected_row(w, 5, i)) for i in range(int(m.count[0])))
    r.close()
    raw[-20] ^= 0xFF                     # the end-of-central-directory record
    p.write_bytes(bytes(raw))
    assert any("not a readable .npz" in x for x in verify(d, workload=w))
    raw[1] ^= 0xFF                       # the first local header: neither walk nor central directory reads it
    p.write_bytes(bytes(raw))
    with pytest.raises(DataError, match="not a readable .npz archive"):
        r = open_reader(d, m, w, via="pread")
        r.read_into(0, aligned_empty(r.max_row_nbytes))


def test_pread_finds_members_of_other_writers(tmp_path):
    """Members in another order (or other writers' layouts): the central directory gives their local headers."""
    w = wl(tmp_path, record_size=None, samples=4, samples_per_file=4)
    d = tmp_path / "d"
    generate(w, d, seed=0)
    m = Manifest.load(d)
    p = d / m.paths[0]
    with np.load(p) as z:
        x, y = z["x"], z["y"]
    np.savez(p, y=y, x=x)
    r = open_reader(d, m, w, via="pread")
    out = aligned_empty(r.max_row_nbytes)
    for i in (2, 0, 3, 1):
        assert np.array_equal(out[:r.read_into(i, out)], expected_row(w, 0, i))
    r.close()


def test_compressed_member_refused_by_pread(tmp_path):
    w = wl(tmp_path, record_size=None, samples=3, samples_per_file=3)
    d = tmp_path / "d"
    generate(w, d, seed=0)
    m = Manifest.load(d)
    p = d / m.paths[0]
    with np.load(p) as z:
        x, y = z["x"], z["y"]
    np.savez_compressed(p, x=x, y=y)
    r = open_reader(d, m, w, via="pread")
    with pytest.raises(DataError, match="compressed .*use --read-via library"):
        r.read_into(0, aligned_empty(r.max_row_nbytes))
    r = open_reader(d, m, w, via="library")                # np.load reads it all the same
    out = aligned_empty(r.max_row_nbytes)
    assert np.array_equal(out[:r.read_into(1, out)], expected_row(w, 0, 1))
