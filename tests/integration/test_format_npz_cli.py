"""`dlbench generate / verify / run` on npz and npy data (format modules of the registry): naive, prefetch and
staging, with np.load (--read-via auto) and the offset path (--read-via pread); every sample's bytes are checked
(--verify) and the bytes read are exactly the samples' sizes (record sizes drawn per file). And DLIO's unet3d
config, shrunk, generates and runs npz."""
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dlbench.data.manifest import Manifest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"


def _workload(tmp_path, layout):
    arrays = [{"name": "x", "shape": [2048], "dtype": "float32", "role": "data"}]
    if layout == "npz":
        arrays.append({"name": "y", "shape": [1], "dtype": "int64", "role": "label"})
    spec = {"name": f"t{layout}", "layout": layout, "arrays": arrays, "samples": 12, "batch_size": 2,
            "samples_per_file": 1 if layout == "npz" else 3,
            "record_size": {"kind": "normal", "mean_bytes": 8192, "std_bytes": 2048, "min_bytes": 4,
                            "max_bytes": 16384},
            "compute": {"h100": {"step_time_s": 0.001, "batch_size": 2}}}
    p = tmp_path / f"{layout}.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def _results(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])


@pytest.mark.parametrize("layout", ["npz", "npy"])
def test_generate_verify_and_run(tmp_path, cli, layout):
    w, d = _workload(tmp_path, layout), tmp_path / "data"
    r = cli(["generate", "--workload", w, "--data-dir", d, "--no-progress"])
    assert r.exit_code == 0, r.output
    m = Manifest.load(d)
    sizes = m.sample_nbytes()
    assert len(set(sizes.tolist())) > 1 and all(p.endswith("." + layout) for p in m.paths)
    r = cli(["verify", "--data-dir", d, "--content"])
    assert r.exit_code == 0, r.output
    for strategy, via in (("naive", "auto"), ("naive", "pread"), ("prefetch", "auto"), ("prefetch", "pread"),
                          ("staging", "pread")):
        extra = ["--num-workers", "1"] if strategy == "prefetch" else []
        r = cli(["run", "--workload", w, "--data-dir", d, "--strategy", strategy, "--read-via", via, "--epochs", "2",
                 "--accelerator", "h100", "--verify", "-o", tmp_path / "res", "--no-progress", *extra])
        assert r.exit_code == 0, (strategy, via, r.output)
        run = json.loads((_results(r.output) / "run.json").read_text())
        assert run["config"]["read_via"] == via
        s = run["summary"]
        per_epoch = 1 if strategy == "staging" else 2      # staging reads the shared tier once, in its prologue
        assert s["bytes_by_tier"]["shared"] + s["prologue_bytes_by_tier"]["shared"] == per_epoch * int(sizes.sum()), \
            (strategy, via, s["bytes_by_tier"], s["prologue_bytes_by_tier"])


def test_cache_direct_falls_back_in_one_line(tmp_path, cli):
    w, d = _workload(tmp_path, "npy"), tmp_path / "data"
    assert cli(["generate", "--workload", w, "--data-dir", d, "--no-progress"]).exit_code == 0
    r = cli(["run", "--workload", w, "--data-dir", d, "--cache", "direct", "--read-via", "pread", "--epochs", "1",
             "--accelerator", "h100", "-o", tmp_path / "res", "--no-progress"])
    assert r.exit_code == 0 and "--cache direct: layouts npy/npz are read through np.load or buffered pread" in r.output


def test_corrupted_file_is_found(tmp_path, cli):
    w, d = _workload(tmp_path, "npz"), tmp_path / "data"
    assert cli(["generate", "--workload", w, "--data-dir", d, "--no-progress"]).exit_code == 0
    m = Manifest.load(d)
    p = d / m.paths[3]
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x55
    p.write_bytes(bytes(raw))
    r = cli(["verify", "--data-dir", d, "--checksum"])
    assert r.exit_code != 0 and m.paths[3] in r.output
    r = cli(["verify", "--data-dir", d, "--content"])
    assert r.exit_code != 0 and m.paths[3] in r.output


def test_read_via_refused_where_the_layout_cannot(tmp_path, cli, monkeypatch):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--workload", "imagenet", "--read-via", "library", "--epochs", "1", "-o", tmp_path / "res",
             "--no-progress"])
    assert r.exit_code != 0 and "--read-via=library: layout jpeg_folders" in r.output and "Traceback" not in r.output


def test_dlio_unet3d_shrunk_runs_npz(tmp_path, cli, monkeypatch):
    """DLIO's unet3d_h100.yaml (npz, 146.6 MB ± 68.3 MB) shrunk to 8 files of 4 KiB ± 512 B."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    args = ["run", "--dlio-config", FIX / "unet3d_h100.yaml", "~workload.model.model_size",
            "++workload.workflow.checkpoint=False", "++workload.dataset.num_files_train=8",
            "++workload.dataset.record_length_bytes=4096", "++workload.dataset.record_length_bytes_stdev=512",
            "++workload.train.epochs=2", "++workload.train.computation_time=0.001", "++workload.reader.batch_size=2",
            "++workload.reader.read_threads=1", "-o", tmp_path / "res", "--no-progress", "--verify"]
    r = cli(args)
    assert r.exit_code == 0, r.output
    run = json.loads((_results(r.output) / "run.json").read_text())
    d = next((tmp_path / "data").glob("unet3d*"))
    m = Manifest.load(d)
    assert len(m.paths) == 8 and m.layout == "npz" and m.spec["record_size"]["std_bytes"] == 512
    with np.load(d / m.paths[0]) as z:
        assert z.files == ["x", "y"] and z["x"].dtype == np.uint8
    x_sizes = m.sample_nbytes() - 8                     # minus y (one int64 per sample)
    assert len(set(x_sizes.tolist())) > 1 and abs(x_sizes.mean() - 4096) < 1024
    assert run["summary"]["read_bytes"] == 2 * int(m.sample_nbytes().sum())
