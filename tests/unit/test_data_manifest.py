import json

import numpy as np
import pytest

from dlbench import workload as W
from dlbench.data.fmt_jpeg import file_name
from dlbench.data.manifest import MANIFEST_NAME, Manifest, plan_manifest, spec_of
from dlbench.errors import DataError


def _plan(name, **kw):
    wl = W.load(name, **kw)
    return wl, plan_manifest(wl, 5, hdf5_file_nbytes=lambda k: 1000 + k * wl.sample_nbytes)


def test_blocks_plan_covers_every_sample_once():
    wl, m = _plan("hep_cnn", scale="tiny", samples=70)
    assert m.count.sum() == 70 and m.first[0] == 0
    assert np.array_equal(m.first[1:], np.cumsum(m.count)[:-1])
    assert m.files[-1].count == 70 - 4 * 16 and m.files[-1].nbytes == 1000 + 6 * wl.sample_nbytes
    assert m.file_of(0) == ("block-000000.h5", 0)
    assert m.file_of(69) == ("block-000004.h5", 5)
    assert list(m.file_index(np.asarray([0, 15, 16, 69]))) == [0, 0, 1, 4]
    with pytest.raises(IndexError):
        m.file_of(70)
    assert (m.sample_nbytes() == wl.sample_nbytes).all()


def test_jpeg_plan_sizes_and_class_folders():
    wl, m = _plan("imagenet", scale="tiny")
    assert len(m.files) == 64 and (m.sample_nbytes() == m.nbytes).all()
    assert m.paths[5] == file_name(wl, 5) and m.paths[5].startswith(f"n{5 % wl.classes:08d}/")


def test_roundtrip_and_identity(tmp_path):
    wl, m = _plan("ptychonn", scale="tiny")
    m.complete = True
    m.provenance = {"ranks": 2}
    m.save(tmp_path)
    d = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert d["schema"] == "dlbench.manifest/1" and d["files"][0][1:3] == [0, 256]
    back = Manifest.load(tmp_path)
    assert back.same_dataset(m) and back.spec == spec_of(wl) and back.files == m.files
    assert back.provenance == {"ranks": 2}
    other = plan_manifest(wl, 6, hdf5_file_nbytes=lambda k: 1)
    assert not back.same_dataset(other)


def test_load_errors(tmp_path):
    with pytest.raises(DataError, match="no dataset here"):
        Manifest.load(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(DataError, match="unreadable"):
        Manifest.load(tmp_path)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"schema": "dlbench.manifest/1"}))
    with pytest.raises(DataError, match="not a valid"):
        Manifest.load(tmp_path)
    _, m = _plan("cosmoflow", scale="tiny")
    m.save(tmp_path)  # complete is False
    with pytest.raises(DataError, match="did not complete"):
        Manifest.load(tmp_path)
    assert not Manifest.load(tmp_path, require_complete=False).complete
