"""The PFS emulation's reader table after fork: a counter the parent closed (still in the at-fork registry until
garbage collection) must not close the descriptor number it once had — in a forked DataLoader worker that number
is another file by then (seen as "DataLoader worker exited unexpectedly" in prefetch runs after --system runs)."""

import os

from dlbench.storage.throttle import ReaderCounter


def test_a_closed_counter_leaves_a_reused_descriptor_alone(tmp_path):
    c = ReaderCounter("fork-test", str(tmp_path))
    old = c._fd
    c.close()
    fd = os.open(os.devnull, os.O_RDONLY)     # the lowest free number: the one the counter closed
    try:
        assert fd == old
        c._forked()                          # what the at-fork hook runs in a child
        # still /dev/null: not closed on the counter's behalf (and not replaced by its reopened table)
        assert os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    finally:
        os.close(fd)


def test_an_open_counter_reopens_its_table_after_fork(tmp_path):
    c = ReaderCounter("fork-test2", str(tmp_path))
    try:
        c._forked()
        assert c._slot == -1 and os.fstat(c._fd).st_size > 0
    finally:
        c.close()
