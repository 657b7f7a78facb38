"""Format webdataset (dlbench/data/fmt_webdataset.py) and its read order (dlbench/plan/shards.py): shards byte for
byte as webdataset's TarWriter writes them and read back by webdataset.WebDataset; verify; both readers (stream:
one read per shard; indexed: one range read per sample) on POSIX and the memory backend; the order's rules."""

import io

import numpy as np
import pytest

from dlbench.data import fmt_webdataset as WD
from dlbench.data.formats import open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.errors import ConfigError
from dlbench.plan.shards import rank_order, shard_stream_plan, wds_shuffle
from dlbench.storage.backend import MemoryBackend
from dlbench.storage.counters import IDX, CounterSet
from dlbench.workload import WorkloadSpec, resolve


def _wl(samples=30, spf=8, read="stream", **opts):
    from dlbench.config import from_mapping

    d = {"name": "wds", "layout": "webdataset", "samples": samples, "batch_size": 4, "samples_per_file": spf,
         "arrays": [{"name": "x", "shape": [3, 7], "dtype": "float32", "role": "data"},
                    {"name": "cls", "shape": [1], "dtype": "int64", "role": "label"}],
         "webdataset": {"read": read, **opts}}
    return resolve(from_mapping(WorkloadSpec, d, where="test"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("wds")
    generate(_wl(), d, seed=3)
    return d


def test_shard_is_tarwriters_bytes(data):
    wds = pytest.importorskip("webdataset")
    w = _wl()
    m = Manifest.load(data)
    assert m.paths == [f"shard-{f:06d}.tar" for f in range(4)] and m.count.tolist() == [8, 8, 8, 6]
    bio = io.BytesIO()
    tw = wds.TarWriter(bio, mtime=WD.MTIME)
    for i in range(24, 30):
        row = WD.expected_row(w, 3, i)
        tw.write({"__key__": WD.key(i), "x.bin": row[:84].tobytes(), "cls.bin": row[84:].tobytes()})
    tw.close()
    assert (data / "shard-000003.tar").read_bytes() == bio.getvalue()


def test_webdataset_reads_dlbenchs_shards(data):
    wds = pytest.importorskip("webdataset")
    w = _wl()
    urls = [str(data / f"shard-{f:06d}.tar") for f in range(4)]
    # .decode(): webdataset's default decoders leave the .bin members as bytes (a member named .cls would be parsed)
    got = {s["__key__"]: s["x.bin"] + s["cls.bin"] for s in wds.WebDataset(urls, shardshuffle=False).decode()}
    assert sorted(got) == [WD.key(i) for i in range(30)]
    for i in (0, 13, 29):
        assert got[WD.key(i)] == WD.expected_row(w, 3, i).tobytes()


def test_verify_and_a_damaged_shard(data, tmp_path):
    assert verify(data, content=True) == []
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    p = bad / "shard-000001.tar"
    b = bytearray(p.read_bytes())
    b[1024 + 3] ^= 0x1     # the second member's name
    p.write_bytes(bytes(b))
    probs = verify(bad)
    assert len(probs) == 1 and "shard-000001.tar" in probs[0] and "member" in probs[0], probs


@pytest.mark.parametrize("read", ["stream", "indexed"])
def test_readers_deliver_rows_and_count_reads(data, read):
    w = _wl(read=read)
    m = Manifest.load(data)
    cs = CounterSet()
    r = open_reader(data, m, w, counters=cs)
    out = np.empty(r.max_row_nbytes, np.uint8)
    order = [9, 8, 15, 10, 11, 12, 13, 14, 0]          # shard 1 in a shuffled order, then shard 0
    for i in order:
        assert r.read_into(i, out) == 92
        assert out.tobytes() == WD.expected_row(w, 3, i).tobytes()
    r.close()
    c = cs.totals()["shared"]
    if read == "stream":       # shard 1 fetched whole once, shard 0 once
        assert c[IDX["POSIX_READS"]] == 2 and c[IDX["POSIX_BYTES_READ"]] == int(m.nbytes[1] + m.nbytes[0])
    else:                      # one range read per sample: cls data (+ padding), x's header, x
        assert c[IDX["POSIX_READS"]] == len(order) and c[IDX["POSIX_BYTES_READ"]] == len(order) * (512 + 512 + 84)


def test_stream_reader_refetches_a_shard_for_the_next_pass(data):
    w = _wl()
    m = Manifest.load(data)
    r = open_reader(data, m, w)
    out = np.empty(r.max_row_nbytes, np.uint8)
    for _ in range(2):           # two epochs over shard 0
        for i in range(8):
            r.read_into(i, out)
    r.read_into(3, out)          # a third pass begins
    assert r.shard_reads == 3


@pytest.mark.parametrize("read", ["stream", "indexed"])
def test_memory_backend(tmp_path, read):
    w = _wl(read=read)
    mem = MemoryBackend()
    generate(w, tmp_path, seed=1, storage=mem)
    m = Manifest.load(tmp_path)
    assert mem.list() == list(m.paths) and not any((tmp_path / p).exists() for p in m.paths)
    assert verify(tmp_path, content=True, storage=mem) == []
    r = open_reader(tmp_path, m, w, storage=mem)
    out = np.empty(r.max_row_nbytes, np.uint8)
    for i in range(30):
        r.read_into(i, out)
        assert out.tobytes() == WD.expected_row(w, 1, i).tobytes()


def test_wds_shuffle_follows_webdataset_rules():
    rng = np.random.default_rng(0)
    seq = np.arange(1000)
    out = wds_shuffle(seq, 50, 10, rng)
    assert sorted(out.tolist()) == list(range(1000))
    # the buffer holds at most 50: the k-th output was read among the first ~2k+2 inputs and at most 50 before
    pos = np.empty(1000, np.int64)
    pos[out] = np.arange(1000)
    # the first is drawn once `initial` (10) are buffered, then two are read per one drawn
    assert (out[:10] < 10 + 2 * np.arange(10)).all() and out[0] < 10
    assert (np.arange(1000) - pos <= 50).all()         # nothing is held back more than the buffer past its turn
    assert wds_shuffle(seq, 1, 1, rng).tolist() == list(range(1000))   # buffer 1: the stream order


def test_shard_split_by_rank_and_worker():
    first = np.arange(0, 100, 10)
    count = np.full(10, 10)
    kw = dict(first=first, count=count, world_size=2, epoch=0, seed=1, streams=2, local_batch=5,
              shuffle_buffer=8, initial=4, shard_shuffle=3)
    for r in range(2):
        o = rank_order(rank=r, **kw)
        assert sorted(set((o // 10).tolist())) == list(range(r, 10, 2))      # split_by_node: f mod W
        assert sorted(o.tolist()) == sorted(i for f in range(r, 10, 2) for i in range(10 * f, 10 * f + 10))
        # batches alternate between the rank's two workers: worker 0 holds shards r, r+4, r+8; worker 1 r+2, r+6
        w0 = {r, r + 4, r + 8}
        assert all(set((o[b * 5:(b + 1) * 5] // 10).tolist()) <= (w0 if b % 2 == 0 else {r + 2, r + 6})
                   for b in range(8))
    e1 = rank_order(rank=0, **{**kw, "epoch": 1})
    assert e1.tolist() != rank_order(rank=0, **kw).tolist()                 # redrawn every epoch


def test_plan_equal_counts_and_semantics():
    first = np.arange(0, 50, 10)
    count = np.array([10, 10, 10, 10, 10])
    p = shard_stream_plan(strategy="naive", first=first, count=count, n_samples=50, world_size=2,
                          node_map=np.zeros(2, np.int64), epochs=1, local_batch=5, seed=0, streams=1,
                          shuffle_buffer=8, initial=4, shard_shuffle=0)
    ep = p.epoch(0)
    assert ep.sample_ids.shape == (2, 20)               # rank 0 has 30 samples, rank 1 20: both keep 20
    assert p.meta["samples_left_out_per_epoch"] == 10
    assert p.semantics.as_dict()["global_batch_is_global_shuffles"].startswith("no")


def test_fewer_shards_than_ranks_is_one_line():
    from types import SimpleNamespace

    w = _wl(samples=8, spf=8)
    ctx = SimpleNamespace(workload=w, n_samples=8, world_size=2, node_map=None, epochs=1, local_batch=4, seed=0)
    with pytest.raises(ConfigError, match="1 shards for 2 ranks"):
        WD.shared_read_plan("naive", ctx, meta=None, streams=1, drop_last_batch=False, sampler_order=None)


def test_array_names_must_be_extensions(tmp_path):
    from dlbench.workload import load_spec

    p = tmp_path / "w.yaml"
    p.write_text("name: w\nlayout: webdataset\nsamples: 4\nbatch_size: 2\ncompute: {}\n"
                 "arrays:\n  - {name: a.b, shape: [4], dtype: uint8, role: data}\n")
    with pytest.raises(ConfigError, match="member extensions"):
        load_spec(str(p))


@pytest.mark.parametrize("read", ["stream", "indexed"])
def test_truncated_shard_is_one_line_naming_it(tmp_path, read):
    from dlbench.errors import DataError

    w = _wl(read=read)
    generate(w, tmp_path, seed=0)
    m = Manifest.load(tmp_path)
    p = tmp_path / m.paths[2]
    p.write_bytes(p.read_bytes()[:3000])
    assert any("shard-000002.tar" in q for q in verify(tmp_path))
    r = open_reader(tmp_path, m, w)
    out = np.empty(r.max_row_nbytes, np.uint8)
    with pytest.raises(DataError, match=r"shard-000002\.tar.*(short read|truncated)"):
        r.read_into(23, out)
