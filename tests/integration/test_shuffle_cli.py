"""CLI bad input for staging/local/pls and the profiles: one line, non-zero exit."""

import json


def _run(cli, hep, tmp_path, *args):
    return cli(["run", "--workload", "hep_cnn", "--data-dir", hep, "--epochs", 1, "--compute-time", 0,
                "--out", tmp_path / "res", *args])


def test_q_outside_range(cli, hep, tmp_path):
    r = _run(cli, hep, tmp_path, "--strategy", "pls", "--exchange-fraction", "1.5")
    # the message names the real flag (issue 12: it named a non-existent --opt)
    assert r.exit_code == 2 and "--exchange-fraction=1.5" in r.output and "<= 1" in r.output


def test_exchange_fraction_only_for_pls(cli, hep, tmp_path):
    r = _run(cli, hep, tmp_path, "--strategy", "local", "--exchange-fraction", "0.3")
    assert r.exit_code == 2 and "option of pls" in r.output


def test_local_dir_missing_parent(cli, hep, tmp_path):
    r = _run(cli, hep, tmp_path, "--strategy", "local", "--local-dir", tmp_path / "no" / "such")
    assert r.exit_code == 2 and "parent directory" in r.output


def test_local_capacity_too_small_says_how_much(cli, hep, tmp_path):
    r = _run(cli, hep, tmp_path, "--strategy", "staging", "--local-capacity", "1000", "--if-too-big", "error",
             "--local-dir", tmp_path / "loc")
    assert r.exit_code == 4 and "needs 786,688 bytes" in r.output and "1,000 bytes" in r.output


def test_unknown_profile_key(cli, hep, tmp_path):
    p = tmp_path / "sys.yaml"
    p.write_text("name: x\nnetwork_mb_per_s: 1\npfs: null\nstaging: {capacity_bytes: 1, threads: 1, "
                 "write_mb_per_s: 1, bandwith: []}\n")
    r = _run(cli, hep, tmp_path, "--system", p)
    assert r.exit_code == 2 and "did you mean 'bandwidth'" in r.output
    r = _run(cli, hep, tmp_path, "--system", "laptop-pfz")
    assert r.exit_code == 2 and "laptop-pfs" in r.output


def test_laptop_pfs_is_recorded_as_modelled(cli, hep, tmp_path):
    r = _run(cli, hep, tmp_path, "--strategy", "pls", "--system", "laptop-pfs", "--local-dir", tmp_path / "loc")
    assert r.exit_code == 0, r.output
    s = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["summary"]
    assert s["shared_tier"]["modelled"] is True and s["shared_tier"]["profile"] == "laptop-pfs"
    assert s["tier_io"]["prologue"]["shared"]["ops"] == 64 and s["prologue_time_s"] > 0
    assert s["order_quality"]["fraction_of_dataset_seen_per_rank_after_epoch"] == [1.0]
