"""Runs the dlbench CLI under MPI after writing the names of the MPICH shared-memory segments this rank has
mapped (``/dev/shm/mpich_shm_*``) to ``<OUT>/shm-<rank>``: a test can then tell whether its own job left its
segment behind, whatever other jobs on the machine do. Usage: shm_probe.py OUT dlbench-args..."""

import os
import sys

import mpi4py

mpi4py.rc.threads = True
mpi4py.rc.thread_level = "multiple"
from mpi4py import MPI  # noqa: E402

out = sys.argv.pop(1)
with open("/proc/self/maps") as f:
    names = sorted({ln.split()[-1] for ln in f if "/dev/shm/mpich_shm_" in ln and ln.split()[-1].startswith("/")})
with open(os.path.join(out, f"shm-{MPI.COMM_WORLD.Get_rank()}"), "w") as f:
    f.write("\n".join(names))

from dlbench.cli import main  # noqa: E402

sys.argv[0] = "dlbench"
main()
