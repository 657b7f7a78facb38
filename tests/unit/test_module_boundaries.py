"""The package's import graph (issue 27): no import cycles between dlbench's modules, and the lower packages do not
import the upper ones. Read from the source (module-level, function-level and TYPE_CHECKING imports alike), so an
import inside a function body counts as much as one at the top."""

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "dlbench"

# the cycles left, each inside one package (compute/: models.py <-> torch_step.py; data/: the Format base class,
# the manifest and the registry, since the Format merge: format_base imports the manifest's content version, the
# manifest asks the registry and format_base); a new one fails this test
KNOWN_CYCLES: list[set[str]] = []   # none: a new cycle fails here


def _name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache   # built once per root: the tests only read it
def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = {_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.Import):
                targets.update(a.name for a in n.names)
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets.add(base)
                targets.update(f"{base}.{a.name}" for a in n.names)
        deps = set()
        for t in targets:
            while t and t not in files:
                t = t.rpartition(".")[0]
            if t and t != name and not (path.name == "__init__.py" and t.startswith(name + ".")):
                deps.add(t)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_but_the_known_one():
    cycles = _cycles(_graph())
    assert [c for c in cycles if c not in KNOWN_CYCLES] == []


def test_lower_packages_do_not_import_upper_ones():
    """storage/ (tiers, backends, checksums, the local tier's lifecycle, the page cache and --cache's CacheMode)
    sits below data/ and plan/ (formats and manifests: the format-aware O_DIRECT check is data.registry's, a
    dataset in a bucket data.bucket's) and everything above them; compute/ below the strategies, the
    simulator, the run and the calibration commands; checkpoint/ (the engine, the --checkpoint-every schedule)
    below the simulator and the run that both use it; strategies/ below the simulator, the run and calibration;
    the simulator below the run (what both share lives below both); simulate/ and run/ below study/ (its two
    drivers); nothing but the CLI imports calibrate/ (its commands)."""
    top = ("strategies", "simulate", "run", "calibrate", "study", "cli")
    above = {"storage": ("data", "plan", "workload", "system", "checkpoint", "compute") + top,
             "compute": ("data", "plan") + top,
             "checkpoint": ("data", "plan") + top,
             "strategies": ("simulate", "run", "calibrate", "study", "cli"),
             "simulate": ("run", "calibrate", "study", "cli"), "run": ("study", "cli")}
    bad = []
    for mod, deps in _graph().items():
        layer = mod.split(".")[1] if mod.count(".") else ""
        for d in deps:
            target = d.split(".")[1] if d.count(".") else ""
            if target in above.get(layer, ()) or (target == "calibrate" and layer not in ("calibrate", "cli")):
                bad.append(f"{mod} -> {d}")
    assert bad == []


def test_the_byte_formatter_sits_at_the_bottom():
    """dlbench.units (format_bytes) imports nothing of dlbench, so storage/ and every layer above may use it."""
    assert _graph()["dlbench.units"] == set()


def test_the_checker_sees_function_level_and_type_checking_imports(tmp_path):
    """The reader counts imports in function bodies and under TYPE_CHECKING (the cycles this issue broke were
    such imports), and finds a cycle made of them."""
    pkg = tmp_path / "dlbench"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "x.py").write_text("def f():\n    from .y import g\n")
    (pkg / "a" / "y.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import f\n")
    assert _cycles(_graph(pkg)) == [{"dlbench.a.x", "dlbench.a.y"}]
