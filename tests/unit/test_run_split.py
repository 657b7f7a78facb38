"""The run split by job (dlbench/run/, issue 16): the workload spec is loaded once per run, the planner gets a
typed, frozen ``PlanContext`` (the same one ``simulate`` builds), the prefetch executor reports its live
workers' I/O itself, and docs/architecture.md's glossary is the code's."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dlbench import strategies
from dlbench import workload as wl_mod
from dlbench.comm import SerialComm
from dlbench.data.formats import MemoryReader
from dlbench.run import driver
from dlbench.run.loop import Loop
from dlbench.run.setup import RunConfig
from dlbench.simulate import from_workload, load_profile, sim_context
from dlbench.strategies import RunContext

ROOT = Path(__file__).resolve().parents[2]


def _count_spec_loads(monkeypatch) -> list:
    calls = []
    real = wl_mod.load_spec

    def counting(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(wl_mod, "load_spec", counting)
    return calls


def test_a_dry_run_loads_the_workload_spec_once(monkeypatch, tmp_path):
    """regression: check_compute, check_compute_options and resolve_dataset each loaded the YAML"""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    calls = _count_spec_loads(monkeypatch)
    out = driver.run(RunConfig(workload="cosmoflow", dry_run=True, out=str(tmp_path / "out")), SerialComm())
    assert "dry_run" in out
    assert calls == ["cosmoflow"]


def test_a_run_loads_the_workload_spec_once(monkeypatch, tmp_path):
    """Generating the tiny dataset on first use, then running on it: one load each time (the dataset's
    workload was a fourth load, through data.verify.workload_of)."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    calls = _count_spec_loads(monkeypatch)
    for k in range(2):
        calls.clear()
        cfg = RunConfig(workload="cosmoflow", epochs=1, compute_time_s=1e-4, out=str(tmp_path / f"out{k}"))
        out = driver.run(cfg, SerialComm())
        assert out["run"]["status"] == "ok"
        assert calls == ["cosmoflow"], k


def test_the_planner_gets_a_frozen_plan_context(monkeypatch):
    from dlbench.strategies import PlanContext

    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)
    seen = []
    cls = type(strategies.get("naive"))
    real = cls.plan
    monkeypatch.setattr(cls, "plan", lambda self, ctx, o: seen.append(ctx) or real(self, ctx, o))
    loop = Loop(RunConfig(workload="cosmoflow", epochs=2, batch_size=4), SerialComm(), wl, mem, None,
                       reader_factory=lambda: mem)
    (ctx,) = seen
    assert type(ctx) is PlanContext
    for executor_only in ("comm", "timeline", "reader_factory", "manifest", "data_dir", "clock", "io_counters"):
        assert not hasattr(ctx, executor_only)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.seed = 1
    assert ctx == dataclasses.replace(ctx)   # every field a value (no hidden state)
    assert isinstance(loop.ctx, RunContext) and loop.ctx.comm is not None


def test_run_and_simulate_build_the_same_plan_context():
    """The simulator's context has exactly PlanContext's fields, with the values a run's rank gives (the
    workload is one typed record, ``PlanWorkload``, in both: the run's from its Workload, with its files' facts)."""
    from dlbench.strategies import PlanContext, PlanWorkload

    wl = wl_mod.load("cosmoflow", scale="tiny")
    mem = MemoryReader(wl, seed=0)
    cfg = RunConfig(workload="cosmoflow", epochs=2, batch_size=4, seed=3, system="local")
    run_ctx = Loop(cfg, SerialComm(), wl, mem, None, reader_factory=lambda: mem).ctx.plan_context()
    sim = sim_context(wl=from_workload(wl, local_batch=4), nodes=1, ranks_per_node=1, epochs=2, seed=3,
                      profile=load_profile("local"), sizes=mem.sample_nbytes().astype(np.float64))
    assert type(sim) is PlanContext
    for f in dataclasses.fields(PlanContext):
        a, b = getattr(run_ctx, f.name), getattr(sim, f.name)
        if f.name == "workload":
            assert type(a) is PlanWorkload and type(b) is PlanWorkload
            assert (a.name, a.layout) == (b.name, b.layout) == (wl.name, wl.layout)
            assert a.samples_per_file == wl.samples_per_file and b.samples_per_file is None   # the simulator: no files
        elif isinstance(a, np.ndarray):
            assert np.array_equal(a, b), f.name
        elif f.name == "system":
            assert a.name == b.name
        else:
            assert a == b, f.name
    assert set(f.name for f in dataclasses.fields(PlanContext)) <= set(f.name for f in dataclasses.fields(RunContext))


def test_prefetch_reports_its_live_workers_io(tmp_path):
    """The per-epoch accounting asks the executor (``unreaped_io``) instead of reading prefetch's worker pids:
    a live child's /proc/<pid>/io counts, a process that is not our child does not."""
    from dlbench.strategies.base import Executor
    from dlbench.strategies.prefetch import DataLoaderExecutor

    if not os.path.exists("/proc/self/io"):
        pytest.skip("needs /proc/<pid>/io")
    f = tmp_path / "blob"
    f.write_bytes(b"x" * (1 << 20))
    child = subprocess.Popen([sys.executable, "-c", f"open({str(f)!r}, 'rb').read(); print(1, flush=True); "
                              f"import sys; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"1"      # the child has read the file and waits
        fake = SimpleNamespace(worker_io={child.pid: (0, 0, 0), 1: (0, 0, 0)})   # pid 1: not our child
        rc, _rb = DataLoaderExecutor.unreaped_io(fake)
        assert rc >= 1 << 20
    finally:
        child.stdin.close()
        child.wait()
    assert DataLoaderExecutor.unreaped_io(fake) == (0, 0)    # reaped: already in our own counters
    assert Executor().unreaped_io() == (0, 0) and Executor().extra_timelines() == []


def test_the_architecture_glossary_is_the_codes():
    """docs/architecture.md lists every entry of metrics.GLOSSARY (what `dlbench report --explain` prints),
    with its meaning, and no other."""
    from dlbench.metrics import GLOSSARY

    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_0-9]+)` \| [^|]+ \| (.+) \|$", section, flags=re.M)
    assert [k for k, _ in rows] == list(GLOSSARY)
    assert dict(rows) == GLOSSARY        # the meanings word for word


def test_docstrings_cite_only_documents_in_the_repository():
    cited = set()
    for p in (ROOT / "dlbench").rglob("*.py"):
        cited |= set(re.findall(r"\b((?:docs/)?[A-Za-z_][\w/-]*\.md)\b", p.read_text()))
    missing = sorted(c for c in cited if not (ROOT / c).is_file())
    assert not missing, missing
