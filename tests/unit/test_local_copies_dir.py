"""``Executor.local_copies_dir`` (issue 16: typed executor interface): ``--cache drop`` finds the node-local
copies to evict through it, not by reading an executor's ``root`` attribute."""

from pathlib import Path

import numpy as np

from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.strategies.base import Executor
from dlbench.timeline import Timeline


def _ctx(tmp_path):
    from dlbench.strategies import RunContext

    wl = wl_mod.load("cosmoflow", scale="tiny")
    sizes = np.full(MemoryReader(wl, seed=0).samples, wl.sample_nbytes, np.int64)
    return RunContext(workload=wl, n_samples=len(sizes), sample_nbytes=sizes, world_size=1, rank=0,
                      node_map=np.zeros(1, np.int64), seed=0, epochs=1, local_batch=2, comm=SerialComm(),
                      timeline=Timeline(1 << 12, 0), reader_factory=lambda: MemoryReader(wl, seed=0),
                      local_dir=tmp_path / "local")


def test_planned_executor_names_its_nodes_local_copies(tmp_path):
    from dlbench import strategies

    ctx = _ctx(tmp_path)
    assert Executor().local_copies_dir() is None
    for name, on_disk in (("naive", False), ("local", True)):
        st = strategies.get(name)
        opts = strategies.parse_options(st, {}, where=name)
        ex = st.executor(ctx, st.plan(ctx, opts), opts)
        try:
            ex.start()
            d = ex.local_copies_dir()
            if not on_disk:
                assert d is None
            else:
                assert d is not None and d.name == "node0" and d.parent.parent == tmp_path / "local"
                assert any(p.is_file() for p in d.rglob("*"))     # the shard's copies are under it
        finally:
            ex.close()


class _Copies(Executor):
    """An executor with node-local copies and no ``root`` attribute."""

    def __init__(self, d: Path):
        self.d = d

    def local_copies_dir(self) -> Path | None:
        return self.d


def test_cache_drop_evicts_the_executors_local_copies(tmp_path):
    from dlbench.run.cache import CacheControl
    from dlbench.storage.pagecache import CacheMode

    wl = wl_mod.load("cosmoflow", scale="tiny")
    cc = CacheControl(CacheMode.DROP, wl, None, None, SerialComm(), tmp_path, probe=False)
    seen: list[str] = []

    class PC:
        @staticmethod
        def files_under(d):
            return [str(d / "x")]

        @staticmethod
        def evict(paths):
            seen.extend(paths)
            return {"files": len(paths), "bytes": 0}

        @staticmethod
        def resident_bytes(paths):   # the eviction's mincore check (nothing on disk here)
            return 0, 0

    cc.pc = PC
    cc.evict_before(0, Timeline(1 << 8, 0), lambda: 0, _Copies(tmp_path / "node0"))
    assert seen == [str(tmp_path / "node0" / "x")]
