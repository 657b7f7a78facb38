import subprocess
import sys


def test_registry_lists_every_builtin_whatever_was_imported_first():
    """Regression: importing one strategy module first used to leave the registry with only that one."""
    code = ("import dlbench.strategies.naive, dlbench.strategies as s; print(','.join(s.names()))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "local,naive,pls,prefetch,staging"


def test_unknown_strategy_lists_choices():
    import pytest

    from dlbench import strategies
    from dlbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"choose one of: local, naive, pls, prefetch, staging \(did you mean 'pls'\?\)"):
        strategies.get("plss")
