"""The stage step protocol (``strategies/stage.py``: hooks driven in order by ``drive``, ``abort`` on an early
stop) and the ring's slot ownership (``stages/ring.py``: ``SlotState``, every illegal transition refused)."""

import threading

import numpy as np
import pytest

from dlbench.errors import RunError
from dlbench.strategies.stage import HOOKS, Stage, drive
from dlbench.strategies.stages.ring import Ring, SlotState


class Done:
    def __init__(self):
        self.synced = 0

    def query(self):
        return False

    def synchronize(self):
        self.synced += 1


def test_a_slot_goes_free_filling_ready_held_free():
    ring = Ring(2, 3, 64, alloc=lambda r, c: Ring(1, r, c).bufs[0])
    ring.claim(0)
    assert ring.state[0] == SlotState.FILLING and ring.step[0] == 0
    ring.claim(0)                                   # the peer stage and the loader both write step 0
    b = ring.lend(0, np.arange(3), 3)
    assert ring.state[0] == SlotState.READY and b.rows is ring[0] and b.hold is not None
    d = Done()
    b.hold(d)
    assert ring.state[0] == SlotState.HELD and not ring.settled(0)
    ring.claim(2)                                   # step 2's claim waits for step 0's copy
    assert d.synced == 1 and ring.state[0] == SlotState.FILLING and ring.step[0] == 2
    ring.lend(2, np.arange(3), 3)
    ring.settle(2)
    assert ring.state[0] == SlotState.FREE and ring.step[0] == -1


def test_illegal_transitions_raise():
    ring = Ring(2, 3, 64)
    with pytest.raises(RunError, match="lend step 0: slot 0 is FREE"):
        ring.lend(0, np.arange(3), 3)               # a batch lent before its slot was filled
    ring.claim(0)
    with pytest.raises(RunError, match="hold step 0: slot 0 is FILLING"):
        ring.hold(0, Done())                        # a slot being filled handed to the device
    with pytest.raises(RunError, match="claim for step 2: slot 0 is FILLING for step 0"):
        ring.claim(2)                               # step 0 still being filled when step 2 claims the slot
    ring.lend(0, np.arange(3), 3)
    ring.claim(2)                                   # step 0 returned: its slot is step 2's
    with pytest.raises(RunError, match="hold step 0: slot 0 is FILLING for step 2"):
        ring.hold(0, Done())                        # a hold after the slot went back
    with pytest.raises(RunError, match="lend step 1"):
        ring.lend(1, np.arange(3), 3)


class Recorder(Stage):
    def __init__(self, name, log, fail_at=None):
        self.name, self.log, self.fail_at = name, log, fail_at

    def begin(self, view):
        self.log.append((self.name, "begin"))

    def before_step(self, view, t):
        self.log.append((self.name, "before", t))
        if t == self.fail_at:
            raise RuntimeError("boom")

    def after_step(self, view, t):
        self.log.append((self.name, "after", t))

    def finish(self, view):
        self.log.append((self.name, "finish"))

    def abort(self, view):
        self.log.append((self.name, "abort"))

    def stats(self):
        return {}


class View:
    steps = 2


def test_drive_calls_every_hook_in_stage_order():
    log: list = []
    got = list(drive([Recorder("a", log), Recorder("b", log)], View(), lambda t: ("batch", t)))
    assert got == [("batch", 0), ("batch", 1)]
    assert log == [("a", "begin"), ("b", "begin"),
                   ("a", "before", 0), ("b", "before", 0), ("a", "after", 0), ("b", "after", 0),
                   ("a", "before", 1), ("b", "before", 1), ("a", "after", 1), ("b", "after", 1),
                   ("a", "finish"), ("b", "finish")]
    assert set(HOOKS) >= {"begin", "before_step", "after_step", "finish", "abort", "close", "stats"}


def test_drive_aborts_on_an_error_and_on_an_early_close():
    log: list = []
    with pytest.raises(RuntimeError, match="boom"):
        list(drive([Recorder("a", log), Recorder("b", log, fail_at=1)], View(), lambda t: t))
    assert log[-2:] == [("a", "abort"), ("b", "abort")] and ("a", "finish") not in log
    log.clear()
    it = drive([Recorder("a", log)], View(), lambda t: t)
    assert next(it) == 0
    it.close()                                      # the trainer stopped after step 0's batch
    assert log == [("a", "begin"), ("a", "before", 0), ("a", "abort")]


def test_an_epoch_closed_early_stops_the_loader_and_frees_the_ring():
    from test_pinned_ring import _executor

    ex = _executor(2, 2)
    ex.start()
    try:
        it = ex.epoch(0)
        next(it)
        it.close()
        assert not [th for th in threading.enumerate() if th.name.startswith("dlbench-loader")]
        assert all(s == SlotState.FREE for s in ex.ring.state)
        assert sum(b.n for b in ex.epoch(1)) == 48                  # the next epoch runs from free slots
        assert all(s == SlotState.FREE for s in ex.ring.state)
    finally:
        ex.close()
