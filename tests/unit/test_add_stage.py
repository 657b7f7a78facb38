"""Adding a stage to the planned executor is one module with a ``Stage`` subclass and an ``epoch_stages``
override (issue 27): ``stagecount`` (next to this file) defines ``BatchTally`` (samples and a checksum of every
batch) and a strategy whose executor runs it, without touching dlbench; ``dlbench run --verify`` carries it out
and the stage's figures reach run.json. A misspelled hook fails when its module is imported."""

import importlib
import json
import zlib

import numpy as np
import pytest

import dlbench.cli  # noqa: F401  (imported before the strategy is registered: run's flags follow the registry)


@pytest.fixture(autouse=True, scope="module")
def tallied():
    """The registration: ``@register`` on import; taken out of the registry after this module's tests."""
    from dlbench import strategies

    yield importlib.import_module("stagecount.strategy").Tallied
    strategies._REGISTRY.pop("tallied")


def test_run_verify_with_the_new_stage(cli, hep, tmp_path, monkeypatch):
    from dlbench import workload as W
    from dlbench.data.formats import MemoryReader

    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    out = tmp_path / "res"
    r = cli(["run", "--workload", "hep_cnn", "--scale", "tiny", "--data-dir", hep, "-s", "tallied", "-e", "2",
             "--compute-time", "0.001", "--system", "laptop-pfs", "--verify", "--no-progress", "-o", out])
    assert r.exit_code == 0, r.output
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, ms = run["config"], run["summary"]
    samples = int(cfg["workload_spec"]["samples"])
    assert cfg["strategy"] == "tallied" and ms["verified_samples"] == 2 * samples
    tally = ms["strategy_stats"][0]["tally"]
    batch = int(cfg["local_batch"])
    assert tally["samples_per_step"] == 2 * ([batch] * (samples // batch) + ([samples % batch] if samples % batch else []))
    # one rank: each epoch is a permutation of the dataset, so its checksum is the dataset's
    wl = W.load("hep_cnn", scale="tiny")
    reader = MemoryReader(wl, seed=int(cfg["seed"]))
    row = np.zeros(reader.max_row_nbytes, np.uint8)
    want = sum(zlib.crc32(row[:reader.read_into(i, row)]) for i in range(samples))
    assert tally["epoch_crc_sums"] == [want, want]


def test_a_misspelled_hook_fails_at_import():
    with pytest.raises(TypeError, match="unknown hook 'befor_step'; did you mean 'before_step'"):
        importlib.import_module("stagecount.misspelled")


def test_a_hook_with_the_wrong_parameters_fails_at_definition():
    from dlbench.strategies.stage import Stage

    with pytest.raises(TypeError, match=r"hook after_step\('view',\) must take \(view, t\)"):
        class OneArg(Stage):   # noqa: F841
            def after_step(self, view):
                pass

            def stats(self):
                return {}

    class Fine(Stage):        # a stage's own methods, unlike any hook, are its business
        def checksum(self, rows):
            return zlib.crc32(rows)

        def stats(self):
            return {}

    assert Fine().stats() == {} and Fine().before_step(None, 0) is None
