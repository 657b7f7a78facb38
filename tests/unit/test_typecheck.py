"""The modules listed under [tool.mypy] in pyproject.toml type-check (issue 16: a type checker configured on
the packages the redesign touches). Skipped where mypy is not installed (it is in the test extra)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_listed_modules_type_check():
    pytest.importorskip("mypy")
    if not (ROOT / "pyproject.toml").is_file() or not (ROOT / "dlbench" / "metrics.py").is_file():
        pytest.skip("needs the source tree")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
