"""torch.distributed set-up from a dlbench ``Comm``: no manual MASTER_ADDR/MASTER_PORT.

Rank 0 picks a free TCP port on its host (bind to port 0) and an address the other ranks can reach, and
broadcasts ``(address, port)`` through ``comm.bcast``; every rank then calls
``dist.init_process_group(init_method="tcp://addr:port", rank=comm.rank, world_size=comm.size)``.
Backend ``auto``: NCCL when CUDA is available (each rank on the GPU ``local rank % device count``), else gloo.
The address is, in order: ``$DLBENCH_DIST_ADDR`` if set; ``127.0.0.1`` when every rank runs on one host; else the
IP rank 0's host name resolves to (not a loopback address), else the host name itself.
torch is imported inside the functions only.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from ..errors import ConfigError, RunError, unknown_choice

BACKENDS = ("auto", "gloo", "nccl")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _rendezvous_addr(one_host: bool) -> str:
    env = os.environ.get("DLBENCH_DIST_ADDR")
    if env:
        return env
    if one_host:
        return "127.0.0.1"
    host = socket.gethostname()
    try:
        ip = socket.gethostbyname(host)
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    return host


def local_rank(comm) -> int:
    """Position of this rank among the ranks of its node (0-based)."""
    return comm.node_ranks().index(comm.rank)


def resolve_backend(backend: str = "auto") -> str:
    import torch
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise unknown_choice("distributed backend", backend, BACKENDS)
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise ConfigError("distributed backend=nccl: CUDA/NCCL is not available here; use gloo or auto")
    return backend


def init_process_group_from_comm(comm, backend: str = "auto", timeout_s: float = 600.0) -> str | None:
    """Form a torch.distributed process group over the ranks of ``comm``. Returns the backend used, or None for a
    single rank (no group is needed). If a default group already exists it is reused (its backend returned)."""
    import torch
    import torch.distributed as dist

    if comm is None or comm.size <= 1:
        return None
    if not dist.is_available():
        raise RunError("torch.distributed is not available in this torch build; cannot average gradients "
                       f"over {comm.size} ranks")
    if dist.is_initialized():
        return str(dist.get_backend())
    backend = resolve_backend(backend)
    if backend == "nccl":
        torch.cuda.set_device(local_rank(comm) % torch.cuda.device_count())
    hosts = comm.allgather(socket.gethostname())  # real hosts (comm's nodes may be emulated)
    info = None
    if comm.rank == 0:
        info = (_rendezvous_addr(len(set(hosts)) == 1), _free_port())
    addr, port = comm.bcast(info, root=0)
    try:
        dist.init_process_group(backend=backend, init_method=f"tcp://{addr}:{port}", rank=comm.rank,
                                world_size=comm.size, timeout=timedelta(seconds=timeout_s))
    except Exception as e:  # noqa: BLE001 - report the rendezvous that failed, in one line
        raise RunError(f"torch.distributed init failed (backend={backend}, tcp://{addr}:{port}, rank {comm.rank}"
                       f"/{comm.size}): {e}; set DLBENCH_DIST_ADDR to an address every rank can reach") from e
    return backend


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
