"""Token datasets (dlbench/data/fmt_indexed.py): Megatron-LM's indexed dataset (``mmap_indexed_binary``: .bin +
.idx) and DLIO's ``indexed_binary`` (.off.idx/.sz.idx): the index bytes as their readers parse them, generate and
verify on POSIX and through the memory backend, both readers, the mmap counters."""

import struct

import numpy as np
import pytest

from dlbench.data import fmt_indexed as X
from dlbench.data.formats import open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.verify import verify
from dlbench.errors import ConfigError
from dlbench.storage.backend import MemoryBackend
from dlbench.storage.counters import IDX, CounterSet
from dlbench.workload import WorkloadSpec, resolve


def _wl(layout=X.MEGATRON, samples=40, spf=16, tokens=64, dtype="uint16", arrays=None):
    from dlbench.config import from_mapping

    d = {"name": "tok", "layout": layout, "samples": samples, "batch_size": 4, "samples_per_file": spf,
         "arrays": arrays or [{"name": "tokens", "shape": [tokens], "dtype": dtype, "role": "data"}]}
    return resolve(from_mapping(WorkloadSpec, d, where="test"))


def _megatron_index(b: bytes):
    """The .idx read field by field the way Megatron-LM's ``_IndexReader`` reads it (written from its format,
    independently of dlbench's parser): magic, <Q version, <B dtype code, <Q sequences, <Q documents, then int32
    lengths, int64 pointers, int64 document indices."""
    assert b[:9] == b"MMIDIDX\x00\x00"
    version, = struct.unpack("<Q", b[9:17])
    code, = struct.unpack("<B", b[17:18])
    n, = struct.unpack("<Q", b[18:26])
    docs, = struct.unpack("<Q", b[26:34])
    off = 34
    lengths = np.frombuffer(b, np.int32, n, off)
    pointers = np.frombuffer(b, np.int64, n, off + 4 * n)
    doc_idx = np.frombuffer(b, np.int64, docs, off + 12 * n)
    assert off + 12 * n + 8 * docs == len(b)
    return version, code, lengths, pointers, doc_idx


def test_megatron_bin_and_idx(tmp_path):
    w = _wl(samples=40, spf=16, tokens=64)
    generate(w, tmp_path, seed=2)
    m = Manifest.load(tmp_path)
    assert m.paths == ["data-000000.bin", "data-000001.bin", "data-000002.bin"]
    version, code, lengths, pointers, doc_idx = _megatron_index((tmp_path / "data-000002.idx").read_bytes())
    assert (version, code) == (1, 8)                  # uint16 is Megatron's code 8
    assert lengths.tolist() == [64] * 8               # the last file: 40 - 32 sequences of 64 tokens
    assert pointers.tolist() == [128 * k for k in range(8)]
    assert doc_idx.tolist() == list(range(9))         # one sequence per document
    tokens = np.memmap(tmp_path / "data-000002.bin", dtype=np.uint16, mode="r")   # as Megatron maps it
    for j in range(8):
        seq = tokens[pointers[j] // 2: pointers[j] // 2 + lengths[j]]
        assert seq.tobytes() == X.expected_row(w, 2, 32 + j).tobytes()
    assert verify(tmp_path, content=True) == []


def test_dlio_offsets_and_sizes(tmp_path):
    w = _wl(layout=X.DLIO, samples=10, spf=10, tokens=300, dtype="uint8")
    generate(w, tmp_path, seed=0)
    assert (tmp_path / "data-000000.indexed_binary").stat().st_size == 3000
    off = np.fromfile(tmp_path / "data-000000.indexed_binary.off.idx", dtype="<u8")
    sz = np.fromfile(tmp_path / "data-000000.indexed_binary.sz.idx", dtype="<u8")
    assert off.tolist() == list(range(0, 3000, 300)) and sz.tolist() == [300] * 10
    assert verify(tmp_path, checksum=True) == []


@pytest.mark.parametrize("layout", [X.MEGATRON, X.DLIO])
def test_verify_names_a_damaged_index_and_a_changed_token(tmp_path, layout):
    w = _wl(layout=layout)
    generate(w, tmp_path, seed=1)
    m = Manifest.load(tmp_path)
    idx = tmp_path / X.index_names(layout, m.paths[1])[0]
    good = idx.read_bytes()
    b = bytearray(good)
    b[-1] ^= 0x40          # the last document index / the last offset
    idx.write_bytes(bytes(b))
    probs = verify(tmp_path)
    assert len(probs) == 1 and m.paths[1] in probs[0], probs
    idx.write_bytes(good)
    data = tmp_path / m.paths[0]
    d = bytearray(data.read_bytes())
    d[5] ^= 1
    data.write_bytes(bytes(d))
    assert verify(tmp_path) == []                          # structure intact
    assert any(m.paths[0] in p for p in verify(tmp_path, checksum=True))


@pytest.mark.parametrize("layout", [X.MEGATRON, X.DLIO])
@pytest.mark.parametrize("via", ["library", "pread"])
def test_readers_deliver_the_stored_tokens_and_count(tmp_path, layout, via):
    w = _wl(layout=layout, samples=40, spf=16)
    generate(w, tmp_path, seed=4)
    m = Manifest.load(tmp_path)
    cs = CounterSet()
    r = open_reader(tmp_path, m, w, via=via, counters=cs)
    assert type(r).__name__ == ("MMapReader" if via == "library" else "PreadReader")
    out = np.empty(r.max_row_nbytes, np.uint8)
    for i in (39, 0, 17, 16, 3):
        assert r.read_into(i, out) == 128
        assert out.tobytes() == X.expected_row(w, 4, i).tobytes()
    r.close()
    c = cs.totals()["shared"]
    if via == "library":    # the copies out of the map, not read calls
        assert (c[IDX["MMAP_READS"]], c[IDX["MMAP_BYTES_READ"]], c[IDX["POSIX_READS"]]) == (5, 640, 0)
        assert c[IDX["POSIX_OPENS"]] == 3
    else:
        assert (c[IDX["POSIX_READS"]], c[IDX["POSIX_BYTES_READ"]], c[IDX["MMAP_READS"]]) == (5, 640, 0)


def test_auto_reader_per_layout(tmp_path):
    for layout, want in ((X.MEGATRON, "MMapReader"), (X.DLIO, "PreadReader")):
        w = _wl(layout=layout, samples=8, spf=8)
        d = tmp_path / layout
        generate(w, d, seed=0)
        assert type(open_reader(d, Manifest.load(d), w)).__name__ == want


def test_page_faults_of_a_cold_map_are_counted(tmp_path):
    """A fresh map's pages are faulted in by the copies (counted; the kernel maps several pages per fault), and
    /proc/self/io's device bytes are taken at close."""
    w = _wl(samples=256, spf=256, tokens=2048)       # 1 MiB in one file, 4 KiB per sequence
    generate(w, tmp_path, seed=0)
    m = Manifest.load(tmp_path)
    cs = CounterSet()
    r = open_reader(tmp_path, m, w, via="library", counters=cs)
    out = np.empty(r.max_row_nbytes, np.uint8)
    for i in range(256):
        r.read_into(i, out)
    r.close()
    c = cs.totals()["shared"]
    assert c[IDX["MMAP_READS"]] == 256 and c[IDX["MMAP_BYTES_READ"]] == 1 << 20
    assert c[IDX["MMAP_MINOR_FAULTS"]] + c[IDX["MMAP_MAJOR_FAULTS"]] >= 1
    assert c[IDX["MMAP_DEVICE_BYTES_READ"]] >= 0


@pytest.mark.parametrize("layout", [X.MEGATRON, X.DLIO])
def test_memory_backend_generate_verify_read(tmp_path, layout):
    w = _wl(layout=layout, samples=24, spf=10)
    mem = MemoryBackend()
    generate(w, tmp_path, seed=5, storage=mem)
    m = Manifest.load(tmp_path)
    assert not any((tmp_path / p).exists() for p in m.paths)           # the bytes live in the backend
    assert set(mem.list()) == {p for rel in m.paths for p in (rel, *X.index_names(layout, rel))}
    assert verify(tmp_path, content=True, storage=mem) == []
    r = open_reader(tmp_path, m, w, storage=mem)                          # auto on a backend: pread
    out = np.empty(r.max_row_nbytes, np.uint8)
    for i in range(24):
        r.read_into(i, out)
        assert out.tobytes() == X.expected_row(w, 5, i).tobytes()
    with pytest.raises(ConfigError, match="numpy.memmap.*storage backend memory.*--read-via pread"):
        open_reader(tmp_path, m, w, storage=mem, via="library")
    mem.files[X.index_names(layout, m.paths[2])[0]] = bytearray(b"junk")
    assert any(m.paths[2] in p for p in verify(tmp_path, storage=mem))


def test_one_token_array_only(tmp_path):
    from dlbench.workload import load_spec

    p = tmp_path / "w.yaml"
    base = "name: tok\nlayout: indexed_binary\nsamples: 8\nbatch_size: 2\ncompute: {}\narrays:\n"
    p.write_text(base + "  - {name: a, shape: [4], dtype: uint16, role: data}\n"
                        "  - {name: b, shape: [1], dtype: int64, role: label}\n")
    with pytest.raises(ConfigError, match="one 1-D token array"):
        load_spec(str(p))
    p.write_text(base + "  - {name: a, shape: [4], dtype: float16, role: data}\n")
    with pytest.raises(ConfigError, match="dtype float16"):
        load_spec(str(p))


def test_direct_and_unknown_via_refused(tmp_path):
    w = _wl(samples=8, spf=8)
    generate(w, tmp_path, seed=0)
    m = Manifest.load(tmp_path)
    with pytest.raises(ConfigError, match="--cache direct"):
        open_reader(tmp_path, m, w, direct=True)
    with pytest.raises(ConfigError, match="--read-via=mmap"):
        open_reader(tmp_path, m, w, via="mmap")


def test_token_readers_benchmark_smoke(tmp_path):
    """benchmarks/token_readers.py with tiny arguments: every variant runs and gives a ratio to its bare loop."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "token_readers.py"
    spec = importlib.util.spec_from_file_location("token_readers", path)
    mod = importlib.util.module_from_spec(spec)
    import sys

    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
        res = mod.main(["--samples", "64", "--tokens", "64", "--shard-samples", "16", "--repeats", "1",
                        "--dir", str(tmp_path)])
    finally:
        sys.path.remove(str(path.parent))
    assert set(res["ratio_to_bare"]) == {"mmap dlbench", "mmap dlbench+counters", "pread dlbench+counters",
                                         "wds dlbench+counters"}
    assert all(v > 0 for v in res["us_per_sample"].values())


@pytest.mark.parametrize("layout", [X.MEGATRON, X.DLIO])
def test_index_written_and_checked_in_pieces(tmp_path, monkeypatch, layout):
    """A large index is written and compared piece by piece (bounded memory): with 5-entry pieces the files are
    the same bytes, verify compares them piece by piece, and a change in a later piece is found."""
    w = _wl(layout=layout, samples=23, spf=23, tokens=8)
    generate(w, tmp_path / "whole", seed=0)
    monkeypatch.setattr(X, "INDEX_CHUNK", 5)
    generate(w, tmp_path / "pieces", seed=0)
    m = Manifest.load(tmp_path / "pieces")
    for rel in X.index_names(layout, m.paths[0]):
        assert (tmp_path / "pieces" / rel).read_bytes() == (tmp_path / "whole" / rel).read_bytes()
    if layout == X.MEGATRON:
        _, _, lengths, pointers, doc_idx = _megatron_index((tmp_path / "pieces" / "data-000000.idx").read_bytes())
        assert lengths.tolist() == [8] * 23 and pointers.tolist() == list(range(0, 23 * 16, 16))
        assert doc_idx.tolist() == list(range(24))
    assert verify(tmp_path / "pieces") == []
    idx = tmp_path / "pieces" / X.index_names(layout, m.paths[0])[0]
    b = bytearray(idx.read_bytes())
    b[-9] ^= 1                 # inside the last piece: a pointer / document index (not the sizes verify reads)
    idx.write_bytes(bytes(b))
    assert any("not the one generate writes" in p for p in verify(tmp_path / "pieces"))


@pytest.mark.parametrize("via", ["library", "pread"])
def test_truncated_data_file_is_one_line_naming_it(tmp_path, via):
    from dlbench.errors import DataError

    w = _wl(samples=16, spf=16)
    generate(w, tmp_path, seed=0)
    m = Manifest.load(tmp_path)
    p = tmp_path / m.paths[0]
    p.write_bytes(p.read_bytes()[:128 * 10 + 5])          # 10 whole sequences and a bit
    assert any("truncated" in q or "manifest says" in q for q in verify(tmp_path))
    r = open_reader(tmp_path, m, w, via=via)
    out = np.empty(r.max_row_nbytes, np.uint8)
    r.read_into(9, out)
    with pytest.raises(DataError, match=r"data-000000\.bin.*sample 10.*truncated"):
        r.read_into(10, out)
