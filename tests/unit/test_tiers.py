"""Node-local and memory tiers: round trips, atomic writes, capacity accounting and the errors a user
sees for a bad --local-dir."""

import os

import numpy as np
import pytest

from dlbench.errors import CapacityError, ConfigError
from dlbench.storage import PAGE, LocalTier, MemoryTier, aligned_empty, check_local_dir


def row(i, n):
    return (np.arange(n, dtype=np.int64) * 7 + i).astype(np.uint8)


# ---- local ---------------------------------------------------------------------------------------

def test_local_round_trip_atomic_and_counted(tmp_path):
    t = LocalTier(tmp_path / "local", node=1, capacity_bytes=10_000)
    assert t.dir == tmp_path / "local" / "node1"
    for i, n in [(3, 1000), (5, 4096), (9, 17)]:
        assert t.put(i, row(i, n)) == n
    assert t.used_bytes == 1000 + 4096 + 17 and len(t) == 3
    assert sorted(os.listdir(t.dir)) == ["3.row", "5.row", "9.row"]   # no temporary files left
    out = aligned_empty(8192)
    for i, n in [(3, 1000), (5, 4096), (9, 17)]:
        assert i in t
        assert t.read_into(i, out) == n
        assert np.array_equal(out[:n], row(i, n))
    assert 4 not in t
    t.delete(5)
    assert 5 not in t and t.used_bytes == 1017
    assert t.counters.as_dict() == {"reads": 3, "read_bytes": 5113, "writes": 3, "write_bytes": 5113,
                                    "deletes": 1}
    with pytest.raises(KeyError):
        t.delete(5)


def test_local_replace_keeps_accounting(tmp_path):
    t = LocalTier(tmp_path, node=0, capacity_bytes=3000)
    t.put(1, row(1, 2000))
    t.put(1, row(2, 2500))                     # replacing: only the difference counts
    assert t.used_bytes == 2500
    out = aligned_empty(4096)
    assert t.read_into(1, out) == 2500 and np.array_equal(out[:2500], row(2, 2500))


def test_local_full_says_needed_and_available(tmp_path):
    t = LocalTier(tmp_path, node=0, capacity_bytes=3000)
    t.put(1, row(1, 2000))
    with pytest.raises(CapacityError) as e:
        t.put(2, row(2, 1500))
    msg = str(e.value)
    assert "--local-dir" in msg and "needs 1500 bytes" in msg and "1000 of capacity_bytes=3000" in msg
    assert "\n" not in msg
    assert 2 not in t and t.used_bytes == 2000
    assert sorted(os.listdir(t.dir)) == ["1.row"]


def test_rows_of_another_process_are_readable(tmp_path):
    a = LocalTier(tmp_path, node=0, capacity_bytes=10_000)
    b = LocalTier(tmp_path, node=0, capacity_bytes=10_000)   # another rank of the node
    a.put(4, row(4, 333))
    out = aligned_empty(PAGE)
    assert 4 in b and b.read_into(4, out) == 333 and np.array_equal(out[:333], row(4, 333))


def test_emulated_nodes_have_their_own_dirs(tmp_path):
    a = LocalTier(tmp_path, node=0, capacity_bytes=1000)
    b = LocalTier(tmp_path, node=1, capacity_bytes=1000)
    a.put(1, row(1, 10))
    assert 1 in a and 1 not in b


def test_read_into_too_small_buffer_is_refused(tmp_path):
    t = LocalTier(tmp_path, node=0, capacity_bytes=10_000)
    t.put(1, row(1, 5000))
    with pytest.raises(ValueError, match="too small"):
        t.read_into(1, aligned_empty(4096))


def test_local_dir_missing_parent(tmp_path):
    with pytest.raises(ConfigError) as e:
        LocalTier(tmp_path / "no" / "such", node=0, capacity_bytes=100)
    assert "--local-dir=" in str(e.value) and "does not exist" in str(e.value)


def test_local_dir_missing_last_component_is_created(tmp_path):
    p = check_local_dir(tmp_path / "new")
    assert p.is_dir()


def test_local_dir_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_local_dir(f)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_local_dir_unwritable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="not writable"):
            check_local_dir(d)
    finally:
        d.chmod(0o700)


def test_local_dir_too_small_says_needed_and_available(tmp_path):
    need = 10**18
    with pytest.raises(CapacityError) as e:
        LocalTier(tmp_path, node=0, capacity_bytes=need)
    msg = str(e.value)
    assert msg.startswith(f"--local-dir={tmp_path}: too small: {need} bytes")
    assert "available" in msg
    # without the free-space check the tier is accepted (the capacity is then a budget only)
    LocalTier(tmp_path, node=0, capacity_bytes=need, check_free=False)


def test_local_capacity_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="capacity_bytes=0"):
        LocalTier(tmp_path, node=0, capacity_bytes=0)


# ---- memory --------------------------------------------------------------------------------------

def test_memory_round_trip_aligned_slots():
    t = MemoryTier(capacity_bytes=3 * 8192, row_nbytes=5000)
    assert t.slots == 3 and t.stride == 8192
    for i, n in [(10, 5000), (11, 1), (12, 4097)]:
        assert t.put(i, row(i, n)) == n
        assert t.view(i).ctypes.data % PAGE == 0
    assert t.used_bytes == 5000 + 1 + 4097 and t.free_slots == 0
    out = aligned_empty(5000)
    for i, n in [(10, 5000), (11, 1), (12, 4097)]:
        assert i in t and t.read_into(i, out) == n and np.array_equal(out[:n], row(i, n))
    assert t.counters.reads == 3 and t.counters.read_bytes == 9098


def test_memory_full_then_delete_frees_a_slot():
    t = MemoryTier(capacity_bytes=2 * 4096, row_nbytes=4096)
    t.put(1, row(1, 4096))
    t.put(2, row(2, 4096))
    with pytest.raises(CapacityError) as e:
        t.put(3, row(3, 10))
    assert "memory tier full" in str(e.value) and "storing sample 3" in str(e.value)
    t.delete(1)
    assert 1 not in t and t.used_bytes == 4096
    t.put(3, row(3, 10))
    out = aligned_empty(4096)
    assert t.read_into(3, out) == 10 and np.array_equal(out[:10], row(3, 10))
    with pytest.raises(KeyError):
        t.read_into(1, out)


def test_memory_reserve_fills_in_place():
    t = MemoryTier(capacity_bytes=4096, row_nbytes=100)
    v = t.reserve(7, 50)
    v[:] = 9
    out = np.zeros(100, np.uint8)
    assert t.read_into(7, out) == 50 and (out[:50] == 9).all()


def test_memory_too_small_for_one_row():
    with pytest.raises(CapacityError) as e:
        MemoryTier(capacity_bytes=4000, row_nbytes=5000)
    assert "8192 bytes needed" in str(e.value)


def test_memory_row_larger_than_slot_is_refused():
    t = MemoryTier(capacity_bytes=8192, row_nbytes=100)
    with pytest.raises(ValueError):
        t.put(1, row(1, 101))


def test_memory_tier_offsets_in_its_flat_span():
    """An MPI message gathered from slots (PeerPush, issue 19) reads ``tier.flat[off:off + n]``: the stored
    row's bytes, slots page-aligned; flat_span refuses what is not rows of bytes."""
    from dlbench.storage import flat_span

    t = MemoryTier(3 * 8192, 5000)
    rows = {sid: np.full(n, sid, np.uint8) for sid, n in ((7, 5000), (3, 1200), (9, 4096))}
    for sid, r in rows.items():
        t.put(sid, r)
    for sid, r in rows.items():
        off, n = t.offset(sid)
        assert n == r.size and off % 4096 == 0 and np.array_equal(t.flat[off:off + n], r)
    assert t.flat.size == 2 * t.slab.strides[0] + 5000 and t.flat.flags.c_contiguous
    with pytest.raises(ValueError):
        flat_span(np.zeros((2, 4), np.float32))


def test_memory_tier_read_rows_into_counts_as_read_into():
    """The inline loader's own-memory reads of a step go through ``read_rows_into`` (one call, each copy timed
    on its own): the same bytes, tier counts and Darshan-style counters as one ``read_into`` per sample."""
    from dlbench.counters import IDX
    from dlbench.storage import aligned_rows
    from dlbench.storage.counters import CounterSet

    ticks = iter(range(0, 10_000, 10))
    cs_one, cs_many = CounterSet(), CounterSet()
    tiers = [MemoryTier(4 * 8192, 5000, io_counters=cs.new("memory", threadsafe=True)) for cs in (cs_one, cs_many)]
    rows = {sid: np.full(n, sid, np.uint8) for sid, n in ((7, 5000), (3, 1200), (9, 5000))}
    for t in tiers:
        for sid, r in rows.items():
            t.put(sid, r)
    a, b = aligned_rows(5, 5000), aligned_rows(5, 5000)
    a[:] = b[:] = 0
    for sid, j in ((7, 0), (3, 2), (9, 4)):
        tiers[0].read_into(sid, a[j])
    got = tiers[1].read_rows_into([7, 3, 9], b, [0, 2, 4], lambda: next(ticks))
    assert np.array_equal(a, b) and [n for _s, _e, n in got] == [5000, 1200, 5000]
    assert all(e - s == 10 for s, e, _n in got)
    assert tiers[0].counters == tiers[1].counters
    one, many = cs_one.totals()["memory"], cs_many.totals()["memory"]
    for k in ("POSIX_READS", "POSIX_BYTES_READ", "POSIX_SIZE_READ_1K_10K", "POSIX_SIZE_READ_100_1K"):
        assert one[IDX[k]] == many[IDX[k]], k
    assert many[IDX["POSIX_F_READ_TIME"]] == 30 and many[IDX["POSIX_F_MAX_READ_TIME"]] == 10


# ---- ArenaTier: the cache family's memory tier counts bytes (issue 19) ----------------------------------------
def test_arena_holds_samples_summing_to_its_bytes_not_slots_of_the_largest():
    from dlbench.storage import ARENA_ALIGN, ArenaTier

    rng = np.random.default_rng(0)
    sizes = [9_000] + rng.integers(100, 1_000, 40).tolist()
    t = ArenaTier(10_240, max(sizes), flag="--cache-capacity")
    stored, used = [], 0
    for sid, n in enumerate(sizes):
        row = rng.integers(0, 255, n, dtype=np.uint8)
        try:
            t.put(sid, row)
        except CapacityError as e:
            assert "--cache-capacity=10240" in str(e) and f"storing sample {sid} needs {n} more bytes" in str(e)
            break
        stored.append((sid, row))
        used += n
    assert len(stored) > 1 == 10_240 // max(sizes)            # slots of the largest would hold one sample
    assert t.used_bytes == used <= 10_240 and len(t) == len(stored)
    for sid, row in stored:                                    # every row intact, each start aligned
        out = np.zeros(max(sizes), np.uint8)
        assert t.read_into(sid, out) == len(row) and np.array_equal(out[:len(row)], row)
        off, n = t.offset(sid)
        assert off % ARENA_ALIGN == 0 and np.array_equal(t.flat[off:off + n], row)
        assert np.array_equal(t.view(sid), row)
    offs, ns = t.offsets([s for s, _ in stored])
    assert ns == [len(r) for _, r in stored] and offs == sorted(offs)


def test_arena_delete_of_the_newest_sample_frees_its_bytes_and_rows_into():
    from dlbench.storage import ArenaTier

    t = ArenaTier(4096, 3000)
    t.put(1, np.full(2000, 1, np.uint8))
    t.put(2, np.full(2000, 2, np.uint8))
    with pytest.raises(CapacityError, match="memory tier full"):
        t.put(3, np.full(500, 3, np.uint8))
    t.delete(2)                                                # the newest: its bytes come back
    t.put(3, np.full(1500, 3, np.uint8))
    assert t.used_bytes == 3500 and 2 not in t and 3 in t
    rows = np.zeros((2, 3000), np.uint8)
    got = t.read_rows_into([3, 1], rows, [0, 1], lambda: 0)
    assert [g[2] for g in got] == [1500, 2000] and (rows[0, :1500] == 3).all() and (rows[1, :2000] == 1).all()
    assert t.counters.reads == 2 and t.counters.read_bytes == 3500
    t.delete(1)
    t.delete(3)                                                # empty again: the whole arena is free
    t.put(4, np.full(4000, 4, np.uint8))
    assert t.offset(4) == (0, 4000)
    with pytest.raises(CapacityError, match="--x=0"):
        ArenaTier(0, 10, flag="--x")
