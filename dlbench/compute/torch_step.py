"""Real compute (``--compute torch``): each step trains the workload's model on the batch the strategy delivered.

A step records, on the rank's timeline (docs/architecture.md contract 3/6):

- ``transfer``: the batch's rows split into arrays (views, docs/architecture.md contract 1), copied into pinned host buffers (CUDA),
  moved host→device and converted from the stored dtype (layout permutes, normalisation); synchronized.
- ``compute``: forward, loss, backward, then (after the allreduce) the optimizer step; ``torch.cuda.synchronize``
  before each timer stops. Two intervals per step under MPI (before and after the allreduce), one otherwise.
- ``barrier``: the gradient allreduce under MPI — every gradient lives in one flat buffer (one bucket; the
  parameters' ``.grad`` are views of it), ``dist.all_reduce`` (sum) then divided by the world size, as DDP
  averages; synchronized. Timed apart so the data-parallel cost is visible.

Under ``--overlap on`` (``overlap="on"``; ``auto``, the default, is on with CUDA and one rank) the step is
asynchronous (``ring.py``): the batch is copied into a pinned slot (or, when the loader's buffer is already
page-locked, from where it lies: the planned executor's batch ring allocated by ``host_allocator``, or a
DataLoader batch pinned by its pin thread), crosses on a side stream and is converted there while the previous step still
computes; the compute stream waits on the copy's event. The intervals are the device's (CUDA events): ``transfer``
(copy and conversion), split into ``transfer_exposed`` (after the previous step's compute ended: the compute
waited) and ``transfer_overlapped`` (hidden), and ``compute`` (forward to optimizer); they are filed once
complete, all of them by ``drain()`` (the loop calls it before it closes an epoch's clock). Synchronous steps
(``--overlap off``, CPU's default) record ``transfer`` and the same interval as ``transfer_exposed``.

Gradients: one rank keeps torch's per-parameter ``.grad`` (``grad_bucket="plain"``); under MPI they are views of
one flat buffer (``"flat"``). The flat buffer of strided views under the GradScaler and the optimizer is what
issue 30 suspects of the fp16 step's ~40 % loss on an H100 (``benchmarks/gpu_check.py`` measures both).

Per-step times are kept (``step_times_s``: compute per step; ``transfer_times_s``; ``transfer_exposed_times_s``;
``allreduce_times_s``) and returned by ``describe()`` for the run summary. torch is imported when a ``TorchCompute`` is built, never when
dlbench is imported.
"""

from __future__ import annotations

import os
import platform
import time

import numpy as np

from ..errors import ConfigError, unknown_choice
from .models import count_parameters, make_task, row_fields, split_rows, torch_dtype

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "fp16")
OVERLAPS = ("auto", "on", "off")
GRAD_BUCKETS = ("auto", "flat", "plain")
RING_SLOTS = 3          # pinned host slots and steps in flight under --overlap on


def resolve_overlap(overlap: str, dev, world: int = 1) -> str:
    """``--overlap``: auto is on with CUDA and one rank, off otherwise; on with more than one rank is refused
    (the allreduce is timed on the host between synchronizes: nothing would overlap)."""
    if overlap not in OVERLAPS:
        raise unknown_choice("overlap", overlap, OVERLAPS)
    if overlap == "auto":
        return "on" if dev.type == "cuda" and world == 1 else "off"
    if overlap == "on" and world > 1:
        raise ConfigError(f"--overlap on: runs one rank's steps with overlapped copies; this run has {world} "
                          f"ranks (their gradient allreduce is synchronous); use --overlap off or auto")
    return overlap


CONV2D_MODELS = ("ptychonn", "deepcam", "deepcam_resnet50", "resnet50", "hep_cnn")  # channels-last helps on CUDA


def resolve_device(device: str = "auto"):
    """``auto``: CUDA when available, else CPU. ``cuda`` without CUDA is a ConfigError (one line)."""
    import torch

    base = device.split(":")[0]
    if base not in DEVICES:
        raise unknown_choice("device", device, DEVICES)
    if base == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if base == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device={device}: CUDA is not available on this machine (torch {torch.__version__}"
                          f"{', CPU-only build' if torch.version.cuda is None else ''}); use --device cpu or auto")
    return torch.device(device)


def check_precision(precision: str, device="auto"):
    """``--precision`` against the device it will run on; returns the torch device. fp16 needs CUDA (autocast
    with a gradient scaler, as users train in fp16); bf16 runs on CPU (autocast) and on GPUs that support it."""
    import torch

    if precision not in PRECISIONS:
        raise unknown_choice("precision", precision, PRECISIONS)
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if precision == "fp16" and dev.type != "cuda":
        raise ConfigError(f"--precision fp16: needs CUDA (fp16 training uses autocast with a gradient scaler on "
                          f"the GPU); the device is {dev.type} (--device {device}); use --precision bf16 or fp32 "
                          f"on CPU")
    if precision == "bf16" and dev.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"--precision bf16: {torch.cuda.get_device_name(dev)} does not support bfloat16; "
                          f"use --precision fp16 or fp32")
    return dev


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(dev) -> str:
    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"{cpu_name()} ({torch.get_num_threads()} threads)"


class _Sync:
    def __init__(self, dev):
        import torch

        self._f = torch.cuda.synchronize if dev.type == "cuda" else None
        self._dev = dev

    def __call__(self):
        if self._f is not None:
            self._f(self._dev)


class TorchCompute:
    """Contract 6 compute object running the real training step.

    ``TorchCompute(workload, batch_size, device="auto", comm=None, seed=0, lr=None, model=None, backend="auto",
    threads=None, precision="fp32")``. ``precision``: fp32; bf16 (autocast to bfloat16 around forward and loss,
    CPU or CUDA); fp16 (CUDA: autocast to float16 and a ``GradScaler``). On CUDA, 2-D convolutional models and
    their inputs are channels-last (``memory_format`` in ``describe()``). ``comm`` with more than one rank forms a torch.distributed group (``distributed.py``) and
    averages gradients every step; parameters start identical on every rank (same seed, then broadcast from
    rank 0). ``threads``: torch CPU threads (default: the host's cores divided by the ranks on this node).
    ``overlap``: auto | on | off (module docstring); ``grad_bucket``: auto (flat under MPI, plain for one rank)
    | flat | plain.
    """

    mode = "torch"

    def __init__(self, workload, batch_size: int, device: str = "auto", comm=None, seed: int = 0,
                 lr: float | None = None, model: str | None = None, backend: str = "auto",
                 threads: int | None = None, precision: str = "fp32", overlap: str = "auto",
                 grad_bucket: str = "auto"):
        import torch

        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ConfigError(f"batch size={batch_size!r}: must be an integer >= 1")
        self.workload = workload
        self.batch_size = int(batch_size)
        self.comm = comm
        self.world = comm.size if comm is not None else 1
        self.rank = comm.rank if comm is not None else 0
        self.device = resolve_device(device)
        self.precision = precision
        check_precision(precision, self.device)
        self._amp_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        if self.device.type == "cpu":
            if threads is None and self.world > 1:
                per_node = len(comm.node_ranks()) if comm is not None else 1
                threads = max(1, (os.cpu_count() or 1) // per_node)
            if threads:
                torch.set_num_threads(int(threads))
        self.backend = None
        if self.world > 1:
            from .distributed import init_process_group_from_comm

            self.backend = init_process_group_from_comm(comm, backend)
            if self.backend == "nccl" and self.device.type == "cuda" and self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        torch.manual_seed(seed)
        self.task = make_task(workload, model)
        self.model = self.task.model.to(self.device)
        self.channels_last = self.device.type == "cuda" and self.task.name in CONV2D_MODELS
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.model.train()
        self.parameters = count_parameters(self.model)
        params = [p for p in self.model.parameters() if p.requires_grad]
        if grad_bucket not in GRAD_BUCKETS:
            raise unknown_choice("grad_bucket", grad_bucket, GRAD_BUCKETS)
        self.grad_bucket = ("flat" if self.world > 1 else "plain") if grad_bucket == "auto" else grad_bucket
        if self.grad_bucket == "plain" and self.world > 1:
            raise ConfigError(f"grad_bucket=plain: {self.world} ranks average their gradients in one flat "
                              f"buffer; use flat or auto")
        self._flat = None
        self._flat_nbytes = 0   # the flat gradient buffer's bytes: what one allreduce moves
        if self.grad_bucket == "flat":
            # under MPI: one flat gradient buffer; each parameter's .grad is a view of it (one allreduce bucket,
            # no copies). One rank has no allreduce, and keeps torch's own per-parameter gradients: strided views
            # of one buffer under the GradScaler's unscale and the optimizer cost the fp16 step ~40 % on an H100
            # (issue 30: 36.9 ms against 25.8 ms with plain parameters).
            self._flat = torch.zeros(sum(p.numel() for p in params), device=self.device)
            self._flat_nbytes = self._flat.numel() * self._flat.element_size()
            off = 0
            for p in params:  # each view with its parameter's strides (channels-last weights stay channels-last)
                p.grad = self._flat[off:off + p.numel()].as_strided(p.size(), p.stride())
                off += p.numel()
        if self.world > 1:
            import torch.distributed as dist

            with torch.no_grad():
                for t in list(self.model.parameters()) + list(self.model.buffers()):
                    if t.is_floating_point():
                        dist.broadcast(t.data, src=0)
        self.opt = self.task.optimizer(params, lr)
        self._scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
        self.lr = self.opt.param_groups[0]["lr"]
        self.fields = row_fields(workload)
        self.row_nbytes = self.fields[-1].offset + self.fields[-1].nbytes
        self.overlap = resolve_overlap(overlap, self.device, self.world)
        self._pinned = None
        self._pipe = None
        if self.overlap == "on":
            from .ring import CudaBackend, HostBackend, StepPipeline

            ring_backend = CudaBackend(self.device) if self.device.type == "cuda" else HostBackend()
            self._pipe = StepPipeline(ring_backend, slots=RING_SLOTS)
            self._slots = [torch.empty((self.batch_size, self.row_nbytes), dtype=torch.uint8,
                                       pin_memory=self.device.type == "cuda") for _ in range(RING_SLOTS)]
        elif self.device.type == "cuda":
            self._pinned = {f.name: torch.empty((self.batch_size, *f.shape), dtype=torch_dtype(f.dtype),
                                                pin_memory=True) for f in self.fields}
        self._sync = _Sync(self.device)
        self._phase: tuple[int, int, int, int, int] | None = None
        self.step_times_s: list[float] = []
        self.transfer_times_s: list[float] = []
        self.transfer_exposed_times_s: list[float] = []
        self.allreduce_times_s: list[float] = []
        self.losses: list[float] = []
        self.keep_losses = False

    # ----- the step ------------------------------------------------------------------------------------------

    def _phase_ids(self):
        if self._phase is None:
            from ..timeline import PHASE_ID

            self._phase = (PHASE_ID["transfer"], PHASE_ID["compute"], PHASE_ID["barrier"],
                           PHASE_ID["transfer_exposed"], PHASE_ID["transfer_overlapped"])
        return self._phase

    def host_allocator(self):
        """Where a loader should put its batches: under ``--overlap on`` on CUDA, ``alloc(rows, row_nbytes)``
        giving page-locked host memory as a uint8 numpy array (the planned executor's batch ring: the loader's
        buffer is the pinned memory, the device copies from it with no staging copy); None otherwise (plain
        memory is as good)."""
        if self._pipe is None or self.device.type != "cuda":
            return None
        import torch

        from ..storage import PAGE

        def alloc(rows: int, row_nbytes: int) -> np.ndarray:
            # like ``aligned_rows``: every row starts on a page (the CUDA host allocator's blocks are
            # page-aligned), padding hidden; the array keeps the pinned tensor alive (its base)
            stride = -(-max(row_nbytes, 1) // PAGE) * PAGE
            block = torch.empty((rows, stride), dtype=torch.uint8, pin_memory=True).numpy()
            return block[:, :row_nbytes]
        return alloc

    def step(self, batch: np.ndarray, sample_ids: np.ndarray, n: int, timeline, epoch: int, step: int,
             hold=None) -> None:
        """Train one step on the first ``n`` rows of ``batch`` ((rows, row_nbytes) uint8). ``timeline`` may be
        None (calibration): the times are still kept in ``step_times_s`` etc. ``hold`` (``Batch.hold``): ``batch``
        is the loader's pinned buffer, which it takes back once ``hold``'s argument (the copy) completed: an
        overlapped step copies from it without waiting for the copy."""
        import torch

        clock = time.perf_counter_ns
        n = int(n)
        if n <= 0 and self.world == 1:
            return  # nothing delivered and no peer to keep in step with
        if n > self.batch_size and (self._pinned is not None or self._pipe is not None):
            raise ConfigError(f"step {step}: {n} samples delivered, more than the batch size {self.batch_size}")
        if self._pipe is not None:
            self._overlapped_step(batch, sample_ids, n, timeline, epoch, step, hold)
            return
        t0 = clock()
        x = y = None
        if n > 0:
            views = split_rows(batch, self.fields, n)
            if self._pinned is not None:
                for name, v in views.items():
                    pin = self._pinned[name][:n]
                    pin.copy_(torch.from_numpy(v))
                    views[name] = pin.numpy()
            x, y = self.task.inputs(views, sample_ids, n, self.device)
            self._sync()
        t1 = clock()
        self._zero_grad()
        if n > 0:
            assert x is not None   # the inputs of the n > 0 rows, made above
            if self.channels_last and x.dim() == 4:
                x = x.contiguous(memory_format=torch.channels_last)
            if self._amp_dtype is not None:
                with torch.autocast(device_type=self.device.type, dtype=self._amp_dtype):
                    out = self.model(x)
                    loss = self.task.loss(out, y)
            else:
                out = self.model(x)
                loss = self.task.loss(out, y)
            (self._scaler.scale(loss) if self._scaler is not None else loss).backward()
            if self.keep_losses:
                self.losses.append(float(loss.detach()))
        t3 = t2 = t1
        if self.world > 1:
            import torch.distributed as dist

            flat = self._flat
            assert flat is not None   # more than one rank runs grad_bucket=flat (checked in __init__)
            self._sync()
            t2 = clock()
            dist.all_reduce(flat)
            flat.div_(self.world)
            self._sync()
            t3 = clock()
        if self._scaler is not None:
            self._scaler.step(self.opt)   # unscales; skips the step on inf/nan gradients
            self._scaler.update()
        else:
            self.opt.step()
        self._sync()
        t4 = clock()
        if timeline is not None:
            p_tr, p_co, p_ba, p_te, _ = self._phase_ids()
            timeline.add(p_tr, t0, t1, epoch, step, nbytes=n * self.row_nbytes)
            timeline.add(p_te, t0, t1, epoch, step)   # synchronous: the compute waited for all of it
            if self.world > 1:
                timeline.add(p_co, t1, t2, epoch, step)
                timeline.add(p_ba, t2, t3, epoch, step, nbytes=self._flat_nbytes)
                timeline.add(p_co, t3, t4, epoch, step)
            else:
                timeline.add(p_co, t1, t4, epoch, step)
        self.transfer_times_s.append((t1 - t0) * 1e-9)
        self.transfer_exposed_times_s.append((t1 - t0) * 1e-9)
        self.step_times_s.append(((t2 - t1) + (t4 - t3)) * 1e-9 if self.world > 1 else (t4 - t1) * 1e-9)
        if self.world > 1:
            self.allreduce_times_s.append((t3 - t2) * 1e-9)

    def _zero_grad(self) -> None:
        if self._flat is not None:
            self._flat.zero_()
        else:
            self.opt.zero_grad(set_to_none=True)

    def _train(self, inputs) -> None:
        """Forward, loss, backward and optimizer step on inputs already on the device (one rank)."""
        import torch

        x, y = inputs
        self._zero_grad()
        if self._amp_dtype is not None:
            with torch.autocast(device_type=self.device.type, dtype=self._amp_dtype):
                out = self.model(x)
                loss = self.task.loss(out, y)
        else:
            out = self.model(x)
            loss = self.task.loss(out, y)
        if self._scaler is not None:
            self._scaler.scale(loss).backward()
            self._scaler.step(self.opt)   # unscales; skips the step on inf/nan gradients
            self._scaler.update()
        else:
            loss.backward()
            self.opt.step()
        if self.keep_losses:
            self.losses.append(float(loss.detach()))

    def _copy_convert(self, src, sample_ids, n: int, strided: tuple[int, int] | None = None):
        """On the copy stream: the batch's n rows to the device in one copy, then the input conversion there.
        ``strided`` = (row width, row stride): ``src`` is the flat span of padded rows (a pinned batch ring's
        page-aligned rows), viewed as rows again on the device."""
        import torch

        from .models import split_rows_tensor

        dev = self.device
        raw = src if dev.type == "cpu" else src.to(dev, non_blocking=True)
        if strided is not None:
            raw = raw.as_strided((n, strided[0]), (strided[1], 1))
        x, y = self.task.inputs(split_rows_tensor(raw, self.fields, n), sample_ids, n, dev)
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if dev.type == "cuda":   # made on the copy stream, used on the compute stream: the allocator must know
            assert self._pipe is not None   # the overlapped path runs on the ring (overlap on)
            compute = self._pipe.b.compute_stream
            for t in (raw, x, *(y if isinstance(y, tuple) else (y,))):
                t.record_stream(compute)
        return x, y

    def _overlapped_step(self, batch: np.ndarray, sample_ids, n: int, timeline, epoch: int, step: int,
                         hold=None) -> None:
        import torch

        pipe = self._pipe
        assert pipe is not None
        rows = batch[:n]      # rows may be wider than the workload's row (a loader's buffer): split by offset
        src = torch.from_numpy(rows)
        # the loader's own buffer when it is page-locked (a DataLoader batch pinned by its pin thread, the planned
        # executor's pinned batch ring): copied from where it lies; anything else through a pinned slot (one host
        # copy, while the device computes)
        pinned = False
        span, strided = src, None
        if self.device.type == "cuda" and bool(src.is_pinned()):
            if rows.flags.c_contiguous:
                pinned = True
            elif rows.strides[1] == 1 and rows.strides[0] >= rows.shape[1]:
                # page-aligned rows (padded): one copy of the span from the first row to the last, the padding
                # included (< 4 KiB a row)
                from ..storage import flat_span

                span, strided, pinned = torch.from_numpy(flat_span(rows)), (rows.shape[1], rows.strides[0]), True

        def fill(j):
            slot = self._slots[j][:n]
            slot.copy_(src[:, :self.row_nbytes])
            return slot

        pipe.step(pinned_source=pinned, fill=fill, source=span,
                  copy_convert=lambda s: self._copy_convert(s, sample_ids, n, strided if s is span else None),
                  compute=self._train,
                  epoch=epoch, step=step, nbytes=n * self.row_nbytes, hold=hold)
        pipe.collect(self._filer(timeline))

    def _filer(self, timeline):
        p_tr, p_co, _, p_te, p_to = self._phase_ids()

        def add(r) -> None:
            self.transfer_times_s.append((r.copy_end - r.copy_start) * 1e-9)
            self.transfer_exposed_times_s.append((r.copy_end - r.exposed_start) * 1e-9)
            self.step_times_s.append((r.compute_end - r.compute_start) * 1e-9)
            if timeline is None:
                return
            timeline.add(p_tr, r.copy_start, r.copy_end, r.epoch, r.step, nbytes=r.nbytes)
            if r.exposed_start < r.copy_end:
                timeline.add(p_te, r.exposed_start, r.copy_end, r.epoch, r.step)
            if r.exposed_start > r.copy_start:
                timeline.add(p_to, r.copy_start, r.exposed_start, r.epoch, r.step)
            timeline.add(p_co, r.compute_start, r.compute_end, r.epoch, r.step)
        return add

    def drain(self, timeline=None) -> None:
        """Wait for the steps still on the device and file their intervals (the loop calls it before it
        closes an epoch's clock, so an epoch's compute lies inside its epoch). Synchronous steps: nothing."""
        if self._pipe is not None:
            self._pipe.drain(self._filer(timeline))

    # ----- reporting -----------------------------------------------------------------------------------------

    def describe(self) -> dict:
        """For run.json: mode, device, torch version, model and parameters, and the measured per-step times."""
        import torch

        self.drain()   # steps still on the device count (their intervals were filed by the loop's drain)
        st = np.asarray(self.step_times_s, dtype=float)
        return {
            "mode": "torch",
            "device": device_name(self.device),
            "device_type": self.device.type,
            "torch": str(torch.__version__),
            "model": self.task.name,
            "parameters": self.parameters,
            "batch_size": self.batch_size,
            "optimizer": type(self.opt).__name__,
            "lr": self.lr,
            "world_size": self.world,
            "backend": self.backend,
            "threads": torch.get_num_threads() if self.device.type == "cpu" else None,
            "precision": self.precision,
            "autocast_dtype": str(self._amp_dtype).replace("torch.", "") if self._amp_dtype is not None else None,
            "grad_scaler": self._scaler is not None,
            "memory_format": "channels_last" if self.channels_last else "contiguous",
            "overlap": self.overlap,
            "grad_bucket": self.grad_bucket,
            "ring_slots": RING_SLOTS if self._pipe is not None else None,
            "h2d_sources": dict(self._pipe.sources) if self._pipe is not None else None,
            "transfer_exposed_times_s": [float(v) for v in self.transfer_exposed_times_s],
            "step_time_s_median": float(np.median(st)) if st.size else None,
            "step_times_s": [float(v) for v in self.step_times_s],
            "transfer_times_s": [float(v) for v in self.transfer_times_s],
            "allreduce_times_s": [float(v) for v in self.allreduce_times_s],
        }

    def close(self) -> None:
        """Frees the model; the process group (if any) is left for the process to reuse (see distributed.py)."""
        if self._pipe is not None:
            self._pipe.drain(self._filer(None))
            self._pipe = None
            self._slots = []
        self._pinned = None
        self._scaler = None
        self._flat = None
        self.model = None
        self.opt = None


