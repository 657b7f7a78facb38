"""The PFS emulation: model arithmetic, the piecewise wait (fake clock: exact durations, no timing), the
cross-process reader counter (γ) and the ThrottledReader wrapper."""

import multiprocessing as mp
import os
import pickle

import numpy as np
import pytest

from dlbench.errors import ConfigError
from dlbench.storage import (
    LocalGamma,
    PfsModel,
    ReaderCounter,
    Throttle,
    ThrottledReader,
    throttle_reader,
    throttled_factory,
)

MB = 1_000_000


class FakeClock:
    """clock() returns fake seconds; sleep(d) advances them; counts sleeps."""

    def __init__(self):
        self.t = 0.0
        self.sleeps = 0

    def clock(self):
        return self.t

    def sleep(self, d):
        assert d > 0
        self.sleeps += 1
        self.t += d


class ScheduledGamma:
    """A γ source whose value is a function of the fake time (other readers coming and going)."""

    def __init__(self, clock, fn):
        self.clock, self.fn = clock, fn
        self.entered = 0

    def enter(self):
        self.entered += 1

    def exit(self):
        self.entered -= 1

    def active(self):
        return self.fn(self.clock.t)

    def maybe_reap(self, every_s=1.0):
        pass

    def close(self):
        pass


def make(model, gamma_fn=lambda t: 1, **kw):
    fc = FakeClock()
    g = ScheduledGamma(fc, gamma_fn)
    th = Throttle(model, g, clock=fc.clock, sleep=fc.sleep, spin_s=0.0, **kw)
    return th, fc, g


# ---- the model ---------------------------------------------------------------------------------------

def test_aggregate_interpolates_linearly_and_is_flat_outside():
    m = PfsModel(0.0, 2000, ((4, 146), (1, 66), (2, 86), (8, 326)))  # unsorted on purpose
    assert m.aggregate_MBps_by_clients == ((1, 66.0), (2, 86.0), (4, 146.0), (8, 326.0))
    assert m.aggregate_MBps(1) == 66
    assert m.aggregate_MBps(3) == pytest.approx(116)
    assert m.aggregate_MBps(6) == pytest.approx(236)
    assert m.aggregate_MBps(16) == 326
    assert m.aggregate_MBps(100) == 326
    assert m.rate_Bps(4) == pytest.approx(146 / 4 * MB)
    assert m.rate_Bps(100) == pytest.approx(326 / 100 * MB)   # beyond the cached table


def test_client_link_caps_a_reader():
    m = PfsModel(0.0, 400, ((1, 200), (2, 1000)))
    assert m.rate_Bps(1) == 200 * MB
    assert m.rate_Bps(2) == 400 * MB        # t(2)/2 = 500 capped at b_fs = 400
    assert PfsModel(0.0, 300).rate_Bps(7) == 300 * MB   # no contention points
    assert m.read_time_s(1000 * MB, 1) == pytest.approx(5.0)


def test_from_mapping_accepts_yaml_string_keys():
    m = PfsModel.from_mapping(0.0005, 400, {"1": 200, "2": 300, 4: 400})
    assert m.aggregate_MBps_by_clients == ((1, 200.0), (2, 300.0), (4, 400.0))


@pytest.mark.parametrize("args, needle", [
    ((-1.0, 100), "latency_s"),
    ((0.0, 0), "client_link_MBps"),
    ((0.0, 100, ((0, 100),)), "clients=0"),
    ((0.0, 100, ((1, -5),)), "aggregate_MBps[1]"),
    ((0.0, 100, ((1, 5), (1, 6))), "twice"),
    ((0.0, 100, (5,)), "(clients, MB/s)"),
])
def test_bad_model_numbers_name_the_key(args, needle):
    with pytest.raises(ConfigError) as e:
        PfsModel(*args)
    assert needle in str(e.value)


# ---- the wait (fake clock) ---------------------------------------------------------------------------

def test_single_reader_1GB_at_200MBps_takes_5s_plus_latency():
    th, fc, g = make(PfsModel(0.0005, 200, ((1, 200), (2, 200))))
    n = th.read(lambda: 1000 * MB)
    assert n == 1000 * MB
    assert fc.t == pytest.approx(5.0005, abs=1e-9)
    assert g.entered == 0                      # counted out again
    assert fc.sleeps >= 5.0 / 0.005            # waited in slices of <= 5 ms
    s = th.stats()
    assert s["throttled_reads"] == 1 and s["throttled_bytes"] == 1000 * MB
    assert s["throttle_wait_s"] == pytest.approx(5.0005)


def test_slow_real_read_is_not_waited():
    th, fc, _ = make(PfsModel(0.001, 200))

    def slow_read():
        fc.t += 10.0                           # the real read took longer than the model's 0.5 s
        return 100 * MB

    th.read(slow_read)
    assert fc.t == 10.0 and fc.sleeps == 0
    assert th.stats()["throttle_wait_s"] == 0


def test_real_read_time_counts_toward_the_model():
    th, fc, _ = make(PfsModel(0.0, 100))

    def read():
        fc.t += 0.3
        return 100 * MB                        # model: 1.0 s, real 0.3 s -> wait 0.7 s

    th.read(read)
    assert fc.t == pytest.approx(1.0, abs=1e-9)
    assert th.stats()["real_read_s"] == pytest.approx(0.3)


def test_two_readers_throughout_each_get_half():
    th, fc, _ = make(PfsModel(0.0, 200, ((1, 200), (2, 200))), gamma_fn=lambda t: 2)
    th.read(lambda: 500 * MB)
    assert fc.t == pytest.approx(5.0, abs=1e-9)       # 0.5 GB at 100 MB/s


def test_gamma_changing_mid_read_is_integrated_piecewise():
    # alone for the first second (200 MB at 200 MB/s), then a second reader: the other 800 MB at 100 MB/s
    th, fc, _ = make(PfsModel(0.0, 200, ((1, 200), (2, 200))), gamma_fn=lambda t: 1 if t < 1.0 else 2)
    th.read(lambda: 1000 * MB)
    assert fc.t == pytest.approx(9.0, abs=0.006)       # within one 5 ms slice
    th2, fc2, _ = make(PfsModel(0.0, 200, ((1, 200), (2, 200))), gamma_fn=lambda t: 2 if t < 1.0 else 1)
    th2.read(lambda: 1000 * MB)
    assert fc2.t == pytest.approx(5.5, abs=0.006)      # 100 MB in the first second, 900 MB at 200


def test_latency_applies_per_request():
    th, fc, _ = make(PfsModel(0.002, 1e6))
    for _ in range(100):
        th.read(lambda: 0)
    assert fc.t == pytest.approx(0.2, abs=1e-9)


def test_read_failure_still_counts_out():
    th, fc, g = make(PfsModel(0.0, 100))

    def boom():
        raise OSError("disk gone")

    with pytest.raises(OSError):
        th.read(boom)
    assert g.entered == 0


# ---- the wrapper -------------------------------------------------------------------------------------

class FakeReader:
    max_row_nbytes = 64

    def __init__(self):
        self.closed = False
        self.calls = []

    def read_into(self, i, out):
        out[:8] = i
        self.calls.append(i)
        return 8

    def decode_into(self, raw, n, out):
        out[:n] = raw[:n] + 1

    def close(self):
        self.closed = True


def test_throttled_reader_passes_through_and_counts():
    fc = FakeClock()
    r = FakeReader()
    tr = ThrottledReader(r, Throttle(PfsModel(0.001, 8e-6), LocalGamma(), clock=fc.clock, sleep=fc.sleep,
                                     spin_s=0))
    out = np.zeros(64, np.uint8)
    assert tr.read_into(7, out) == 8 and (out[:8] == 7).all()
    assert fc.t == pytest.approx(0.001 + 1.0)            # 8 bytes at 8 B/s
    assert tr.max_row_nbytes == 64
    dec = np.zeros(64, np.uint8)
    tr.decode_into(out, 8, dec)
    assert (dec[:8] == 8).all()
    assert tr.stats()["throttled_reads"] == 1 and tr.stats()["throttled_bytes"] == 8
    tr.close()
    assert r.closed


def test_unthrottled_path_does_not_wrap():
    r = FakeReader()
    assert throttle_reader(r, None) is r

    def factory():
        return r

    assert throttled_factory(factory, None) is factory


def test_throttled_factory_wraps_in_the_calling_process(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    f = pickle.loads(pickle.dumps(throttled_factory(FakeReader, PfsModel(0.0, 1e9), key="factory-test")))
    tr = f()
    assert isinstance(tr, ThrottledReader)
    assert tr.throttle.counter.path.startswith(str(tmp_path))
    out = np.zeros(64, np.uint8)
    assert tr.read_into(1, out) == 8
    tr.close()


# ---- γ across processes ------------------------------------------------------------------------------

def test_counter_counts_reads_in_flight(tmp_path):
    a = ReaderCounter("k", str(tmp_path))
    b = ReaderCounter("k", str(tmp_path))      # a second user of the same emulated PFS
    other = ReaderCounter("other", str(tmp_path))
    assert a.active() == 0
    a.enter()
    a.enter()
    b.enter()
    assert a.active() == 3 and b.active() == 3
    assert other.active() == 0                 # another key: another table
    a.exit()
    b.exit()
    assert a.active() == 1
    a.exit()
    a.exit()                                   # an extra exit never goes negative
    assert b.active() == 0
    for c in (a, b, other):
        c.close()


def test_closing_frees_the_slot(tmp_path):
    a = ReaderCounter("k", str(tmp_path))
    a.enter()
    b = ReaderCounter("k", str(tmp_path))
    assert b.active() == 1
    a.close()
    assert b.active() == 0
    b.close()


def _enter_and_die(key, d, q):
    c = ReaderCounter(key, d)
    c.enter()
    q.send(os.getpid())                        # a pipe: sent before os._exit (a Queue's feeder thread may not be)
    os._exit(0)                                # dies while counted: no exit(), no atexit


def test_dead_process_slot_is_reaped(tmp_path):
    ctx = mp.get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_enter_and_die, args=("crash", str(tmp_path), w))
    p.start()
    assert r.poll(30)
    r.recv()
    p.join(30)
    c = ReaderCounter("crash", str(tmp_path))
    # the constructor does not reap; a claim does
    assert c.active() == 1
    assert c.reap() == 1
    assert c.active() == 0
    c.close()


def _two_readers(key, d, barrier, q):
    c = ReaderCounter(key, d)
    c.enter()
    barrier.wait(30)
    q.put(c.active())
    barrier.wait(30)
    c.exit()
    barrier.wait(30)
    q.put(c.active())
    c.close()


def test_two_processes_see_each_other(tmp_path):
    d = str(tmp_path)
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    ps = [ctx.Process(target=_two_readers, args=("two", d, barrier, q)) for _ in range(2)]
    for p in ps:
        p.start()
    got = sorted(q.get(timeout=60) for _ in range(4))
    for p in ps:
        p.join(30)
        assert p.exitcode == 0
    assert got == [0, 0, 2, 2]


def _child_of_fork(c, w):
    w.send(c.active())       # the parent's read, still in flight
    c.enter()
    w.send(c.active())
    c.exit()
    w.send(c.active())
    os._exit(0)


def test_forked_child_takes_its_own_slot(tmp_path):
    c = ReaderCounter("fork", str(tmp_path))
    c.enter()
    ctx = mp.get_context("fork")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child_of_fork, args=(c, w))
    p.start()
    got = []
    for _ in range(3):
        assert r.poll(30)
        got.append(r.recv())
    p.join(30)
    assert got == [1, 2, 1]
    assert c.active() == 1                     # the child's exit did not count the parent out
    c.exit()
    assert c.active() == 0
    c.close()


def test_counter_pickles_by_key(tmp_path):
    c = ReaderCounter("pk", str(tmp_path))
    c.enter()
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.path == c.path and c2.active() == 1
    c.close()
    c2.close()


def test_unwritable_state_dir_is_a_config_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ConfigError, match="DLBENCH_PFS_STATE"):
        ReaderCounter("k", str(f))
