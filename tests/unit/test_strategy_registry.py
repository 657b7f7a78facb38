import subprocess
import sys


def test_registry_lists_every_builtin_whatever_was_imported_first():
    """Regression: importing one strategy module first used to leave the registry with only that one."""
    first = ("import dlbench.strategies.naive, dlbench.strategies as s; print(','.join(s.names()))")
    plain = ("import dlbench.strategies as s; print(','.join(s.names()))")
    a = subprocess.run([sys.executable, "-c", first], capture_output=True, text=True, check=True).stdout.split(",")
    b = subprocess.run([sys.executable, "-c", plain], capture_output=True, text=True, check=True).stdout.split(",")
    assert a == b and {"naive", "prefetch", "staging", "local", "pls", "lbann"} <= {x.strip() for x in a}


def test_unknown_strategy_lists_choices():
    import pytest

    from dlbench import strategies
    from dlbench.errors import ConfigError

    with pytest.raises(ConfigError, match=r"choose one of: .*local, .*naive, pls, prefetch, .*staging.* \(did you mean 'pls'\?\)"):
        strategies.get("plss")
