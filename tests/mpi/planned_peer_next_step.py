"""2-rank script for tests/mpi/test_cache_mpi.py: a hand-made plan where rank 0 keeps sample 0 at step 0
(a cache fill, on the fill thread) and rank 1 reads it from rank 0 at step 1, with a barrier after every
step. Rank 0 must post that send before its step-1 barrier, or both ranks wait forever."""

import sys

import numpy as np

sys.setswitchinterval(1.0)   # the trainer keeps the GIL until it blocks: the fill thread runs late


def main() -> None:
    from dlbench import strategies
    from dlbench import workload as wl_mod
    from dlbench.comm import get_comm
    from dlbench.data.formats import MemoryReader
    from dlbench.plan import MEMORY, NO_TIER, PEER, SHARED, SYNC, Capacity, EpochPlan, Pipeline, Plan
    from dlbench.plan.semantics import Semantics, no, yes
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.strategies.cache import CacheOptions, planned_executor
    from dlbench.timeline import Timeline

    class Hand(strategies.Strategy):
        name = "handplan"
        summary = "test plan"
        semantics = Semantics(no(), no(), yes())
        Options = CacheOptions

        def plan(self, ctx, options):
            ids = np.array([[0, 1, 2, 3], [4, 5, 0, 6]])
            src = np.full((2, 4), SHARED, np.uint8)
            src[1, 2] = PEER
            peer = np.full((2, 4), -1, np.int32)
            peer[1, 2] = 0
            keep = np.full((2, 4), NO_TIER, np.uint8)
            keep[0, 0] = MEMORY
            ep = EpochPlan(0, ids, src, np.array([[0, 2, 4], [0, 2, 4]]), peer=peer, keep=keep)
            return Plan(strategy=self.name, n_samples=8, world_size=2, node_map=ctx.node_map, epochs=1, local_batch=2,
                        seed=0, build_epoch=lambda e: ep, capacity=Capacity(cache_peak_samples=[1, 0]),
                        pipeline=Pipeline("prefetch", options.loader_threads, options.window)
                        if options.loader_threads else SYNC)

        def executor(self, ctx, plan, options):
            return planned_executor(ctx, plan, options)

    strategies.register(Hand)
    comm = get_comm(ranks_per_node=1)
    wl = wl_mod.load("cosmoflow", scale="tiny", samples=8)
    mem = MemoryReader(wl, seed=0, cache=True)
    cfg = RunConfig(workload="cosmoflow", strategy="handplan", epochs=1, batch_size=2, compute_time_s=0.01,
                    barrier=True, verify=True)
    loop = Loop(cfg, comm, wl, mem, None, reader_factory=lambda: mem)
    out = loop.run(Timeline(1 << 12, comm.rank))
    print(f"rank {comm.rank} ok delivered={out['delivered_samples']} verified={out['verified']}", flush=True)


if __name__ == "__main__":
    main()
