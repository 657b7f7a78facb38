"""Issue 15: one numeric validation for every option, flag and study entry; strict JSON results."""

import json
import math

import pytest

from dlbench.config import convert
from dlbench.errors import ConfigError


def _strict(text: str):
    def bad(c):
        raise ValueError(f"non-standard JSON constant {c}")

    return json.loads(text, parse_constant=bad)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", float("nan"), float("inf"), "1e400"])
def test_floats_must_be_finite(value):
    with pytest.raises(ConfigError, match="finite number"):
        convert(value, float, "--cache-capacity", "")


@pytest.mark.parametrize("value", ["nan", "inf", float("nan"), "1e400", "2.5", "abc"])
def test_integers_refuse_nan_inf_and_fractions_in_one_line(value):
    with pytest.raises(ConfigError, match="expected an integer"):
        convert(value, int, "--loader-threads", "")


@pytest.mark.parametrize("args", [
    ["--cache-capacity", "nan"], ["--cache-capacity", "inf"], ["--local-cache-capacity", "nan"],
    ["--loader-threads", "nan"], ["--loader-threads", "100000"], ["--window", "inf"], ["--seed", "-1"],
])
def test_run_flags_are_one_line_errors(cli, args):
    r = cli(["run", "--strategy", "clairvoyant", *args, "--dry-run"])
    assert r.exit_code != 0 and "Traceback" not in r.output and len(r.output.strip().splitlines()) <= 4, r.output


@pytest.mark.parametrize("args,msg", [
    (["--strategies", ""], "name at least one"),
    (["--strategies", "naive", "--option", "local.loader_threads=2"], "not simulated here"),
    (["--strategies", "local", "--option", "local.loader_threads=nan"], "expected an integer"),
    (["--strategies", "naive", "--pls-q", "0.5"], "pls is not simulated here"),
    (["--strategies", "pls", "--pls-q", "nan"], "must be from 0 to 1"),
    (["--strategies", "naive", "--batch-size", "100000", "--scale", "tiny"], "larger than the dataset"),
    (["--strategies", "naive", "--loader-threads", "100000"], "from 1 to 1024"),
])
def test_simulate_refuses_silent_nonsense(cli, tmp_path, args, msg):
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", *args,
             "--out", str(tmp_path)])
    assert r.exit_code != 0 and msg in r.output, r.output


def test_simulate_defaults_to_the_step_time_run_uses(cli, tmp_path):
    """regression: simulate refused a profile without compute_mb_per_s unless --accelerator was given, while
    run defaults to the workload's published a100 step time"""
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", "--strategies",
             "naive", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    r2 = cli(["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", "--strategies",
              "naive", "--accelerator", "a100", "--out", str(tmp_path / "b")])
    t = [_strict(p.read_text())["summary"]["total_time_s"] for d in ("a", "b")
         for p in (tmp_path / d).rglob("run.json")]
    assert r2.exit_code == 0 and t[0] == pytest.approx(t[1])


def test_run_json_is_strict_json_with_non_finite_values_named(tmp_path):
    from dlbench.results import read_run, write_run

    d = tmp_path / "r"
    d.mkdir()
    write_run(d, config={"x": float("inf")}, summary={"au": float("nan"), "ok": 1.5, "v": [1.0, float("-inf")]})
    doc = _strict((d / "run.json").read_text())
    assert doc["summary"]["au"] is None and doc["summary"]["v"] == [1.0, None] and doc["summary"]["ok"] == 1.5
    assert set(doc["non_finite_as_null"]) == {"config.x", "summary.au", "summary.v[1]"}
    assert read_run(d)["summary"]["ok"] == 1.5
    assert not math.isnan(doc["summary"]["ok"])


@pytest.mark.parametrize("key,value", [("network_mb_per_s", 1e-300), ("network_mb_per_s", 1e300),
                                       ("pfs.client_link_mb_per_s", 1e-300), ("pfs.latency_s", 1e9)])
def test_absurd_profile_is_refused_at_load(key, value):
    """regression: client_link_mb_per_s: 1e-300 made a run wait forever"""
    import copy

    import yaml

    from dlbench.config import resource_dir
    from dlbench.system import from_dict

    d = yaml.safe_load((resource_dir("configs") / "systems" / "laptop-pfs.yaml").read_text())
    d = copy.deepcopy(d)
    sect, _, k = key.rpartition(".")
    (d[sect] if sect else d)[k] = value
    with pytest.raises(ConfigError, match=key.split(".")[-1]):
        from_dict(d, where="p.yaml")


def test_every_emulated_wait_is_bounded():
    """A profile that passes the bounds but holds one read for longer than MAX_WAIT_S is an error, not a
    wait (the fake clock would otherwise loop for ~11 days of modelled time)."""
    from dlbench.storage.throttle import MAX_WAIT_S, LocalGamma, PfsModel, Throttle

    class Clock:
        t = 0.0

        def clock(self):
            return self.t

        def sleep(self, d):
            self.t += d

    c = Clock()
    th = Throttle(PfsModel(0.0, 1e-3), LocalGamma(), clock=c.clock, sleep=c.sleep, spin_s=0.0)
    with pytest.raises(ConfigError, match="cannot be right"):
        th.read(lambda: 1_000_000)          # 1 MB at 1 KB/s: 1,000 s
    assert c.t < MAX_WAIT_S
    assert th.read(lambda: 100) == 100       # 0.1 s: held, and returns


@pytest.mark.parametrize("shape,msg", [("[0, 32, 32, 4]", "every dimension must be >= 1"),
                                       ("[-1, 4]", "every dimension must be >= 1"),
                                       ("[100000, 100000, 100000, 4]", "at most 68,719,476,736")])
@pytest.mark.parametrize("cmd", ["show", "run", "simulate"])
def test_preset_with_zero_negative_or_huge_dimension_is_one_line(tmp_path, cli, shape, msg, cmd):
    """regression: a preset's shapes skipped the array checks (0 and negative dims ran; a 8 EB sample was
    'simulated')"""
    from dlbench.config import resource_dir

    src = (resource_dir("workloads") / "cosmoflow.yaml").read_text()
    w = tmp_path / "w.yaml"
    w.write_text(src.replace("shapes: {full: [32, 32, 32, 4]}", f"shapes: {{full: {shape}}}"))
    args = {"show": ["show", str(w), "--scale", "tiny"],
            "run": ["run", "--workload", str(w), "--scale", "tiny", "--dry-run"],
            "simulate": ["simulate", "--system", "laptop-pfs", "--workload", str(w), "--scale", "tiny", "--nodes",
                         "2", "--strategies", "naive", "--out", str(tmp_path / "s")]}[cmd]
    r = cli(args)
    assert r.exit_code == 2 and msg in r.output and "presets.tiny" in r.output, r.output
