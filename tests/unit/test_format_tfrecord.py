"""Format tfrecord (dlbench/data/fmt_tfrecord.py): TFRecord framing with masked CRC32C, tf.train.Example encoding,
writer + index files, the indexed and tf.data readers, verify, and the tf.data order planner (plan/tfdata.py)."""

import struct

import numpy as np
import pytest

from dlbench.data import fmt_tfrecord as T
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.errors import ConfigError, DataError
from dlbench.plan.tfdata import rank_order, shuffle_buffer_order, tfdata_plan
from dlbench.storage.counters import IDX, CounterSet
from dlbench.workload import WorkloadSpec, resolve

crc32c = pytest.importorskip("crc32c")


def _spec(read="indexed", samples=40, spf=8, record_size=None, dtype="uint8", shape=(1000,), **tf):
    from dlbench.config import from_mapping

    d = {"name": "tfr", "layout": "tfrecord", "samples": samples, "batch_size": 4, "samples_per_file": spf,
         "arrays": [{"name": "x", "shape": list(shape), "dtype": dtype, "role": "data"}],
         "tfrecord": {"read": read, **tf}}
    if record_size:
        d["record_size"] = record_size
    return from_mapping(WorkloadSpec, d, where="test")


def _wl(**kw):
    return resolve(_spec(**kw))


# ---- framing and CRC ------------------------------------------------------------------------------------

def test_crc32c_published_vector_and_mask():
    assert crc32c.crc32c(b"123456789") == 0xE3069283            # the published CRC-32C check value (RFC 3720)
    c = 0xE3069283
    want = ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert T.mask(c) == T.masked_crc(b"123456789") == want == 0xC78AB0E5
    for v in (0, 1, 0xFFFFFFFF, 0x80000000, 0x12345678):
        assert T.unmask(T.mask(v)) == v


def test_record_is_the_one_tensorflow_writes():
    """tf.io.TFRecordWriter (TensorFlow 2.21) writing b"123456789", captured once: length, its masked CRC,
    payload, the payload's masked CRC (0xC78AB0E5 = mask(0xE3069283))."""
    assert T.frame(b"123456789") == bytes.fromhex("090000000000000037f97139313233343536373839e5b08ac7")
    assert T.header(1038) == bytes.fromhex("0e04000000000000049cc8b9")   # a 1,038-byte payload


def test_frame_round_trip():
    payload = bytes(range(256)) * 3
    rec = T.frame(payload)
    assert len(rec) == len(payload) + 16
    (n,) = struct.unpack("<Q", rec[:8])
    assert n == len(payload)
    assert struct.unpack("<I", rec[8:12])[0] == T.mask(crc32c.crc32c(rec[:8]))
    assert rec[12:12 + n] == payload
    assert struct.unpack("<I", rec[12 + n:])[0] == T.mask(crc32c.crc32c(payload))


def _decode_varint(b, p):
    x = s = 0
    while True:
        c = b[p]
        p += 1
        x |= (c & 0x7F) << s
        if c < 0x80:
            return x, p
        s += 7


def _tiny_decoder(b):
    """A second, minimal protobuf decoder: Example -> {name: value} (bytes or int)."""
    def fields(p, end):
        while p < end:
            k, p = _decode_varint(b, p)
            assert k & 7 == 2
            n, p = _decode_varint(b, p)
            yield k >> 3, p, p + n
            p += n
    out = {}
    (f1, s1, e1), = list(fields(0, len(b)))
    assert f1 == 1
    for _, es, ee in fields(s1, e1):
        (_, ks, ke), (_, vs, ve) = list(fields(es, ee))
        (kind, ls, le), = list(fields(vs, ve))
        (_, xs, xe), = list(fields(ls, le))
        out[bytes(b[ks:ke]).decode()] = bytes(b[xs:xe]) if kind == 1 else _decode_varint(b, xs)[0]
        assert kind in (1, 3)
    return out


@pytest.mark.parametrize("n", [0, 1, 127, 128, 16383, 16384, 150528])
def test_example_encoding_decodes(n):
    img = bytes((i * 7) % 256 for i in range(n))
    pre, suf = T.example_parts(n)
    payload = pre + img + suf
    assert _tiny_decoder(payload) == {"image": img, "size": n}
    kind, vals = T.parse_example(payload)["image"]
    assert kind == "bytes" and payload[vals[0][0]:vals[0][1]] == img
    assert T.parse_example(payload)["size"] == ("int64", [n])


def test_example_is_tensorflows_serialization():
    """The bytes TensorFlow 2.21 writes for {image: b'\\x00..\\x09', size: 10} (tf.train.Example
    SerializeToString, captured once): ours must be identical."""
    want = bytes.fromhex("0a280a170a05696d616765120e0a0c0a0a000102030405060708090a0d0a0473697a6512051a030a010a")
    pre, suf = T.example_parts(10)
    assert pre + bytes(range(10)) + suf == want


# ---- generate, index, readers, verify ---------------------------------------------------------------------

@pytest.fixture
def data(tmp_path):
    w = _wl()
    generate(w, tmp_path / "d", seed=3)
    return w, tmp_path / "d"


def test_files_index_and_framing(data):
    w, d = data
    m = Manifest.load(d)
    assert m.paths[0] == "data-000000.tfrecord" and len(m.paths) == 5
    p = T.row_nbytes(m.spec, 3)[0]
    stride = p + 16
    assert list(m.nbytes) == [8 * stride] * 5
    idx = (d / "index" / "data-000002.tfrecord.idx").read_text().split("\n")
    assert idx[:3] == [f"0 {stride}", f"{stride} {stride}", f"{2 * stride} {stride}"]
    raw = (d / m.paths[2]).read_bytes()
    for j, line in enumerate(idx[:-1]):
        off, ln = map(int, line.split())
        rec = raw[off:off + ln]
        (n,) = struct.unpack("<Q", rec[:8])
        assert n == ln - 16
        assert struct.unpack("<I", rec[12 + n:])[0] == T.mask(crc32c.crc32c(rec[12:12 + n]))
        assert rec[12:12 + n] == T.expected_row(w, 3, 16 + j).tobytes()
    assert m.sample_nbytes().tolist() == [p] * 40


@pytest.mark.parametrize("read", ["indexed", "tfdata"])
def test_readers_return_the_payload_and_decode_the_image(data, read):
    w, d = data
    w = _wl(read=read)
    m = Manifest.load(d)
    r = T.open_reader(d, m, w)
    out = np.empty(r.max_row_nbytes, np.uint8)
    img = np.empty(r.decoded_nbytes, np.uint8)
    order = np.random.default_rng(0).permutation(40)
    for i in order.tolist():
        n = r.read_into(i, out)
        assert np.array_equal(out[:n], T.expected_row(w, 3, i))
        k = r.decode_into(out, n, img)
        assert k == 1000 and img[:k].tobytes() == _tiny_decoder(out[:n].tobytes())["image"]
    r.close()


def test_tfdata_reader_reads_each_stream_front_to_back(data):
    """In the tf.data order with S loader workers (worker w gets batches w, w+S, ...), each worker's reader
    returns the right records; with one stream it reads its files sequentially: nothing read twice, nothing
    dropped from its buffer (with 2 streams over 5 files the last batches wrap to the other worker)."""
    w, d = data
    w = _wl(read="tfdata", shuffle_buffer=6)
    m = Manifest.load(d)
    for streams in (1, 2):   # 5 files: with 2 streams the last batches wrap to the other worker
        order = rank_order(first=m.first, count=m.count, world_size=1, rank=0, epoch=1, seed=3, streams=streams,
                           local_batch=4, shuffle_buffer=6, file_shuffle=True)
        assert sorted(order.tolist()) == list(range(40))
        batches = [order[i:i + 4] for i in range(0, 40, 4)]
        for k in range(streams):
            cnt = CounterSet().new("shared", len(m.paths))
            r = T.open_reader(d, m, w, counters=cnt)
            out = np.empty(r.max_row_nbytes, np.uint8)
            mine = [b for j, b in enumerate(batches) if j % streams == k]
            for b in mine:
                for i in b.tolist():
                    n = r.read_into(i, out)
                    assert np.array_equal(out[:n], T.expected_row(w, 3, i))
            if streams == 1:   # every record read once, in file order; the shuffle buffer's records kept, then given
                assert (r.rereads, r.evicted, len(r._kept)) == (0, 0, 0)
                # one open and one buffered read (256 KiB buffer > 8.4 KB file) per file: read front to back
                assert (cnt.c[IDX["POSIX_OPENS"]], cnt.c[IDX["POSIX_READS"]]) == (5, 5)
                assert cnt.c[IDX["POSIX_BYTES_READ"]] == int(m.nbytes.sum())
            r.close()


def test_flipped_payload_byte_named_by_file_and_record(data):
    w, d = data
    m = Manifest.load(d)
    stride = int(m.nbytes[1]) // 8
    path = d / m.paths[1]
    b = bytearray(path.read_bytes())
    b[5 * stride + 12 + 300] ^= 0x40          # file 1, record 5, inside the image
    path.write_bytes(bytes(b))
    assert verify(d) == []                     # structure only: headers and index are intact
    probs = verify(d, checksum=True)
    assert any("data-000001.tfrecord: record 5 (sample 13): payload CRC mismatch" in p for p in probs), probs
    assert any("data-000001.tfrecord" in p for p in verify(d, content=True))
    r = T.open_reader(d, m, _wl(read="tfdata"))
    out = np.empty(r.max_row_nbytes, np.uint8)
    with pytest.raises(DataError, match=r"data-000001.tfrecord: record 5: payload CRC mismatch"):
        for i in range(8, 16):
            r.read_into(i, out)
    r.close()


def test_flipped_length_and_missing_index(data):
    w, d = data
    m = Manifest.load(d)
    path = d / m.paths[0]
    b = bytearray(path.read_bytes())
    b[2] ^= 1
    path.write_bytes(bytes(b))
    (d / "index" / "data-000003.tfrecord.idx").unlink()
    probs = verify(d)
    assert any("data-000000.tfrecord: record 0: header length CRC mismatch" in p for p in probs), probs
    assert any("data-000003.tfrecord.idx: missing" in p for p in probs), probs


def test_resume_rewrites_damaged_file_and_missing_index(data):
    w, d = data
    m = Manifest.load(d)
    before = (d / m.paths[4]).read_bytes()
    (d / "index" / "data-000004.tfrecord.idx").unlink()
    b = bytearray((d / m.paths[2]).read_bytes())
    b[-1] ^= 1
    (d / m.paths[2]).write_bytes(bytes(b))
    res = generate(w, d, seed=3)
    assert (res.files_written, res.files_skipped) == (2, 3)
    assert (d / m.paths[4]).read_bytes() == before
    assert verify(d, content=True) == []


def test_record_sizes_per_file(tmp_path):
    w = _wl(record_size={"kind": "normal", "mean_bytes": 3000, "std_bytes": 600, "min_bytes": 1,
                         "max_bytes": 5400}, shape=(3000,))
    generate(w, tmp_path / "d", seed=1)
    m = Manifest.load(tmp_path / "d")
    sizes = T.image_sizes(m.spec, 1)
    assert len(set(sizes.tolist())) > 1 and sizes.max() <= 5400
    assert verify(tmp_path / "d", content=True) == []
    r = T.open_reader(tmp_path / "d", m, w)
    out = np.empty(r.max_row_nbytes, np.uint8)
    img = np.empty(w.decoded_nbytes, np.uint8)
    assert r.decode_into(out, r.read_into(17, out), img) == sizes[2]


def test_float_arrays_unaligned_in_the_record(tmp_path):
    w = _wl(dtype="float32", shape=(7, 5), samples=6, spf=3)
    generate(w, tmp_path / "d", seed=0)
    assert verify(tmp_path / "d", content=True) == []


def test_read_via_and_direct_are_refused(data):
    w, d = data
    m = Manifest.load(d)
    with pytest.raises(ConfigError, match="--read-via=pread: layout tfrecord"):
        T.open_reader(d, m, w, via="pread")
    with pytest.raises(ConfigError, match="--cache direct"):
        T.open_reader(d, m, w, direct=True)


def test_tfrecord_section_needs_the_layout():
    from dlbench.config import from_mapping
    from dlbench.workload import _check_spec

    s = from_mapping(WorkloadSpec, {"name": "h", "layout": "hdf5_blocks", "samples": 4, "batch_size": 1,
                                    "arrays": [{"name": "x", "shape": [4], "dtype": "uint8"}],
                                    "tfrecord": {"read": "tfdata"}}, where="t")
    with pytest.raises(ConfigError, match="a 'tfrecord' section needs layout: tfrecord"):
        _check_spec(s, "t")


# ---- the tf.data order (pure) -----------------------------------------------------------------------------

def test_shuffle_buffer_semantics():
    seq = np.arange(1000)
    out = shuffle_buffer_order(seq, 10, np.random.default_rng(0))
    assert sorted(out.tolist()) == list(range(1000))
    # an element leaves the buffer no earlier than its read position minus the buffer (it is read at
    # step max(0, i - B + 1)) and the output is not the identity
    pos = np.empty(1000, int)
    pos[out] = np.arange(1000)
    assert (pos >= np.arange(1000) - 9).all() and not np.array_equal(out, seq)
    assert np.array_equal(shuffle_buffer_order(seq, 1, np.random.default_rng(0)), seq)


def test_rank_order_shards_files_and_interleaves_streams():
    first = np.arange(0, 48, 8)
    count = np.full(6, 8)
    o0 = rank_order(first=first, count=count, world_size=2, rank=0, epoch=0, seed=1, streams=2, local_batch=4,
                    shuffle_buffer=1, file_shuffle=False)
    # rank 0 has files 0, 2, 4; stream 0 reads files 0 and 4, stream 1 file 2; batches alternate
    assert o0.tolist()[:16] == [0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23]
    assert sorted(o0.tolist()) == sorted(list(range(0, 8)) + list(range(16, 24)) + list(range(32, 40)))
    plan = tfdata_plan(strategy="naive", first=first, count=count, n_samples=48, world_size=2,
                       node_map=np.zeros(2, int), epochs=2, local_batch=4, seed=1, streams=2, shuffle_buffer=8,
                       file_shuffle=True)
    ep = plan.epoch(1)
    assert sorted(np.concatenate([ep.rank_samples(0), ep.rank_samples(1)]).tolist()) == list(range(48))
    assert plan.read_pattern == "tfdata" and plan.meta["samples_left_out_per_epoch"] == 0
    assert not np.array_equal(plan.epoch(0).sample_ids, ep.sample_ids)


def test_unequal_ranks_are_cut_to_the_same_steps():
    first = np.arange(0, 40, 8)
    plan = tfdata_plan(strategy="naive", first=first, count=np.full(5, 8), n_samples=40, world_size=2,
                       node_map=np.zeros(2, int), epochs=1, local_batch=4, seed=0, streams=1, shuffle_buffer=4,
                       file_shuffle=True)
    ep = plan.epoch(0)
    assert list(ep.counts()) == [16, 16] and plan.meta["samples_left_out_per_epoch"] == 8


def test_fewer_files_than_ranks_shards_records():
    """DLIO's element sharding: every rank reads every file, rank r keeps every W-th record of the shuffled
    sequence; the ranks' records are disjoint and cover the dataset."""
    first, count = np.asarray([0]), np.asarray([10])
    rows = [rank_order(first=first, count=count, world_size=2, rank=r, epoch=0, seed=4, streams=1, local_batch=2,
                       shuffle_buffer=4, file_shuffle=True) for r in range(2)]
    assert sorted(rows[0].tolist() + rows[1].tolist()) == list(range(10)) and len(rows[0]) == 5


def test_generated_records_carry_dlio_2_0_0_size_feature(data):
    """The side-by-side with DLIO 2.0.0 found one byte more per record: dlbench wrote size=<bytes> (3-byte
    varint for 64 KiB) where DLIO 2.0.0 writes the side of its square image (256). Records now match."""
    w, d = data
    m = Manifest.load(d)
    raw = (d / m.paths[0]).read_bytes()
    (length,) = struct.unpack_from("<Q", raw, 0)
    payload = raw[12:12 + length]
    img_kind, img = T.parse_example(payload)["image"]
    n = img[0][1] - img[0][0]
    import math

    assert T.parse_example(payload)["size"] == ("int64", [math.isqrt(n)])
    pre, suf = T._parts(65536)
    # DLIO 2.0.0's 64 KiB records, as traced by benchmarks/dlio_side_by_side.py: 8,396,160 B for 128 records
    assert suf.endswith(bytes([0x02, 0x80, 0x02])) and len(pre) + 65536 + len(suf) + 16 == 8_396_160 // 128


def test_tfdata_plan_with_fewer_files_than_ranks_is_every_ranks_own_order():
    """The plan builds the shared order once when every rank reads every file; it must equal each rank's own
    rank_order (the equal-count cut applied)."""
    first, count = np.arange(0, 30, 10), np.full(3, 10)
    kw = dict(first=first, count=count, seed=3, streams=2, local_batch=2, shuffle_buffer=4, file_shuffle=True)
    p = tfdata_plan(strategy="naive", n_samples=30, world_size=5, node_map=np.arange(5), epochs=2, **kw)
    for e in (0, 1):
        ref = [rank_order(world_size=5, rank=r, epoch=e, **kw) for r in range(5)]
        n = min(len(r) for r in ref)
        assert np.array_equal(p.epoch(e).sample_ids, np.stack([r[:n] for r in ref]))
