"""`dlbench` on webdataset shards: generate, verify --checksum/--content, `run --verify` per read pattern
(stream: naive, prefetch; indexed: naive, clairvoyant), simulate counting the same bytes and requests; the
stream's order stated in the summary, one read per shard per epoch; another strategy on stream is one line."""

import json

import pytest

SPEC = """\
name: wdscli
layout: webdataset
samples_per_file: 10
arrays:
  - {{name: x, shape: [3, 20], dtype: float32, role: data}}
  - {{name: cls, shape: [1], dtype: int64, role: label}}
samples: 64
batch_size: 4
compute: {{}}
webdataset: {{read: {read}, shuffle_buffer: 16, initial: 4, shard_shuffle: 4}}
"""
ROW = 3 * 20 * 4 + 8


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from click.testing import CliRunner

    from dlbench.cli import main

    root = tmp_path_factory.mktemp("wdswl")
    specs = {}
    for read in ("stream", "indexed"):
        specs[read] = root / f"{read}.yaml"
        specs[read].write_text(SPEC.format(read=read))
    d = tmp_path_factory.mktemp("wdsdata") / "wds"
    r = CliRunner().invoke(main, ["generate", "--workload", str(specs["stream"]), "--data-dir", str(d),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    return specs, d


def test_verify_checksum_and_content(cli, data):
    for extra in ([], ["--checksum"], ["--content"]):
        r = cli(["verify", "--data-dir", data[1], *extra])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("read,strategy", [("stream", "naive"), ("stream", "prefetch"), ("indexed", "naive"),
                                           ("indexed", "clairvoyant")])
def test_run_verify_and_simulate_count_the_same(cli, data, tmp_path, monkeypatch, read, strategy):
    from dlbench import workload as wl
    from dlbench.simulate import load_profile, simulate
    from dlbench.simulate.core import from_workload

    specs, d = data
    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    out = tmp_path / "res"
    extra = ["--num-workers", "2"] if strategy == "prefetch" else []
    r = cli(["run", "--workload", specs[read], "--data-dir", d, "-s", strategy, "-e", "2", "--compute-time",
             "0.001", "--system", "laptop-pfs", "--verify", "--no-progress", "--out", out, *extra])
    assert r.exit_code == 0, r.output
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, ms = run["config"], run["summary"]
    assert ms["webdataset_read"] == read and ms["verified_samples"] == 2 * 64
    w = wl.load(str(specs[read]))
    sw = from_workload(w, local_batch=int(cfg["local_batch"]), step_time_s=float(cfg["compute_step_time_s"]))
    ss = simulate([("x", strategy, dict(cfg["options"]))], wl=sw, profile=load_profile("laptop-pfs"), nodes=1,
                  ranks_per_node=1, epochs=2, seed=int(cfg["seed"]))["x"]
    assert ms["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert ms["read_bytes"] == ss["read_bytes"] == 2 * 64 * ROW
    assert ms["shared_read_requests"] == ss["shared_read_requests"]
    shared = ms["io_counters"]["by_class"]["shared"]
    if read == "stream":
        assert ms["order"].startswith("webdataset stream") and ms["semantics"]["global_batch_is_global_shuffles"] \
            .startswith("no")
        assert "order_quality" in ms
        if strategy == "naive":    # every shard read whole, once per epoch
            assert shared["POSIX_READS"] == 2 * 7 and shared["POSIX_BYTES_READ"] == 2 * sum(
                p.stat().st_size for p in d.glob("shard-*.tar"))
        else:                      # per worker; a worker may fetch a shard its stream shares at an epoch's end
            assert 2 * 7 <= shared["POSIX_READS"] <= 2 * 7 * 2
    else:                          # one range read per sample from the shared tier
        assert shared["POSIX_READS"] == ms["shared_read_requests"]


def test_stream_with_a_cache_strategy_is_one_line(cli, data, tmp_path):
    specs, d = data
    r = cli(["run", "--workload", specs["stream"], "--data-dir", d, "-s", "clairvoyant", "-e", "1",
             "--compute-time", "0.001", "--no-progress", "--out", tmp_path / "res"])
    assert r.exit_code != 0
    assert "webdataset read pattern stream" in r.output and "Traceback" not in r.output
    assert not list((tmp_path / "res").rglob("run.json"))
