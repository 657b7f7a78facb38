"""Training models per workload, in plain torch (no torchvision), sized from the workload's sample shape.

Each model is a faithful re-implementation of the published architecture; what a model trains on, how the
stored bytes become tensors, the loss and the optimizer are bundled in a ``Task`` (see ``make_task``).
torch is imported lazily: importing this module does not import torch (``dlbench show`` asks only for
``parameter_count``, which builds the model on torch's ``meta`` device, allocating nothing).

Models (``MODELS``; a workload picks one by ``workload.model.name``, else by its own name):

- ``ptychonn`` — PtychoNN (Cherukara et al., Appl. Phys. Lett. 117, 044103 (2020); github.com/mcherukara/PtychoNN,
  PyTorch notebook): encoder of three [conv3x3-ReLU ×2, maxpool 2] levels with 32/64/128 channels, and two
  decoders (amplitude: sigmoid; phase: tanh × π) of three [conv3x3-ReLU ×2, bilinear ×2] levels. Loss: L1 on
  amplitude + L1 on phase; Adam. Input (N,1,H,W); H and W must be multiples of 8 (64, 128, tiny 32).
- ``cosmoflow`` — MLPerf HPC CosmoFlow reference (mlcommons/hpc cosmoflow/models/cosmoflow.py with
  configs/cosmo.yaml): 5 × [Conv3D k=2 'same', LeakyReLU(0.3), MaxPool3D 2] with 32·2^i channels, Dense 128,
  Dense 64 (LeakyReLU, dropout 0.5), Dense 4 tanh × 1.2. Loss MSE; SGD momentum 0.9. Input (N,4,D,H,W).
  The reference data pipeline applies ``log(x + 1)`` (``apply_log: True``); so do we, after clamping to >= 0
  (real counts are >= 0; synthetic int16 may be negative).
- ``deepcam`` — MLPerf HPC DeepCAM reference (mlcommons/hpc deepcam/src/deepCam/architecture/
  deeplab_xception.py): DeepLabv3+ whose encoder is the *modified aligned Xception* (output stride 16),
  ASPP (rates 1/6/12/18 + image pooling), low-level features at stride 4 reduced to 48 channels, and a
  transposed-convolution decoder to full resolution; 16 input channels, 3 classes. Note: the MLPerf HPC
  reference backbone is Xception, not ResNet-50; the original DeepCAM paper (Kurth et al., SC18) used
  DeepLabv3+ with a ResNet-50 encoder, offered here as ``deepcam_resnet50``. Neither is reduced in width.
  Loss: cross entropy weighted by class frequency^-0.125 (the reference's weighting); AdamW (the reference
  uses LAMB, which torch does not ship). Inputs whose H or W is not a multiple of 16 (the tiny preset,
  48×72) are zero-padded to one, and the logits cropped back.
- ``deepcam_resnet50`` — DeepLabv3+ (Chen et al., ECCV 2018) on ResNet-50 (layer4 dilated, output stride 16),
  decoder: 1×1 48-channel low-level projection, two 3×3 256 convs, bilinear ×4.
- ``resnet50`` — ResNet-50 v1.5 (He et al. 2016; stride on the 3×3 conv as torchvision): 25,557,032 parameters
  at 1,000 classes. Loss cross entropy; SGD momentum 0.9. Input: decoded (224,224,3) uint8 → /255,
  ImageNet mean/std normalisation.
- ``hep_cnn`` — NERSC HEP-CNN RPV classifier: [conv3x3 pad 1, ReLU, maxpool 2] × 5 with 128 filters
  (Kurth et al., "Deep Learning at 15PF", SC17: five conv+pool layers of 128 3×3 filters), flatten,
  Linear → 1, sigmoid (folded into the loss: BCE with logits), Adam (layer structure as in NERSC's PyTorch HEP-CNN port
  ``HEPCNNClassifier``). The widths come from the paper's description, not from a released config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError, unknown_choice

MODELS = ("cosmoflow", "deepcam", "deepcam_resnet50", "hep_cnn", "ptychonn", "resnet50")
_ALIASES = {"imagenet": "resnet50", "resnet-50": "resnet50"}

# DeepCAM class frequencies (background, tropical cyclone, atmospheric river) of the training set, as the DeepCAM
# reference training script sets its loss weights (frequency ** -0.125); they change the loss value, not the cost.
DEEPCAM_CLASS_FREQ = (0.986267818390377, 0.0004459691185655761, 0.01346621333202152)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def model_name_for(workload, model: str | None = None) -> str:
    """The model a workload trains: ``model`` if given, else ``workload.model.name``, else the workload name."""
    name = model or (workload.model.name if workload.model is not None and workload.model.name else workload.name)
    name = _ALIASES.get(name, name)
    if name not in MODELS:
        raise unknown_choice("model", name, MODELS)
    return name


# ----- row layout: docs/architecture.md contract 1 ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: np.dtype
    role: str


def row_fields(workload) -> tuple[Field, ...]:
    """Byte layout of one row (docs/architecture.md contract 1): the arrays of ``workload.arrays`` concatenated in order, or
    the format module's ``row_arrays`` (jpeg_folders: the decoded image alone)."""
    own = workload.format.driver().row_arrays(workload)   # a format that decodes owns its row
    if own is not None:
        out, off = [], 0
        for name, shape, dtype, role in own:
            n = int(np.prod(shape)) * np.dtype(dtype).itemsize
            out.append(Field(name, off, n, tuple(shape), np.dtype(dtype), role))
            off += n
        return tuple(out)
    if getattr(workload, "record_size", None) is not None:
        from ..errors import ConfigError

        raise ConfigError(f"--compute torch: workload {workload.name} has record sizes drawn per file (record_size), "
                          f"so its samples have no one shape for a model; use --compute sleep (the default)")
    out, off = [], 0
    for a in workload.arrays:
        out.append(Field(a.name, off, a.nbytes, tuple(a.shape), np.dtype(a.dtype), a.role))
        off += a.nbytes
    return tuple(out)


def split_rows(batch: np.ndarray, fields: tuple[Field, ...], n: int) -> dict[str, np.ndarray]:
    """Views (no copy when aligned) of the first ``n`` rows of a (rows, row_nbytes) uint8 batch, one per array,
    shaped (n, *shape) in the stored dtype. No per-sample Python work."""
    if batch.ndim != 2 or batch.dtype != np.uint8:
        raise ValueError(f"batch must be a 2-D uint8 array, got {batch.dtype} {batch.shape}")
    need = fields[-1].offset + fields[-1].nbytes
    if batch.shape[1] < need:
        raise ValueError(f"batch rows hold {batch.shape[1]} bytes, the workload's row needs {need}")
    rows = batch[:n]
    out = {}
    for f in fields:
        cols = rows[:, f.offset:f.offset + f.nbytes]
        isz = f.dtype.itemsize
        if isz > 1 and (f.offset % isz or rows.strides[0] % isz or cols.ctypes.data % isz):
            cols = np.ascontiguousarray(cols)  # unaligned: one copy of this column block
        out[f.name] = cols.view(f.dtype).reshape((n, *f.shape))
    return out


def split_rows_tensor(rows, fields: tuple[Field, ...], n: int) -> dict:
    """``split_rows`` for a (rows, row_nbytes) uint8 torch tensor (the batch after its host-to-device copy):
    views shaped (n, *shape) in the stored dtype, made contiguous only where a field is not aligned to its
    item size. Runs on the tensor's device (the conversion after an overlapped copy)."""

    rows = rows[:n]
    out = {}
    for f in fields:
        cols = rows[:, f.offset:f.offset + f.nbytes]
        isz = f.dtype.itemsize
        if isz > 1 and (cols.storage_offset() % isz or cols.stride(0) % isz):
            cols = cols.contiguous()
        out[f.name] = cols.view(torch_dtype(f.dtype)).reshape((n, *f.shape))
    return out


# ----- the models ---------------------------------------------------------------------------------------------

def build_ptychonn(hw: tuple[int, int], nconv: int = 32):
    from torch import nn

    if hw[0] % 8 or hw[1] % 8:
        raise ConfigError(f"ptychonn: diffraction pattern {hw[0]}x{hw[1]}: H and W must be multiples of 8 "
                          "(three 2x poolings)")

    def conv(i, o):
        return [nn.Conv2d(i, o, 3, stride=1, padding=1), nn.ReLU()]

    def decoder(final):
        return nn.Sequential(
            *conv(nconv * 4, nconv * 4), *conv(nconv * 4, nconv * 4), nn.Upsample(scale_factor=2, mode="bilinear"),
            *conv(nconv * 4, nconv * 2), *conv(nconv * 2, nconv * 2), nn.Upsample(scale_factor=2, mode="bilinear"),
            *conv(nconv * 2, nconv * 2), *conv(nconv * 2, nconv * 2), nn.Upsample(scale_factor=2, mode="bilinear"),
            nn.Conv2d(nconv * 2, 1, 3, stride=1, padding=1), final)

    class PtychoNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(
                *conv(1, nconv), *conv(nconv, nconv), nn.MaxPool2d(2),
                *conv(nconv, nconv * 2), *conv(nconv * 2, nconv * 2), nn.MaxPool2d(2),
                *conv(nconv * 2, nconv * 4), *conv(nconv * 4, nconv * 4), nn.MaxPool2d(2))
            self.decoder1 = decoder(nn.Sigmoid())  # amplitude
            self.decoder2 = decoder(nn.Tanh())     # phase, scaled to [-pi, pi]

        def forward(self, x):
            h = self.encoder(x)
            return self.decoder1(h), self.decoder2(h) * math.pi

    return PtychoNN()


def build_cosmoflow(shape_dhwc: tuple[int, ...], target_size: int = 4, conv_size: int = 32, n_conv_layers: int = 5,
                    fc1_size: int = 128, fc2_size: int = 64, dropout: float = 0.5):
    from torch import nn

    d, h, w, c = shape_dhwc
    spatial = [d, h, w]
    layers: list[Any] = []
    cin = c
    for i in range(n_conv_layers):
        cout = conv_size * 2 ** i
        # Keras 'same' with an even kernel pads one voxel at the end of each axis
        layers += [nn.ConstantPad3d((0, 1, 0, 1, 0, 1), 0.0), nn.Conv3d(cin, cout, kernel_size=2),
                   nn.LeakyReLU(0.3), nn.MaxPool3d(2)]
        spatial = [s // 2 for s in spatial]
        cin = cout
    if min(spatial) < 1:
        raise ConfigError(f"cosmoflow: cube {d}x{h}x{w}: every side must be >= {2 ** n_conv_layers} "
                          f"({n_conv_layers} 2x poolings)")
    flat = cin * spatial[0] * spatial[1] * spatial[2]

    class Scale(nn.Module):
        def forward(self, x):
            return x * 1.2

    layers += [nn.Flatten(), nn.Linear(flat, fc1_size), nn.LeakyReLU(0.3), nn.Dropout(dropout),
               nn.Linear(fc1_size, fc2_size), nn.LeakyReLU(0.3), nn.Dropout(dropout),
               nn.Linear(fc2_size, target_size), nn.Tanh(), Scale()]
    return nn.Sequential(*layers)


def build_hep_cnn(chw: tuple[int, int, int], conv_sizes=(128, 128, 128, 128, 128), dense_sizes=(), dropout=0.5):
    from torch import nn

    c, h, w = chw
    layers: list[Any] = []
    cin = c
    for cs in conv_sizes:
        layers += [nn.Conv2d(cin, cs, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cs
    k = 2 ** len(conv_sizes)
    if h // k < 1 or w // k < 1:
        raise ConfigError(f"hep_cnn: image {h}x{w}: sides must be >= {k} ({len(conv_sizes)} 2x poolings)")
    flat = cin * (h // k) * (w // k)
    layers.append(nn.Flatten())
    for ds in dense_sizes:
        layers += [nn.Linear(flat, ds), nn.ReLU(), nn.Dropout(dropout)]
        flat = ds
    # the reference ends in Sigmoid + BCELoss; the sigmoid is folded into the loss (BCE with logits: same
    # function, numerically stable, so saturated outputs still get a gradient)
    layers += [nn.Linear(flat, 1), nn.Flatten(0)]
    return nn.Sequential(*layers)


def _resnet_parts():
    import torch
    from torch import nn


    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None, dilation=1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=dilation, dilation=dilation, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    class ResNet50(nn.Module):
        """ResNet-50 v1.5; ``dilate_last`` replaces layer4's stride by dilation 2 (output stride 16)."""

        def __init__(self, in_channels=3, num_classes=1000, dilate_last=False, head=True):
            super().__init__()
            self.inplanes, self.dilation = 64, 1
            self.conv1 = nn.Conv2d(in_channels, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._make(64, 3)
            self.layer2 = self._make(128, 4, stride=2)
            self.layer3 = self._make(256, 6, stride=2)
            self.layer4 = self._make(512, 3, stride=2, dilate=dilate_last)
            self.head = head
            if head:
                self.avgpool = nn.AdaptiveAvgPool2d(1)
                self.fc = nn.Linear(2048, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def _make(self, planes, blocks, stride=1, dilate=False):
            prev = self.dilation
            if dilate:
                self.dilation *= stride
                stride = 1
            down = None
            if stride != 1 or self.inplanes != planes * 4:
                down = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                     nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, down, prev)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes, dilation=self.dilation) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def features(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            low = self.layer1(x)
            return self.layer4(self.layer3(self.layer2(low))), low

        def forward(self, x):
            x, _ = self.features(x)
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet50


def build_resnet50(num_classes: int = 1000, in_channels: int = 3):
    return _resnet_parts()(in_channels=in_channels, num_classes=num_classes)


def _conv_bn_relu(nn, cin, cout, k, padding=0, dilation=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=padding, dilation=dilation, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


def build_deepcam_resnet50(in_channels: int = 16, n_classes: int = 3):
    import torch
    import torch.nn.functional as F
    from torch import nn

    ResNet50 = _resnet_parts()

    class DeepLabV3PlusResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = ResNet50(in_channels=in_channels, dilate_last=True, head=False)
            self.aspp = nn.ModuleList([_conv_bn_relu(nn, 2048, 256, 1)] +
                                      [_conv_bn_relu(nn, 2048, 256, 3, padding=r, dilation=r) for r in (6, 12, 18)])
            self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), _conv_bn_relu(nn, 2048, 256, 1))
            self.project = _conv_bn_relu(nn, 5 * 256, 256, 1)
            self.low = _conv_bn_relu(nn, 256, 48, 1)
            self.decode = nn.Sequential(_conv_bn_relu(nn, 304, 256, 3, padding=1),
                                        _conv_bn_relu(nn, 256, 256, 3, padding=1), nn.Conv2d(256, n_classes, 1))

        def forward(self, x):
            size = x.shape[-2:]
            f, low = self.backbone.features(x)
            p = self.pool(f).expand(-1, -1, f.shape[-2], f.shape[-1])
            f = self.project(torch.cat([b(f) for b in self.aspp] + [p], 1))
            f = F.interpolate(f, size=low.shape[-2:], mode="bilinear", align_corners=False)
            y = self.decode(torch.cat([f, self.low(low)], 1))
            return F.interpolate(y, size=size, mode="bilinear", align_corners=False)

    return DeepLabV3PlusResNet50()


def build_deepcam(in_channels: int = 16, n_classes: int = 3):
    """MLPerf HPC DeepCAM: DeepLabv3+ on the modified aligned Xception (output stride 16)."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class SepConv(nn.Module):
        """Depthwise 3×3 ('same' padding for the dilation) + pointwise 1×1, no bias."""

        def __init__(self, cin, cout, stride=1, dilation=1):
            super().__init__()
            self.depthwise = nn.Conv2d(cin, cin, 3, stride, padding=dilation, dilation=dilation, groups=cin,
                                       bias=False)
            self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)

        def forward(self, x):
            return self.pointwise(self.depthwise(x))

    class Block(nn.Module):
        def __init__(self, cin, cout, reps, stride=1, dilation=1, end_with_relu=True, grow_first=True,
                     is_last=False):
            super().__init__()
            self.end_with_relu = end_with_relu
            self.skip = None
            if cout != cin or stride != 1:
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))
            rep: list[Any] = []
            filters = cin
            if grow_first:
                rep += [SepConv(cin, cout, dilation=dilation), nn.BatchNorm2d(cout), nn.ReLU()]
                filters = cout
            for _ in range(reps - 1):
                rep += [SepConv(filters, filters, dilation=dilation), nn.BatchNorm2d(filters), nn.ReLU()]
            if not grow_first:
                rep += [SepConv(cin, cout, dilation=dilation), nn.BatchNorm2d(cout), nn.ReLU()]
            rep = rep[:-1]
            if stride != 1:
                rep.append(SepConv(cout, cout, stride=2))
            elif is_last:
                rep.append(SepConv(cout, cout))
            self.rep = nn.Sequential(*rep)

        def forward(self, inp):
            x = self.rep(inp) + (inp if self.skip is None else self.skip(inp))
            return F.relu(x) if self.end_with_relu else x

    class Xception(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(in_channels, 32, 3, stride=2, padding=1, bias=False),
                                      nn.BatchNorm2d(32), nn.ReLU(),
                                      nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
            self.block1 = Block(64, 128, 2, stride=2, end_with_relu=False)
            self.entry = nn.Sequential(Block(128, 256, 2, stride=2), Block(256, 728, 2, stride=2, is_last=True))
            self.middle = nn.Sequential(*[Block(728, 728, 3) for _ in range(16)])
            self.exit = nn.Sequential(
                Block(728, 1024, 2, end_with_relu=False, grow_first=False, is_last=True),
                SepConv(1024, 1536, dilation=2), nn.BatchNorm2d(1536), nn.ReLU(),
                SepConv(1536, 1536, dilation=2), nn.BatchNorm2d(1536), nn.ReLU(),
                SepConv(1536, 2048, dilation=2), nn.BatchNorm2d(2048), nn.ReLU())

        def forward(self, x):
            low = F.relu(self.block1(self.stem(x)))
            return self.exit(self.middle(self.entry(low))), low

    class Affine(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(c, 1, 1))
            self.bias = nn.Parameter(torch.zeros(c, 1, 1))

        def forward(self, x):
            return self.weight * x + self.bias

    def deconv(cin, cout, bn=True):
        layers = [nn.ConvTranspose2d(cin, cout, 3, stride=2, padding=1, output_padding=1, bias=False)]
        return layers + ([nn.BatchNorm2d(cout), nn.ReLU()] if bn else [])

    class DeepLabV3PlusXception(nn.Module):
        def __init__(self):
            super().__init__()
            self.xception = Xception()
            self.aspp = nn.ModuleList([_conv_bn_relu(nn, 2048, 256, 1)] +
                                      [_conv_bn_relu(nn, 2048, 256, 3, padding=r, dilation=r) for r in (6, 12, 18)])
            self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(2048, 256, 1, bias=False), Affine(256),
                                      nn.ReLU())
            self.project = _conv_bn_relu(nn, 5 * 256, 256, 1)
            self.low = _conv_bn_relu(nn, 128, 48, 1)
            self.deconv1 = nn.Sequential(*deconv(256, 256), *deconv(256, 256))
            self.conv1 = nn.Sequential(_conv_bn_relu(nn, 304, 256, 3, padding=1),
                                       _conv_bn_relu(nn, 256, 256, 3, padding=1), nn.Conv2d(256, 256, 1))
            self.deconv2 = nn.Sequential(*deconv(256, 256))
            self.last = nn.Sequential(*deconv(256, n_classes, bn=False))

        def forward(self, x):
            h, w = x.shape[-2:]
            ph, pw = (-h) % 16, (-w) % 16
            if ph or pw:  # reduced shapes only (the real 768×1152 is a multiple of 16)
                x = F.pad(x, (0, pw, 0, ph))
            f, low = self.xception(x)
            p = self.pool(f).expand(-1, -1, f.shape[-2], f.shape[-1])
            f = self.project(torch.cat([b(f) for b in self.aspp] + [p], 1))
            y = self.conv1(torch.cat([self.deconv1(f), self.low(low)], 1))
            y = self.last(self.deconv2(y))
            return y[..., :h, :w]

    return DeepLabV3PlusXception()


# ----- tasks: model + input conversion + loss + optimizer ----------------------------------------------------

@dataclass
class Task:
    """A model with what it needs to train: ``inputs(views, sample_ids, n, device)`` → (x, targets) on device,
    ``loss(output, targets)``, ``optimizer(params, lr)``. ``name`` is the model name."""

    name: str
    model: Any
    data_field: str
    default_lr: float
    info: dict = field(default_factory=dict)
    _conv: Any = None
    _loss: Any = None
    _opt: Any = None

    def inputs(self, views: dict, sample_ids, n: int, device):
        return self._conv(views, sample_ids, n, device)

    def loss(self, output, targets):
        return self._loss(output, targets)

    def optimizer(self, params, lr: float | None = None):
        return self._opt(params, self.default_lr if lr is None else lr)


def _field(fields, role, idx=0):
    got = [f for f in fields if f.role == role]
    return got[idx] if len(got) > idx else None


def _to(t, device, non_blocking=True):
    return t.to(device, non_blocking=non_blocking) if t.device != device else t


FLOAT_CLIP = 1.0e4


def _finite(x):
    """Synthetic float bytes may hold NaN, inf or huge values (random bytes read as float32): NaN → 0, the rest
    clipped to ±FLOAT_CLIP, so the step trains on finite numbers whatever the content. Out of place: ``x`` may
    view the caller's batch."""
    import torch

    return torch.nan_to_num(x, nan=0.0, posinf=FLOAT_CLIP, neginf=-FLOAT_CLIP).clamp_(-FLOAT_CLIP, FLOAT_CLIP)


def make_task(workload, model: str | None = None, *, meta: bool = False) -> Task:
    """Build the model for ``workload`` (shapes from ``workload.arrays``) with its input conversion, loss and
    optimizer. ``meta=True`` builds on torch's meta device (parameter counting without memory)."""
    import torch
    import torch.nn.functional as F

    name = model_name_for(workload, model)
    fields = row_fields(workload)
    data = _field(fields, "data")
    from contextlib import nullcontext

    ctx = torch.device("meta") if meta else nullcontext()

    def from_np(a):   # a stored array (host) or, under --overlap, a device view of the copied batch
        return torch.from_numpy(a) if isinstance(a, np.ndarray) else a

    if name == "ptychonn":
        if len(data.shape) != 3 or data.shape[2] != 1:
            raise ConfigError(f"ptychonn: data array {data.name} has shape {data.shape}; expected (H, W, 1)")
        labels = [f for f in fields if f.role == "label"]
        if len(labels) != 2:
            raise ConfigError(f"ptychonn: needs two label arrays (amplitude, phase); workload has {len(labels)}")
        with ctx:
            net = build_ptychonn(data.shape[:2])

        def conv(v, ids, n, dev):
            x, a, p = (_finite(_to(from_np(v[f.name]), dev).float().permute(0, 3, 1, 2))
                       for f in (data, *labels))
            return x, (a, p)

        def loss(out, tgt):
            return F.l1_loss(out[0], tgt[0]) + F.l1_loss(out[1], tgt[1])

        return Task(name, net, data.name, 1e-3, {"input": "(N,1,H,W) float32"}, conv, loss,
                    lambda ps, lr: torch.optim.Adam(ps, lr=lr))

    if name == "cosmoflow":
        if len(data.shape) != 4:
            raise ConfigError(f"cosmoflow: data array {data.name} has shape {data.shape}; expected (D, H, W, C)")
        label = _field(fields, "label")
        target = int(np.prod(label.shape)) if label else 4
        with ctx:
            net = build_cosmoflow(data.shape, target_size=target)

        def conv(v, ids, n, dev):
            x = _to(from_np(v[data.name]), dev).float().clamp_(min=0).log1p_()
            x = x.permute(0, 4, 1, 2, 3).contiguous(memory_format=torch.channels_last_3d)
            if label is not None:
                y = _finite(_to(from_np(v[label.name]), dev).float().reshape(n, -1)).clamp_(-1.2, 1.2)
            else:
                y = torch.zeros((n, target), device=dev)
            return x, y

        return Task(name, net, data.name, 1e-3 * 4 / 64, {"input": "(N,C,D,H,W) log1p(max(x,0)) float32"}, conv,
                    lambda o, t: F.mse_loss(o, t),
                    lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9))

    if name in ("deepcam", "deepcam_resnet50"):
        if len(data.shape) != 3:
            raise ConfigError(f"{name}: data array {data.name} has shape {data.shape}; expected (H, W, C)")
        label = _field(fields, "label")
        n_classes = 3
        with ctx:
            net = (build_deepcam if name == "deepcam" else build_deepcam_resnet50)(data.shape[2], n_classes)
        weight = torch.tensor(DEEPCAM_CLASS_FREQ) ** -0.125

        def conv(v, ids, n, dev):
            x = _finite(_to(from_np(v[data.name]), dev).float().permute(0, 3, 1, 2))
            if label is not None:
                y = _to(from_np(v[label.name]), dev).long().remainder_(n_classes)
            else:
                y = torch.zeros((n, *data.shape[:2]), dtype=torch.long, device=dev)
            return x, y

        wcache: dict = {}

        def loss(o, t):
            w = wcache.get(o.device)
            if w is None:
                w = wcache[o.device] = weight.to(o.device)
            return F.cross_entropy(o, t, weight=w)

        return Task(name, net, data.name, 1e-3, {"input": "(N,16,H,W) float32", "classes": n_classes}, conv, loss,
                    lambda ps, lr: torch.optim.AdamW(ps, lr=lr))

    if name == "resnet50":
        if len(data.shape) != 3 or data.shape[2] != 3:
            raise ConfigError(f"resnet50: decoded image shape {data.shape}; expected (H, W, 3)")
        classes = max(int(workload.classes or 1000), 1)
        with ctx:
            net = build_resnet50(classes)
        mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * 255
        std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * 255
        cache: dict = {}

        def conv(v, ids, n, dev):
            if dev not in cache:
                cache[dev] = (mean.to(dev), std.to(dev))
            m, s = cache[dev]
            x = _to(from_np(v[data.name]), dev).permute(0, 3, 1, 2).float()
            x = ((x - m) / s).contiguous(memory_format=torch.channels_last)
            y = _to(torch.from_numpy(np.asarray(ids[:n], dtype=np.int64) % classes), dev)
            return x, y

        return Task(name, net, data.name, 0.1 * 64 / 256, {"input": "(N,3,224,224) normalised", "classes": classes},
                    conv, lambda o, t: F.cross_entropy(o, t),
                    lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=1e-4))

    if name == "hep_cnn":
        if len(data.shape) != 3:
            raise ConfigError(f"hep_cnn: data array {data.name} has shape {data.shape}; expected (C, H, W)")
        label = _field(fields, "label")
        with ctx:
            net = build_hep_cnn(data.shape)

        def conv(v, ids, n, dev):
            x = _finite(_to(from_np(v[data.name]), dev).float())
            if label is not None:
                y = _to(from_np(v[label.name]), dev).reshape(n, -1)[:, 0].long().remainder_(2).float()
            else:
                y = torch.zeros(n, device=dev)
            return x, y

        return Task(name, net, data.name, 1e-3, {"input": "(N,C,H,W) float32"}, conv,
                    lambda o, t: F.binary_cross_entropy_with_logits(o, t),
                    lambda ps, lr: torch.optim.Adam(ps, lr=lr))

    raise unknown_choice("model", name, MODELS)  # pragma: no cover


def count_parameters(model) -> int:
    """Trainable parameters of a torch module."""
    return int(sum(p.numel() for p in model.parameters() if p.requires_grad))


def parameter_count(workload, model: str | None = None) -> int:
    """Trainable parameters of the workload's model at the workload's (resolved) shapes, counted on torch's meta
    device (no memory, no initialisation cost). This is what ``dlbench show WORKLOAD`` prints."""
    return count_parameters(make_task(workload, model, meta=True).model)


def torch_dtype(dt):
    """The torch dtype of a numpy dtype (the rows' arrays viewed as tensors)."""
    import torch

    return {np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8, np.dtype(np.int16): torch.int16,
            np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64, np.dtype(np.float16): torch.float16,
            np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
            np.dtype(np.uint16): torch.uint16, np.dtype(np.uint32): torch.uint32}[np.dtype(dt)]
