"""Smoke tests of benchmarks/checkpoint_*.py with tiny arguments."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_checkpoint_io_smoke(tmp_path):
    res = _load("checkpoint_io").main(["--scale", "2e-5", "--repeats", "2", "--dir", str(tmp_path)])
    assert res["files"] == 2 and res["bytes"] > 0
    assert res["write_ratio"] > 0 and res["restore_ratio"] > 0
    assert list(tmp_path.iterdir()) == []


def test_the_architecture_checkpoint_table_is_the_codes():
    import re

    from dlbench.checkpoint.aggregate import DEFINITIONS
    from dlbench.metrics import CHECKPOINT_GLOSSARY

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Checkpoints (", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_0-9]+)` \| (.+) \|$", section, flags=re.M)
    assert dict(rows) == CHECKPOINT_GLOSSARY and DEFINITIONS is CHECKPOINT_GLOSSARY
