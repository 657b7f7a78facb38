import json

import pytest

from dlbench.data.manifest import MANIFEST_NAME

pytestmark = pytest.mark.mpi


def _tree(d):
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()
            and p.name != MANIFEST_NAME}


def _manifest(d):
    m = json.loads((d / MANIFEST_NAME).read_text())
    prov = m.pop("provenance")
    return m, prov


@pytest.mark.parametrize("name, extra", [
    ("cosmoflow", []),                       # hdf5_per_sample
    ("hep_cnn", ["--samples", "40"]),         # hdf5_blocks, last block short
    ("ptychonn", []),                        # hdf5_shared: ranks write chunks of one file
    ("imagenet", ["--samples", "24"]),       # jpeg_folders
])
def test_two_ranks_write_the_same_bytes_as_one(cli, run_mpi, tmp_path, name, extra):
    serial, par = tmp_path / "serial", tmp_path / "mpi"
    assert cli(["generate", "-w", name, "--scale", "tiny", *extra, "--data-dir", serial]).exit_code == 0
    p = run_mpi(["generate", "-w", name, "--scale", "tiny", *extra, "--data-dir", par], n=2)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("generated") == 1 and "2 ranks" in p.stdout
    assert _tree(serial) == _tree(par)
    ms, ps = _manifest(serial)
    mp, pp = _manifest(par)
    assert ms == mp and ms["complete"]
    assert ps["ranks"] == 1 and pp["ranks"] == 2
    v = run_mpi(["verify", "--data-dir", par, "--content"], n=2)
    assert v.returncode == 0 and v.stdout.count("ok:") == 1, v.stderr


def test_two_ranks_resume_and_refuse(run_mpi, tmp_path):
    d = tmp_path / "d"
    assert run_mpi(["generate", "-w", "cosmoflow", "--data-dir", d], n=2).returncode == 0
    (d / "data-00000004.h5").unlink()
    (d / "data-00000007.h5").unlink()
    p = run_mpi(["generate", "-w", "cosmoflow", "--data-dir", d], n=2)
    assert p.returncode == 0 and "2 files" in p.stdout and "30 files already complete" in p.stdout
    p = run_mpi(["generate", "-w", "cosmoflow", "--data-dir", d, "--seed", "9"], n=2)
    assert p.returncode == 3 and "--force" in p.stderr
