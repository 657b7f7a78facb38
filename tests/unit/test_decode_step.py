"""The decode step is the format's (issue 16: one registry per extension point): ``Format.decoder(workload)``
is None for formats whose rows are delivered as stored and the module's decode callable otherwise; the
executors and --verify call that step, not a per-reader ``decode_into`` behind a JPEG branch."""

import numpy as np
import pytest

from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.content import expected_row
from dlbench.data.formats import MemoryReader
from dlbench.data.registry import get_format
from dlbench.timeline import Timeline


def test_format_decoder_none_for_stored_rows_callable_for_decoding_formats():
    wl = wl_mod.load("imagenet", scale="tiny")
    for name in ("hdf5_per_sample", "hdf5_blocks", "npy", "npz"):
        assert get_format(name).decoder(wl) is None
    dec = get_format("jpeg_folders").decoder(wl)
    raw = expected_row(wl, 0, 3)
    out, ref = np.empty(wl.decoded_nbytes, np.uint8), np.empty(wl.decoded_nbytes, np.uint8)
    dec(raw, len(raw), out)
    MemoryReader(wl, seed=0, n=8).decode_into(raw, len(raw), ref)
    assert np.array_equal(out, ref)
    assert callable(get_format("tfrecord").decoder(wl))


class _NoDecodeReader:
    """A reader of stored JPEG bytes that cannot decode: the executor must use the format's step."""

    def __init__(self, wl):
        self._r = MemoryReader(wl, seed=0, n=8)
        self.max_row_nbytes = self._r.max_row_nbytes

    def read_into(self, i, out):
        return self._r.read_into(i, out)

    def decode_into(self, raw, nbytes, out):
        raise AssertionError("the executor called the reader's decode_into, not the format's decode step")

    def close(self):
        pass


@pytest.mark.parametrize("threads", [0, 1])
def test_planned_executor_decodes_with_the_formats_step(threads):
    from dlbench.strategies import RunContext
    from dlbench.strategies.localcopy import set_pipeline
    from dlbench.strategies.naive import shared_tier_plan
    from dlbench.strategies.planned import PlannedExecutor

    wl = wl_mod.load("imagenet", scale="tiny")
    sizes = MemoryReader(wl, seed=0, n=8).sample_nbytes()
    ctx = RunContext(workload=wl, n_samples=8, sample_nbytes=sizes, world_size=1, rank=0,
                     node_map=np.zeros(1, np.int64), seed=0, epochs=1, local_batch=4, comm=SerialComm(),
                     timeline=Timeline(1 << 12, 0), reader_factory=lambda: _NoDecodeReader(wl))
    plan = set_pipeline(shared_tier_plan("naive", ctx, False), threads, 1 if threads else 0)
    ex = PlannedExecutor(ctx, plan, capacity_bytes={}, fill_thread=False)
    ref = MemoryReader(wl, seed=0, n=8)
    want = np.empty(wl.decoded_nbytes, np.uint8)
    ex.start()
    try:
        n = 0
        for b in ex.epoch(0):
            for j, i in enumerate(b.ids[:b.n].tolist()):
                raw = expected_row(wl, 0, i)
                ref.decode_into(raw, len(raw), want)
                assert np.array_equal(b.rows[j, :wl.decoded_nbytes], want)
                n += 1
        assert n == 8
    finally:
        ex.close()
