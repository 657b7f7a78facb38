"""PLS exchange throughput against a bare mpi4py Isend/Irecv loop moving the same bytes, in the same run.

Run with 2 ranks as 2 emulated nodes:

    mpiexec -n 2 env PYTHONPATH=. python benchmarks/exchange.py [--samples 800] [--batch 16] [--q 1.0]

Data: CosmoFlow's tiny rows (262,160 B) from the in-memory format (no files on the shared side), so the
figure is the exchange itself. PLS: the real executor (``pls``, --tier memory and --tier local) runs E
epochs with zero compute; its exchange time is the union of its ``exchange`` intervals (posting: packing
the step's samples from the store + Isend/Irecv; completing: waiting + storing what came in + deleting
what went). Bare: for every step of the same plan, Irecv + Isend of a preallocated buffer of exactly the
bytes PLS moved in that step, then Waitall — nothing else. Throughput = bytes received per rank / time;
ratio = PLS / bare (goal ≥ 80 %). Best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=800)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--q", type=float, default=1.0)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from dlbench import workload as wl_mod
    from dlbench.comm import get_comm
    from dlbench.data.formats import MemoryReader
    from dlbench.metrics import union_length
    from dlbench.runner import Loop, RunConfig
    from dlbench.storage import aligned_empty
    from dlbench.timeline import PHASE_ID, Timeline

    comm = get_comm(ranks_per_node=1)
    wl = wl_mod.load("cosmoflow", scale="tiny", samples=a.samples)
    mem = MemoryReader(wl, seed=0, cache=True)

    class _M:
        samples = mem.n

        def sample_nbytes(self):
            return mem.sample_nbytes()

    class NoCompute:
        def step(self, *args):
            pass

        def close(self):
            pass

    res = {}
    plan = None
    for tier in ("memory", "local"):
        best = None
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory() as d:
                cfg = RunConfig(workload="cosmoflow", strategy="pls", epochs=a.epochs, batch_size=a.batch,
                                options={"exchange_fraction": a.q, "tier": tier}, compute_time_s=0.0, local_dir=d)
                loop = Loop(cfg, comm, wl, _M(), None, reader_factory=lambda: mem)
                plan = loop.plan
                tl = Timeline(1 << 14, comm.rank)
                out = loop.run(tl, compute=NoCompute())
                arr = out["arrays"]
                m = (arr["phase"] == PHASE_ID["exchange"]) & (arr["epoch"] >= 0)
                t = union_length(arr["start_ns"][m], arr["end_ns"][m]) * 1e-9
                got = out["strategy_stats"]["exchange"]["bytes_received"]
                t = comm.allreduce(t, op="max")
                best = t if best is None else min(best, t)
        res[f"pls_{tier}"] = {"bytes": got, "time_s": best, "MB_per_s": got / best / 1e6}

    # the bare loop: the same per-step message sizes
    sizes = np.asarray(mem.sample_nbytes(), dtype=np.int64)
    msgs = []
    for ep in plan:
        steps = ep.extras["send_step"][0]
        for s in np.unique(steps):
            cols = steps == s
            me = comm.rank
            src = int(np.nonzero(ep.extras["send_to"][:, np.nonzero(cols)[0][0]] == me)[0][0])
            dst = int(ep.extras["send_to"][me, np.nonzero(cols)[0][0]])
            msgs.append((dst, src, int(sizes[ep.extras["send_ids"][me, cols]].sum()),
                         int(sizes[ep.extras["send_ids"][src, cols]].sum())))
    big = max(max(m[2], m[3]) for m in msgs)
    sbuf, rbuf = aligned_empty(big), aligned_empty(big)
    sbuf[:] = 7
    best = None
    for _ in range(a.repeat):
        comm.barrier()
        t0 = time.perf_counter()
        total = 0
        for dst, src, ns, nr in msgs:
            rr = comm.irecv(rbuf[:nr], src, tag=5)
            sr = comm.isend(sbuf[:ns], dst, tag=5)
            rr.wait()
            sr.wait()
            total += nr
        t = comm.allreduce(time.perf_counter() - t0, op="max")
        best = t if best is None else min(best, t)
    res["bare_isend_irecv"] = {"bytes": total, "time_s": best, "MB_per_s": total / best / 1e6}
    for k in ("pls_memory", "pls_local"):
        res[k]["ratio_to_bare"] = res[k]["MB_per_s"] / res["bare_isend_irecv"]["MB_per_s"]
    if comm.rank == 0:
        res["setup"] = {"ranks": comm.size, "samples": a.samples, "row_bytes": int(sizes[0]), "batch": a.batch,
                        "q": a.q, "epochs": a.epochs, "messages_per_rank": len(msgs), "repeat": a.repeat}
        print(json.dumps(res, indent=1))
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
