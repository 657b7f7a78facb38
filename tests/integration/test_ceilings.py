"""Counts and sizes past dlbench.config's ceilings are one-line errors before anything runs (issue 15's second
pass: huge epochs/nodes/threads/seeds/step times/sizes gave allocation errors, overflows, runs that never end,
a disk filled by a 10^30-parameter checkpoint, or an "ok" row of nonsense)."""


import pytest
import yaml

from dlbench.config import MAX_EPOCHS, MAX_THREADS

HUGE = "1000000000000000"


def _one_line_error(r, needle):
    assert r.exit_code not in (0, None), r.output
    assert "Traceback" not in r.output, r.output
    assert needle in r.output, r.output


@pytest.mark.parametrize("args,needle", [
    (["run", "--workload", "cosmoflow", "--epochs", HUGE], f"--epochs={HUGE}: must be <= {MAX_EPOCHS:,}"),
    (["run", "--workload", "cosmoflow", "--ranks-per-node", HUGE], "--ranks-per-node="),
    (["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "2",
      "--strategies", "naive", "--epochs", HUGE], f"--epochs={HUGE}: must be <="),
    (["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--scale", "tiny", "--nodes", HUGE,
      "--strategies", "naive"], f"--nodes={HUGE}: must be <="),
    (["sustain", "--workload", "cosmoflow", "--accelerator", "a100", "--ranks-per-node", "0"],
     "--ranks-per-node=0: must be >= 1"),
    (["sustain", "--workload", "cosmoflow", "--accelerator", "a100", "--ranks-per-node", HUGE], "--ranks-per-node="),
    (["sustain", "--workload", "cosmoflow", "--accelerator", "a100", "--measure-ranks", HUGE], "--measure-ranks="),
    (["sustain", "--workload", "cosmoflow", "--accelerator", "a100", "--seed", "-1"], "--seed=-1: must be >= 0"),
    (["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "--threads", "0"], "--threads=0: must be >= 1"),
    (["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "--threads", "-1"], "--threads=-1"),
    (["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "--threads", HUGE],
     f"--threads={HUGE}: must be <= {MAX_THREADS:,}"),
    (["calibrate", "--workload", "cosmoflow", "--scale", "tiny", "--steps", HUGE], "--steps="),
])
def test_flags_past_a_ceiling_are_one_line(cli, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    _one_line_error(cli(args), needle)
    assert not (tmp_path / "results").exists()


def _sim_study(tmp_path, **changes):
    from dlbench.config import resource_dir

    d = yaml.safe_load((resource_dir("configs") / "studies" / "hdmlp-thesis-s2.yaml").read_text())
    for k, v in changes.items():
        if k.startswith("workload."):
            d["workload"][k.split(".", 1)[1]] = v
        else:
            d[k] = v
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.parametrize("changes,needle", [
    ({"epochs": 1e30}, "epochs="),
    ({"seed": 1e30}, "seed="),
    ({"workload.global_batch": 1e30}, "global_batch="),
])
def test_simulated_study_values_past_a_ceiling(cli, tmp_path, changes, needle):
    _one_line_error(cli(["simulate", "--study", _sim_study(tmp_path, **changes), "--out", tmp_path / "o"]), needle)


def test_run_study_negative_seed_refused_before_generating(cli, tmp_path):
    from dlbench.config import resource_dir

    d = yaml.safe_load((resource_dir("configs") / "studies" / "shuffle-comparison.yaml").read_text())
    d["seed"] = -1
    p = tmp_path / "st.yaml"
    p.write_text(yaml.safe_dump(d))
    r = cli(["study", p, "--data-dir", tmp_path / "data", "--out", tmp_path / "res"])
    _one_line_error(r, "seed=-1")
    assert not (tmp_path / "data").exists()


def test_profile_and_workload_values_past_a_ceiling(cli, tmp_path):
    from dlbench.config import resource_dir

    prof = yaml.safe_load((resource_dir("configs") / "systems" / "laptop-pfs.yaml").read_text())
    prof["staging"]["threads"] = 1e30
    pp = tmp_path / "p.yaml"
    pp.write_text(yaml.safe_dump(prof))
    r = cli(["simulate", "--system", pp, "--workload", "cosmoflow", "--scale", "tiny", "--nodes", "2",
             "--strategies", "staging", "--out", tmp_path / "o"])
    _one_line_error(r, "threads=")
    wl = yaml.safe_load((resource_dir("configs") / "examples" / "onemib-hdf5.yaml").read_text())
    for key, val, needle in (("compute", {"a100": {"step_time_s": 1e30, "batch_size": 16}}, "step_time_s="),
                             ("model", {"name": "x", "parameters": 1e30}, "parameters=")):
        w = dict(wl, **{key: val})
        wp = tmp_path / f"w-{key}.yaml"
        wp.write_text(yaml.safe_dump(w))
        _one_line_error(cli(["show", wp]), needle)


def test_checkpoint_larger_than_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    """Regression: a checkpoint bigger than the disk's free space was written until the disk was full."""
    import shutil
    from collections import namedtuple

    from dlbench.compute import sleep
    from dlbench.errors import OutputError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10 << 20, 0, 1 << 20))
    with pytest.raises(OutputError, match="disk full writing 2,097,152 bytes"):
        sleep.write_checkpoint(tmp_path, 2 << 20)
    assert not list(tmp_path.iterdir())          # nothing written, nothing left
    sleep.write_checkpoint(tmp_path, 1 << 10)    # what fits is written (and removed)
    assert not list(tmp_path.iterdir())


def test_simulated_study_with_every_point_left_out_is_not_exit_0(cli, tmp_path):
    """Regression: a batch no node count can hold left every point out and printed an empty table, exit 0."""
    from dlbench.config import resource_dir

    d = yaml.safe_load((resource_dir("configs") / "studies" / "scaling-weak.yaml").read_text())
    d["batch_size"] = 1000
    d["simulate"]["nodes"] = [1, 2]
    p = tmp_path / "wb.yaml"
    p.write_text(yaml.safe_dump(d))
    r = cli(["study", p, "--simulate", "--out", tmp_path / "res"])
    assert r.exit_code == 4 and "Traceback" not in r.output, r.output
    assert "could not be costed" in r.output and "nothing was costed" in r.output


def test_simulate_accelerator_help_is_whole(cli):
    r = cli(["simulate", "--help"])
    assert r.exit_code == 0 and "uses that rate]" in " ".join(r.output.split())


def test_compute_profile_step_time_past_a_day_is_one_line(cli, tmp_path):
    """Regression: step_time_s 1e30 in a compute profile ran, then failed as 'OverflowError: timestamp out of range'."""
    p = tmp_path / "c.yaml"
    p.write_text("workload: cosmoflow\nstep_time_s: 1.0e+30\nbatch_size: 4\n")
    r = cli(["run", "--workload", "cosmoflow", "--compute-profile", p, "--data-dir", tmp_path / "d", "--out",
             tmp_path / "r"])
    _one_line_error(r, "step_time_s=1e+30: must be a number of seconds from 0 to 86400")
    assert not (tmp_path / "r").exists() and not (tmp_path / "d").exists()


def test_simulate_memory_refusal_names_the_samples(cli, tmp_path):
    """Issue 15 second pass: a huge --samples was blamed on --nodes alone."""
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", "--strategies", "naive",
             "--samples", str(1 << 39), "--out", tmp_path / "o"])
    _one_line_error(r, f"--nodes 2 with {1 << 39:,} samples (--samples or the workload's)")
