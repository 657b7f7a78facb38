"""Run by tests/mpi/test_torch_ddp_mpi.py under ``mpiexec -n 2``: each rank trains one step on different data;
gradients are averaged over a gloo group formed from the MPI Comm, so parameters must stay identical."""

import json
import sys
import types

import numpy as np

PHASES = ("read", "decode", "transfer", "exchange", "stage", "compute", "checkpoint", "stall", "barrier")
try:
    from dlbench.timeline import PHASE_ID
except ImportError:  # before the timeline module is merged: the contract's order
    mod = types.ModuleType("dlbench.timeline")
    mod.PHASES, mod.PHASE_ID = PHASES, {p: i for i, p in enumerate(PHASES)}
    sys.modules["dlbench.timeline"] = mod
    PHASE_ID = mod.PHASE_ID

import torch  # noqa: E402

from dlbench import workload as W  # noqa: E402
from dlbench.comm import get_comm  # noqa: E402
from dlbench.compute.torch_step import TorchCompute  # noqa: E402


class TL:
    def __init__(self):
        self.rows = []

    def add(self, phase_id, start_ns, end_ns, epoch, step, nbytes=0, tier=0):
        self.rows.append(phase_id)


def main(out_dir):
    comm = get_comm()
    wl = W.load(sys.argv[2] if len(sys.argv) > 2 else "hep_cnn", scale="tiny")
    tc = TorchCompute(wl, 4, device="cpu", comm=comm, seed=comm.rank)  # different seeds: broadcast must align
    tl = TL()
    rng = np.random.default_rng(100 + comm.rank)  # different data per rank
    batch = rng.integers(0, 256, (4, tc.row_nbytes), dtype=np.uint8)
    for s in range(2):
        tc.step(batch, np.arange(4) + 4 * comm.rank, 4, tl, 0, s)
    flat = torch.cat([p.detach().reshape(-1) for p in tc.model.parameters()]).numpy()
    np.save(f"{out_dir}/params_{comm.rank}.npy", flat)
    # the averaged gradient of this step is what both ranks hold
    np.save(f"{out_dir}/grad_{comm.rank}.npy", tc._flat.numpy())
    d = tc.describe()
    with open(f"{out_dir}/describe_{comm.rank}.json", "w") as f:
        names = {i: p for p, i in PHASE_ID.items()}
        json.dump({"phases": [names[i] for i in tl.rows], "backend": d["backend"], "world": d["world_size"],
                   "allreduce": d["allreduce_times_s"]}, f)
    comm.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
