"""nan/inf in the flags and study entries the issue-15 second pass found without a CLI-level test: each a one-line
error before anything runs, and verify names a FIFO that stands where a data file should be."""

import os

import pytest
import yaml


@pytest.mark.parametrize("args,needle", [
    (["--strategy", "surrogatetrain", "--buffer-fraction", "nan"], "--buffer-fraction="),
    (["--strategy", "staging", "--local-capacity", "nan"], "--local-capacity="),
    (["--strategy", "staging", "--local-capacity", "inf"], "--local-capacity="),
    (["--strategy", "clairvoyant", "--cache-capacity", "inf"], "--cache-capacity="),
    (["--strategy", "local", "--loader-threads", "nan"], "--loader-threads="),
])
def test_nonfinite_strategy_flags_are_one_line(tiny, tmp_path, cli, args, needle):
    out = tmp_path / "r"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--out", out, *args])
    assert r.exit_code == 2 and needle in r.output and "Traceback" not in r.output, r.output
    assert len([ln for ln in r.output.splitlines() if ln.strip()]) == 1, r.output
    assert not out.exists()


def test_study_entry_with_nan_is_refused_before_any_run(tiny, tmp_path, cli):
    st = {"name": "nanstudy", "workload": "cosmoflow", "scale": "tiny", "epochs": 1, "compute_time_s": 0.0,
          "runs": [{"strategy": "naive"}, {"strategy": "local", "options": {"loader_threads": float("nan")}}]}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(st))
    out = tmp_path / "res"
    r = cli(["study", p, "--data-dir", tiny, "--out", out])
    assert r.exit_code == 2 and "loader_threads" in r.output and "Traceback" not in r.output, r.output
    assert not list(out.rglob("run.json"))      # the valid first entry did not run either


def test_verify_names_a_fifo(tiny, cli):
    victim = sorted(tiny.glob("*.h5"))[0]
    victim.unlink()
    os.mkfifo(victim)
    r = cli(["verify", "--data-dir", tiny])
    assert r.exit_code == 3 and f"{victim.name}: is a FIFO (named pipe), not a regular file" in r.output, r.output
