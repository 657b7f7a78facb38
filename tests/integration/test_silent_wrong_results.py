"""Issue 12 (part B): inputs that used to give silently wrong results are now errors (regression tests
named after each bug)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.comm import check_launcher_matches, get_comm, launcher_world_size
from dlbench.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _one_line_error(r, *needles):
    assert r.exit_code != 0
    err = r.output.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("dlbench: error:"), r.output
    for n in needles:
        assert n in err[0], err[0]
    assert "Traceback" not in r.output


@pytest.mark.parametrize("k", ["0", "-1"])
def test_ranks_per_node_zero_or_negative_is_an_error(tmp_path, cli, tiny, k):
    out = tmp_path / "res"
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-time", "0", "-o", out, "--ranks-per-node", k])
    _one_line_error(r, f"--ranks-per-node={k}", ">= 1")
    assert not out.exists()
    with pytest.raises(ConfigError, match="ranks-per-node"):
        get_comm(ranks_per_node=int(k))


def test_compute_time_with_torch_compute_conflicts(tmp_path, cli, tiny):
    out = tmp_path / "res"
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute", "torch", "--compute-time", "0.5", "-o", out])
    _one_line_error(r, "--compute-time=0.5", "--compute torch")
    assert not out.exists()
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute", "torch", "--compute-stdev", "0.1", "-o", out])
    _one_line_error(r, "--compute-stdev", "--compute torch")


def test_compute_profile_of_another_workload_is_an_error(tmp_path, cli, tiny):
    prof = tmp_path / "hep.compute.yaml"
    prof.write_text("workload: hep_cnn\nstep_time_s: 0.01\nbatch_size: 4\n")
    out = tmp_path / "res"
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-profile", prof, "-o", out])
    _one_line_error(r, "hep_cnn", "cosmoflow", "--compute-profile")
    assert not out.exists()
    # the same profile for the right workload runs
    prof.write_text("workload: cosmoflow\nstep_time_s: 0.001\nbatch_size: 4\n")
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-profile", prof, "-o", out])
    assert r.exit_code == 0, r.output
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-profile", prof, "--compute-time", "0", "-o", out])
    _one_line_error(r, "--compute-time", "--compute-profile", "conflict")


def _user_yaml(tmp_path, shape):
    src = (ROOT / "workloads" / "cosmoflow.yaml").read_text()
    assert "[32, 32, 32, 4]" in src
    y = tmp_path / "my" / "cosmoflow.yaml"
    y.parent.mkdir(exist_ok=True)
    y.write_text(src.replace("[32, 32, 32, 4]", shape))
    return y


def test_user_yaml_named_like_builtin_gets_its_own_data(tmp_path, cli, monkeypatch):
    """Before: a user YAML with name: cosmoflow ran on the built-in's default dataset, with its shapes."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "-e", "1", "--compute-time", "0", "-o", out])
    assert r.exit_code == 0, r.output
    y = _user_yaml(tmp_path, "[16, 16, 16, 4]")
    r = cli(["run", "--workload", y, "-e", "1", "--compute-time", "0", "-o", out])
    assert r.exit_code == 0, r.output
    dirs = sorted(p.name for p in (tmp_path / "data").iterdir())
    assert len(dirs) == 2 and "cosmoflow-tiny-seed0" in dirs, dirs
    user = [d for d in dirs if d != "cosmoflow-tiny-seed0"][0]
    assert user.startswith("cosmoflow-user-")
    from dlbench.data.manifest import Manifest

    m = Manifest.load(tmp_path / "data" / user)
    assert m.spec["arrays"][0]["shape"] == [16, 16, 16, 4]


def test_user_yaml_on_a_dataset_of_another_spec_is_an_error(tmp_path, cli, tiny):
    y = _user_yaml(tmp_path, "[16, 16, 16, 4]")
    out = tmp_path / "res"
    r = cli(["run", "--workload", y, "--data-dir", tiny, "-e", "1", "--compute-time", "0", "-o", out])
    _one_line_error(r, "does not describe the dataset", "arrays")
    assert not out.exists()


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", ".hidden"])
def test_workload_name_escaping_results_dir_is_refused(tmp_path, cli, name):
    y = tmp_path / "w.yaml"
    y.write_text((ROOT / "workloads" / "cosmoflow.yaml").read_text().replace("name: cosmoflow", f"name: '{name}'", 1))
    out = tmp_path / "a" / "res"
    r = cli(["run", "--workload", y, "-e", "1", "--compute-time", "0", "-o", out, "--data-dir", tmp_path / "d"])
    _one_line_error(r, "workload name=")
    assert not (tmp_path / "escape").exists() and not out.exists()
    from dlbench.results import new_run_dir

    with pytest.raises(ConfigError, match="plain folder name"):
        new_run_dir(out, name, "naive")


def test_error_names_the_real_flag_not_opt(tmp_path, cli, tiny):
    """Before: 'exchange_fraction=5.0 (in --opt for pls)': there is no --opt flag."""
    r = cli(["run", "--data-dir", tiny, "-e", "1", "--compute-time", "0", "-o", tmp_path / "res", "-s", "pls",
             "--exchange-fraction", "5"])
    _one_line_error(r, "--exchange-fraction=5")
    assert "--opt" not in r.output
    import dlbench

    src = "".join(p.read_text() for p in Path(dlbench.__file__).parent.rglob("*.py"))
    import re

    assert not re.search(r"--opt\b(?!ion)", src)   # `simulate --option STRATEGY.KEY=VALUE` is a real flag


def test_generate_resume_rewrites_a_file_with_flipped_bytes(tmp_path):
    """Before: a re-run skipped any file of the planned size, so flipped bytes stayed."""
    from dlbench import workload as W
    from dlbench.data import generate as G
    from dlbench.data.verify import verify

    for name in ("cosmoflow", "ptychonn"):
        wl = W.load(name, scale="tiny", samples=8)
        d = tmp_path / name
        res = G.generate(wl, d, seed=1, progress=False)
        m = res.manifest
        assert m.sum64 is not None and None not in m.sum64
        victim = d / m.paths[-1]
        b = bytearray(victim.read_bytes())
        b[len(b) - 100] ^= 0xFF
        victim.write_bytes(bytes(b))
        assert verify(d, content=True) != []
        res2 = G.generate(wl, d, seed=1, progress=False)
        assert res2.files_written == 1 and res2.files_skipped == len(m.paths) - 1
        assert verify(d, content=True) == []


def test_generate_resume_without_checksum_record_rewrites(tmp_path):
    """An interrupted generation whose done record lacks a file writes it again (size alone is not trusted)."""
    from dlbench import workload as W
    from dlbench.data import generate as G
    from dlbench.data.manifest import Manifest

    wl = W.load("hep_cnn", scale="tiny", samples=24)
    d = tmp_path / "d"
    G.generate(wl, d, seed=0, progress=False)
    m = Manifest.load(d)
    m.sum64 = [None] + m.sum64[1:]
    m.save(d)
    res = G.generate(wl, d, seed=0, progress=False)
    assert res.files_written == 1
    assert Manifest.load(d).sum64[0] is not None


def test_launcher_world_size_reads_launcher_env_only():
    assert launcher_world_size({"PMI_SIZE": "4"}) == ("PMI_SIZE", 4)
    assert launcher_world_size({"OMPI_COMM_WORLD_SIZE": "2"}) == ("OMPI_COMM_WORLD_SIZE", 2)
    # a batch script's shell: SLURM_NTASKS set but no srun step: not a multi-rank launch
    assert launcher_world_size({"SLURM_NTASKS": "8", "SLURM_PROCID": "0"}) is None
    assert launcher_world_size({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "8"}) == ("SLURM_STEP_NUM_TASKS", 8)
    check_launcher_matches(1, "X", {"PMI_SIZE": "1"})       # a 1-rank launch is fine
    check_launcher_matches(2, "X", {"PMI_SIZE": "2"})       # matched
    with pytest.raises(ConfigError, match="PMI_SIZE=2.*Open MPI v5"):
        check_launcher_matches(1, "Open MPI v5.0.3, package: x\nmore", {"PMI_SIZE": "2"})


def test_mpi_launcher_library_mismatch_stops(tmp_path, tiny):
    """What a mismatched launcher produces: one process whose env says PMI_SIZE=2 but COMM_WORLD has 1."""
    pytest.importorskip("mpi4py")
    env = dict(os.environ)
    env.pop("DLBENCH_NO_MPI", None)
    env.update(PMI_SIZE="2", PMI_RANK="0", PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    out = tmp_path / "res"
    p = subprocess.run([sys.executable, "-m", "dlbench.cli", "run", "--data-dir", str(tiny), "-e", "1",
                        "--compute-time", "0", "-o", str(out)], capture_output=True, text=True, env=env,
                       timeout=120, cwd=tmp_path)
    assert p.returncode != 0
    assert "PMI_SIZE=2" in p.stderr and "COMM_WORLD of size 1" in p.stderr and "MPI (" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not out.exists()
    assert np.sum([ln.startswith("dlbench: error") for ln in p.stderr.splitlines()]) == 1
