"""What is inside a generated sample: a pure function of (workload, seed, sample index).

The bytes of sample ``i`` depend only on ``(workload name, seed, i)`` (and the array shapes and dtypes of
the resolved workload), never on the number of ranks, the order of generation or anything written before.
``verify --content`` and ``run --verify`` recompute them with ``expected_row``.

HDF5 layouts (docs/architecture.md contract 1: a row is the concatenation, in the order of ``workload.arrays``, of each
array's C-contiguous bytes):

- Each sample has its own generator, ``numpy.random.default_rng([workload_id, seed, i])`` (PCG64 seeded
  through a SeedSequence); arrays draw from it in order.
- A data array (``role: data``) is a random *block* of ``BLOCK_ELEMS`` = 16,411 elements (a prime, ≈ 64 KiB
  of float32; ``SMALL_BLOCK_ELEMS`` = 1,021 for arrays of up to 1 Mi elements, so small samples cost
  little more than their write) tiled over the whole array: float arrays hold uniform values in [0, 1),
  integer arrays uniform integers in [0, 1024) (clipped to the dtype's range), so every value is finite
  and usable by a real model. Because the block length is prime, no two 4 KiB pages of an array hold the
  same bytes (the small block's phase against the pages repeats only after 4 MiB, the large one's after
  64 MiB), so page-level deduplication cannot shortcut the I/O, while filling costs about as much as a
  memcpy (docs/LIMITS.md: tiling runs at ≈ 30 GB/s, drawing every value at 1.7 GB/s).
- A label array (``role: label``) holds floats in [0, 1) or integers in {0, 1} (valid class ids for
  binary and for 3-class segmentation losses); fully random when it is small, and tiled from a random block
  like the data when it is larger than one block (PtychoNN's 64 KiB targets, DeepCAM's masks), so that
  generation stays write-bound.

JPEG layout (``jpeg_folders``, manifest content ``dlbench.jpeg/2``): a row is the JPEG file's bytes. Its size is
drawn per sample from the workload's ``jpeg.size`` distribution with a counter-based hash of (workload, seed, i)
(``jpeg_sizes``, vectorised, independent of the number of samples), then clipped to [min_bytes, max_bytes].
The file is a pre-encoded *pool image* of its size class, made unique in bytes that keep it valid:

- Size classes (``jpeg_class_bounds``): lower bounds b_0 = max(min_bytes, 1024), b_{k+1} = b_k + b_k // 16
  (≈ 6 % apart, integer arithmetic). A target size t belongs to the class with the largest b_k <= t.
- The pool of (workload, seed) (``jpeg_pool``, built lazily, one image per class, cached in-process so
  generation and ``verify --content`` encode each class once): image k is a crop of one *smooth random image*
  (the canvas, ``_CANVAS`` pixels square, drawn once per pool; classes larger than it draw their own) — a
  random colour grid with 32-pixel cells, upsampled bicubically to 8-pixel cells and perturbed there (±60 %),
  then to 2-pixel cells (±50 %), then to full size, so it compresses (≈ 0.56 B per pixel at quality 90,
  close to ImageNet's) and decodes like a photograph, not like noise. Its aspect ratio (uniform in
  [3/4, 4/3]) and crop offset come from (workload, seed, k) alone; its pixel count is fitted so that the
  encoded image is between ``JPEG_FILL_MIN`` (0.88) and 1 times b_k (minus the id segment), aiming at
  ``JPEG_FILL``. Image k therefore does not depend on which classes were built before, on the process or on
  the number of ranks.
- File i = SOI, then JPEG comment (COM, 0xFFFE) segments up to exactly the target size — the first one's
  payload starts with the sample id (8 bytes, big-endian), the rest are seeded bytes (the pool's random block
  from an offset hashed from i: no generator per file) — then the pool image after its SOI. So every file is a valid JPEG of distinct bytes (the id), padding is at most
  ≈ 17 % of a file (≈ 8 % on average for ImageNet's sizes), and the decode cost tracks the file size.
  The *decoded pixels* repeat across the files of one size class (≈ 100 classes for ImageNet): a loader
  decodes a real image of the file's size, but a model sees few distinct images (fine for I/O and decode
  timing, not for accuracy). Generation costs a memcpy per file plus the pool (≈ 0.5 s per process).

Encoding uses Pillow; the same Pillow/libjpeg version gives the same bytes (the manifest's provenance
records the version; ``verify --content`` across versions may report differences). Datasets of the
previous JPEG content (``dlbench.content/1``: every image encoded separately) cannot be recomputed:
``verify --content`` says so in one line, ``generate`` asks for ``--force``.
"""

from __future__ import annotations

import io
import math

import numpy as np

from ..workload import Workload, workload_id

BLOCK_ELEMS = 16411          # prime: tiles never line up with 4 KiB pages
SMALL_BLOCK_ELEMS = 1021     # prime, for arrays of up to 1 Mi elements (cheaper per sample)
INT_DATA_HIGH = 1024         # integer data arrays: values in [0, 1024)
JPEG_QUALITY = 90
JPEG_BYTES_PER_PIXEL = 0.57  # first guess of the encoded size per pixel of the smooth image at quality 90
JPEG_FILL = 0.94             # aim a pool image at this fraction of its size class's lower bound
JPEG_FILL_MIN = 0.88         # and accept it from this fraction (so padding stays under ~17 % of a file)
JPEG_CLASS_STEP = 16         # size class k+1 starts at b_k + b_k // 16 (≈ 6 % apart)
_CANVAS = 2304               # the pool's smooth canvas, square (5.3 Mpx, ≈ 3 MB of JPEG); larger images: their own
_ID_SEG = 12                 # the first COM segment holds at least the 8-byte sample id
_FILL_OFFSETS = 1 << 16      # a sample's padding starts at one of this many offsets of the pool's random block
_OCTAVES = ((32, 1.0), (8, 0.6), (2, 0.5))  # (grid cell in pixels, amplitude relative to full range)
_COM_MAX = 65535 + 2         # a COM segment: FF FE, 2-byte length (counts itself), <= 65533 payload bytes


def sample_rng(workload: Workload, seed: int, i: int, stream: int = 0) -> np.random.Generator:
    """The generator of sample ``i`` (stream 0: arrays; 1 and 2: JPEG image and padding before dlbench.jpeg/2)."""
    return np.random.default_rng([workload_id(workload.name), int(seed) & 0xFFFFFFFFFFFFFFFF, int(i), stream])


# ---- HDF5 rows ----------------------------------------------------------------------------------------

def _fill_random(rng: np.random.Generator, out: np.ndarray, role: str) -> None:
    """Fill a typed 1-D array with the random values of its role (see the module docstring)."""
    dt = out.dtype
    if dt.kind == "f":
        if dt == np.float32 or dt == np.float64:
            rng.random(out=out, dtype=dt.type)
        else:
            out[...] = rng.random(out.size, dtype=np.float32)
    else:
        hi = 2 if role == "label" else INT_DATA_HIGH
        hi = min(hi, int(np.iinfo(dt).max) + 1)
        out[...] = rng.integers(0, hi, size=out.size, dtype=dt)


def _tile(out: np.ndarray, n_first: int) -> None:
    """Repeat ``out[:n_first]`` over all of ``out`` by doubling copies (memcpy speed)."""
    filled, n = n_first, out.size
    while filled < n:
        step = min(filled, n - filled)
        out[filled:filled + step] = out[:step]
        filled += step


def fill_arrays(workload: Workload, seed: int, i: int, outs: list[np.ndarray]) -> None:
    """Write sample ``i``'s arrays into ``outs`` (one uint8 buffer per array of ``workload.arrays``, each
    exactly that array's nbytes; any alignment). No allocation beyond the small random block."""
    rng = sample_rng(workload, seed, i)
    for a, buf in zip(workload.arrays, outs):
        typed = buf.view(a.dtype) if buf.ctypes.data % np.dtype(a.dtype).itemsize == 0 else None
        if typed is None:  # unaligned staging buffer: fill a scratch copy (rare; never on our paths)
            scratch = np.empty(a.nbytes // np.dtype(a.dtype).itemsize, dtype=a.dtype)
            _fill_one(rng, scratch, a.role)
            buf[...] = scratch.view(np.uint8)
        else:
            _fill_one(rng, typed, a.role)


def _fill_one(rng: np.random.Generator, typed: np.ndarray, role: str) -> None:
    block = SMALL_BLOCK_ELEMS if typed.size <= (1 << 20) else BLOCK_ELEMS
    if typed.size > block:
        _fill_random(rng, typed[:block], role)
        _tile(typed, block)
    else:
        _fill_random(rng, typed, role)


def fill_row(workload: Workload, seed: int, i: int, out: np.ndarray) -> int:
    """Write sample ``i``'s row (docs/architecture.md contract 1) into ``out[:nbytes]`` and return nbytes
    (the format driver's ``fill_row``; its default: ``expected_row`` copied)."""
    return workload.format.driver().fill_row(workload, seed, i, out)


def expected_row(workload: Workload, seed: int, i: int) -> np.ndarray:
    """Sample ``i``'s stored bytes as the generator wrote them (uint8, a fresh array): the format module's."""
    return workload.format.driver().expected_row(workload, seed, i)


# ---- JPEG sizes and images ----------------------------------------------------------------------------

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
    z = x
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
    return z ^ (z >> np.uint64(31))


def _uniform(key: int, idx: np.ndarray, lane: int) -> np.ndarray:
    """Counter-based uniforms in (0, 1): hash of (key, lane, index)."""
    with np.errstate(over="ignore"):
        k = _splitmix64(np.asarray([key ^ (lane * 0x632BE59BD9B4E019)], dtype=np.uint64))[0]
        h = _splitmix64(idx.astype(np.uint64) ^ k)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def size_draw(wid: int, seed: int, idx: np.ndarray, kind: str, mean: float, std: float,
              lanes: tuple[int, int]) -> np.ndarray:
    """Sizes (float64, before a caller's rounding and clipping) of the items ``idx`` from a fixed, normal or
    lognormal distribution of the given mean and sd: Box-Muller over two counter lanes, a pure function of
    (workload id, seed, lanes, index). Each caller has its own lanes (JPEG files 1, 2; npy records 11, 12)."""
    if kind == "fixed" or std == 0:
        return np.full(idx.shape, float(mean))
    key = ((wid << 32) ^ (int(seed) & 0xFFFFFFFFFFFFFFFF)) & 0xFFFFFFFFFFFFFFFF
    u1, u2 = (_uniform(key ^ ((lane * 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF), idx, 0) for lane in lanes)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)  # Box-Muller
    if kind == "normal":
        return mean + std * z
    s2 = math.log(1.0 + (std / mean) ** 2)
    return np.exp(math.log(mean) - s2 / 2.0 + math.sqrt(s2) * z)


def jpeg_sizes(workload: Workload, seed: int, idx: np.ndarray | None = None) -> np.ndarray:
    """Target file size (bytes, int64) of each sample in ``idx`` (default: all samples): the workload's
    ``jpeg.size`` distribution (fixed, normal, or lognormal with the given mean and sd), clipped to
    [min_bytes, max_bytes]. Sample i's size depends only on (workload, seed, i)."""
    dist = workload.jpeg.size  # type: ignore[union-attr]
    idx = np.arange(workload.samples, dtype=np.int64) if idx is None else np.asarray(idx, dtype=np.int64)
    sizes = size_draw(workload_id(workload.name), seed, idx, dist.kind, float(dist.mean_bytes),
                      float(dist.std_bytes), (1, 2))
    lo = max(float(dist.min_bytes), 1024.0)
    return np.clip(np.rint(sizes), lo, max(lo, float(dist.max_bytes))).astype(np.int64)


def _smooth_image(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """A smooth random RGB image (h, w, 3) uint8: coarse-to-fine random grids, each upsampled
    bicubically to the next scale and perturbed there (see ``_OCTAVES``)."""
    from PIL import Image

    cur: np.ndarray | None = None
    for cell, amp in _OCTAVES:
        gw, gh = max(2, -(-w // cell) + 1), max(2, -(-h // cell) + 1)
        noise = rng.integers(-128, 128, size=(gh, gw, 3), dtype=np.int16)
        if cur is None:
            cur = (noise + 128).astype(np.uint8)
        else:
            up = np.asarray(Image.fromarray(cur, "RGB").resize((gw, gh), Image.Resampling.BICUBIC), dtype=np.int16)
            cur = np.clip(up + (noise * amp).astype(np.int16), 0, 255).astype(np.uint8)
    assert cur is not None   # _OCTAVES is not empty
    return np.asarray(Image.fromarray(cur, "RGB").resize((w, h), Image.Resampling.BICUBIC))


def _encode(img: np.ndarray) -> bytes:
    from PIL import Image

    bio = io.BytesIO()
    Image.fromarray(img, "RGB").save(bio, format="JPEG", quality=JPEG_QUALITY)
    return bio.getvalue()


def _dims(pixels: float, aspect: float) -> tuple[int, int]:
    w = max(8, int(round(math.sqrt(max(pixels, 64.0) * aspect))))
    h = max(8, int(round(max(pixels, 64.0) / w)))
    return w, h


def jpeg_class_bounds(lo: int, hi: int) -> np.ndarray:
    """Lower bounds (int64, ascending) of the JPEG size classes covering [lo, hi]: b_0 = lo,
    b_{k+1} = b_k + max(1, b_k // JPEG_CLASS_STEP) (≈ 6 % apart; integers only, so every machine agrees)."""
    out = [int(lo)]
    while out[-1] <= hi:
        out.append(out[-1] + max(1, out[-1] // JPEG_CLASS_STEP))
    return np.asarray(out[:-1] if len(out) > 1 else out, dtype=np.int64)


class _JpegPool:
    """The pre-encoded images of one (workload, seed): image k (built on first use) is a JPEG of
    between ``JPEG_FILL_MIN`` and 1 times the lower bound of size class k (minus room for the id segment),
    cut from one smooth canvas (``_CANVAS`` pixels square, drawn once) at an offset, aspect ratio and
    pixel count drawn from (workload, seed, k) alone, so it does not depend on which classes are built
    first, on the process or on the number of ranks."""

    def __init__(self, workload: Workload, seed: int):
        self.wid, self.seed = workload_id(workload.name), int(seed) & 0xFFFFFFFFFFFFFFFF
        dist = workload.jpeg.size  # type: ignore[union-attr]
        lo = max(int(dist.min_bytes), 1024)
        self.bounds = jpeg_class_bounds(lo, max(lo, int(dist.max_bytes)))
        self.images: dict[int, bytes] = {}
        self._canvas: np.ndarray | None = None
        self._fill: bytes | None = None
        self._fill_room = _FILL_OFFSETS + int(0.2 * int(self.bounds[-1])) + (1 << 16)

    def _rng(self, stream: int, k: int = 0) -> np.random.Generator:
        return np.random.default_rng([self.wid, self.seed, k, stream])

    def canvas(self) -> np.ndarray:
        if self._canvas is None:
            self._canvas = _smooth_image(self._rng(3), _CANVAS, _CANVAS)
        return self._canvas

    def fill(self, i: int, n: int) -> memoryview:
        """``n`` seeded padding bytes of sample ``i``: the pool's random block (drawn once) from an offset
        hashed from ``i`` (repeated past its end, which only a padding larger than ≈ 20 % of the largest
        class would reach)."""
        if self._fill is None:
            self._fill = self._rng(5).bytes(self._fill_room)
        h = ((int(i) * 0x9E3779B97F4A7C15) ^ self.seed) & 0xFFFFFFFFFFFFFFFF
        off = (((h ^ (h >> 29)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF) >> 48   # in [0, 65536)
        if off + n <= len(self._fill):
            return memoryview(self._fill)[off:off + n]
        reps = -(-(off + n) // len(self._fill))
        return memoryview(self._fill * reps)[off:off + n]

    def image(self, k: int) -> bytes:
        got = self.images.get(k)
        if got is None:
            got = self.images[k] = self._build(k)
            if len(self.images) == len(self.bounds):   # every class built: the canvas (16 MB) is not needed
                self._canvas = None
        return got

    def _crop(self, rng_off: tuple[float, float], w: int, h: int, big: np.ndarray | None) -> np.ndarray:
        if big is not None:
            return big[:h, :w]
        c = self.canvas()
        y = int(rng_off[0] * (c.shape[0] - h + 1))
        x = int(rng_off[1] * (c.shape[1] - w + 1))
        return c[y:y + h, x:x + w]

    def _build(self, k: int) -> bytes:
        b = int(self.bounds[k])
        limit = b - _ID_SEG                       # room for the id segment of every file of the class
        floor = JPEG_FILL_MIN * b
        rng = self._rng(4, k)
        aspect = float(rng.uniform(0.75, 4.0 / 3.0))
        off = (float(rng.random()), float(rng.random()))
        big_seed = int(rng.integers(0, 1 << 62))
        pixels = JPEG_FILL * b / JPEG_BYTES_PER_PIXEL
        big = None
        best: bytes | None = None
        for _attempt in range(8):
            w, h = _dims(pixels, aspect)
            if big is None and (w > _CANVAS or h > _CANVAS):   # larger than the canvas: its own image
                big = _smooth_image(np.random.default_rng(big_seed), int(w * 1.3), int(h * 1.3))
            if big is not None and (w > big.shape[1] or h > big.shape[0]):
                big = _smooth_image(np.random.default_rng(big_seed), int(w * 1.3), int(h * 1.3))
            enc = _encode(np.ascontiguousarray(self._crop(off, w, h, big)))
            if len(enc) <= limit and (best is None or len(enc) > len(best)):
                best = enc
            if floor <= len(enc) <= limit or (len(enc) < floor and w * h <= 64):
                break
            pixels *= JPEG_FILL * b / len(enc)
        if best is None:
            best = _encode(np.zeros((8, 8, 3), dtype=np.uint8))
            if len(best) > limit:
                raise ValueError(f"jpeg target {b} B is smaller than the smallest JPEG ({len(best) + _ID_SEG} B)")
        return best


_POOLS: dict[tuple, _JpegPool] = {}
_POOLS_KEPT = 4


def jpeg_pool(workload: Workload, seed: int) -> _JpegPool:
    """The pool of (workload, seed), kept in-process (the last ``_POOLS_KEPT``), so generation and
    ``verify --content`` encode each size class once."""
    d = workload.jpeg.size  # type: ignore[union-attr]
    key = (workload.name, int(seed), int(d.min_bytes), int(d.max_bytes))
    pool = _POOLS.get(key)
    if pool is None:
        while len(_POOLS) >= _POOLS_KEPT:
            _POOLS.pop(next(iter(_POOLS)))
        pool = _POOLS[key] = _JpegPool(workload, seed)
    return pool


def jpeg_bytes(workload: Workload, seed: int, i: int, target: int | None = None) -> bytes:
    """Sample ``i``'s JPEG file, exactly ``jpeg_sizes(...)[i]`` bytes (see the module docstring): the
    pool image of its size class, with COM segments after SOI holding the sample id and seeded bytes."""
    if target is None:
        target = int(jpeg_sizes(workload, seed, np.asarray([i]))[0])
    pool = jpeg_pool(workload, seed)
    k = int(np.searchsorted(pool.bounds, target, side="right")) - 1
    if k < 0:
        raise ValueError(f"jpeg target {target} B is below the smallest size class ({int(pool.bounds[0])} B)")
    img = pool.image(k)
    return _pad(img, target, pool.fill(i, max(0, target - len(img))), i)


def _pad(enc: bytes, target: int, fill, sample_id: int) -> bytes:
    """Insert COM segments after SOI so that the file is exactly ``target`` bytes; the first one's payload
    starts with ``sample_id`` (8 bytes, big-endian), the rest comes from ``fill`` (bytes-like, at least
    ``target - len(enc)`` long)."""
    pad = target - len(enc)
    if pad < _ID_SEG:
        raise ValueError(f"jpeg target {target} B leaves {pad} B for the id segment ({_ID_SEG} needed)")
    segs: list[bytes] = []
    pos = 0
    while pad > 0:
        seg = min(pad, _COM_MAX)
        if 0 < pad - seg < 4:
            seg -= 4
        head = b"\xff\xfe" + (seg - 2).to_bytes(2, "big")
        if segs:
            segs += (head, fill[pos:pos + seg - 4])
        else:
            segs += (head, int(sample_id).to_bytes(_ID_SEG - 4, "big"), fill[pos + _ID_SEG - 4:pos + seg - 4])
        pos += seg - 4
        pad -= seg
    out = b"".join((enc[:2], *segs, memoryview(enc)[2:]))
    assert len(out) == target
    return out
