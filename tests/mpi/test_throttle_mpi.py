"""γ across MPI ranks: two ranks reading the same emulated PFS count each other, and a throttled read
under contention is modelled at the shared rate (checked on the model's bookkeeping, not on time)."""

import pytest

SCRIPT = r"""
import os, sys
from mpi4py import MPI
from dlbench.storage import PfsModel, ReaderCounter, Throttle
comm = MPI.COMM_WORLD
c = ReaderCounter("mpi-test")
c.enter()
comm.Barrier()
inside = c.active()
comm.Barrier()
c.exit()
comm.Barrier()
after = c.active()
# both ranks in one throttled read of 0 bytes and latency 0: the counter is entered and left again
th = Throttle(PfsModel(0.0, 1e6), c)
n = th.read(lambda: 0)
comm.Barrier()
end = c.active()
got = comm.gather((inside, after, n, end), root=0)
if comm.rank == 0:
    print("GAMMA", got, flush=True)
c.close()
"""


@pytest.mark.mpi
def test_two_ranks_see_gamma_two(run_mpi, tmp_path):
    r = run_mpi([], n=2, python_args=("-c", SCRIPT), env={"DLBENCH_PFS_STATE": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("GAMMA"))
    assert line == "GAMMA [(2, 0, 0, 0), (2, 0, 0, 0)]"
