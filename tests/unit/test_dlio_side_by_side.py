"""benchmarks/dlio_side_by_side.py, its pure parts, on a recorded DLIO 2.0.0 run (tests/fixtures/dlio_side_by_side:
tiny_hdf5.yaml, 8 HDF5 files of 4 records of 4,096 B, batch 4, 2 epochs, traced by DLIO's own pydftracer; the
output folder's summary.json, per_epoch_stats.json, 0_output.json, the trace's opens and preads of the dataset
and the files' HDF5 data regions). DLIO itself is not needed (CI has no DLIO venv)."""

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "dlio_side_by_side"


@pytest.fixture(scope="module")
def S():
    spec = importlib.util.spec_from_file_location("dlio_side_by_side", ROOT / "benchmarks" / "dlio_side_by_side.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dlio_side_by_side"] = mod
    spec.loader.exec_module(mod)
    return mod


def _dlio(S):
    return S.parse_dlio_output(json.loads((FIX / "summary.json").read_text()),
                               json.loads((FIX / "per_epoch_stats.json").read_text()),
                               json.loads((FIX / "0_output.json").read_text()), batch=4)


def _dlio_io(S, doc):
    regions = {k: [tuple(r) for r in v] for k, v in json.loads((FIX / "regions.json").read_text()).items()}
    with gzip.open(FIX / "dlio-trace.pfw.gz", "rt") as f:
        calls = S.trace_calls(f, "/DLIO/train")
    return S.per_epoch_io(calls, doc["windows"], regions.get)


def test_parse_dlio_output(S):
    d = _dlio(S)
    assert (d["epochs"], d["steps_per_epoch"], d["samples_per_epoch"]) == (2, [8, 8], [32, 32])
    assert d["samples_per_s"] == pytest.approx([38.0948, 307.1906], rel=1e-5)
    # DLIO's MB/s is its mean samples/s times record_length (4,096 B): nominal
    assert d["nominal_MB_per_s"] == pytest.approx((38.09483111204333 + 307.19062528609356) / 2 * 4096 / 2**20)
    (a0, a1), (b0, b1) = d["windows"]
    assert a0 < a1 < b0 < b1 and a1 - a0 == pytest.approx(0.855807, abs=1e-6)   # 14:14:15.307131 .. 16.162938


def test_dlio_trace_per_epoch(S):
    io = _dlio_io(S, _dlio(S))
    for b in io["epochs"]:
        # every sample read: 32 x 4,096 B of the dataset, all 8 files; DLIO opens the file per sample
        assert (b["files"], b["distinct_data_bytes"], b["opens"]) == (8, 32 * 4096, 32)
        # libhdf5's sieve buffer reads from the record to the dataset's end: 16 + 12 + 8 + 4 KiB per file
        assert b["data_bytes"] == 8 * (16 + 12 + 8 + 4) * 1024
        assert b["metadata_bytes"] > 0 and b["bytes"] == b["data_bytes"] + b["metadata_bytes"]
        assert len(b["order"]) == 32 and len(set(b["order"])) == 32
    assert io["outside"]["reads"] == 0 and io["outside"]["opens"] == 0
    assert S.in_file_order(io["epochs"]) == [False, False]     # sample_shuffle: seed shuffles
    assert S.order_repeats(io["epochs"]) == [False]             # ... a new order in epoch 2


def test_trace_calls_dftracer2_hashes_and_positions(S):
    """dftracer 2.x (dlbench's preload): paths by FH hash, read/readv offsets from opens, lseeks and reads."""
    ev = [{"name": "CM", "cat": "dftracer", "args": {"name": "time_metric", "value": "US"}},
          {"name": "FH", "cat": "dftracer", "args": {"name": "/d/x/a.h5", "value": "h1"}},
          {"name": "FH", "cat": "dftracer", "args": {"name": "/elsewhere/b", "value": "h2"}},
          {"name": "open64", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_000, "args": {"fhash": "h1", "ret": 3}},
          {"name": "read", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_001, "args": {"fhash": "h1", "ret": 100}},
          {"name": "lseek64", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_002, "args": {"fhash": "h1",
                                                                                         "ret": 4096}},
          {"name": "readv", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_003, "args": {"fhash": "h1", "ret": 50}},
          {"name": "read", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_004, "args": {"fhash": "h1", "ret": -1}},
          {"name": "read", "cat": "POSIX", "pid": 5, "tid": 5, "ts": 1_000_005, "args": {"fhash": "h2", "ret": 9}}]
    lines = ["[", *(json.dumps(e) + "," for e in ev), "not json", "]"]
    calls = S.trace_calls(lines, "/d")
    assert [(c[3], c[5], c[6]) for c in calls] == [("open", 0, 0), ("read", 0, 100), ("read", 4096, 50)]
    assert calls[0][0] == pytest.approx(1.0)
    io = S.per_epoch_io(calls, [(0.5, 1.5)], lambda p: [(4096, 4096)])
    b = io["epochs"][0]
    assert (b["files"], b["opens"], b["reads"], b["data_bytes"], b["metadata_bytes"]) == (1, 1, 2, 50, 100)
    assert b["split"] and b["distinct_data_bytes"] == 50
    b = S.per_epoch_io(calls, [(0.5, 1.5)], lambda p: None)["epochs"][0]   # not HDF5: every read is data
    assert (b["split"], b["data_bytes"], b["distinct_data_bytes"], b["metadata_bytes"]) == (False, 150, 150, 0)


def test_union_length(S):
    assert S.union_length([(0, 10), (5, 15), (20, 30), (30, 31), (21, 22)]) == 26
    assert S.union_length([]) == 0


def test_parse_dlbench_run(S):
    run = {"summary": {"samples_per_epoch": [32, 32], "epoch_time_max_s": [0.5, 0.25],
                       "read_bytes_per_epoch": [131072, 131072], "au_per_epoch": [0.5, 0.6], "epoch_ids": [0, 1]}}
    rows = [["0", "0", " plan", "x", "10.0", "10.1", "0.1", "1", "0"], ["0", "0", " read", "x", "10.2", "10.4"],
            ["1", "0", " stall", "x", "11.0", "11.3"], ["bad"]]
    d = S.parse_dlbench_run(run, rows)
    assert d["samples_per_s"] == [64.0, 128.0] and d["windows"] == [(10.0, 10.4), (11.0, 11.3)]
    assert d["au_percent"] == pytest.approx([50.0, 60.0])


def _spec(**kw):
    return {"samples": 32, "batch": 4, "epochs": 2, "record_length": 4096.0, "samples_per_file": 4,
            "dlio_files_on_disk": 8, "dlbench_files_on_disk": 8, "sample_shuffle": "seed", "unsupported": [], **kw}


def _dlb_like(S, dlio_doc, dlio_io, *, samples=32, data=32 * 4096):
    dlb = {"epochs": 2, "samples_per_epoch": [samples, samples], "samples_per_s": [100.0, 110.0],
           "read_bytes_per_epoch": [data, data]}
    io = {"epochs": [{**b, "data_bytes": data, "distinct_data_bytes": data, "metadata_bytes": 1000, "opens": 8,
                      "reads": 40,
                      "order": list(reversed(b["order"]))} for b in dlio_io["epochs"]], "outside": dlio_io["outside"]}
    return dlb, io


def test_compare_same_counts(S):
    d = _dlio(S)
    io = _dlio_io(S, d)
    dlb, dio = _dlb_like(S, d, io)
    c = S.compare(_spec(), d, io, dlb, dio, [d], [dlb])
    v = {r[0]: r[3] for r in c["rows"]}
    assert c["mismatches"] == []
    for e in (0, 1):
        assert v[f"epoch {e}: samples"] == v[f"epoch {e}: files read"] == "same"
        assert v[f"epoch {e}: dataset bytes read (distinct)"] == "same"
    assert v["files in the dataset"] == "same"
    assert any("train_io_mean_MB_per_second" in n and "not bytes read" in n for n in c["notes"])
    assert "epoch 0: samples/s (median of 1)" in v
    text = S.render("tiny", c)
    assert text.startswith("== tiny") and "MISMATCH" not in text


def test_compare_flags_an_unexplained_difference(S):
    d = _dlio(S)
    io = _dlio_io(S, d)
    dlb, dio = _dlb_like(S, d, io, data=32 * 4096 + 1)
    c = S.compare(_spec(), d, io, dlb, dio, [d], [dlb])
    assert [m.split(":")[0] for m in c["mismatches"]][:1] == ["epoch 0"]
    assert "dlbench's own read_bytes_per_epoch" not in " ".join(c["mismatches"])   # own == traced here
    assert "MISMATCH: epoch 0: dataset bytes read" in S.render("tiny", c)


def test_compare_known_dlio_behaviours(S):
    """A record_length that is not a square and N % batch != 0: differences named, not mismatches."""
    d = _dlio(S)
    io = _dlio_io(S, d)
    dlb, dio = _dlb_like(S, d, io, samples=34, data=34 * 4096)
    c = S.compare(_spec(samples=34, record_length=4100.0), d, io, dlb, dio, [d], [dlb])
    v = {r[0]: r[3] for r in c["rows"]}
    assert c["mismatches"] == []
    assert v["epoch 0: samples"].startswith("differs (known: DLIO's PyTorch loader drops the last partial batch")
    assert any("sieve buffer" in n for n in c["notes"])
    assert "64x64=4,096 B records, not 4,100" in v["epoch 0: dataset bytes read (distinct)"]
    assert any("34 samples in batches of 4: DLIO reads 32" in n for n in c["notes"])


def test_compare_notes_dlio_unshuffled_reads(S):
    d = _dlio(S)
    io = _dlio_io(S, d)
    for b in io["epochs"]:
        b["order"] = sorted(b["order"])
    dlb, dio = _dlb_like(S, d, io)   # dlbench's order: the reverse
    c = S.compare(_spec(sample_shuffle="off"), d, io, dlb, dio, [d], [dlb])
    rows = {r[0]: r for r in c["rows"]}
    assert rows["epochs read in file order (unshuffled)"][1:3] == ("yes, yes", "no, no")
    assert any("read every epoch in file order: it does not shuffle" in n for n in c["notes"])


def test_missing_venv_is_one_line(S, tmp_path, capsys):
    assert S.main(["--dlio-venv", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no DLIO 2.0.0 there" in err[0] and "pip install --no-deps dlio-benchmark==2.0.0" in err[0]


def test_overrides_must_name_the_workload(S, capsys):
    assert S.main(["--dlio-venv", "/nonexistent", "++hydra.run.dir=x"]) == 2
    assert "expected ++workload.KEY=VALUE" in capsys.readouterr().err


def test_compare_non_hdf5_reads_all_bytes_as_data(S):
    """npz/npy/tfrecord (no data regions): distinct bytes of the files compared; dlbench's own byte counter (the
    samples' bytes) is not held against the trace's whole-file reads."""
    d = _dlio(S)
    io = _dlio_io(S, d)
    for b in io["epochs"]:
        b["split"] = False
    dlb, dio = _dlb_like(S, d, io)
    for b in dio["epochs"]:
        b["split"] = False
    dlb["read_bytes_per_epoch"] = [1, 1]
    c = S.compare(_spec(), d, io, dlb, dio, [d], [dlb])
    assert c["mismatches"] == []
    rows = {r[0]: r for r in c["rows"]}
    assert "epoch 0: bytes read (all calls)" in rows
    assert any("some bytes more than once" in n for n in c["notes"])


# DLIO 2.0.0's dataset formats (common/enumerations.py FormatType)
DLIO_FORMATS = ("tfrecord", "hdf5", "csv", "npz", "npy", "hdf5_opt", "jpeg", "png", "indexed_binary",
                "mmap_indexed_binary", "synthetic")


def test_a_format_dlbench_lacks_is_skipped_before_anything_runs(S, tmp_path):
    from dlbench import dlio as D
    from dlbench import workload as W

    lacking = [f for f in DLIO_FORMATS if f != "hdf5" and D.LAYOUT_OF.get(f, f) not in W.LAYOUTS]
    assert "csv" in lacking and "npz" not in lacking      # npz was the example until the format registry read it
    cfg = ROOT / "benchmarks" / "dlio_configs" / "npz_small.yaml"
    for fmt in lacking:
        with pytest.raises(S.NotYet, match=f"format {fmt} .* is not readable by this dlbench yet"):
            S.side_by_side(cfg, [f"++workload.dataset.format={fmt}"], tmp_path / "no-venv", tmp_path / "work", 1)
    assert not (tmp_path / "work").exists()
    with pytest.raises(S.Refused, match="dataset.record_length must be set"):
        S.side_by_side(ROOT / "tests" / "fixtures" / "dlio" / "unet3d_h100.yaml", [], tmp_path, tmp_path / "w", 1)
