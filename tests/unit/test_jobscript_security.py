"""dlbench jobscript must not be a way to run commands: a hostile study name, --account or --partition is
refused; a hostile path (``$(...)``, backticks, ``;``, newline, spaces) or --dlbench is quoted, so running
the generated scripts -- submit-all.sh included -- with fake schedulers and launchers runs no injected
command and hands every path over intact (regression: issue 15, newline in name / $(...) in --results)."""

import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from dlbench.errors import ConfigError
from dlbench.jobscript import write_jobscripts

ROOT = Path(__file__).resolve().parents[2]
WEAK = ROOT / "configs" / "studies" / "scaling-weak.yaml"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="no bash")

EXT = {"slurm": "sbatch", "pbs": "pbs", "flux": "flux"}

# every fake logs its argv (NUL-separated, one file per call); the submitters run the job script as a
# scheduler would (in the background of a real one) and print a job id
FAKE_LOG = '''f=$(mktemp "$FAKELOG/call.XXXXXX"); printf '%s\\0' "$(basename "$0")" "$@" > "$f"'''
FAKES = {
    "srun": FAKE_LOG,
    "mpiexec": FAKE_LOG,
    "sbatch": FAKE_LOG + '\nbash "${@: -1}" >> "$FAKELOG/jobs.out" 2>&1 || exit 9\necho 4242',
    "qsub": FAKE_LOG + '\nbash "${@: -1}" >> "$FAKELOG/jobs.out" 2>&1 || exit 9\necho 4242.pbs',
    "flux": FAKE_LOG + '\nif [ "$1" = batch ]; then bash "${@: -1}" >> "$FAKELOG/jobs.out" 2>&1 || exit 9; '
                       'echo f4242; fi',
}

HOSTILE = ["x$(touch PWNED)", "x`touch PWNED`", "x; touch PWNED", "x\ntouch PWNED", "x && touch PWNED",
           "x'$(touch PWNED)'", 'x"; touch PWNED; "', "x y", "x|touch PWNED", "../x"]


def _fakes(tmp_path: Path) -> dict:
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    for name, body in FAKES.items():
        p = bin_dir / name
        p.write_text("#!/bin/bash\n" + body + "\n")
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "fakelog"
    log.mkdir()
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", FAKELOG=str(log))
    env.pop("PBS_O_WORKDIR", None)
    return env


def _calls(env: dict) -> list[list[str]]:
    out = []
    for f in sorted(Path(env["FAKELOG"]).glob("call.*")):
        out.append(f.read_bytes().decode().split("\0")[:-1])
    return out


def _pwned(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.name.startswith("PWNED")]


def _study(tmp_path: Path, name: str) -> Path:
    raw = yaml.safe_load(WEAK.read_text())
    raw["name"] = name
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_study_name_is_refused(tmp_path, name):
    with pytest.raises(ConfigError, match=r"study name=.*letters, digits"):
        write_jobscripts(_study(tmp_path, name), tmp_path / "jobs", scheduler="slurm", nodes_list=(1,),
                         data_dir=tmp_path / "d", results=tmp_path / "r")
    assert not (tmp_path / "jobs").exists() or not list((tmp_path / "jobs").glob("*.sbatch"))


@pytest.mark.parametrize("flag", ["account", "partition"])
@pytest.mark.parametrize("value", HOSTILE + ["", "-x"])
def test_hostile_account_or_partition_is_refused(tmp_path, flag, value):
    with pytest.raises(ConfigError, match=rf"--{flag}="):
        write_jobscripts(WEAK, tmp_path / "jobs", scheduler="pbs", nodes_list=(1,), data_dir=tmp_path / "d",
                         results=tmp_path / "r", **{flag: value})
    assert not list((tmp_path / "jobs").glob("*.pbs")) if (tmp_path / "jobs").exists() else True


@pytest.mark.parametrize("flag,value", [("env_line", "source a\ntouch PWNED"), ("dlbench", "dlbench\ntouch PWNED"),
                                        ("dlbench", "'unclosed"), ("dlbench", "  ")])
def test_multiline_env_or_dlbench_is_refused(tmp_path, flag, value):
    with pytest.raises(ConfigError, match="--env=|--dlbench="):
        write_jobscripts(WEAK, tmp_path / "jobs", scheduler="slurm", nodes_list=(1,), data_dir=tmp_path / "d",
                         results=tmp_path / "r", **{flag: value})


def test_plain_account_partition_are_written(tmp_path):
    write_jobscripts(WEAK, tmp_path, scheduler="slurm", nodes_list=(1,), data_dir=tmp_path / "d",
                     results=tmp_path / "r", account="proj_123-a", partition="gpu,debug", env_line="true")
    text = (tmp_path / "point-N1.sbatch").read_text()
    assert "#SBATCH --account=proj_123-a\n" in text and "#SBATCH --partition=gpu,debug\n" in text


@pytest.mark.parametrize("scheduler", ["slurm", "pbs", "flux"])
def test_generated_scripts_run_no_injected_command(tmp_path, scheduler):
    """Paths holding $(...), backticks, ';', a newline, quotes and spaces, and a --dlbench with $(...): run
    submit-all.sh (which runs every job script through the fake submitter): nothing injected ran, and the
    launcher got every path as one intact argument."""
    env = _fakes(tmp_path)
    evil = tmp_path / "with space $(touch PWNED1) `touch PWNED2`; touch PWNED3 \n touch PWNED4 'q' \"d\""
    data_dir, results = evil / "data", evil / "res $(touch PWNED5)"
    jobs = tmp_path / "jobs dir"
    files = write_jobscripts(WEAK, jobs, scheduler=scheduler, nodes_list=(1, 2), ranks_per_node=2,
                             data_dir=data_dir, results=results, account="acct", partition="part",
                             env_line="export DLB_FAKE_ENV=1", dlbench="'dl$(touch PWNED6)bench' --flag")
    for f in files:
        if f.suffix != ".yaml":
            r = subprocess.run([BASH, "-n", str(f)], capture_output=True, text=True)
            assert r.returncode == 0, (f, r.stderr)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = subprocess.run([BASH, str(jobs / "submit-all.sh")], cwd=cwd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout, r.stderr, (Path(env["FAKELOG"]) / "jobs.out").read_text())
    assert _pwned(tmp_path) == []
    # submit-all.sh printed the results path not evaluated, quoted so that it can be pasted into a shell
    assert f"dlbench compare {shlex.quote(str(results))} && dlbench plot " in r.stdout
    calls = _calls(env)
    launches = [c for c in calls if c[0] in ("srun", "mpiexec") or c[:2] == ["flux", "run"]]
    submits = [c for c in calls if c not in launches]
    assert len(submits) == 3 and len(launches) == 3  # generate + 2 points, each launched once
    for c in launches:
        i = c.index("dl$(touch PWNED6)bench")
        assert c[i + 1:i + 3] == ["--flag", "study"]
        assert c[i + 3] == str(jobs.absolute() / "study.yaml")
        assert c[c.index("--data-dir") + 1] == str(data_dir)
        assert c[c.index("--out") + 1] == str(results)
    assert sum("--generate-only" in c for c in launches) == 1
    assert not _pwned(tmp_path)


@pytest.mark.parametrize("kw,msg", [({"ranks_per_node": 0}, "--ranks-per-node=0: must be >= 1"),
                                    ({"ranks_per_node": 10**20}, "--ranks-per-node=1000"),
                                    ({"generate_nodes": 10**20}, "--generate-nodes=1000"),
                                    ({"generate_nodes": 0}, "--generate-nodes=0: must be >= 1"),
                                    ({"nodes_list": (1, 10**20)}, f"--nodes-list={10**20}: must be <= 1,000,000"),
                                    ({"nodes_list": (0, 2)}, "--nodes-list=0: must be >= 1")])
def test_zero_or_huge_counts_are_refused(tmp_path, kw, msg):
    """--ranks-per-node 0 used to fall back to the sweep's value silently; 10^20 nodes was written. The
    bounds and their message are the CLI's (config.check_counts, one definition for every command)."""
    with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
        write_jobscripts(WEAK, tmp_path, scheduler="slurm", data_dir=tmp_path / "d", results=tmp_path / "r",
                         **{"nodes_list": (1,), **kw})


def test_huge_nodes_list_flag_is_refused():
    from dlbench.jobscript import parse_nodes_list

    with pytest.raises(ConfigError, match="^--nodes-list=99999999999999999999: must be <= 1,000,000$"):
        parse_nodes_list("1,99999999999999999999")
    with pytest.raises(ConfigError, match="^--nodes-list=0: must be >= 1$"):
        parse_nodes_list("0,2")
