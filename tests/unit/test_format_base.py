"""The format contract (dlbench.data.format_base.FormatDriver, issue 27): every registered format's driver is a
checked subclass; a misspelled hook fails when its class is defined, a missing required operation when it is
registered, each in one line naming it; docs/formats.md's hook table is the class's; the defaults are today's
behaviour of a format that leaves a hook out; no call site asks a driver with getattr."""

import importlib
import re
from pathlib import Path

import numpy as np
import pytest

from dlbench.data import format_base as fb
from dlbench.data.registry import FORMATS, Format, get_format, register

ROOT = Path(__file__).resolve().parents[2]


def test_docs_hook_table_is_the_class():
    text = (ROOT / "docs" / "formats.md").read_text()
    m = re.search(r"<!-- hooks: begin[^\n]*-->\n(.*?)<!-- hooks: end -->", text, re.S)
    assert m, "docs/formats.md has no generated hook table"
    documented = set(re.findall(r"^\| `([A-Za-z_]+)", m.group(1), re.M))
    assert documented == set(fb.hook_names()), (sorted(documented ^ set(fb.hook_names())))
    assert m.group(1) == fb.hooks_markdown(), "docs/formats.md's hook table is stale: regenerate it (hooks_markdown)"


def test_hook_names_cover_the_four_once_undocumented_ones():
    assert {"size_distribution", "check_plan", "row_arrays", "summary_keys"} <= fb.hook_names()
    assert "reads_by_offset" not in fb.hook_names()


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_every_builtin_driver_is_a_checked_subclass(name):
    fmt = get_format(name)
    drv = fmt.driver()
    assert isinstance(drv, fb.FormatDriver) and type(drv) is not fb.FormatDriver
    assert fmt.driver() is drv    # made once
    fb.check_driver(type(drv), fmt.decodes, name)
    if fmt.decodes:
        assert fb.overrides(type(drv), "decode_into") or fb.overrides(type(drv), "decoder")


def test_docs_reads_by_offset_column_matches_the_registry():
    text = (ROOT / "docs" / "formats.md").read_text()
    rows = re.findall(r"^\| (`[a-z_0-9]+`(?:, `[a-z_0-9]+`)*) \| `fmt_[a-z0-9]+` \| (yes|no)", text, re.M)
    seen = set()
    for names, yes in rows:
        for n in re.findall(r"`([a-z_0-9]+)`", names):
            assert get_format(n).reads_by_offset == (yes == "yes"), n
            seen.add(n)
    assert seen == set(FORMATS) - {"raw"}


def test_a_misspelled_hook_fails_when_the_class_is_defined():
    with pytest.raises(TypeError) as e:
        class Bad(fb.FormatDriver):   # noqa: F841
            def fil_row(self, workload, seed, i, out):
                return 0
    msg = str(e.value)
    assert "\n" not in msg and "'fil_row'" in msg and "did you mean 'fill_row'" in msg
    with pytest.raises(TypeError, match="unknown hook 'STORGE'.*'STORAGE'"):
        class Bad2(fb.FormatDriver):   # noqa: F841
            STORGE = True
    class Fine(fb.FormatDriver):   # private helpers are the class's own business
        _cache: dict = {}

        def _helper(self):
            return 1
    assert Fine._helper is not None


def _module(tmp_path, monkeypatch, name, body):
    """A package of the test's own (a name of its own: imports are cached) holding module ``name``."""
    pkg = "plug_" + re.sub(r"\W", "_", tmp_path.name)
    d = tmp_path / pkg
    d.mkdir(exist_ok=True)
    (d / "__init__.py").write_text("")
    (d / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return f"{pkg}.{name}"


REQUIRED = """
from dlbench.data.format_base import FormatDriver


class Some(FormatDriver):
    def plan_files(self, workload, seed):
        return [], [], [], []

    def expected_row(self, workload, seed, i):
        return None

    def sample_nbytes(self, manifest):
        return None

    def check_file(self, path, workload, seed, m, f, image=None, storage=None):
        return []
{extra}
"""


@pytest.mark.parametrize("extra,decodes,want", [
    ("", False, "does not define the required open_reader"),
    ("    def open_reader(self, d, m, w, **kw):\n        return None\n", False, "neither write_file nor writer"),
    ("    def open_reader(self, d, m, w, **kw):\n        return None\n\n"
     "    def write_file(self, fd, w, seed, m, f):\n        return 0\n", True, "neither decode_into nor decoder"),
])
def test_a_missing_operation_fails_at_the_register_line(tmp_path, monkeypatch, extra, decodes, want):
    mod = _module(tmp_path, monkeypatch, f"fmt_some{len(extra)}", REQUIRED.format(extra=extra))
    with pytest.raises(TypeError) as e:
        register(Format("some", decodes=decodes, samples_per_file="one", module=mod))
    assert want in str(e.value) and "\n" not in str(e.value) and "some" in str(e.value)
    assert "some" not in FORMATS


def test_a_complete_outside_format_registers_and_gets_the_defaults(tmp_path, monkeypatch):
    body = REQUIRED.format(extra="    def open_reader(self, d, m, w, **kw):\n        return None\n\n"
                                 "    def write_file(self, fd, w, seed, m, f):\n        return 0\n")
    body = body.replace("return None\n\n    def sample_nbytes", "return np.arange(4, dtype=np.uint8)\n\n"
                                                               "    def sample_nbytes")
    mod = _module(tmp_path, monkeypatch, "fmt_complete", "import numpy as np\n" + body)
    fmt = register(Format("complete", decodes=False, samples_per_file="one", module=mod))
    try:
        drv = fmt.driver()
        out = np.zeros(8, np.uint8)
        assert drv.fill_row(None, 0, 3, out) == 4 and list(out[:5]) == [0, 1, 2, 3, 0]   # expected_row copied
        assert drv.shared_read_plan("naive", None, meta={"m": 1}, streams=1, drop_last_batch=False,
                                    sampler_order=lambda meta: ("sampler", meta)) == ("sampler", {"m": 1})
        assert drv.file_order(None, [3, 1]) == [3, 1] and drv.write_dataset(None, None, None, None) is False
        assert drv.extra_ok(None, None, 0) is True and drv.check_records(None, None, 0, None, 0) == []
        assert drv.summary_keys(None) == {} and drv.size_distribution(None) is None
        assert drv.row_arrays(None) is None and drv.manifest_row_nbytes(None) == 0
        assert drv.direct_unsupported("complete") == "" and drv.file_nbytes_planner(None, None) is None
        assert not drv.STORAGE and drv.HAS_ARRAYS and drv.SECTION == ""
        from dlbench.data.manifest import CONTENT_VERSION
        assert drv.CONTENT_VERSION == CONTENT_VERSION
        w = drv.writer(None, 0, None, None, [0])   # default writer: write_file per file
        assert w.write_file(None, 0) == 0
    finally:
        FORMATS.pop("complete")


def test_no_call_site_asks_a_driver_with_getattr():
    """Every hook has a default on the class: call sites call it (a getattr with a fallback would hide a
    misspelled hook again)."""
    bad = []
    for p in (ROOT / "dlbench").rglob("*.py"):
        for k, line in enumerate(p.read_text().splitlines(), 1):
            if re.search(r"(getattr|hasattr)\((drv|self\.drv|[^)]*driver\(\))", line):
                bad.append(f"{p.relative_to(ROOT)}:{k}: {line.strip()}")
    assert not bad, "\n".join(bad)
