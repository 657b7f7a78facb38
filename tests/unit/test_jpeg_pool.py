"""JPEG files from the per-(workload, seed) pool of size-class images (issue 19): valid, exact size, unique,
deterministic whatever the build order, checked byte for byte by verify --content; old JPEG content is named."""

import hashlib
import io
import json

import numpy as np
import pytest

from dlbench import workload as W
from dlbench.data import content as C
from dlbench.data import generate as G
from dlbench.data.fmt_jpeg import CONTENT_VERSION as JPEG_CONTENT_VERSION
from dlbench.data.fmt_jpeg import decode_jpeg_into
from dlbench.data.manifest import MANIFEST_NAME, Manifest
from dlbench.data.verify import verify
from dlbench.errors import DataError

N = 200


@pytest.fixture(scope="module")
def wl():
    return W.load("imagenet", scale="tiny", samples=N)


@pytest.fixture(scope="module")
def files(wl):
    C._POOLS.clear()
    return [C.jpeg_bytes(wl, 5, i) for i in range(N)]


def test_every_file_is_a_decodable_jpeg_of_its_drawn_size(wl, files):
    from PIL import Image

    sizes = C.jpeg_sizes(wl, 5)
    shape = tuple(wl.jpeg.decoded_shape)
    out = np.zeros(int(np.prod(shape)), dtype=np.uint8)
    pool = C.jpeg_pool(wl, 5)
    for i, b in enumerate(files):
        assert len(b) == sizes[i]
        assert b[:2] == b"\xff\xd8" and b[-2:] == b"\xff\xd9"
        assert b[2:4] == b"\xff\xfe" and int.from_bytes(b[6:14], "big") == i   # the id leads the first COM
        with Image.open(io.BytesIO(b)) as img:
            img.load()
            assert img.mode == "RGB" and 0.7 <= img.size[0] / img.size[1] <= 1.45
        out[:] = 0
        decode_jpeg_into(np.frombuffer(b, dtype=np.uint8), len(b), out, shape)
        assert out.std() > 5      # a real image, not a blank
        # the pool image fills most of the file: decode cost follows the file size
        k = int(np.searchsorted(pool.bounds, len(b), side="right")) - 1
        assert b.endswith(pool.images[k][2:]) and len(pool.images[k]) >= 0.8 * len(b)


def test_bytes_unique_and_pool_images_fit_their_class(wl, files):
    assert len({hashlib.sha256(b).digest() for b in files}) == N
    pool = C.jpeg_pool(wl, 5)
    assert len(pool.images) >= 10
    for k, img in pool.images.items():
        b = int(pool.bounds[k])
        assert C.JPEG_FILL_MIN * b <= len(img) <= b - C._ID_SEG
    # classes cover every size a workload may draw, ≈ 6 % apart
    bounds = C.jpeg_class_bounds(4096, 2_000_000)
    assert bounds[0] == 4096 and bounds[-1] <= 2_000_000 < bounds[-1] + bounds[-1] // 16
    assert np.all(np.diff(bounds) == bounds[:-1] // 16)


def test_deterministic_whatever_order_the_classes_are_built(wl, files):
    C._POOLS.clear()
    again = [C.jpeg_bytes(wl, 5, i) for i in reversed(range(N))][::-1]
    assert again == files
    C._POOLS.clear()
    assert C.jpeg_bytes(wl, 6, 0) != files[0]       # another seed, other bytes


def test_generate_twice_same_bytes_and_verify_catches_a_flipped_byte(tmp_path):
    w = W.load("imagenet", scale="tiny", samples=12)
    a, b = tmp_path / "a", tmp_path / "b"
    G.generate(w, a, seed=1, progress=False)
    C._POOLS.clear()
    m = G.generate(w, b, seed=1, progress=False).manifest
    assert m.content == JPEG_CONTENT_VERSION
    for p in m.paths:
        assert (a / p).read_bytes() == (b / p).read_bytes()
    assert verify(b, content=True) == []
    for f, where in ((3, -100), (7, 20)):     # in the pool image's entropy data; in the id/padding segment
        p = b / m.paths[f]
        raw = bytearray(p.read_bytes())
        raw[where] ^= 0x01
        p.write_bytes(bytes(raw))
    problems = verify(b, content=True)
    assert len(problems) == 2 and all("differs from the expected content (1 of" in x for x in problems)
    assert "sample 3 " in problems[0] and "sample 7 " in problems[1]


def test_old_jpeg_content_is_one_line_and_generate_asks_for_force(tmp_path):
    w = W.load("imagenet", scale="tiny", samples=6)
    d = tmp_path / "d"
    G.generate(w, d, seed=0, progress=False)
    mp = d / MANIFEST_NAME
    doc = json.loads(mp.read_text())
    doc["content"] = "dlbench.content/1"          # what a dataset generated before the pool records
    mp.write_text(json.dumps(doc))
    assert verify(d) == [] and verify(d, checksum=True) == []   # still a valid dataset
    problems = verify(d, content=True)
    assert len(problems) == 1
    assert "'dlbench.content/1'" in problems[0] and JPEG_CONTENT_VERSION in problems[0]
    assert "generate --force" in problems[0]
    with pytest.raises(DataError, match="older dlbench.*--force"):
        G.generate(w, d, seed=0, progress=False)
    G.generate(w, d, seed=0, force=True, progress=False)
    assert Manifest.load(d).content == JPEG_CONTENT_VERSION and verify(d, content=True) == []
