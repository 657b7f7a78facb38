"""Every script in benchmarks/ runs with tiny arguments (issue 26: surrogatetrain_reduction.py crashed at HEAD
for weeks unseen). One row per script: its tiny arguments, whether it runs under ``mpiexec -n 2``; a script
that needs another tool (DLIO's venv) names the test that covers its pure parts instead. A new script without
a row fails ``test_every_benchmark_has_a_row``. Each run checks the exit code and that it printed something."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"

# script -> (args, ranks): "{tmp}" is the test's scratch folder, "{runs}" a results root with two tiny measured
# runs (naive and prefetch, 2 epochs, laptop-pfs); ranks 2: under mpiexec -n 2
SMOKE: dict[str, tuple[list[str], int]] = {
    "cache_study.py": (["--samples", "64", "--batch", "4", "--epochs", "1", "--compute-time", "0.001",
                        "--cache-slots", "8", "--rows", "naive"], 1),
    "chunked_read.py": (["--samples", "64", "--scale", "tiny", "--run", "4", "--repeats", "1", "--dir", "{tmp}"], 1),
    "cold_reads.py": (["--root", "{tmp}", "--epochs", "1", "--strategies", "naive", "--cosmoflow-samples", "4",
                       "--smoke"], 1),
    "counters.py": (["--repeats", "1", "--dir", "{tmp}", "--smoke"], 1),
    "exchange.py": (["--samples", "64", "--batch", "4", "--epochs", "1", "--repeat", "1"], 2),
    "executor_overhead.py": (["--samples", "256", "--batch", "8", "--repeat", "1"], 1),
    "generate.py": (["--dir", "{tmp}", "--only", "imagenet", "--imagenet-samples", "16", "--repeat", "1"], 1),
    "format_hooks.py": (["--calls", "50", "--repeat", "1", "--dir", "{tmp}"], 1),
    "generate_resume.py": (["--dir", "{tmp}", "--repeats", "1", "--smoke"], 1),
    "npz_readers.py": (["--samples", "16", "--kib", "4", "--repeats", "1", "--dir", "{tmp}"], 1),
    "peer_push.py": (["--samples", "64", "--batch", "4", "--epochs", "1", "--repeat", "1", "--workload",
                      "ptychonn"], 2),
    "peer_reads.py": (["--samples", "64", "--batch", "4", "--epochs", "1", "--repeat", "1"], 2),
    "progress.py": (["--steps", "2000", "--step-ms", "0.01", "--repeats", "1"], 1),
    "read_call.py": (["--sizes", "4096", "--reads", "200", "--repeats", "1"], 1),
    "read_path.py": (["--samples", "32", "--epochs", "1", "--repeat", "1", "--dir", "{tmp}", "--smoke"], 1),
    "reader_rows.py": (["--samples", "64", "--repeats", "1", "--dir", "{tmp}"], 1),
    "readers.py": (["--samples", "16", "--repeats", "1", "--dir", "{tmp}"], 1),
    "real_vs_sim.py": (["--results", "{runs}"], 1),
    "scaling_vs_sim.py": (["--results", "{runs}", "--curve", "1,2"], 1),
    "simulate.py": (["--nodes", "4", "--epochs", "1"], 1),
    "simulate_thesis.py": (["--smoke"], 1),
    "sleep_accuracy.py": (["--steps", "20", "--step-ms", "0.1", "--repeat", "1"], 1),
    "storage_backend.py": (["--files", "20", "--nbytes", "4096", "--repeat", "1", "--dir", "{tmp}"], 1),
    "surrogatetrain_order.py": (["--epochs", "3", "--samples", "100", "--buffer", "40", "--repeats", "1"], 1),
    "surrogatetrain_reduction.py": (["--smoke"], 1),
    "surrogatetrain_table.py": (["{runs}"], 1),
    "tfrecord_readers.py": (["--files", "1", "--records", "8", "--kib", "4", "--repeats", "1", "--dir", "{tmp}"], 1),
    "thesis_fig58.py": (["--reduce", "1000"], 1),
    "thesis_scale.py": (["--nodes", "2", "--epochs", "1", "--skip-big", "--smoke"], 1),
    "throttle.py": (["--total-bytes", "5e5", "--dir", "{tmp}"], 1),
    "verify_checksum.py": (["--dir", "{tmp}", "--repeats", "1", "--smoke"], 1),
}
# scripts that need a tool this suite does not install: the test that runs their own code instead
COVERED_ELSEWHERE = {
    "dlio_side_by_side.py": "tests/unit/test_dlio_side_by_side.py",   # needs DLIO 2.0.0's own venv
    # smoke tests beside the feature they measure (run with tiny arguments there)
    "checkpoint_io.py": "tests/unit/test_checkpoint_bench.py",
    "checkpoint_scale.py": "tests/unit/test_checkpoint_simulate.py",
    "gpu_check.py": "tests/unit/test_bench_gpu_check.py",
    "gpu_check.sh": "tests/unit/test_bench_gpu_check.py",
    "torch_step_overhead.py": "tests/unit/test_bench_gpu_check.py",
    "s3_clients.py": "tests/s3/test_s3_benchmarks.py",        # need the s3 extra and a SeaweedFS server
    "s3_matrix.py": "tests/s3/test_s3_benchmarks.py",
    "s3_read_path.py": "tests/s3/test_s3_benchmarks.py",
    "token_readers.py": "tests/unit/test_format_indexed_binary.py",
    "sim_scale.py": "tests/unit/test_simulate_scale.py",
}
HELPERS = {"_bench.py"}   # imported by the scripts above (runs with them)


def test_every_benchmark_has_a_row():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    rows = set(SMOKE) | set(COVERED_ELSEWHERE) | HELPERS
    assert scripts == rows, f"benchmarks without a smoke row: {sorted(scripts - rows)}; rows without a script: " \
                            f"{sorted(rows - scripts)}"
    for script, test in COVERED_ELSEWHERE.items():
        text = (ROOT / test).read_text()
        stem = script.rsplit(".", 1)[0]
        assert script in text or f'"{stem}"' in text, (script, test)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny measured runs (naive, prefetch; 2 epochs; laptop-pfs), for the scripts that read results."""
    from click.testing import CliRunner

    from dlbench.cli import main

    tmp = tmp_path_factory.mktemp("bench-runs")
    data, out = tmp / "cf", tmp / "res"
    r = CliRunner().invoke(main, ["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", str(data),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    for s in ("naive", "prefetch"):
        r = CliRunner().invoke(main, ["run", "--workload", "cosmoflow", "--strategy", s, "--data-dir", str(data),
                                      "--epochs", "2", "--compute-time", "0.001", "--system", "laptop-pfs",
                                      "--out", str(out), "--no-progress"])
        assert r.exit_code == 0, r.output
    return out


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_with_tiny_arguments(script, tmp_path, runs):
    args, ranks = SMOKE[script]
    args = [a.replace("{tmp}", str(tmp_path)).replace("{runs}", str(runs)) for a in args]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "DLBENCH_DATA_DIR": str(tmp_path / "data"), "DLBENCH_PFS_STATE": str(tmp_path / "pfs")}
    env.pop("DLBENCH_NO_MPI", None)
    (tmp_path / "pfs").mkdir()
    cmd = [sys.executable, str(BENCH / script), *args]
    if ranks > 1:
        exe = next((str(c) for c in (Path(sys.executable).parent / "mpiexec",) if c.exists()), None) or \
            shutil.which("mpiexec")
        if exe is None:
            pytest.skip("mpiexec not found: pip install 'dlbench[mpi]'")
        cmd = [exe, "-n", str(ranks), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0, f"{script}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert r.stdout.strip(), f"{script} printed nothing\n{r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
