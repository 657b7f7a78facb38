"""`dlbench import dftracer`: a dftracer trace (hand-written fixture: tests/fixtures/dftracer/) becomes a results
folder with Darshan-style counters per class and per rank, read intervals, and every bad line counted with its
line number (or refused with --strict); bad inputs leave nothing behind."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from dlbench import importers_dftracer as D

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dftracer"
APP = FIX / "app-0123456789abcdef-preload.pfw"
OLD = FIX / "old-format.pfw"
TIERS = {"/data/ds": "shared", "/scratch/loc": "local"}


def _results_line(output: str) -> Path:
    return Path([ln for ln in output.splitlines() if ln.startswith("results: ")][-1].split("results: ", 1)[1])


def test_fixture_counters_exact():
    doc, iv = D.dftracer_run([APP], tiers=TIERS, mounts=[])
    s, imp = doc["summary"], doc["imported"]
    ioc = s["io_counters"]
    sh, lo = ioc["by_class"]["shared"], ioc["by_class"]["local"]
    # rank 0: pid 100 (pread 4096 @0, lseek 8192 + read 100, readv 50, a failed read) and its worker pid 101
    # (pread 200 @100); rank 1: pid 200 (pread 1000 @0, on a second thread)
    assert (sh["POSIX_OPENS"], sh["POSIX_READS"], sh["POSIX_BYTES_READ"]) == (3, 5, 4096 + 100 + 50 + 200 + 1000)
    assert (sh["POSIX_SIZE_READ_0_100"], sh["POSIX_SIZE_READ_100_1K"], sh["POSIX_SIZE_READ_1K_10K"]) == (2, 2, 1)
    assert (sh["POSIX_SEQ_READS"], sh["POSIX_CONSEC_READS"]) == (3, 1)  # 8192 and 8292 (right after) in a.bin, 100
    assert sh["POSIX_MAX_BYTE_READ"] == 8192 + 100 + 50 - 1
    assert sh["POSIX_F_READ_TIME"] == pytest.approx((10 + 2 + 1 + 3 + 7) * 1e-6)
    assert sh["POSIX_F_MAX_READ_TIME"] == pytest.approx(10e-6)
    assert (lo["POSIX_OPENS"], lo["POSIX_READS"], lo["POSIX_BYTES_READ"]) == (1, 1, 4096)
    assert (lo["POSIX_WRITES"], lo["POSIX_BYTES_WRITTEN"]) == (1, 4096)
    assert [(r["POSIX_OPENS"], r["POSIX_READS"], r["POSIX_BYTES_READ"]) for r in ioc["by_rank"]] == \
        [(3, 5, 4096 + 100 + 50 + 4096 + 200), (1, 1, 1000)]
    assert ioc["by_rank_class"][1] == {"shared": ioc["by_rank"][1]}
    assert s["ranks"] == 2 and s["workload"] == "app" and s["strategy"] == "imported-dftracer"
    assert s["read_bytes"] == 5446 + 4096 and s["bytes_by_tier"] == {"shared": 5446, "local": 4096}
    assert s["total_time_s"] == pytest.approx((1521 - 1000) * 1e-6)
    assert [(p["pid"], p["rank"]) for p in imp["processes"]] == [(100, 0), (101, 0), (200, 1)]
    assert imp["failed_calls"] == {"read": 1}
    assert imp["other_calls"]["dlio_benchmark:TorchFramework.compute"] == 1
    # the cut line (16) and the non-object (17), with their line numbers, and said in the notes
    assert imp["bad_line_count"] == 2 and [b[1] for b in imp["bad_lines"]] == [16, 17]
    assert any("2 bad line(s) skipped" in n and "line 16" in n for n in s["import_notes"])
    # FH of b.bin comes after its calls: still attributed
    assert imp["files"]["/data/ds/b.bin"]["reads"] == 2
    # read intervals, per rank, in ns
    assert [len(a["start_ns"]) for a in iv] == [5, 1]
    assert iv[1]["start_ns"].tolist() == [1510_000] and iv[1]["end_ns"].tolist() == [1517_000]
    assert int(np.sum(iv[0]["nbytes"])) == 4096 + 100 + 50 + 4096 + 200
    assert s["phase_time_s"]["read"] == pytest.approx(((10 + 2 + 1 + 20 + 3) + 7) / 2 * 1e-6)
    # read-call latency percentiles per tier and rank, as a measured run has them (was missing from imports)
    lat = s["read_latency"]
    assert (lat["all"]["shared"]["count"], lat["all"]["local"]["count"]) == (5, 1)
    assert lat["all"]["shared"]["max_s"] == pytest.approx(10e-6) and lat["all"]["local"]["p50_s"] == pytest.approx(20e-6)
    r1 = lat["per_rank"][1]["tiers"]["shared"]
    assert r1["count"] == 1 and r1["p50_s"] == pytest.approx(7e-6) and r1["p99_s"] == pytest.approx(7e-6)
    assert lat["per_rank"][0]["tiers"]["shared"]["p50_s"] == pytest.approx(2.5e-6)  # 1, 2, 3, 10 us


def test_old_format_and_folder_of_traces(tmp_path):
    doc, _ = D.dftracer_run([OLD], tiers=TIERS, mounts=[])
    sh = doc["summary"]["io_counters"]["by_class"]["shared"]
    # "[" ... "]" with trailing commas, args.fname instead of fhash; read offsets follow the file position
    assert (sh["POSIX_OPENS"], sh["POSIX_READS"], sh["POSIX_BYTES_READ"], sh["POSIX_CONSEC_READS"]) == (1, 2, 1024, 1)
    assert doc["imported"]["bad_line_count"] == 0
    d = tmp_path / "traces"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / APP.name).write_bytes(APP.read_bytes())
    with gzip.open(d / "old.pfw.gz", "wb") as f:
        f.write(OLD.read_bytes())
    (d / "notes.txt").write_text("not a trace")
    doc, _ = D.dftracer_run([d], tiers=TIERS, mounts=[])
    assert doc["summary"]["ranks"] == 3 and len(doc["imported"]["trace_files"]) == 2


def test_truncated_gz_counted_or_refused(tmp_path):
    rng = np.random.default_rng(0)
    ev = [{"name": "pread64", "cat": "POSIX", "pid": 7, "tid": 7, "ts": int(t), "dur": 3,
           "args": {"fname": "/data/ds/x", "ret": int(r), "offset": int(t) * 17}}
          for t, r in zip(np.cumsum(rng.integers(1, 999, 2000)), rng.integers(1, 1 << 20, 2000))]
    raw = gzip.compress("".join(json.dumps(e) + "\n" for e in ev).encode())
    p = tmp_path / "cut.pfw.gz"
    p.write_bytes(raw[: len(raw) // 2])  # a process killed mid-write
    doc, _ = D.dftracer_run([p], tiers=TIERS, mounts=[])
    bad = doc["imported"]["bad_lines"]
    reads = doc["summary"]["io_counters"]["by_class"]["shared"]["POSIX_READS"]
    # the complete lines before the cut are kept; the cut line and the cut itself are reported
    assert 500 < reads < 2000 and any("cut short" in b[2] for b in bad)
    assert bad[-1][1] == reads + 2 and "not JSON" in bad[0][2] and bad[0][1] == reads + 1
    with pytest.raises(D.DataError, match=r"cut.pfw.gz: line \d+: "):
        D.dftracer_run([p], tiers=TIERS, strict=True, mounts=[])


def test_mount_classes_and_tier_args():
    cl = D.Classifier({"/data/ds": "shared"}, mounts=[("/", "ext4"), ("/data", "lustre")])
    assert cl("/data/ds/a.bin") == "shared" and cl("/data/other/x") == "/data (lustre)"
    assert cl("/tmp/x") == "/ (ext4)" and cl("/data") == "/data (lustre)" and cl("/dataset/x") == "/ (ext4)"
    assert D.parse_tier_args(["/a=shared", "/b/c=local"]) == {"/a": "shared", "/b/c": "local"}
    with pytest.raises(D.ConfigError, match="--tier 'oops': expected PREFIX=NAME"):
        D.parse_tier_args(["oops"])


def test_split_data_metadata():
    regions = [(2048, 4096), (8192, 64)]
    reads = [(0, 8, 1), (96, 512, 1), (2048, 4096, 1), (3000, 100, 2), (8192, 4, 1), (8250, 12288, 1)]
    assert D.split_data_metadata(reads, regions) == {"data_reads": 3, "data_bytes": 4200, "metadata_reads": 3,
                                                     "metadata_bytes": 8 + 512 + 12288}


def test_hdf5_metadata_split_of_a_real_file(tmp_path):
    h5py = pytest.importorskip("h5py")
    f = tmp_path / "ds" / "x.h5"
    f.parent.mkdir()
    with h5py.File(f, "w") as h:
        h.create_dataset("a", data=np.arange(1024, dtype=np.float32))
    (off, n), = D.data_regions(f)
    trace = tmp_path / "t.pfw"
    ev = [{"name": "FH", "cat": "dftracer", "ph": 4, "pid": 1, "args": {"name": str(f), "value": "fx"}}]
    ev += [{"name": "pread64", "cat": "POSIX", "pid": 1, "tid": 1, "ts": 10 + k, "dur": 1,
            "args": {"fhash": "fx", "ret": r, "offset": o}} for k, (o, r) in enumerate([(0, 8), (48, 96), (off, n)])]
    trace.write_text("\n".join(json.dumps(e) for e in ev) + "\n")
    doc, _ = D.dftracer_run([trace], tiers={str(tmp_path / "ds"): "shared"}, mounts=[])
    h = doc["summary"]["hdf5_metadata"]
    assert (h["data_reads"], h["data_bytes"], h["metadata_reads"], h["metadata_bytes"]) == (1, n, 2, 104)
    assert h["by_class"]["shared"]["metadata_reads"] == 2 and h["files_split"] == 1
    from dlbench.report import render_io_counters

    assert "hdf5 metadata (libhdf5's own reads, not data, included above): 2 reads, 0.000 MiB; data: 1 reads" in \
        render_io_counters(doc["summary"]["io_counters"])


def test_cli_import_report_compare_plot(tmp_path, cli):
    out = tmp_path / "res"
    r = cli(["import", "dftracer", APP, "--tier", "/data/ds=shared", "--tier", "/scratch/loc=local", "--out", out])
    assert r.exit_code == 0, r.output
    rd = _results_line(r.output)
    assert rd.parent == out / "app" / "imported-dftracer"
    assert "IMPORTED from dftracer" in r.output and "2 bad line(s) skipped" in r.output
    doc = json.loads((rd / "run.json").read_text())
    assert doc["imported"]["kind"] == "dftracer" and doc["config"]["tiers"] == TIERS
    assert {"intervals.npz", "trace.json", "timelogger.csv"} <= set(doc["files"])
    rep = cli(["report", rd])
    assert rep.exit_code == 0 and "read latency" in rep.output and "P95 (ms)" in rep.output
    c = cli(["compare", rd])
    assert c.exit_code == 0 and "imported-dftracer" in c.output
    pytest.importorskip("matplotlib")
    p = cli(["plot", rd, "-o", tmp_path / "figs", "--kind", "timeline"])
    assert p.exit_code == 0, p.output
    assert list((tmp_path / "figs").glob("timeline-*.png"))


def test_cli_bad_inputs_leave_nothing(tmp_path, cli):
    out = tmp_path / "res"
    r = cli(["import", "dftracer", APP, "--strict", "--out", out])
    assert r.exit_code == 3 and "line 16: not JSON" in r.output and "--strict" in r.output
    r = cli(["import", "dftracer", tmp_path / "missing.pfw", "--out", out])
    assert r.exit_code == 3 and "no such file or folder" in r.output
    (tmp_path / "empty").mkdir()
    r = cli(["import", "dftracer", tmp_path / "empty", "--out", out])
    assert r.exit_code == 3 and "without dftracer traces" in r.output
    (tmp_path / "blank.pfw").write_text("\n")
    r = cli(["import", "dftracer", tmp_path / "blank.pfw", "--out", out])
    assert r.exit_code == 3 and "no dftracer events" in r.output
    r = cli(["import", "dftracer", APP, "--tier", "nope", "--out", out])
    assert r.exit_code == 2 and "PREFIX=NAME" in r.output
    assert not out.exists() or not any(out.rglob("run.json"))


def test_garbage_fields_are_skipped_not_raised(tmp_path):
    """Regression (found by mutating the fixture): infinite or huge numbers, a non-string name, args that are
    not an object, a process with a start event and no calls must not raise; the good call still counts."""
    lines = ['{"name":"pread64","cat":"POSIX","pid":5,"tid":5,"ts":1e999,"dur":1,"args":{"fname":"/d/x","ret":1e30}}',
             '{"name":["pread64"],"cat":"POSIX","pid":5,"ts":1}',
             '{"name":"read","cat":"POSIX","pid":5,"ts":2,"args":[1,2]}',
             '{"name":"start","cat":"dftracer","ph":1,"pid":6,"ts":3,"args":{"ppid":5}}',
             '{"name":"start","cat":"dftracer","ph":1,"pid":7,"args":{"ppid":null}}',
             '{"name":"pread64","cat":"POSIX","pid":5,"tid":5,"ts":10,"dur":2,"args":{"fname":"/d/x","ret":8,"offset":4}}']
    p = tmp_path / "g.pfw"
    p.write_text("\n".join(lines) + "\n")
    doc, _ = D.dftracer_run([p], tiers={"/d": "shared"}, mounts=[])
    sh = doc["summary"]["io_counters"]["by_class"]["shared"]
    assert (sh["POSIX_READS"], sh["POSIX_BYTES_READ"]) == (1, 8)
    assert doc["imported"]["failed_calls"] == {"pread64": 1}  # ret unusable: not a read
    assert [b[1] for b in doc["imported"]["bad_lines"]] == [2]
    assert doc["summary"]["ranks"] == 2  # pid 5 (with its child 6) and pid 7


def test_mount_classes_go_to_tiers_by_file_system_type():
    """Without --tier, bytes are filed by the mount's file-system type, as `import darshan` files them:
    a Lustre mount is the shared FS, ext4 a node-local disk (regression: classes became tiers of their own)."""
    doc, _ = D.dftracer_run([APP], mounts=[("/", "ext4"), ("/data", "lustre"), ("/scratch", "xfs")])
    s = doc["summary"]
    assert set(s["io_counters"]["by_class"]) == {"/data (lustre)", "/scratch (xfs)"}
    assert s["bytes_by_tier"] == {"shared": 4096 + 100 + 50 + 200 + 1000, "local": 4096}
    doc, _ = D.dftracer_run([APP], mounts=[("/", "weirdfs")])
    assert set(doc["summary"]["bytes_by_tier"]) == {"unclassified"}
