"""The two honesty primitives: page-cache residency by mincore, and cache-/fsync-defeating libraries."""
import os

import pytest

from dlbench import provenance
from dlbench.storage import pagecache


def test_resident_bytes_follow_eviction_and_reads(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(1 << 20))
    os.sync()
    pagecache.evict([str(f)])
    res, tot = pagecache.resident_bytes([str(f)])
    if res:  # some file systems (tmpfs) keep pages DONTNEED cannot drop
        pytest.skip(f"this file system keeps {res} bytes resident after POSIX_FADV_DONTNEED")
    assert tot == 1 << 20
    with open(f, "rb") as fh:
        fh.read(4096)
    res2, _ = pagecache.resident_bytes([str(f)])
    assert 4096 <= res2 <= tot


def test_resident_bytes_empty_and_missing(tmp_path):
    (tmp_path / "e").write_bytes(b"")
    assert pagecache.resident_bytes([str(tmp_path / "e"), str(tmp_path / "missing")]) == (0, 0)


def test_preloaded_defeating_library_is_named():
    maps = ("7f00-7f01 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libeatmydata.so.1.3.0\n"
            "7f02-7f03 r-xp 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    pre = provenance.preloaded_libraries(environ={"LD_PRELOAD": "/opt/x/libnocache.so"}, maps=maps)
    assert pre["ld_preload"] == ["/opt/x/libnocache.so"]
    assert set(pre["defeating"]) == {"/usr/lib/x86_64-linux-gnu/libeatmydata.so.1.3.0", "/opt/x/libnocache.so"}
    assert "fsync" in provenance.defeating_warning(pre)


def test_this_process_has_no_defeating_library():
    pre = provenance.preloaded_libraries()
    assert provenance.defeating_warning(pre) is None, pre
