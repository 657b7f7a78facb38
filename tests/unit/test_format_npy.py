"""Format npy (dlbench/data/fmt_npy.py): files np.save writes, np.load and header+pread readers, record sizes
drawn per file (DLIO record_length ± stdev), verify catches damage."""
import io
from pathlib import Path

import numpy as np
import pytest
import yaml

from dlbench import workload as W
from dlbench.data import fmt_npy
from dlbench.data.content import expected_row
from dlbench.data.formats import aligned_empty, open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.errors import ConfigError

SPEC = {"name": "tnpy", "layout": "npy", "samples": 10, "batch_size": 2, "samples_per_file": 3,
        "arrays": [{"name": "x", "shape": [1000], "dtype": "float32", "role": "data"}],
        "record_size": {"kind": "normal", "mean_bytes": 4000, "std_bytes": 1000, "min_bytes": 4, "max_bytes": 8000}}


def wl(tmp_path, **over):
    spec = {**SPEC, **over}
    spec = {k: v for k, v in spec.items() if v is not None}
    p = tmp_path / f"{spec['name']}-{abs(hash(yaml.safe_dump(spec)))}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return W.load(str(p))


@pytest.fixture(params=[(3, True), (1, True), (3, False)], ids=["blocks-var", "one-var", "blocks-fixed"])
def data(request, tmp_path):
    spf, var = request.param
    w = wl(tmp_path, samples_per_file=spf, record_size=SPEC["record_size"] if var else None)
    d = tmp_path / "d"
    generate(w, d, seed=5)
    return w, d, Manifest.load(d)


def test_files_are_what_np_save_writes_and_np_load_reads(data):
    w, d, m = data
    assert len(m.paths) == -(-w.samples // w.samples_per_file)
    sizes = m.sample_nbytes()
    for f, p in enumerate(m.paths):
        raw = (d / p).read_bytes()
        assert len(raw) == m.nbytes[f]
        arr = np.load(d / p)
        bio = io.BytesIO()
        np.save(bio, arr)
        assert bio.getvalue() == raw                                   # byte for byte np.save's file
        rows = arr.reshape(int(m.count[f]), -1) if w.samples_per_file > 1 else arr.reshape(1, -1)
        for j in range(int(m.count[f])):
            i = int(m.first[f]) + j
            assert np.array_equal(rows[j].view(np.uint8), expected_row(w, 5, i))
            assert rows[j].nbytes == sizes[i]
    assert (w.samples_per_file == 1) == (np.load(d / m.paths[0]).ndim == 1)


def test_pread_path_returns_np_load_bytes(data):
    w, d, m = data
    got = {}
    for via in ("library", "pread"):
        r = open_reader(d, m, w, via=via)
        out = aligned_empty(r.max_row_nbytes)
        got[via] = []
        for i in (7, 0, 3, 9, 1, 2, 8, 4, 6, 5):
            n = r.read_into(i, out)
            got[via].append(out[:n].copy())
        r.close()
        assert type(r).__name__ == {"library": "NpyLoadReader", "pread": "NpyPreadReader"}[via]
    for a, b in zip(got["library"], got["pread"]):
        assert np.array_equal(a, b)
    assert sum(len(a) for a in got["pread"]) == int(m.sample_nbytes().sum())


def test_record_sizes_deterministic_bounded_and_seeded(tmp_path):
    w = wl(tmp_path, samples=4000, samples_per_file=1)
    from dlbench.data.manifest import spec_of

    spec = spec_of(w)
    a = fmt_npy.record_nbytes(spec, 1, 4000)
    assert np.array_equal(a, fmt_npy.record_nbytes(spec, 1, 4000))
    assert np.array_equal(a[:10], fmt_npy.record_nbytes(spec, 1, 10))          # independent of the count
    assert not np.array_equal(a, fmt_npy.record_nbytes(spec, 2, 4000))
    assert (a % 4 == 0).all() and a.min() >= 4 and a.max() <= 8000
    assert abs(a.mean() - 4000) < 60 and abs(a.std() - 1000) < 60
    fixed = wl(tmp_path, record_size={"kind": "fixed", "mean_bytes": 4002, "min_bytes": 4, "max_bytes": 8000})
    assert set(fmt_npy.record_nbytes(spec_of(fixed), 0, 5).tolist()) == {4000}   # whole elements


def test_dlio_unet3d_sizes(tmp_path):
    """146.6 MB ± 68.3 MB, truncated to [1 B, mean + 4 sd], as the DLIO translation gives it."""
    rs = {"kind": "normal", "mean_bytes": 146600628, "std_bytes": 68341808, "min_bytes": 1.0,
          "max_bytes": 146600628 + 4 * 68341808}
    w = wl(tmp_path, name="u", samples=168, samples_per_file=1, record_size=rs,
           arrays=[{"name": "x", "shape": [146600628], "dtype": "uint8", "role": "data"}])
    from dlbench.data.manifest import spec_of

    s = fmt_npy.record_nbytes(spec_of(w), 0, 168)
    assert s.min() >= 1 and s.max() <= rs["max_bytes"] and 1.0e8 < s.mean() < 1.9e8 and s.std() > 4e7


def test_verify_catches_damage(data):
    w, d, m = data
    assert verify(d, workload=w, content=True) == []
    p = d / m.paths[1]
    raw = bytearray(p.read_bytes())
    raw[-3] ^= 0xFF
    p.write_bytes(bytes(raw))
    assert any("checksum" in x for x in verify(d, workload=w, checksum=True))
    assert any("differs from the expected content" in x for x in verify(d, workload=w, content=True))
    raw[2] ^= 0xFF                      # the magic: np.load refuses it
    p.write_bytes(bytes(raw))
    assert any("not a readable .npy" in x for x in verify(d, workload=w))
    p.write_bytes(bytes(raw[:-5]))
    assert any("truncated or corrupt" in x for x in verify(d, workload=w))


def test_generate_resumes_and_rewrites_damaged(tmp_path):
    w = wl(tmp_path)
    d = tmp_path / "d"
    generate(w, d, seed=0)
    m = Manifest.load(d)
    (d / m.paths[2]).unlink()
    raw = bytearray((d / m.paths[0]).read_bytes())
    raw[-1] ^= 1
    (d / m.paths[0]).write_bytes(bytes(raw))
    r = generate(w, d, seed=0)
    assert (r.files_written, r.files_skipped) == (2, len(m.paths) - 2)
    assert verify(d, workload=w, content=True) == []


def test_spec_checks(tmp_path):
    with pytest.raises(ConfigError, match="layout npy holds one array"):
        wl(tmp_path, arrays=SPEC["arrays"] + [{"name": "y", "shape": [1], "dtype": "int64", "role": "label"}])
    with pytest.raises(ConfigError, match="record_size: layout hdf5_blocks has fixed sample sizes"):
        wl(tmp_path, layout="hdf5_blocks")
    with pytest.raises(ConfigError, match="min_bytes=4 <= mean_bytes=9000 <= max_bytes=8000"):
        wl(tmp_path, record_size={**SPEC["record_size"], "mean_bytes": 9000})
    with pytest.raises(ConfigError, match="one data array of one dimension"):
        wl(tmp_path, arrays=[{"name": "x", "shape": [10, 100], "dtype": "float32", "role": "data"}])
    from dlbench.compute.models import row_fields

    with pytest.raises(ConfigError, match="--compute torch: workload tnpy has record sizes"):
        row_fields(wl(tmp_path))
    with pytest.raises(ConfigError, match="read-via=hdf5"):
        w = wl(tmp_path, record_size=None)
        fmt_npy.open_reader(Path("."), None, w, via="hdf5")


def test_header_and_sizes_planned_exactly(tmp_path):
    w = wl(tmp_path, samples=7, samples_per_file=7, record_size=None)
    paths, first, count, nbytes = fmt_npy.plan_files(w, 0)
    bio = io.BytesIO()
    np.save(bio, np.zeros((7, 1000), np.float32))
    assert nbytes.tolist() == [len(bio.getvalue())]
