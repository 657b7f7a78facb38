"""Remote reads of the planned executor (``stages.peerpush.PeerPush``) against a bare mpi4py loop moving the same
bytes, in the same run.

    mpiexec -n 2 env PYTHONPATH=. python benchmarks/peer_reads.py [--samples 800] [--batch 16] [--repeat 5]

2 ranks as 2 emulated nodes. Data: CosmoFlow's tiny rows (262,160 B) from the in-memory format, so no file
is read. Plan: ``deepio --mode ordered`` with memory for the whole dataset: each rank preloads its half
(not timed: epoch −1), then every access is either its own memory (a copy into the batch buffer) or a
peer's memory (a message), about half each. Zero compute: the epoch time is the data path alone.

- ``executor``: the real runner loop and ``PlannedExecutor`` (loader inline, ``--loader-threads 0``; and
  ``executor_t2``: 2 loader threads), epoch time = the slowest rank's epochs 0.. summed.
- ``bare``: for each step of the same plan, one Irecv per peer sample straight into a preallocated batch
  buffer and one Isend per sample the peer needs from a preallocated slab, then the own samples copied
  into the batch buffer, then Waitall; a barrier per epoch, as the runner does. Same messages, same bytes,
  same copies: what a hand-written loop would cost.
- ``bare_tight``: the same bytes per step as one message each way (the MPI ceiling for these bytes).

Throughput = peer bytes received per rank / epoch time; ratio = executor / bare; overhead per sample =
(executor − bare) / samples consumed per rank. Best of ``--repeat``, variants interleaved (shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from _bench import NoCompute

    from dlbench import workload as wl_mod
    from dlbench.comm import get_comm
    from dlbench.data.formats import MemoryReader
    from dlbench.plan import PEER
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.storage import aligned_rows
    from dlbench.timeline import Timeline

    comm = get_comm(ranks_per_node=1)
    wl = wl_mod.load("cosmoflow", scale="tiny", samples=a.samples)
    mem = MemoryReader(wl, seed=0, cache=True)
    me = comm.rank

    sizes = np.asarray(mem.sample_nbytes(), dtype=np.int64)
    row = int(sizes.max())

    def run_executor(threads: int):
        cfg = RunConfig(workload="cosmoflow", strategy="deepio", epochs=a.epochs, batch_size=a.batch,
                        options={"mode": "ordered", "loader_threads": threads}, compute_time_s=0.0)
        loop = Loop(cfg, comm, wl, mem, None, reader_factory=lambda: mem)
        out = loop.run(Timeline(1 << 16, me), compute=NoCompute())
        arr = out["arrays"]
        ok = arr["epochs"] >= 0
        t = float((arr["epoch_end_ns"][ok] - arr["epoch_start_ns"][ok]).sum()) * 1e-9
        got = out["strategy_stats"]["tiers"]["peer"]["bytes"]
        return loop.plan, got, comm.allreduce(t, op="max")

    plan = run_executor(0)[0]
    # the plan's per-step messages for this rank
    steps = []
    n_consumed = 0
    for ep in plan:
        s_steps, s_dst, s_cols, s_ids = ep.peer_sends(me)
        for s in range(ep.steps):
            b0, b1 = int(ep.bounds[me, s]), int(ep.bounds[me, s + 1])
            src = ep.source[me, b0:b1]
            ids = ep.sample_ids[me, b0:b1]
            rj = np.nonzero(src == PEER)[0]
            recv = [(int(j), int(ep.peer[me, b0 + j]), int(sizes[ids[j]])) for j in rj]
            own = [(int(j), int(ids[j])) for j in np.nonzero(src != PEER)[0]]
            m = s_steps == s
            send = [(int(d), int(i), int(c - ep.bounds[d, s])) for d, i, c in zip(s_dst[m], s_ids[m], s_cols[m])]
            steps.append((ep.epoch, s, recv, own, send))
            n_consumed += b1 - b0
    slab = aligned_rows(a.samples, row)          # every sample in memory (what the ranks' caches hold)
    for i in range(a.samples):
        mem.read_into(i, slab[i])
    batch = aligned_rows(a.batch, row)
    batch[:] = 0
    tight_s, tight_r = aligned_rows(1, row * a.batch)[0], aligned_rows(1, row * a.batch)[0]
    tight_s[:], tight_r[:] = 7, 0                # pages faulted in before timing, as the executor's ring

    def run_bare(tight: bool):
        total, t, epoch = 0, 0.0, -1
        for e, _s, recv, own, send in steps:
            if e != epoch:
                comm.barrier()
                epoch = e
            t0 = time.perf_counter()
            reqs = []
            if tight:
                nr = sum(n for _j, _p, n in recv)
                ns = sum(int(sizes[i]) for _d, i, _j in send)
                if recv:
                    reqs.append(comm.irecv(tight_r[:nr], recv[0][1], tag=9))
                if send:
                    reqs.append(comm.isend(tight_s[:ns], send[0][0], tag=9))
                total += nr
            else:
                for j, p, n in recv:
                    reqs.append(comm.irecv(batch[j, :n], p, tag=100 + j))
                    total += n
                for d, i, j in send:
                    reqs.append(comm.isend(slab[i, :int(sizes[i])], d, tag=100 + j))
            for j, i in own:
                batch[j, :int(sizes[i])] = slab[i, :int(sizes[i])]
            for r in reqs:
                r.wait()
            t += time.perf_counter() - t0
        return total, comm.allreduce(t, op="max")

    best: dict[str, tuple[int, float]] = {}

    def keep(name, got, t):
        if name not in best or t < best[name][1]:
            best[name] = (got, t)

    for _ in range(a.repeat):
        keep("bare", *run_bare(False))
        keep("executor", *run_executor(0)[1:])
        keep("bare_tight", *run_bare(True))
        keep("executor_t2", *run_executor(2)[1:])
    res = {k: {"peer_bytes": g, "time_s": t, "MB_per_s": g / t / 1e6} for k, (g, t) in best.items()}
    for k in ("executor", "executor_t2", "bare_tight"):
        res[k]["ratio_to_bare"] = res[k]["MB_per_s"] / res["bare"]["MB_per_s"]
    for k in ("executor", "executor_t2"):
        res[k]["overhead_per_sample_us"] = (res[k]["time_s"] - res["bare"]["time_s"]) / n_consumed * 1e6
    if me == 0:
        res["setup"] = {"ranks": comm.size, "samples": a.samples, "row_bytes": int(sizes[0]), "batch": a.batch,
                        "epochs": a.epochs, "samples_per_rank": n_consumed, "repeat": a.repeat,
                        "peer_messages_per_rank": int(sum(len(x[2]) for x in steps)),
                        "loadavg_1min": os.getloadavg()[0]}
        print(json.dumps(res, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
