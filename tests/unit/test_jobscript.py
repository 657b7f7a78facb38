"""dlbench jobscript: batch scripts that parse, with the right node and task counts per scheduler, and a
submit-all.sh that submits the generate job first and every point after it."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dlbench.errors import ConfigError
from dlbench.jobscript import parse_nodes_list, write_jobscripts
from dlbench.study.schema import load_study, points

ROOT = Path(__file__).resolve().parents[2]
WEAK = ROOT / "configs" / "studies" / "scaling-weak.yaml"
STRONG = ROOT / "configs" / "studies" / "scaling-strong.yaml"

BASH = shutil.which("bash")


def _bash_n(p: Path):
    r = subprocess.run([BASH, "-n", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, (p, r.stderr)


EXPECT = {
    "slurm": lambda n, k: [f"#SBATCH --nodes={n}\n", f"#SBATCH --ntasks-per-node={k}\n",
                           f"\nsrun -N {n} -n {n * k} --ntasks-per-node={k} dlbench study "],
    "pbs": lambda n, k: [f"#PBS -l select={n}:ncpus={k}:mpiprocs={k}\n", f"\nmpiexec -n {n * k} -ppn {k} dlbench study "],
    "flux": lambda n, k: [f"#flux: -N {n}\n", f"#flux: -n {n * k}\n", f"\nflux run -N {n} -n {n * k} dlbench study "],
}


@pytest.mark.skipif(BASH is None, reason="no bash")
@pytest.mark.parametrize("scheduler", ["slurm", "pbs", "flux"])
def test_scripts_parse_and_hold_the_counts(tmp_path, scheduler):
    files = write_jobscripts(WEAK, tmp_path / "jobs", scheduler=scheduler, nodes_list=(1, 2, 16), ranks_per_node=4,
                             data_dir=tmp_path / "data", results=tmp_path / "res", time="02:30:00")
    ext = {"slurm": "sbatch", "pbs": "pbs", "flux": "flux"}[scheduler]
    names = sorted(f.name for f in files)
    assert names == sorted(["study.yaml", f"generate.{ext}", f"point-N1.{ext}", f"point-N2.{ext}",
                            f"point-N16.{ext}", "submit-all.sh"])
    for f in files:
        if f.suffix != ".yaml":
            _bash_n(f)
            assert os.access(f, os.X_OK)
    for n in (1, 2, 16):
        text = (tmp_path / "jobs" / f"point-N{n}.{ext}").read_text()
        for want in EXPECT[scheduler](n, 4):
            assert want in text, (want, text)
        assert f"DATA_DIR={tmp_path / 'data'}" in text and f"RESULTS={tmp_path / 'res'}" in text
        assert f"STUDY={tmp_path / 'jobs' / 'study.yaml'}" in text
        assert '--data-dir "$DATA_DIR" --out "$RESULTS"' in text
        # the environment line is near the top, ahead of set -u (activate scripts read unset variables)
        lines = text.splitlines()
        assert lines.index("set -euo pipefail") > next(i for i, x in enumerate(lines) if x.startswith("# ---- edit"))
    gen = (tmp_path / "jobs" / f"generate.{ext}").read_text()
    assert "--generate-only" in gen
    walltime = {"slurm": "#SBATCH --time=02:30:00", "pbs": "#PBS -l walltime=02:30:00", "flux": "#flux: -t 9000s"}
    assert walltime[scheduler] in gen
    # no account / partition given: commented lines, not placeholders that break submission
    assert re.search(r"^##\S*.*(ACCOUNT|BANK)", gen, re.M) and not re.search(r"^#(SBATCH|PBS|flux:).*ACCOUNT", gen, re.M)


def test_study_copy_runs_exactly_the_scripted_points(tmp_path):
    write_jobscripts(WEAK, tmp_path, scheduler="slurm", nodes_list=(2, 8), ranks_per_node=4,
                     data_dir=tmp_path / "d", results=tmp_path / "r")
    st = load_study(tmp_path / "study.yaml")
    assert st.out == str(tmp_path / "r")
    pts = points(st)
    assert [(p.ranks, p.nodes, p.samples) for p in pts] == [(8, 2, 1600), (32, 8, 6400)]  # weak: 200 per rank


def test_strong_ranks_sweep_becomes_nodes(tmp_path):
    write_jobscripts(STRONG, tmp_path, scheduler="flux", ranks_per_node=2, data_dir=tmp_path / "d",
                     results=tmp_path / "r")
    assert sorted(p.name for p in tmp_path.glob("point-*")) == ["point-R1.flux", "point-R2.flux", "point-R4.flux",
                                                                 "point-R8.flux"]
    t1, t8 = (tmp_path / "point-R1.flux").read_text(), (tmp_path / "point-R8.flux").read_text()
    assert "\nflux run -N 1 -n 1 dlbench" in t1 and "\nflux run -N 4 -n 8 dlbench" in t8
    st = load_study(tmp_path / "study.yaml")
    assert [p.ranks for p in points(st)] == [1, 2, 4, 8]
    assert {p.samples for p in points(st)} == {4096}  # strong: F fixed


def test_account_and_partition_lines(tmp_path):
    write_jobscripts(WEAK, tmp_path, scheduler="pbs", nodes_list=(1,), account="proj", partition="debug",
                     data_dir=tmp_path / "d", results=tmp_path / "r", env_line="module load conda; conda activate x")
    t = (tmp_path / "point-N1.pbs").read_text()
    assert "#PBS -A proj\n" in t and "#PBS -q debug\n" in t and "\nmodule load conda; conda activate x\n" in t


@pytest.mark.skipif(BASH is None, reason="no bash")
def test_submit_all_submits_generate_then_points(tmp_path):
    write_jobscripts(WEAK, tmp_path / "jobs", scheduler="slurm", nodes_list=(1, 2), data_dir=tmp_path / "d",
                     results=tmp_path / "r")
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "sbatch.log"
    (fake / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {log}\necho $((1000 + $(wc -l < {log})))\n')
    (fake / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([BASH, str(tmp_path / "jobs" / "submit-all.sh")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert calls == ["--parsable generate.sbatch", "--parsable --dependency=afterok:1001 point-N1.sbatch",
                     "--parsable --dependency=afterok:1001 point-N2.sbatch"]
    assert (tmp_path / "jobs" / "logs").is_dir()


def test_bad_inputs_are_one_line(tmp_path, cli):
    with pytest.raises(ConfigError, match="--nodes-list"):
        parse_nodes_list("1,two")
    with pytest.raises(ConfigError, match="--nodes-list"):
        parse_nodes_list("0,2")
    with pytest.raises(ConfigError, match="--time="):
        write_jobscripts(WEAK, tmp_path / "j", scheduler="slurm", time="1h")
    assert not (tmp_path / "j").exists()  # nothing half-written
    res = cli(["jobscript", WEAK, "--scheduler", "lsf"])
    assert res.exit_code == 2 and "lsf" in res.output
    res = cli(["jobscript", ROOT / "configs" / "studies" / "shuffle-comparison.yaml", "--scheduler", "slurm",
               "-o", tmp_path / "j2"])
    assert res.exit_code == 2 and "no sweep" in res.output and "Traceback" not in res.output


def test_cli_jobscript(tmp_path, cli):
    res = cli(["jobscript", WEAK, "--scheduler", "slurm", "--nodes-list", "4,1", "-o", tmp_path / "jobs",
               "--data-dir", tmp_path / "d", "--results", tmp_path / "r"])
    assert res.exit_code == 0, res.output
    assert "point-N1.sbatch" in res.output and "point-N4.sbatch" in res.output
    assert res.output.strip().splitlines()[-1] == f"submit: {tmp_path / 'jobs' / 'submit-all.sh'}"


def test_cli_jobscript_s3_data_dir(tmp_path, cli):
    """An s3:// data root stays a URL in the scripts (was: made absolute as a local path, "<cwd>/s3:/...")."""
    res = cli(["jobscript", WEAK, "--scheduler", "slurm", "--nodes-list", "1", "-o", tmp_path / "jobs",
               "--data-dir", "s3://bucket/sweeps", "--results", tmp_path / "r"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "jobs" / "point-N1.sbatch").read_text()
    assert "DATA_DIR=s3://bucket/sweeps\n" in text
