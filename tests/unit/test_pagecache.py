"""--cache keep|drop|direct (issue 17): page-cache eviction, O_DIRECT reads, device-bytes accounting, the
verdict, and read-latency percentiles on synthetic intervals."""

import os

import numpy as np
import pytest

from dlbench import metrics
from dlbench import workload as W
from dlbench.data.content import expected_row
from dlbench.data.formats import open_reader
from dlbench.data.generate import generate
from dlbench.data.manifest import Manifest
from dlbench.data.registry import direct_support
from dlbench.errors import ConfigError
from dlbench.storage import LocalTier, aligned_empty, pagecache
from dlbench.storage.pagecache import CacheMode, ReadPolicy
from dlbench.timeline import PHASE_ID, Timeline


def _direct_ok(path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


# ---- eviction and device bytes -----------------------------------------------------------------------

def test_evicted_file_is_read_from_the_device_again(tmp_path):
    """A file read (warm), evicted with posix_fadvise DONTNEED, read again: the re-read reaches the device
    (/proc/self/io read_bytes grows by about the file's size), where this file system accounts it."""
    p = tmp_path / "data.bin"
    p.write_bytes(os.urandom(2 << 20))
    (tmp_path / "small").write_bytes(b"x" * 100)
    acc = pagecache.device_accounting(tmp_path / "small")
    if not acc["available"]:
        pytest.skip(f"device bytes unavailable here: {acc['reason']}")
    p.read_bytes()
    warm0 = pagecache.proc_io()["read_bytes"]
    p.read_bytes()
    warm = pagecache.proc_io()["read_bytes"] - warm0
    got = pagecache.evict([p])
    assert got == {"files": 1, "bytes": 2 << 20}
    cold0 = pagecache.proc_io()["read_bytes"]
    p.read_bytes()
    cold = pagecache.proc_io()["read_bytes"] - cold0
    assert cold >= 0.9 * (2 << 20) > warm


def test_evict_skips_vanished_files_and_lists_trees(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 10)
    (tmp_path / "a" / "b" / "y").write_bytes(b"2" * 20)
    files = pagecache.files_under(tmp_path / "a")
    assert sorted(os.path.basename(f) for f in files) == ["x", "y"]
    assert pagecache.evict([*files, str(tmp_path / "gone")], sync=False) == {"files": 2, "bytes": 30}
    assert pagecache.files_under(tmp_path / "none") == []


def test_fs_of_takes_the_longest_mount_prefix(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                  "30 22 0:5 / /scratch rw shared:1 - lustre 10.0.0.1@tcp:/fs rw\n"
                  "31 22 0:6 / /scratch2 rw - tmpfs tmpfs rw\n")
    assert pagecache.fs_of("/scratch/x/y", str(mi)) == ("lustre", "/scratch")
    assert pagecache.fs_of("/scratch2", str(mi)) == ("tmpfs", "/scratch2")
    assert pagecache.fs_of("/home/u", str(mi)) == ("ext4", "/")


def test_memory_fs_has_no_device_bytes(tmp_path, monkeypatch):
    p = tmp_path / "f"
    p.write_bytes(b"x")
    monkeypatch.setattr(pagecache, "fs_of", lambda path: ("tmpfs", "/dev/shm"))
    acc = pagecache.device_accounting(p)
    assert not acc["available"] and "memory-backed" in acc["reason"]


def test_verdict_thresholds_and_unknown():
    assert pagecache.verdict(100, 95, True)[0] == "cold"
    assert pagecache.verdict(100, 90, True)[0] == "cold"
    assert pagecache.verdict(100, 10, True)[0] == "warm"
    assert pagecache.verdict(100, 50, True)[0] == "mixed"
    word, line = pagecache.verdict(100, 0, False, "tmpfs")
    assert word == "unknown" and "unavailable" in line and "tmpfs" in line   # never "warm" blindly
    assert pagecache.verdict(0, 0, True)[0] == "none"


def test_summarize_sums_ranks_and_checks_mlperf():
    acc = {"available": True, "reason": "probe"}
    ranks = [{"epochs": [{"epoch": -1, "requested_bytes": 0, "device_read_bytes": 0, "rchar_bytes": 0},
                         {"epoch": 0, "requested_bytes": 100, "device_read_bytes": 100, "rchar_bytes": 110},
                         {"epoch": 1, "requested_bytes": 100, "device_read_bytes": 0, "rchar_bytes": 110}],
              "evictions": [{"before_epoch": 0, "evict_s": 0.5, "files": 3, "bytes": 300}], "accounting": acc},
             {"epochs": [{"epoch": 0, "requested_bytes": 100, "device_read_bytes": 100, "rchar_bytes": 110},
                         {"epoch": 1, "requested_bytes": 100, "device_read_bytes": 0, "rchar_bytes": 110}],
              "evictions": [{"before_epoch": 0, "evict_s": 0.7, "files": 0, "bytes": 0}], "accounting": None}]
    s = pagecache.summarize(CacheMode.KEEP.policy(), ranks, dataset_bytes=10, node_mem_bytes=100)
    ep = {d["epoch"]: d for d in s["per_epoch"]}
    assert ep[0]["requested_bytes"] == 200 and ep[0]["verdict"] == "cold" and ep[1]["verdict"] == "warm"
    assert s["verdict"] == "mixed"
    assert s["evictions"] == [{"before_epoch": 0, "evict_s": 0.7, "files": 3, "bytes": 300}]
    assert not s["mlperf"]["ok"] and "not met" in s["mlperf"]["line"]
    s = pagecache.summarize(CacheMode.DROP.policy(), ranks, dataset_bytes=10, node_mem_bytes=100)
    assert s["mlperf"]["ok"] and s["mlperf"]["moot"]
    s = pagecache.summarize(CacheMode.KEEP.policy(), ranks, dataset_bytes=600, node_mem_bytes=100)
    assert s["mlperf"]["meets_5x"]
    ranks[0]["accounting"] = {"available": False, "reason": "tmpfs", "fs_type": "tmpfs", "mount": "/dev/shm"}
    s = pagecache.summarize(CacheMode.DIRECT.policy(), ranks, dataset_bytes=600, node_mem_bytes=100)
    assert not s["mlperf"]["ok"] and "memory-backed" in s["mlperf"]["line"] and s["verdict"] == "unknown"


# ---- O_DIRECT -------------------------------------------------------------------------------------------

def test_pread_direct_alignment(tmp_path):
    """Unaligned offsets, lengths and buffers give the same bytes as a buffered read; aligned ones read
    straight into the buffer; a read past the end of the file is short."""
    p = tmp_path / "f.bin"
    data = os.urandom(3 * 4096 + 123)
    p.write_bytes(data)
    if not _direct_ok(p):
        pytest.skip("this file system refuses O_DIRECT")
    fd = pagecache.open_direct(p)
    bounce = pagecache.DirectBuffer(4096)
    try:
        base = aligned_empty(5 * 4096)
        for off, n, shift in [(0, 4096, 0), (4096, 8192, 0), (1, 100, 0), (4000, 200, 3), (12345, 1, 17),
                              (0, len(data), 5), (7, 3 * 4096, 1)]:
            out = base[shift:shift + n]
            assert pagecache.pread_direct(fd, out, n, off, bounce) == n
            assert bytes(out) == data[off:off + n]
        out = base[:8192]
        assert pagecache.pread_direct(fd, out, 8192, 2 * 4096, bounce) == 4096 + 123   # end of file
        assert bytes(out[:4096 + 123]) == data[2 * 4096:]
        assert bounce.buf.ctypes.data % pagecache.DIRECT_ALIGN == 0
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    out = {}
    for name in ("hep_cnn", "ptychonn", "imagenet", "cosmoflow"):
        wl = W.load(name, scale="tiny", samples=16)
        d = tmp_path_factory.mktemp(name)
        generate(wl, d, seed=3, progress=False)
        out[name] = (wl, d)
    return out


@pytest.mark.parametrize("name", ["hep_cnn", "ptychonn", "imagenet"])
def test_direct_readers_return_the_generated_rows(datasets, name):
    wl, d = datasets[name]
    m = Manifest.load(d)
    if not _direct_ok(d / m.paths[0]):
        pytest.skip("this file system refuses O_DIRECT")
    with open_reader(d, m, wl, direct=True) as r:
        out = aligned_empty(r.max_row_nbytes + 8)
        for i in (0, 15, 7, 3):
            exp = expected_row(wl, 3, i)
            view = out[3:3 + r.max_row_nbytes]          # an unaligned destination too
            assert r.read_into(i, view) == exp.size
            assert np.array_equal(view[:exp.size], exp)
        if r.supports_runs:                               # aggregated runs (surrogatetrain): block mode
            rows = aligned_empty((5, r.max_row_nbytes))
            assert r.read_run_into(4, 5, rows) == 5 * r.max_row_nbytes
            for k in range(5):
                assert np.array_equal(rows[k], expected_row(wl, 3, 4 + k))


def test_direct_hdf5_per_sample_is_refused_with_the_reason(datasets):
    """libhdf5 opens per-sample files itself and h5py has no direct VFD here: the reader refuses, and the
    runner's fallback (buffered + eviction) carries this message as its warning."""
    wl, d = datasets["cosmoflow"]
    ok, why = direct_support("hdf5_per_sample")
    assert not ok and "libhdf5" in why and "direct_vfd" in why and "evicted" in why
    with pytest.raises(ConfigError, match="hdf5_per_sample"):
        open_reader(d, Manifest.load(d), wl, direct=True)
    assert direct_support("hdf5_shared") == (True, "")


def test_local_tier_direct_reads(tmp_path):
    t = LocalTier(tmp_path / "local", node=0, capacity_bytes=1 << 20, direct=True)
    rows = {i: os.urandom(n) for i, n in [(1, 17), (2, 4096), (3, 10_000)]}
    for i, b in rows.items():
        t.put(i, np.frombuffer(b, dtype=np.uint8))
    if not _direct_ok(t.path_of(1)):
        pytest.skip("this file system refuses O_DIRECT")
    out = aligned_empty(16384)
    for i, b in rows.items():
        assert t.read_into(i, out[1:]) == len(b)
        assert bytes(out[1:1 + len(b)]) == b
    assert t.counters.reads == 3


# ---- read latency percentiles ----------------------------------------------------------------------------

def _reads(rank, durations_ns, tier=0, epoch=0, t0=0):
    tl = Timeline(16, rank=rank)
    t = t0
    for d in durations_ns:
        tl.add(PHASE_ID["read"], t, t + int(d), epoch, 0, 100, tier)
        t += int(d) + 10
    return tl


def test_read_latency_per_rank_is_exact_and_per_tier():
    rng = np.random.default_rng(0)
    shared = rng.lognormal(12, 1, 500).astype(np.int64) + 1
    local = rng.lognormal(9, 0.5, 300).astype(np.int64) + 1
    tl = _reads(0, shared, tier=0)
    for d in local:
        tl.add(PHASE_ID["read"], 0, int(d), 1, 0, 10, 1)
    tl.add(PHASE_ID["read"], 0, 10 ** 12, -1, 0, 10, 0)   # a prologue read: left out
    tl.add(PHASE_ID["compute"], 0, 10 ** 12, 0, 0, 0, 0)  # not a read
    lat = metrics.read_latency_rank(tl.arrays())
    sh, lo = lat["tiers"]["shared"], lat["tiers"]["local"]
    assert sh["count"] == 500 and lo["count"] == 300 and set(lat["tiers"]) == {"shared", "local"}
    for q in (50, 95, 99):
        assert sh[f"p{q}_s"] == pytest.approx(np.percentile(shared, q) * 1e-9)
        assert lo[f"p{q}_s"] == pytest.approx(np.percentile(local, q) * 1e-9)
    assert sh["max_s"] == pytest.approx(shared.max() * 1e-9) and sh["mean_s"] == pytest.approx(shared.mean() * 1e-9)


def test_read_latency_merged_over_ranks_within_histogram_resolution():
    rng = np.random.default_rng(1)
    parts, all_d = [], []
    for r in range(3):
        d = (rng.lognormal(11 + r, 0.8, 2000)).astype(np.int64) + 1
        all_d.append(d)
        parts.append(metrics.read_latency_rank(_reads(r, d).arrays()))
    m = metrics.merge_read_latency(parts)
    cat = np.concatenate(all_d)
    row = m["all"]["shared"]
    assert row["count"] == cat.size and row["ranks"] == 3
    assert row["max_s"] == pytest.approx(cat.max() * 1e-9)
    assert row["mean_s"] == pytest.approx(cat.mean() * 1e-9)
    for q in (50, 95, 99):
        exact = np.percentile(cat, q, method="inverted_cdf") * 1e-9
        assert row[f"p{q}_s"] == pytest.approx(exact, rel=0.025)
    assert [p["rank"] for p in m["per_rank"]] == [0, 1, 2]
    # one rank: the exact figures
    one = metrics.merge_read_latency(parts[:1])["all"]["shared"]
    assert one["p99_s"] == parts[0]["tiers"]["shared"]["p99_s"]


# ---- one CacheMode, resolved once into a read policy (issue 27) --------------------------------------------

def test_cache_mode_parses_the_option_string_once():
    assert [CacheMode.parse(v) for v in ("keep", "drop", "direct")] == [CacheMode.KEEP, CacheMode.DROP,
                                                                        CacheMode.DIRECT]
    assert CacheMode.parse(CacheMode.DROP) is CacheMode.DROP and f"--cache {CacheMode.DIRECT}" == "--cache direct"
    with pytest.raises(ConfigError, match=r"unknown cache 'dorp'; choose one of: direct, drop, keep.*'drop'"):
        CacheMode.parse("dorp")


def test_read_policy_of_each_mode():
    """keep: nothing; drop: evict; direct: O_DIRECT on both tiers, or, where the layout cannot, the shared tier
    buffered with the eviction and the reason as the run's warning (the local tier's row files stay direct)."""
    assert CacheMode.KEEP.policy() == ReadPolicy()
    assert CacheMode.DROP.policy("any reason") == ReadPolicy(CacheMode.DROP, evict=True)
    assert CacheMode.DIRECT.policy() == ReadPolicy(CacheMode.DIRECT, shared_direct=True, local_direct=True)
    why = direct_support("hdf5_per_sample")[1]
    assert CacheMode.DIRECT.policy(why) == ReadPolicy(CacheMode.DIRECT, local_direct=True, evict=True, warning=why)


def test_run_config_carries_the_mode_and_echoes_its_string():
    from dlbench.config import to_dict
    from dlbench.run.setup import RunConfig

    cfg = RunConfig(cache="direct")
    assert cfg.cache is CacheMode.DIRECT and to_dict(cfg)["cache"] == "direct"
    with pytest.raises(ConfigError, match="unknown cache 'cold'"):
        RunConfig(cache="cold")
