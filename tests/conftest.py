import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def mpiexec() -> str | None:
    """The mpiexec next to this Python (the mpi extra's mpich) or on PATH."""
    cand = Path(sys.executable).parent / "mpiexec"
    if cand.exists():
        return str(cand)
    return shutil.which("mpiexec")


def mpi_runner(cwd):
    """A function that runs `mpiexec -n n python -m dlbench.cli ARGS` in folder `cwd` (skips the test without
    mpiexec or mpi4py); run_mpi's body, shared with the session's datasets."""
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found: pip install 'dlbench[mpi]'")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py not installed")

    def _run(args, n=2, timeout=240, env=None, python_args=("-m", "dlbench.cli")):
        e = dict(os.environ)
        e.pop("DLBENCH_NO_MPI", None)
        e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
        if env:
            e.update(env)
        cmd = [exe, "-n", str(n), sys.executable, *python_args, *map(str, args)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)

    return _run


@pytest.fixture
def run_mpi(tmp_path):
    """run_mpi(args, n=2) runs `mpiexec -n n python -m dlbench.cli ...` and returns CompletedProcess."""
    return mpi_runner(tmp_path)


@pytest.fixture
def cli():
    """cli(args) runs the click app in-process and returns the click Result."""
    from click.testing import CliRunner

    from dlbench.cli import main

    def _run(args, **kw):
        return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False, **kw)

    return _run


@pytest.fixture(scope="module")
def hep(tmp_path_factory):
    """A tiny hep_cnn dataset (HDF5 blocks), generated once per test module."""
    from click.testing import CliRunner

    from dlbench.cli import main

    d = tmp_path_factory.mktemp("hep") / "hep"
    r = CliRunner().invoke(main, ["generate", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", str(d),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    return d
