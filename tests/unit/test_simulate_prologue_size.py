"""simulate's size check counts the prologue (issue 16): staging's all-gather plan has a prologue row per sample
and storage group (60,000 samples x 2,048 nodes = 123M rows, about 8.4 GB measured), so ``dlbench simulate``
refuses a world whose prologue would not fit in one line, before any plan is built."""

import pytest

from dlbench.errors import ConfigError
from dlbench.simulate import SimWorkload
from dlbench.simulate.core import BYTES_PER_PROLOGUE_ROW, check_size, prologue_rows

WL = SimWorkload("w", 60_000, 8, "fixed", 1e5)


def test_prologue_rows_come_from_the_strategies():
    assert prologue_rows(["lowerbound", "naive"], WL, 2048, 1) == (60_000, "naive")
    assert prologue_rows(["naive", "staging"], WL, 2048, 1) == (60_000 * 2048, "staging")
    # storage groups: nodes for node-local stores, ranks for process memory
    assert prologue_rows([("s", "staging", {"tier": "memory"})], WL, 16, 4) == (60_000 * 64, "staging")
    assert prologue_rows(["staging"], WL, 16, 4, options={"staging": {"tier": "memory"}}) == (60_000 * 64, "staging")


def test_check_size_refuses_a_prologue_beyond_memory_in_one_line():
    gib = 2**30
    pro = prologue_rows(["naive", "staging"], WL, 2048, 1)
    assert check_size(WL, 2048, 1, available=64 * gib, prologue=pro) >= BYTES_PER_PROLOGUE_ROW * 60_000 * 2048
    with pytest.raises(ConfigError) as e:
        check_size(WL, 2048, 1, available=8 * gib, prologue=pro)
    msg = str(e.value)
    assert "\n" not in msg and "staging's prologue of 122,880,000 moves" in msg and "leave staging out" in msg
    check_size(WL, 2048, 1, available=8 * gib)   # the epochs alone fit


def test_simulate_cli_refuses_before_planning(cli, tmp_path, monkeypatch):
    import dlbench.host

    monkeypatch.setattr(dlbench.host, "meminfo", lambda key: 4 * 2**30)
    r = cli(["simulate", "--system", "hdmlp-thesis", "--workload", "hep_cnn", "--samples", "60000", "--batch-size",
             "8", "--nodes", "1024", "--strategies", "naive,staging", "--out", tmp_path / "out"])
    assert r.exit_code != 0 and "staging's prologue of 61,440,000 moves" in r.output
    assert not (tmp_path / "out").exists()


def test_study_simulate_part_refuses_before_writing_a_row(tmp_path, monkeypatch):
    """the study's simulate part checks every world (its prologue included) before it writes any row"""
    import dlbench.host
    from dlbench.study.schema import load_study
    from dlbench.study.simulate import run_simulate

    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkload: hep_cnn\nscale: tiny\nsystem: hdmlp-thesis\nepochs: 1\nbatch_size: 1\n"
                 "samples: 60000\nruns:\n  - {strategy: naive}\n  - {strategy: staging}\n"
                 "sweep:\n  ranks: [1]\n  scaling: strong\nsimulate:\n  nodes: [1, 1024]\n")
    monkeypatch.setattr(dlbench.host, "meminfo", lambda key: 4 * 2**30)
    with pytest.raises(ConfigError, match="staging's prologue of 61,440,000 moves"):
        run_simulate(load_study(str(p)), out=tmp_path / "out")
    assert not (tmp_path / "out").exists()
