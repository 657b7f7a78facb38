"""Strategy options own their flags (issue 16): an option name two strategies use with different meanings
(``mode``: lbann's preload/dynamic, deepio's ordered/opportunistic) is each one's own flag (``--lbann-mode``,
``--deepio-mode``) whose help describes only that strategy; the old ``--mode`` still works, routed to the
selected strategy's option, and a value that strategy does not take is one line, exit 2. Config and study
files keep the key (``mode:``)."""

import json

import pytest


def _help(cli) -> dict:
    """``run --help``: each flag's help text (joined, whitespace normalised)."""
    out = cli(["run", "--help"]).output
    flags: dict = {}
    cur = None
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("--") or s.startswith("-"):
            first = s.split()[0].split("/")[0]
            cur = first if first.startswith("--") else (s.split()[1] if len(s.split()) > 1 else first)
            flags[cur] = s
        elif cur and s:
            flags[cur] += " " + s
        elif not s:
            cur = None
    return {k: " ".join(v.split()) for k, v in flags.items()}


def test_each_strategys_own_flag_describes_only_that_strategy(cli):
    h = _help(cli)
    lb, dp, old = h["--lbann-mode"], h["--deepio-mode"], h["--mode"]
    assert "(lbann) preload (each rank reads its range before epoch 0) or dynamic" in lb and "default preload" in lb
    assert "ordered" not in lb and "opportunistic" not in lb and "deepio" not in lb
    assert "(deepio) ordered (exact global shuffle" in dp and "default ordered" in dp
    assert "preload" not in dp and "dynamic" not in dp and "lbann" not in dp
    # the old spelling says what it stands for, and describes neither meaning itself
    assert "--deepio-mode (deepio), --lbann-mode (lbann)" in old and "existing command lines" in old
    assert "preload" not in old and "opportunistic" not in old


def test_every_shared_plain_flag_has_one_type_and_one_set_of_choices():
    """The check the CLI runs when it builds the flags: a name shared without its own flag means one thing."""
    from dlbench.cli.strategyflags import strategy_option_fields

    fields = strategy_option_fields()
    assert fields["mode"]["alias"] == {"deepio": "--deepio-mode", "lbann": "--lbann-mode"}
    assert fields["lbann_mode"]["owners"] == ["lbann"] and fields["deepio_mode"]["owners"] == ["deepio"]
    for ent in fields.values():
        if ent["alias"] is None:
            assert len({(r["type"], tuple(r["choices"] or ())) for r in ent["rows"].values()}) == 1, ent["flag"]


def test_a_collision_without_own_flags_is_refused_when_the_cli_is_built(monkeypatch):
    from dataclasses import dataclass

    from dlbench import strategies
    from dlbench.cli.strategyflags import strategy_option_fields
    from dlbench.config import opt

    @dataclass(frozen=True, kw_only=True)
    class Opts:
        mode: str = opt("x", help="another mode", choices=("x", "y"))

    real = strategies.get

    class Fake:
        name = "fake"
        Options = Opts

    monkeypatch.setattr(strategies, "names", lambda: ["deepio", "fake", "lbann"])
    monkeypatch.setattr(strategies, "get", lambda n: Fake if n == "fake" else real(n))
    with pytest.raises(RuntimeError, match="--mode"):
        strategy_option_fields()


@pytest.mark.parametrize("strategy,flags,want", [
    ("lbann", ["--mode", "dynamic"], "dynamic"),            # the old spelling
    ("lbann", ["--lbann-mode", "dynamic"], "dynamic"),
    ("lbann", ["--mode", "dynamic", "--lbann-mode", "dynamic"], "dynamic"),
    ("deepio", ["--mode", "opportunistic"], "opportunistic"),
    ("deepio", ["--deepio-mode", "opportunistic"], "opportunistic"),
    ("deepio", [], "ordered"),
])
def test_old_and_new_spellings_set_the_strategys_option(tmp_path, cli, strategy, flags, want):
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tmp_path / "none", "--dry-run", "--out", tmp_path / "r",
             "--strategy", strategy, "--cache-capacity", 1e9, *flags])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["config"]["options"]["mode"] == want


@pytest.mark.parametrize("strategy,flags,line", [
    ("deepio", ["--mode", "preload"], "--mode=preload: strategy deepio's mode (--deepio-mode) is one of ordered, "
                                      "opportunistic; preload is lbann's --lbann-mode"),
    ("lbann", ["--mode", "bogus"], "--mode=bogus: strategy lbann's mode (--lbann-mode) is one of preload, dynamic"),
    ("lbann", ["--lbann-mode", "ordered"], "--lbann-mode='ordered' (in strategy lbann): choose one of preload, "
                                           "dynamic"),
    ("lbann", ["--deepio-mode", "ordered"], "--deepio-mode is an option of deepio, not of strategy lbann"),
    ("naive", ["--mode", "preload"], "--mode is an option of deepio, lbann, not of strategy naive"),
    ("lbann", ["--mode", "dynamic", "--lbann-mode", "preload"], "the same option of lbann; give one"),
])
def test_a_value_the_strategy_does_not_take_is_one_line_exit_2(tmp_path, cli, strategy, flags, line):
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tmp_path / "none", "--dry-run", "--out", tmp_path / "r",
             "--strategy", strategy, *flags])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and line in lines[0] and "Traceback" not in r.output, r.output
    assert not (tmp_path / "r").exists() and not (tmp_path / "none").exists()


def test_files_keep_the_key_and_listings_show_the_own_flag(tmp_path, cli):
    from dlbench import strategies
    from dlbench.study.schema import load_study

    # a study's run entry and simulate's --option keep the key `mode`
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nworkload: cosmoflow\nscale: tiny\nepochs: 1\nruns:\n"
                     "  - {strategy: lbann, options: {mode: dynamic}}\n"
                     "  - {strategy: deepio, options: {mode: opportunistic}}\n")
    st = load_study(str(study))
    got = [strategies.parse_options(strategies.get(r.strategy), r.options).mode for r in st.runs]
    assert got == ["dynamic", "opportunistic"]
    out = cli(["list", "strategies", "-v"]).output
    assert "--lbann-mode" in out and "--deepio-mode" in out and " --mode " not in out
