import pytest


@pytest.fixture
def tiny(tmp_path, cli):
    """A tiny CosmoFlow dataset, private to the test (some tests damage it)."""
    d = tmp_path / "cf"
    r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.exit_code == 0, r.output
    return d
