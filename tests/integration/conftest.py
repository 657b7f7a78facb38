import shutil

import pytest


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory):
    """The tiny CosmoFlow dataset generated once per session: the source every test's private `tiny` is
    copied from (never handed to a test itself)."""
    from click.testing import CliRunner

    from dlbench.cli import main

    d = tmp_path_factory.mktemp("cf-source") / "cf"
    r = CliRunner().invoke(main, ["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", str(d),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    return d


@pytest.fixture
def tiny(tmp_path, tiny_source):
    """A tiny CosmoFlow dataset, private to the test (some tests damage it): a copy of the session's
    `tiny_source` (generation is deterministic; the manifest names no path)."""
    d = tmp_path / "cf"
    shutil.copytree(tiny_source, d)
    return d
