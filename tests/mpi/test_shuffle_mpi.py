"""staging, local and pls on 2 ranks as 2 emulated nodes (--ranks-per-node 1), with --verify."""

import json

import pytest

pytestmark = pytest.mark.mpi


@pytest.fixture
def tiny(tmp_path, run_mpi):
    d = tmp_path / "hep"
    r = run_mpi(["generate", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.returncode == 0, r.stderr
    return d


@pytest.mark.parametrize("strategy,extra", [("staging", []), ("local", []), ("pls", ["--exchange-fraction", "0.3"]),
                                            ("staging", ["--tier", "memory", "--local-capacity", "600000"]),
                                            ("pls", ["--exchange-fraction", "0.3", "--tier", "memory",
                                                     "--local-capacity", "4000000"])])
def test_two_nodes_verify(tiny, tmp_path, run_mpi, strategy, extra):
    out, loc = tmp_path / "res", tmp_path / "loc"
    r = run_mpi(["run", "--workload", "hep_cnn", "--strategy", strategy, *extra, "--data-dir", tiny,
                 "--ranks-per-node", 1, "--epochs", 2, "--compute-time", "0.001", "--verify", "--out", out,
                 "--local-dir", loc])
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    assert s["nodes"] == 2 and s["verified_samples"] == 2 * 64
    io = s["tier_io"]
    assert io["epochs"]["shared"]["bytes"] == 0                      # training never touches the shared tier
    assert io["prologue"]["shared"]["ops"] == (64 if "--local-capacity" not in extra else 64)
    if strategy == "staging" and not extra:
        assert io["prologue"]["peer"]["bytes"] == 64 * 12292         # each node got the other's half
    if strategy == "pls":
        assert io["epochs"]["peer"]["bytes"] == 2 * 2 * 9 * 12292    # 2 ranks × 2 epochs × floor(0.3·32)
        assert s["phase_time_s"]["exchange"] > 0
    if strategy == "staging" and "--local-capacity" in extra:         # 600 kB < 64 slots of 16 KiB: per-node subset
        assert "not a global shuffle" in r.stderr.lower() or "no longer" in r.stderr
    assert not any(loc.rglob("*.row"))
