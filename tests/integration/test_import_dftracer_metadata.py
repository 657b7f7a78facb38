"""`dlbench import dftracer` of a trace recorded without DFTRACER_INC_METADATA=1 (issue 26): dftracer then writes
every call but no file names, return values or offsets; the import used to report 0.0 MB with exit 0 and count
calls without a return value as failed. Now a warning line and ``summary.import_warning`` say so."""
import json
from pathlib import Path

from dlbench import importers_dftracer as D

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dftracer"
HEAD = [
    {"name": "HH", "cat": "dftracer", "pid": 100, "tid": 100, "ph": 4, "args": {"hhash": "h1", "name": "n1",
                                                                               "value": "h1"}},
    {"id": 1, "name": "start", "cat": "dftracer", "pid": 100, "tid": 100, "ts": 1000, "dur": 0, "ph": 1,
     "args": {"hhash": "h1", "ppid": 1}},
]


def _trace(tmp_path, events, name="app-nometa-preload.pfw"):
    p = tmp_path / name
    p.write_text("[\n" + "\n".join(json.dumps(e) for e in HEAD + events) + "\n]\n")
    return p


def _call(i, name, args):
    return {"id": i, "name": name, "cat": "POSIX", "pid": 100, "tid": 100, "ts": 1000 + 10 * i, "dur": 5, "ph": 1,
            "args": {"hhash": "h1", **args}}


def test_trace_without_metadata_says_it_has_no_bytes(tmp_path, cli):
    # what dftracer writes without DFTRACER_INC_METADATA: the calls, no fhash/fname, ret or offset
    p = _trace(tmp_path, [_call(i, n, {}) for i, n in enumerate(["open64", "pread64", "read", "close"], 2)])
    doc, _iv = D.dftracer_run([p], mounts=[])
    s = doc["summary"]
    assert s["read_bytes"] == 0
    assert s["import_warning"].startswith("no byte counts: 2 read/write call(s) carry no byte count")
    assert "DFTRACER_INC_METADATA=1" in s["import_warning"] and s["import_notes"][0] == s["import_warning"]
    r = cli(["import", "dftracer", str(p), "--out", str(tmp_path / "res")])
    assert r.exit_code == 0, r.output
    assert f"dlbench: warning: {s['import_warning']}" in r.output
    assert f"note: {s['import_warning']}" in r.output       # the summary printed (and `report`)


def test_calls_without_a_return_value_are_not_failures(tmp_path):
    fh = {"name": "FH", "cat": "dftracer", "pid": 100, "tid": 100, "ph": 4,
          "args": {"hhash": "h1", "name": "/data/a.bin", "value": "f1"}}
    ev = [fh, _call(2, "open64", {"fhash": "f1"}), _call(3, "pread64", {"fhash": "f1", "ret": 4096, "offset": 0}),
          _call(4, "pread64", {"fhash": "f1"}), _call(5, "read", {"fhash": "f1", "ret": -1})]
    doc, _iv = D.dftracer_run([_trace(tmp_path, ev)], mounts=[])
    s, imp = doc["summary"], doc["imported"]
    assert s["read_bytes"] == 4096
    assert imp["failed_calls"] == {"read": 1} and imp["calls_without_ret"] == {"pread64": 1}
    assert s["import_warning"].startswith("incomplete byte counts: 1 read/write call(s)")


def test_a_trace_with_metadata_has_no_warning():
    doc, _iv = D.dftracer_run([FIX / "app-0123456789abcdef-preload.pfw"], mounts=[])
    assert doc["summary"]["import_warning"] is None
