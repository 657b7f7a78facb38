"""Remote reads of the planned executor (stages.peerpush.PeerPush) against bare mpi4py Isend/Irecv loops moving the
same samples, in the same run; and the executor's overhead per sample.

Run with 2 ranks as 2 emulated nodes, at both sample sizes of issue 19:

    mpiexec -n 2 env PYTHONPATH=. python benchmarks/peer_push.py --workload cosmoflow --samples 1600
    mpiexec -n 2 env PYTHONPATH=. python benchmarks/peer_push.py --workload ptychonn --samples 3200
    [--batch 16] [--window 2] [--epochs 2] [--repeat 9]

Workloads (``--workload``, tiny scale, in-memory format): CosmoFlow's rows (262,160 B, the default) or
PtychoNN's (12,288 B: the small-sample case). Strategy ``lbann --mode preload``: every rank holds its half of
the dataset in its memory tier, so each step about half of a rank's batch comes from the peer (pushed by the
holder on the plan's schedule) and half from its own memory. Compute is zero, so the epoch time is all data
delivery.

- ``planned``: the real executor (runner loop, zero compute) for E epochs; time = the slowest rank's epoch
  times summed; peer bytes = what the ranks received. Its messages: one per (step, sender), an MPI hindexed
  datatype gathering the samples from the sender's memory slots and scattering them into the batch rows.
- ``bare``: the same steps without the executor, one message per sample (the reference of issue 19): for
  each step, Irecv straight into a batch buffer for the step's peer samples (same sizes, same order, same
  peer), Isend of the samples it serves from a preallocated slab, copy of its own-memory samples into the
  batch buffer, wait; posted up to ``window`` steps ahead, as the executor does.
- ``bare_hindexed``: as ``bare`` with the executor's message form (one hindexed message per (step, peer)):
  what the executor's work costs at the least with its own messages.
- ``bare_tight``: the per-sample peer messages only, back to back (the MPI ceiling for that pattern).

Reported (rank 0): per variant the best time of ``--repeat`` rounds (variants interleaved, their order rotated
each round: the machine is shared and noisy) and MB/s of peer bytes; ``ratio_planned_over_bare`` = best bare
time / best planned time (>= 0.9 is issue 19's target), the same against ``bare_hindexed``, the median over
rounds of the paired ratio (bare / planned in the same round), and the overhead per delivered sample
((t_planned - t_bare) / samples delivered).
"""

from __future__ import annotations

import argparse
import json
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
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--workload", default="cosmoflow", help="cosmoflow (262,160 B rows) or ptychonn (12,288 B)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from _bench import NoCompute

    from dlbench import workload as wl_mod
    from dlbench.comm import get_comm
    from dlbench.data.formats import MemoryReader
    from dlbench.plan import MEMORY, PEER
    from dlbench.run.loop import Loop
    from dlbench.run.setup import RunConfig
    from dlbench.storage import aligned_rows
    from dlbench.timeline import Timeline

    comm = get_comm(ranks_per_node=1)
    me = comm.rank
    wl = wl_mod.load(a.workload, scale="tiny", samples=a.samples)
    mem = MemoryReader(wl, seed=0, cache=True)

    sizes = np.asarray(mem.sample_nbytes(), dtype=np.int64)
    row = int(sizes.max())

    def run_planned():
        cfg = RunConfig(workload=a.workload, strategy="lbann", epochs=a.epochs, batch_size=a.batch,
                        options={"mode": "preload", "window": a.window}, compute_time_s=0.0)
        loop = Loop(cfg, comm, wl, mem, None, reader_factory=lambda: mem)
        tl = Timeline(1 << 15, comm.rank)
        out = loop.run(tl, compute=NoCompute())
        arr = out["arrays"]
        ep = arr["epochs"] >= 0
        t = float(((arr["epoch_end_ns"] - arr["epoch_start_ns"])[ep]).sum()) * 1e-9
        got = out["strategy_stats"]["tiers"]["peer"]["bytes"]
        return loop.plan, got, comm.allreduce(t, op="max"), out["delivered_samples"]

    plan, _, _, _ = run_planned()
    # what the bare loops move: per epoch and step, the peer receives (sizes, peer) and sends (sizes, dst)
    slab = aligned_rows(plan.n_samples, row)
    for i in range(plan.n_samples):
        mem.read_into(i, slab[i])
    batch = [aligned_rows(a.batch, row) for _ in range(a.window + 1)]
    sched = []
    for ep in plan:
        b = ep.bounds[me]
        steps_s, dst_s, col_s, sid_s = ep.peer_sends(me)
        for s in range(ep.steps):
            cols = np.arange(b[s], b[s + 1])
            src = ep.source[me, cols]
            recv = [(int(j), int(ep.peer[me, c]), int(ep.sample_ids[me, c]), int(c)) for j, c in enumerate(cols)
                    if src[j] == PEER]
            own = [(int(j), int(ep.sample_ids[me, c])) for j, c in enumerate(cols) if src[j] == MEMORY]
            m = steps_s == s
            send = list(zip(dst_s[m].tolist(), col_s[m].tolist(), sid_s[m].tolist()))
            sched.append((recv, own, send))

    MPI = comm.comm   # the mpi4py communicator
    def flat_span(rows):      # the bytes of row-strided rows as one buffer (dlbench.storage.flat_span)
        n = (rows.shape[0] - 1) * rows.strides[0] + rows.shape[1]
        return np.lib.stride_tricks.as_strided(rows, shape=(n,), strides=(1,))

    slab_flat, slab_stride = flat_span(slab), int(slab.strides[0])
    batch_flat = [(flat_span(b), int(b.strides[0])) for b in batch]

    def run_bare(form: str):
        """``form``: "sample" (one message per sample), "hindexed" (one per (step, peer)), "tight" (per-sample
        messages, nothing else)."""
        comm.barrier()
        t0 = time.perf_counter()
        pending = {}
        got = 0
        W = a.window + 1
        for k in range(min(W, len(sched))):
            pending[k] = post(k, form)
        for k in range(len(sched)):
            reqs, buf = pending.pop(k)
            if form != "tight":
                for j, sid in sched[k][1]:
                    buf[j, :sizes[sid]] = slab[sid, :sizes[sid]]
            for r in reqs:
                r.Wait()
            got += sum(int(sizes[sid]) for _j, _p, sid, _c in sched[k][0])
            if k + W < len(sched):
                pending[k + W] = post(k + W, form)
        t = time.perf_counter() - t0
        return got, comm.allreduce(t, op="max")

    def post(k, form):
        """Step k's receives (straight into the batch buffer) and sends (from the slab), tagged as the
        executor tags them: by the receiver's column in its epoch row (of a message's first sample)."""
        recv, _own, send = sched[k]
        slot = k % (a.window + 1)
        buf = batch[slot]
        if form != "hindexed":
            reqs = [MPI.Irecv(buf[j, :sizes[sid]], source=p, tag=4096 + c) for j, p, sid, c in recv]
            reqs += [MPI.Isend(slab[sid, :sizes[sid]], dest=d, tag=4096 + col) for d, col, sid in send]
            return reqs, buf
        flat, stride = batch_flat[slot]
        reqs = []
        for p in sorted({p for _j, p, _s, _c in recv}):
            mine = sorted((c, j, sid) for j, q, sid, c in recv if q == p)
            t = MPI_.BYTE.Create_hindexed([int(sizes[sid]) for _c, _j, sid in mine],
                                          [j * stride for _c, j, _s in mine]).Commit()
            reqs.append(MPI.Irecv([flat, 1, t], source=p, tag=4096 + mine[0][0]))
            t.Free()
        for d in sorted({d for d, _c, _s in send}):
            mine = sorted((c, sid) for e, c, sid in send if e == d)
            t = MPI_.BYTE.Create_hindexed([int(sizes[sid]) for _c, sid in mine],
                                          [sid * slab_stride for _c, sid in mine]).Commit()
            reqs.append(MPI.Isend([slab_flat, 1, t], dest=d, tag=4096 + mine[0][0]))
            t.Free()
        return reqs, buf

    MPI_ = comm.MPI
    variants = [("planned", lambda: run_planned()[1:]), ("bare", lambda: run_bare("sample")),
                ("bare_hindexed", lambda: run_bare("hindexed")), ("bare_tight", lambda: run_bare("tight"))]
    best: dict = {}
    paired = []
    for r in range(a.repeat):
        times = {}
        for name, fn in variants[r % len(variants):] + variants[:r % len(variants)]:
            res = fn()
            got, t = res[0], res[1]
            times[name] = t
            if name not in best or t < best[name][1]:
                best[name] = (got, t, res[2] if len(res) > 2 else None)
        paired.append(times["bare"] / times["planned"])
    delivered = best["planned"][2]
    if me == 0:
        out = {}
        for name, (got, t, _d) in best.items():
            out[name] = {"peer_bytes_per_rank": got, "time_s": t, "peer_mb_per_s": got / t / 1e6}
        out["ratio_planned_over_bare"] = out["bare"]["time_s"] / out["planned"]["time_s"]
        out["ratio_planned_over_bare_hindexed"] = out["bare_hindexed"]["time_s"] / out["planned"]["time_s"]
        out["ratio_planned_over_tight"] = out["bare_tight"]["time_s"] / out["planned"]["time_s"]
        out["ratio_paired_median"] = float(np.median(paired))
        out["overhead_per_sample_us"] = (best["planned"][1] - best["bare"][1]) / max(delivered, 1) * 1e6
        out["setup"] = {"workload": a.workload, "samples": a.samples, "batch": a.batch, "epochs": a.epochs,
                        "window": a.window, "row_bytes": row, "ranks": comm.size,
                        "delivered_samples_per_rank": delivered, "repeat": a.repeat}
        print(json.dumps(out, indent=2))
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
