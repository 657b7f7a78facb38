import json

import numpy as np
import pytest

from dlbench.data.manifest import MANIFEST_NAME


def test_list_and_show(cli):
    r = cli(["list", "workloads"])
    assert r.exit_code == 0
    for name in ("cosmoflow", "deepcam", "hep_cnn", "imagenet", "ptychonn"):
        assert name in r.output
    r = cli(["show", "cosmoflow", "--scale", "tiny"])
    assert r.exit_code == 0
    assert "[32, 32, 32, 4] int16" in r.output and "262,160 B" in r.output and "32 files" in r.output
    assert "a100: 0.00551 s" in r.output
    r = cli(["show", "imagenet"])
    assert "25,557,032 parameters" in r.output and "lognormal" in r.output and "[tiny]" in r.output


@pytest.mark.parametrize("args, msg", [
    (["show", "cosmoflw"], "did you mean 'cosmoflow'"),
    (["show", "cosmoflow", "--scale", "huge"], "unknown scale 'huge'"),
    (["generate", "-w", "hep_cnn", "--samples", "0", "--data-dir", "{d}"], "--samples=0"),
    (["generate", "-w", "hep_cnn", "--samples", "-5", "--data-dir", "{d}"], "--samples=-5"),
    (["generate", "-w", "imagenet", "--samples", "1000000000", "--data-dir", "{d}"], "files is more than"),
    (["generate", "-w", "hep_cnn", "--data-dir", "{d}/missing/x"], "parent directory"),
])
def test_bad_input_one_line_nonzero_nothing_written(cli, tmp_path, args, msg):
    r = cli([a.replace("{d}", str(tmp_path / "d")) for a in args])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and msg in lines[0] and lines[0].startswith("dlbench: error:")
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())


def test_generate_verify_and_detect_damage(cli, tmp_path):
    d = tmp_path / "d"
    r = cli(["generate", "-w", "hep_cnn", "--data-dir", d, "--seed", "3"])
    assert r.exit_code == 0 and "generated hep_cnn (tiny, seed 3): 4 files" in r.output and "MiB/s" in r.output
    m = json.loads((d / MANIFEST_NAME).read_text())
    assert m["seed"] == 3 and m["complete"] and len(m["files"]) == 4
    assert cli(["verify", "--data-dir", d, "--content"]).exit_code == 0
    r = cli(["generate", "-w", "hep_cnn", "--data-dir", d, "--seed", "3"])
    assert r.exit_code == 0 and "0 files" in r.output and "4 files already complete" in r.output
    r = cli(["generate", "-w", "hep_cnn", "--data-dir", d, "--seed", "4"])
    assert r.exit_code == 3 and "--force" in r.output

    # flip one data byte: only --content sees it
    p = d / "block-000002.h5"
    b = bytearray(p.read_bytes())
    b[-100] ^= 0xFF
    p.write_bytes(bytes(b))
    assert cli(["verify", "--data-dir", d]).exit_code == 0
    r = cli(["verify", "--data-dir", d, "--content"])
    assert r.exit_code == 3 and "block-000002.h5 row 15" in r.output and "1 problem(s)" in r.output

    # truncate one file and remove another
    (d / "block-000001.h5").write_bytes(b[:1000])
    (d / "block-000003.h5").unlink()
    r = cli(["verify", "--data-dir", d])
    assert r.exit_code == 3
    assert "block-000001.h5: 1000 B" in r.output and "block-000003.h5: missing" in r.output

    # re-run repairs what is missing or truncated, and (issue 12) the file with the flipped byte too: a
    # skipped file must match the checksum recorded when it was written, not just its size
    r = cli(["generate", "-w", "hep_cnn", "--data-dir", d, "--seed", "3"])
    assert "3 files" in r.output and "1 files already complete" in r.output
    assert cli(["verify", "--data-dir", d, "--content"]).exit_code == 0


def test_verify_corrupt_hdf5_and_jpeg(cli, tmp_path):
    d = tmp_path / "c"
    assert cli(["generate", "-w", "cosmoflow", "--samples", "3", "--scale", "tiny", "--data-dir", d]).exit_code == 0
    p = d / "data-00000001.h5"
    p.write_bytes(b"\0" * p.stat().st_size)  # right size, garbage
    r = cli(["verify", "--data-dir", d])
    assert r.exit_code == 3 and "not a readable HDF5 file" in r.output
    j = tmp_path / "j"
    assert cli(["generate", "-w", "imagenet", "--samples", "6", "--scale", "tiny", "--data-dir", j]).exit_code == 0
    m = json.loads((j / MANIFEST_NAME).read_text())
    f = j / m["files"][4][0]
    raw = f.read_bytes()
    f.write_bytes(raw[:-2] + b"\0\0")
    r = cli(["verify", "--data-dir", j])
    assert r.exit_code == 3 and "not a complete JPEG" in r.output


def test_verify_without_dataset(cli, tmp_path):
    r = cli(["verify", "--data-dir", tmp_path])
    assert r.exit_code == 3 and "no dataset here" in r.output


def test_generated_jpegs_are_class_folders(cli, tmp_path):
    d = tmp_path / "img"
    assert cli(["generate", "-w", "imagenet", "--data-dir", d]).exit_code == 0
    folders = sorted(p.name for p in d.iterdir() if p.is_dir())
    assert folders == [f"n{c:08d}" for c in range(4)]
    sizes = np.asarray([f[3] for f in json.loads((d / MANIFEST_NAME).read_text())["files"]])
    assert len(sizes) == 64 and sizes.std() > 0
    for c in range(4):
        names = sorted(p.name for p in (d / f"n{c:08d}").iterdir())
        assert all(int(n.split("_")[1].split(".")[0]) % 4 == c for n in names) and len(names) == 16


def test_verify_checksum_catches_flipped_data_bytes(cli, tmp_path):
    """verify ignored the sum64 checksums generate records: a flipped data byte passed unless --content."""
    d = tmp_path / "d"
    assert cli(["generate", "-w", "hep_cnn", "--data-dir", d, "--seed", "3"]).exit_code == 0
    r = cli(["verify", "--data-dir", d, "--checksum"])
    assert r.exit_code == 0 and "checksums match" in r.output
    p = d / "block-000002.h5"
    b = bytearray(p.read_bytes())
    b[-100] ^= 0xFF
    p.write_bytes(bytes(b))
    r = cli(["verify", "--data-dir", d, "--checksum"])
    assert r.exit_code == 3 and "1 problem(s)" in r.output
    assert "block-000002.h5: checksum" in r.output and "bytes changed since" in r.output


def test_verify_content_checks_checksum_of_bytes_outside_samples(tmp_path):
    """--content also checks sum64: a file whose samples all match but whose other bytes changed (here: its
    recorded checksum no longer matches) is reported by its checksum, once."""
    from dlbench.data.generate import generate
    from dlbench.data.manifest import Manifest
    from dlbench.data.verify import verify
    from dlbench.workload import load

    d = tmp_path / "d"
    generate(load("cosmoflow", scale="tiny", samples=4), d, progress=False)
    m = Manifest.load(d)
    assert verify(d, manifest=m, content=True) == verify(d, manifest=m, checksum=True) == []
    m.sum64[1] = (m.sum64[1] + 1) % (1 << 64)
    for kw in ({"checksum": True}, {"content": True}):
        problems = verify(d, manifest=m, **kw)
        assert len(problems) == 1 and m.paths[1] in problems[0] and "checksum" in problems[0]
    assert verify(d, manifest=m) == []  # the default check reads metadata only
