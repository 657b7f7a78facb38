"""dlbench.checkpoint.engine and `dlbench checkpoint` in one process: durable publish, restores, faults."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dlbench.checkpoint import content, engine
from dlbench.checkpoint.models import get_model
from dlbench.comm import SerialComm
from dlbench.errors import DataError

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--model", "llama3-8b", "--scale", "2e-5", "--dp", "1", "--checkpoints", "2", "--steps", "1",
        "--compute-time", "0.01"]


def _result(out: Path) -> dict:
    (f,) = out.glob("checkpoint/*/checkpoint.json")
    return json.loads(f.read_text())


@pytest.mark.parametrize("layout, mode", [("stream", "sync"), ("shards", "async"), ("dcp", "sync")])
def test_checkpoint_command_every_layout(cli, tmp_path, layout, mode):
    shape = ["--layers", "2"] if layout == "dcp" else []    # dcp costs per tensor: fewer layers
    r = cli(["checkpoint", *TINY, *shape, "--layout", layout, "--mode", mode, "--out", tmp_path, "--keep"])
    assert r.exit_code == 0, r.output
    res = _result(tmp_path)
    s = res["summary"]
    assert s["checkpoints"] == 2 and s["files_per_checkpoint"] == {"stream": 1, "shards": 2, "dcp": 2}[layout]
    m = get_model("llama3-8b", dp=1, scale=2e-5, **({"layers": 2} if shape else {}))
    assert s["bytes_per_checkpoint"] == engine.Saver(SerialComm(), m, 0, "stream", tmp_path).nbytes
    assert all(c["durable_s"] >= c["stall_s"] * (mode == "async") > -1 for c in res["per_checkpoint"])
    assert s["fsync_s"]["count"] >= 2 * s["files_per_checkpoint"]
    assert "MLPerf's mean of per-checkpoint rates" in r.output and "restore own" in r.output
    ck = Path(res["folder"]) / "ckpt"
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt_0000", "ckpt_0001"]   # published, nothing partial
    assert (ck / "ckpt_0001" / "manifest.json").exists()
    own = res["restore"]["own"]
    assert own["bytes"] == s["bytes_per_checkpoint"] and own["missing_bytes"] == 0
    if layout != "dcp":
        assert own["resident_before_bytes"] == 0          # cold: evicted, checked with mincore
        assert res["restore"]["reshard"]["bytes"] > 0
        assert res["restore"]["cross"]["bytes"] == own["bytes"]


def test_content_is_incompressible_and_differs_per_checkpoint():
    import zlib

    a, b = content.page_aligned(3 << 20), content.page_aligned(3 << 20)
    content.fill(a, 0, 0, 0)
    content.fill(b, 0, 0, 1)
    assert len(zlib.compress(a.tobytes(), 6)) > 0.99 * a.nbytes
    assert not np.array_equal(a, b) and a.any()
    pages = a[: (3 << 20) // 4096 * 4096].reshape(-1, 4096)
    assert len({p.tobytes() for p in pages}) == len(pages)        # no two pages alike


def _saved(tmp_path, layout="shards"):
    m = get_model("llama3-8b", dp=1, scale=2e-5)
    s = engine.Saver(SerialComm(), m, 0, layout, tmp_path)
    s.generate(0)
    clock = time.perf_counter_ns
    s.begin(0, clock)
    s.finish(clock)
    return m, s, tmp_path / "ckpt_0000"


def test_damaged_checkpoint_restore_names_the_file(tmp_path):
    m, s, folder = _saved(tmp_path)
    man = engine.load_manifest(folder)
    verify = {n: (v[0], v[1]) for n, v in man["files"].items()}
    place = engine.placement(m, [0], "shards", folder)
    rp = engine.read_plan(place, [t for f in s.files for t, _ in f.tensors])
    engine.execute(rp, cold=False, verify=verify)                  # intact: passes
    victim = folder / s.files[-1].name
    with open(victim, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(DataError, match=f"{victim}: CRC-32 mismatch"):
        engine.execute(rp, cold=False, verify=verify)
    os.truncate(victim, 10)
    with pytest.raises(DataError, match="truncated or damaged"):
        engine.execute(rp, cold=False, verify=verify)


def test_disk_full_mid_checkpoint_publishes_nothing(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the second file's writes fail as a full disk
    would: one line, exit != 0, no traceback, no published or .incomplete folder."""
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (200000, 200000)); "
            "from dlbench.cli import main; sys.argv[0] = 'dlbench'; main()")
    env = dict(os.environ, PYTHONPATH=str(ROOT), DLBENCH_NO_MPI="1")
    r = subprocess.run([sys.executable, "-c", code, "checkpoint", *TINY, "--layout", "shards", "--out",
                        str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "file too large writing" in lines[0] and "nothing was published" in lines[0]
    ck = next(tmp_path.glob("checkpoint/*/ckpt"))
    assert list(ck.iterdir()) == []


def test_sigterm_during_async_save_publishes_nothing_partial(tmp_path):
    """SIGTERM while an async save is in flight (the writer done or not: the publish waits for the next step,
    2 s away): exit 143, one line, no .incomplete folder, and every published checkpoint complete."""
    import signal

    env = dict(os.environ, PYTHONPATH=str(ROOT), DLBENCH_NO_MPI="1")
    p = subprocess.Popen([sys.executable, "-m", "dlbench", "checkpoint", *TINY[:-4], "--checkpoints", "2",
                          "--steps", "1", "--compute-time", "2", "--mode", "async", "--layout", "shards", "--keep",
                          "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        for _ in range(600):
            if list(tmp_path.glob("checkpoint/*/ckpt/*.incomplete")):
                break
            time.sleep(0.05)
        else:
            pytest.fail("no save started")
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert err.strip().count("\n") == 0 and "no partial checkpoint published" in err
    ck = next(tmp_path.glob("checkpoint/*/ckpt"))
    assert not list(ck.glob("*.incomplete"))
    for d in ck.iterdir():
        assert (d / "manifest.json").exists()


def test_implausibly_fast_fsyncs_and_slow_generation_are_flagged():
    from dlbench.checkpoint import aggregate

    rec = {"checkpoint": 0, "rank": 0, "bytes": 64 << 20, "files": 2, "stall_s": 0.1, "durable_s": 0.1,
           "write_s": 0.1, "fsync_s": [1e-5, 0.02, 0.001], "fsync_after_write_bytes": [32 << 20, 32 << 20]}
    per = aggregate.checkpoints([[rec]])
    s = aggregate.summary(per, [[rec]], [{"generation_bytes_per_s": 1e9, "write_bytes_per_s": 0.8e9}])
    assert any("1 of 2 fsyncs made >= 1 MiB durable faster than 20 GB/s" in w for w in s["warnings"])
    assert any("generation ran at only 1.25x the write rate" in w for w in s["warnings"])
    rec["fsync_s"][0] = 0.02
    s = aggregate.summary(per, [[rec]], [{"generation_bytes_per_s": 3e9, "write_bytes_per_s": 1e9}])
    assert s["warnings"] == [] and s["generation_ratio"] == 3.0


def test_a_defeating_preload_is_flagged_in_the_summary(tmp_path):
    """A library that makes fsync a no-op, named in LD_PRELOAD: the summary says so (and provenance keeps it)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), DLBENCH_NO_MPI="1", LD_PRELOAD="libeatmydata.so")
    r = subprocess.run([sys.executable, "-m", "dlbench", "checkpoint", *TINY, "--restore", "", "--out",
                        str(tmp_path)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "WARNING: loaded into the process: libeatmydata.so" in r.stdout
    assert _result(tmp_path)["preloaded"]["ld_preload"] == ["libeatmydata.so"]


def test_async_dcp_is_published_only_after_its_fsyncs(tmp_path, monkeypatch):
    """Regression: an async dcp save's future is done before its done-callback (the engine's fsyncs) has run;
    publishing then renamed the folder under those fsyncs and counted files it had not made durable."""
    import threading

    real_fsync = os.fsync
    gate = threading.Event()

    def slow_fsync(fd):
        if threading.current_thread() is not threading.main_thread():
            gate.wait(10)                 # the callback's fsyncs wait until the test has looked
        return real_fsync(fd)

    m = get_model("llama3-8b", dp=1, layers=2, scale=2e-5)
    s = engine.Saver(SerialComm(), m, 0, "dcp", tmp_path, mode="async")
    s.generate(0)
    clock = time.perf_counter_ns
    monkeypatch.setattr(os, "fsync", slow_fsync)
    s.begin(0, clock)
    for _ in range(400):
        if s._future.done():
            break
        time.sleep(0.025)
    assert s._future.done() and not s.done()     # saved, not yet durable: not publishable
    gate.set()
    rec = s.finish(clock)
    assert rec["files"] == 2 and len(rec["fsync_s"]) == 3          # .distcp, .metadata, the folder
    assert (tmp_path / "ckpt_0000" / ".metadata").exists()


def test_cross_node_restore_on_one_node_says_it_read_its_own_files(cli, tmp_path):
    r = cli(["checkpoint", *TINY, "--checkpoints", "1", "--restore", "cross", "--out", tmp_path])
    assert r.exit_code == 0, r.output
    assert "NOTE: the cross-node restore read each rank's own files" in r.output


def test_dcp_saves_tensors_of_their_real_shapes_and_reshards_by_key(tmp_path):
    """dcp: every layer tensor has its real shape (a TP shard of the row-parallel [hidden, ffn] weight is
    [hidden, ffn / TP]); the bytes equal the shards layout's; a resharded restore dcp.loads the needed keys."""
    import torch.distributed.checkpoint as dcp

    m = get_model(None, layers=1, hidden=64, ffn=256, vocab=512, heads=4, kv_heads=2, tp=2, dp=1, zero=1)
    s = engine.Saver(SerialComm(), m, 1, "dcp", tmp_path)          # model rank 1: TP rank 1 of 2
    s.generate(0)
    clock = time.perf_counter_ns
    s.begin(0, clock)
    s.finish(clock)
    meta = dcp.FileSystemReader(str(tmp_path / "ckpt_0000")).read_metadata().state_dict_metadata
    pre = "layer_01-model_01_model_states.pt/1." if m.pp > 1 else "model_01_model_states.pt/1."
    assert tuple(meta[pre + "mlp_4h_to_h"].size) == (64, 256 // 2)          # row-parallel: [hidden, ffn / TP]
    assert tuple(meta[pre + "mlp_h_to_4h"].size) == (2 * 256 // 2, 64)     # column-parallel, gated
    assert tuple(meta[pre + "attention_qkv"].size) == ((64 + 2 * 32) // 2, 64)
    assert tuple(meta[pre + "input_norm"].size) == (64,)
    assert tuple(meta["model_01_model_states.pt/0.embedding"].size) == (512 // 2, 64)
    assert sum(math.prod(v.size) * (2 if "optim" not in k else 4) for k, v in meta.items()) == s.nbytes
    # a resharded restore (TP 1) loads, by key, every old shard holding part of what TP rank 0 of TP 1 needs
    new = get_model(None, layers=1, hidden=64, ffn=256, vocab=512, heads=4, kv_heads=2, tp=1, dp=1, zero=1)
    s2 = engine.Saver(SerialComm(), m, 1, "dcp", tmp_path)
    rec = engine.dcp_reshard_restore(s2, tmp_path / "ckpt_0000", [1], engine.needs(new, 0), cold=False)
    assert rec["keys"] > 0 and rec["bytes"] > 0 and rec["missing_bytes"] > 0   # rank 0's halves were not written
    # scaled: the whole [hidden, ffn] by sqrt(scale) per dimension (3 significant bits), then split: every
    # sharding covers the same elements, so a resharded restore (ZeRO-3 DP 2 -> TP 2) misses nothing
    ms = get_model("llama3-8b", dp=2, scale=1e-3)
    (t,) = [t for t in engine.needs(ms, 1) if t.name == "1.mlp_4h_to_h"]
    assert t.shape == (128 // 2, 448) and t.count == math.prod(t.shape)        # 4096 -> 129 -> 128, 14336 -> 448
    mt = get_model("llama3-8b", tp=2, dp=1, scale=1e-3)
    (u,) = [u for u in engine.needs(mt, 1) if u.name == "1.mlp_4h_to_h"]
    assert u.shape == (128, 448 // 2)
    place = engine.placement(ms, [0, 1], "shards", tmp_path)
    assert engine.read_plan(place, engine.needs(mt, 0) + engine.needs(mt, 1)).missing == 0
