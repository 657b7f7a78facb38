"""2-rank script for tests/mpi/test_cache_mpi.py: lbann --mode preload (each rank holds half the dataset in
memory, about half of every batch comes from the peer), checking ``stages.peerpush.PeerPush``'s messages: one per
(step, sender) carrying all its samples (MPI gathers them from the sender's slots and scatters them into the
receiver's rows), cut at ``PEER_MESSAGE_BYTES`` (0: one message per sample). Every delivered sample is
verified, and the peer counts must be the plan's: samples and bytes received, and messages."""

import sys

import numpy as np


def main() -> None:
    from dlbench import workload as wl_mod
    from dlbench.comm import get_comm
    from dlbench.data.formats import MemoryReader
    from dlbench.plan import PEER
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.strategies.stages import peerpush as stages
    from dlbench.timeline import Timeline

    comm = get_comm(ranks_per_node=1)
    default = stages.PEER_MESSAGE_BYTES
    # (workload, message cap in samples: None = the default cap, which every step's group fits in)
    for name, per in (("ptychonn", None), ("ptychonn", 0), ("ptychonn", 2), ("cosmoflow", None),
                      ("cosmoflow", 0), ("imagenet", None)):
        wl = wl_mod.load(name, scale="tiny", samples=48)
        mem = MemoryReader(wl, seed=0, cache=True)
        sizes = mem.sample_nbytes()
        stages.PEER_MESSAGE_BYTES = default if per is None else per * int(sizes.max())
        cfg = RunConfig(workload=name, strategy="lbann", epochs=2, batch_size=8, compute_time_s=0.0, verify=True,
                        options={"mode": "preload"})
        loop = Loop(cfg, comm, wl, mem, None, reader_factory=lambda mem=mem: mem)
        out = loop.run(Timeline(1 << 12, comm.rank))
        peer = out["strategy_stats"]["tiers"]["peer"]
        want_samples = want_bytes = want_messages = groups = 0
        for ep in loop.plan:
            cols = np.flatnonzero(ep.rank_sources(comm.rank) == PEER)
            steps = np.searchsorted(ep.bounds[comm.rank], cols, side="right") - 1
            want_samples += len(cols)
            want_bytes += int(sizes[ep.rank_samples(comm.rank)[cols]].sum())
            pairs = list(zip(steps.tolist(), ep.rank_peers(comm.rank)[cols].tolist()))
            for g in set(pairs):
                k = pairs.count(g)
                groups += 1
                want_messages += k if per == 0 else (-(-k // per) if per else 1)
        got = (peer["samples"], peer["bytes"], peer["messages"], out["verified"])
        want = (want_samples, want_bytes, want_messages, out["delivered_samples"])
        status = "ok" if got == want and want_samples > 0 and groups < want_samples else "BAD"
        print(f"rank {comm.rank} {name} per={per} {status} got={got} want={want}", flush=True)
    stages.PEER_MESSAGE_BYTES = default


if __name__ == "__main__":
    sys.exit(main())
