import numpy as np
import pytest

from dlbench import workload as W
from dlbench.data.content import expected_row
from dlbench.data.fmt_hdf5 import BlockReader, H5Template, create_hdf5
from dlbench.data.formats import MemoryReader, aligned_empty, open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.errors import DataError

LAYOUT_WORKLOADS = ["cosmoflow", "deepcam", "hep_cnn", "ptychonn", "imagenet"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    out = {}
    for name in LAYOUT_WORKLOADS:
        wl = W.load(name, scale="tiny", samples=20 if name != "hep_cnn" else 40)
        d = tmp_path_factory.mktemp(name)
        generate(wl, d, seed=11, progress=False)
        out[name] = (wl, d)
    return out


def test_aligned_empty():
    for n in (1, 4096, 1 << 20):
        a = aligned_empty(n)
        assert a.size == n and a.ctypes.data % 4096 == 0 and a.dtype == np.uint8


@pytest.mark.parametrize("name", LAYOUT_WORKLOADS)
def test_reader_returns_generated_rows(datasets, name):
    wl, d = datasets[name]
    m = Manifest.load(d)
    with open_reader(d, m, wl) as r:
        out = aligned_empty(r.max_row_nbytes)
        for i in (0, wl.samples - 1, 7, 3, 7):
            n = r.read_into(i, out)
            exp = expected_row(wl, 11, i)
            assert n == exp.size == m.sample_nbytes()[i]
            assert np.array_equal(out[:n], exp)


def test_per_sample_files_are_plain_hdf5(datasets):
    import h5py

    wl, d = datasets["deepcam"]
    row = expected_row(wl, 11, 4)
    with h5py.File(d / "data-00000004.h5", "r") as f:
        data = f["climate/data"][...]
        assert data.shape == (48, 72, 16) and data.dtype == np.float32
        assert np.array_equal(data.view(np.uint8).reshape(-1), row[:data.nbytes])
        assert f["climate/labels_0"].shape == (48, 72)


@pytest.mark.parametrize("via", ["auto", "hdf5"])
def test_blocks_reader_lru_keeps_few_files_open(datasets, via):
    wl, d = datasets["hep_cnn"]
    m = Manifest.load(d)
    r = BlockReader(d, m, wl, max_open_files=1, via=via)
    out = aligned_empty(r.max_row_nbytes)
    for i in (0, 39, 17, 0, 38):
        r.read_into(i, out)
        assert np.array_equal(out[:wl.sample_nbytes], expected_row(wl, 11, i))
        assert len(r._open) == 1
    r.close()
    assert not r._open


def test_jpeg_decode_into(datasets):
    wl, d = datasets["imagenet"]
    r = open_reader(d, Manifest.load(d), wl)
    raw = aligned_empty(r.max_row_nbytes)
    dec = np.zeros(wl.decoded_nbytes, dtype=np.uint8)
    n = r.read_into(2, raw)
    r.decode_into(raw, n, dec)
    assert r.decoded_nbytes == 224 * 224 * 3 and dec.std() > 1  # a real image, not zeros


def test_open_reader_refuses_other_workload(datasets):
    wl, d = datasets["cosmoflow"]
    other = W.load("cosmoflow", scale="tiny", samples=21)
    with pytest.raises(DataError, match="not the data of workload"):
        open_reader(d, Manifest.load(d), other)


def test_out_buffer_too_small(datasets):
    wl, d = datasets["ptychonn"]
    with open_reader(d, Manifest.load(d), wl) as r, pytest.raises(ValueError, match="a row needs"):
        r.read_into(0, np.empty(10, dtype=np.uint8))


@pytest.mark.parametrize("name", ["hep_cnn", "imagenet"])
def test_memory_reader_matches_files(datasets, name):
    wl, d = datasets[name]
    mem = MemoryReader(wl, 11, 20)
    real = open_reader(d, Manifest.load(d), wl)
    a, b = aligned_empty(mem.max_row_nbytes), aligned_empty(real.max_row_nbytes)
    assert np.array_equal(mem.sample_nbytes(), Manifest.load(d).sample_nbytes()[:20])
    for i in (0, 19):
        n = mem.read_into(i, a)
        assert n == real.read_into(i, b) and np.array_equal(a[:n], b[:n])
    with pytest.raises(IndexError):
        mem.read_into(20, a)
    nocache = MemoryReader(wl, 11, 20, cache=False)
    assert nocache.read_into(1, a) == mem.read_into(1, b) and np.array_equal(a[:n], b[:n])


def test_template_segments_cover_metadata(tmp_path):
    wl = W.load("deepcam", scale="tiny")
    p = tmp_path / "t.h5"
    regions = create_hdf5(p, wl, 3)
    t = H5Template(p, regions)
    covered = sum(len(b) for _, b in t.segments) + sum(n for _, n in regions)
    assert covered == t.eof == p.stat().st_size


def test_reader_and_h5py_can_open_the_same_file(datasets):
    """Regression: a reader holding the shared file open must not stop h5py.File from opening it."""
    import h5py

    wl, d = datasets["ptychonn"]
    with open_reader(d, Manifest.load(d), wl) as r, h5py.File(d / "train.h5", "r") as f:
        out = aligned_empty(r.max_row_nbytes)
        r.read_into(3, out)
        assert np.array_equal(f["X_train"][3].view(np.uint8).reshape(-1), out[:f["X_train"][3].nbytes])


@pytest.mark.parametrize("name,via", [("hep_cnn", "auto"), ("hep_cnn", "hdf5"), ("cosmoflow", "auto"),
                                      ("ptychonn", "auto"), ("deepcam", "auto")])
def test_reader_view_cache_keyed_by_fresh_row_view(datasets, name, via):
    """Regression (issue 12): the view cache was keyed by id(out) of the fresh row view ``rows[j]`` the
    executors pass, so it never hit (views rebuilt per sample, ~2x per-sample cost on small samples:
    benchmarks/reader_rows.py) and it kept up to 256 dead row views alive. Reading into fresh row views
    must give the right bytes and keep no reference to them."""
    import weakref

    from dlbench.storage import aligned_rows

    wl, d = datasets[name]
    m = Manifest.load(d)
    r = BlockReader(d, m, wl, via=via) if wl.layout in ("hdf5_blocks", "hdf5_shared") else open_reader(d, m, wl)
    rows = aligned_rows(4, r.max_row_nbytes)
    refs = []
    for k, i in enumerate((0, 5, wl.samples - 1, 3, 5, 1)):
        row = rows[k % 4]
        n = r.read_into(i, row)
        assert np.array_equal(row[:n], expected_row(wl, 11, i))
        refs.append(weakref.ref(row))
        del row
    assert all(ref() is None for ref in refs)  # the reader holds no row view
    r.close()


def test_per_sample_reader_leaves_no_file_open_and_counts_exactly(datasets, tmp_path):
    """The per-sample reader closes each file by releasing its identifier (no FileID.close: issue 19) and
    reads every array straight into its byte slice of the row: after each read no HDF5 file is open, the
    bytes are the generated row's, and the counters count one file open and, per array, one dataset open
    and read. A damaged file is a DataError naming it, and is closed too."""
    import shutil

    import h5py

    from dlbench.counters import IDX
    from dlbench.storage import aligned_rows
    from dlbench.storage.counters import CounterSet

    wl, d = datasets["deepcam"]           # two arrays per sample
    m = Manifest.load(d)
    cs = CounterSet()
    r = open_reader(d, m, wl, counters=cs)
    rows = aligned_rows(3, r.max_row_nbytes)
    order = (0, 5, wl.samples - 1, 5)
    open_objects = h5py.h5f.OBJ_FILE | h5py.h5f.OBJ_DATASET | h5py.h5f.OBJ_GROUP
    for k, i in enumerate(order):
        rows[k % 3] = 0
        n = r.read_into(i, rows[k % 3])
        assert np.array_equal(rows[k % 3][:n], expected_row(wl, 11, i))
        assert h5py.h5f.get_obj_count(types=open_objects) == 0
    c = cs.totals()["shared"]
    arrays = len(wl.arrays)
    assert c[IDX["H5F_OPENS"]] == len(order) and c[IDX["POSIX_OPENS"]] == len(order)
    assert c[IDX["H5D_OPENS"]] == c[IDX["H5D_READS"]] == c[IDX["POSIX_READS"]] == arrays * len(order)
    assert c[IDX["POSIX_BYTES_READ"]] == c[IDX["H5D_BYTES_READ"]] == len(order) * wl.sample_nbytes
    # a truncated copy of the dataset's file 1: one line naming it, nothing left open
    bad = tmp_path / "bad"
    shutil.copytree(d, bad)
    f1 = bad / m.paths[1]
    f1.write_bytes(f1.read_bytes()[:f1.stat().st_size // 2])
    for counters in (None, CounterSet()):
        rb = open_reader(bad, Manifest.load(bad), wl, counters=counters)
        with pytest.raises(DataError, match=str(f1.name)):
            rb.read_into(1, rows[0])
        assert h5py.h5f.get_obj_count(types=open_objects) == 0
