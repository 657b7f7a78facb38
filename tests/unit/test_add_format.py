"""Adding a format is its module + one registration (issue 16): ``rawformat/fmt_raw.py`` (next to this file)
defines layout "raw" (a file per sample, the row's bytes as they are, read by pread) with only the operations
docs/formats.md lists as required (its ``RawFormat(FormatDriver)`` class), registered here with one ``register(Format(...))`` whose ``module`` is a
dotted path outside dlbench.data. A workload YAML written by the test uses it: ``dlbench generate``, ``verify``
(``--checksum``, ``--content``), ``run --verify`` (naive, clairvoyant, staging) and ``simulate`` of the same configuration count the same
bytes and requests. Nothing else in dlbench knows the name."""

import json

import pytest

import dlbench.cli  # noqa: F401  (imported before the format is registered, as a plug-in registered at start-up)
import dlbench.workload  # noqa: F401  (so is the workload schema: its layout check must see the later format)

WORKLOAD = """\
name: rawtest
description: a test workload in the test's own format
layout: raw
arrays:
  - {name: data, shape: [3, 16, 16], dtype: float32, role: data}
  - {name: label, shape: [1], dtype: int32, role: label}
samples: 24
batch_size: 4
compute: {}
"""


@pytest.fixture(autouse=True, scope="module")
def raw():
    """The registration line; taken out afterwards so the suite's other tests see the built-ins only."""
    from dlbench.data.registry import FORMATS, Format, register

    fmt = register(Format("raw", decodes=False, samples_per_file="one", reads_by_offset=True,
                          reader="rawformat.fmt_raw:RawReader", module="rawformat.fmt_raw",
                          help="one file per sample, the row's bytes as they are"))
    yield fmt
    FORMATS.pop("raw")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    p = tmp_path_factory.mktemp("rawwl") / "rawtest.yaml"
    p.write_text(WORKLOAD)
    return p


@pytest.fixture(scope="module")
def data(spec, tmp_path_factory):
    from click.testing import CliRunner

    from dlbench.cli import main

    d = tmp_path_factory.mktemp("rawdata") / "raw"
    r = CliRunner().invoke(main, ["generate", "--workload", str(spec), "--data-dir", str(d), "--no-progress"])
    assert r.exit_code == 0, r.output
    return d


def test_the_module_is_the_registered_one(raw):
    from rawformat import fmt_raw

    from dlbench.data.registry import get_format, names

    assert "raw" in names() and type(get_format("raw").driver()) is fmt_raw.RawFormat
    assert raw.reader_class() is fmt_raw.RawReader


def test_generate_writes_the_rows_and_verify_checks_them(cli, spec, data):
    from dlbench import workload as wl
    from dlbench.data.content import expected_row

    w = wl.load(str(spec))
    files = sorted(data.glob("sample-*.raw"))
    assert len(files) == 24
    assert files[5].read_bytes() == expected_row(w, 0, 5).tobytes()
    for extra in ([], ["--checksum"], ["--content"]):
        r = cli(["verify", "--data-dir", data, *extra])
        assert r.exit_code == 0, r.output


def test_verify_content_finds_a_changed_byte(cli, spec, data, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    f = bad / "sample-00000007.raw"
    b = bytearray(f.read_bytes())
    b[100] ^= 0xFF
    f.write_bytes(b)
    r = cli(["verify", "--data-dir", bad, "--content"])
    assert r.exit_code != 0 and "7" in r.output, r.output


@pytest.mark.parametrize("strategy", ["naive", "clairvoyant", "staging"])
def test_run_verify_and_simulate_count_the_same(cli, spec, data, tmp_path, monkeypatch, strategy):
    from dlbench import workload as wl
    from dlbench.simulate import load_profile, simulate
    from dlbench.simulate.core import from_workload

    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    out = tmp_path / "res"
    r = cli(["run", "--workload", spec, "--data-dir", data, "-s", strategy, "-e", "2", "--compute-time", "0.001",
             "--system", "laptop-pfs", "--verify", "--no-progress", "-o", out])
    assert r.exit_code == 0, r.output
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, ms = run["config"], run["summary"]
    assert cfg["workload_spec"]["layout"] == "raw"
    assert ms["verified_samples"] == 2 * 24
    w = wl.load(str(spec))
    sw = from_workload(w, local_batch=int(cfg["local_batch"]), step_time_s=float(cfg["compute_step_time_s"]))
    ss = simulate([("x", strategy, dict(cfg["options"]))], wl=sw, profile=load_profile("laptop-pfs"), nodes=1,
                  ranks_per_node=1, epochs=int(cfg["epochs"]), seed=int(cfg["seed"]))["x"]
    nbytes = 3 * 16 * 16 * 4 + 4
    assert ms["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert ms["read_bytes"] == ss["read_bytes"]
    assert ms["shared_read_requests"] == ss["shared_read_requests"]
    assert ms["samples"] == ss["samples"]
    total = 2 * 24 * nbytes
    assert ms["read_bytes"] == total   # every delivered sample, whichever tier served it
    want = {"naive": ({"shared": total}, 48),   # each sample from the shared tier every epoch
            "clairvoyant": ({"shared": total // 2, "memory": total // 2}, 24),   # once, then from memory
            "staging": ({"local": total}, 0)}[strategy]   # copied in before epoch 0 (the prologue)
    assert {k: v for k, v in ms["bytes_by_tier"].items() if v} == want[0]
    assert ms["shared_read_requests"] == want[1]


def test_simulate_cli_costs_the_new_format(cli, spec, tmp_path):
    r = cli(["simulate", "--system", "laptop-pfs", "--workload", spec, "--nodes", "2",
             "--strategies", "naive,clairvoyant", "--compute-time", "0.001", "--out", tmp_path / "sim", "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert any(ln.split(",")[1] == "clairvoyant" for ln in r.output.splitlines()[1:] if ln.count(",") > 2)
