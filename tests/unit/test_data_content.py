import io

import numpy as np
import pytest

from dlbench import workload as W
from dlbench.data import content as C


@pytest.fixture(scope="module")
def wls():
    return {n: W.load(n, scale="tiny") for n in W.builtin_names()}


@pytest.mark.parametrize("name", ["cosmoflow", "deepcam", "hep_cnn", "ptychonn"])
def test_rows_deterministic_and_seeded(wls, name):
    wl = wls[name]
    a = C.expected_row(wl, 7, 3)
    assert a.dtype == np.uint8 and a.size == wl.sample_nbytes
    assert np.array_equal(a, C.expected_row(wl, 7, 3))
    assert not np.array_equal(a, C.expected_row(wl, 8, 3))
    assert not np.array_equal(a, C.expected_row(wl, 7, 4))
    out = np.full(wl.sample_nbytes + 10, 0xAB, dtype=np.uint8)
    assert C.fill_row(wl, 7, 3, out) == wl.sample_nbytes
    assert np.array_equal(out[:wl.sample_nbytes], a) and (out[wl.sample_nbytes:] == 0xAB).all()


def test_bytes_depend_on_index_only_not_on_order(wls):
    wl = wls["hep_cnn"]
    forward = [C.expected_row(wl, 0, i) for i in range(6)]
    backward = [C.expected_row(wl, 0, i) for i in reversed(range(6))][::-1]
    for a, b in zip(forward, backward):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", ["cosmoflow", "deepcam", "hep_cnn", "ptychonn"])
def test_values_usable_by_a_model(wls, name):
    wl = wls[name]
    row = C.expected_row(wl, 0, 1)
    pos = 0
    for a in wl.arrays:
        v = row[pos:pos + a.nbytes].view(a.dtype)
        pos += a.nbytes
        if v.dtype.kind == "f":
            assert np.isfinite(v).all() and v.min() >= 0 and v.max() < 1
        elif a.role == "label":
            assert set(np.unique(v)) <= {0, 1}
        else:
            assert v.min() >= 0 and v.max() < C.INT_DATA_HIGH


def test_large_data_array_has_no_repeated_pages():
    wl = W.load("cosmoflow", scale="small")  # 16 MiB sample: the block is tiled
    row = C.expected_row(wl, 0, 0)
    pages = row[: (row.size // 4096) * 4096].reshape(-1, 4096)
    assert len({p.tobytes() for p in pages}) == len(pages)


def test_jpeg_sizes_distribution_and_independence(wls):
    wl = W.load("imagenet", scale="full")
    sizes = C.jpeg_sizes(wl, 0, np.arange(200_000))
    d = wl.jpeg.size
    assert sizes.min() >= d.min_bytes and sizes.max() <= d.max_bytes
    assert abs(sizes.mean() - d.mean_bytes) / d.mean_bytes < 0.03
    assert abs(sizes.std() - d.std_bytes) / d.std_bytes < 0.10
    # sample i's size depends only on (workload, seed, i): not on which other samples are asked for
    assert np.array_equal(C.jpeg_sizes(wl, 0, np.asarray([5, 199_999])), sizes[[5, 199_999]])
    assert not np.array_equal(C.jpeg_sizes(wl, 1, np.arange(100)), sizes[:100])


def test_jpeg_exact_size_decodable_and_smooth(wls):
    from PIL import Image

    wl = wls["imagenet"]
    sizes = C.jpeg_sizes(wl, 3)
    for i in (0, 1, 2):
        b = C.jpeg_bytes(wl, 3, i)
        assert len(b) == sizes[i]
        assert b[:2] == b"\xff\xd8" and b[-2:] == b"\xff\xd9" and b[2:4] == b"\xff\xfe"
        assert b == C.jpeg_bytes(wl, 3, i)
        img = Image.open(io.BytesIO(b))
        img.load()
        assert img.mode == "RGB"
        w, h = img.size
        assert 0.7 <= w / h <= 1.45
        # encoded image (without padding) fills most of the file: sizes come from pixels, not padding
        assert w * h * C.JPEG_BYTES_PER_PIXEL > 0.4 * len(b) or len(b) < 8192


def test_jpeg_padding_handles_awkward_remainders():
    rng = np.random.default_rng(0)
    enc = b"\xff\xd8" + b"x" * 100 + b"\xff\xd9"
    for target in (len(enc) + 12, len(enc) + 65537, len(enc) + 65538, len(enc) + 65540, len(enc) + 200_000):
        out = C._pad(enc, target, rng.bytes(target - len(enc)), 77)
        assert len(out) == target and out.endswith(enc[2:])
        assert out[2:4] == b"\xff\xfe" and int.from_bytes(out[6:14], "big") == 77   # the id leads the first COM
    with pytest.raises(ValueError, match="id segment"):
        C._pad(enc, len(enc) + 11, rng.bytes(11), 77)
