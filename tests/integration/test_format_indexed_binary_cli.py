"""`dlbench` on the token datasets (mmap_indexed_binary, indexed_binary): generate, verify --checksum/--content,
`run --verify` per reader (numpy.memmap, pread) with naive and clairvoyant, simulate counting the same bytes and
requests; the built-in megatron workload; DLIO's megatron_deepspeed.yaml and dlrm.yaml shrunk by overrides."""

import json
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dlio"
SPEC = """\
name: tok{tag}
layout: {layout}
samples_per_file: 16
arrays:
  - {{name: tokens, shape: [256], dtype: uint16, role: data}}
samples: 48
batch_size: 4
compute: {{}}
"""


@pytest.fixture(scope="module", params=["mmap_indexed_binary", "indexed_binary"])
def dataset(request, tmp_path_factory):
    from click.testing import CliRunner

    from dlbench.cli import main

    layout = request.param
    p = tmp_path_factory.mktemp("tokwl") / "tok.yaml"
    p.write_text(SPEC.format(tag=layout.split("_")[0], layout=layout))
    d = tmp_path_factory.mktemp("tokdata") / layout
    r = CliRunner().invoke(main, ["generate", "--workload", str(p), "--data-dir", str(d), "--no-progress"])
    assert r.exit_code == 0, r.output
    return layout, p, d


def test_verify_checksum_and_content(cli, dataset):
    _, _, d = dataset
    for extra in ([], ["--checksum"], ["--content"]):
        r = cli(["verify", "--data-dir", d, *extra])
        assert r.exit_code == 0, r.output


@pytest.mark.parametrize("via", ["library", "pread"])
@pytest.mark.parametrize("strategy", ["naive", "clairvoyant"])
def test_run_verify_per_reader_and_simulate_counts_the_same(cli, dataset, tmp_path, monkeypatch, via, strategy):
    from dlbench import workload as wl
    from dlbench.simulate import load_profile, simulate
    from dlbench.simulate.core import from_workload

    layout, spec, d = dataset
    monkeypatch.setenv("DLBENCH_PFS_STATE", str(tmp_path))
    out = tmp_path / "res"
    r = cli(["run", "--workload", spec, "--data-dir", d, "-s", strategy, "-e", "2", "--compute-time", "0.001",
             "--system", "laptop-pfs", "--verify", "--no-progress", "--read-via", via, "-o", out])
    assert r.exit_code == 0, r.output
    run = json.loads(next(out.rglob("run.json")).read_text())
    cfg, ms = run["config"], run["summary"]
    assert cfg["workload_spec"]["layout"] == layout and ms["verified_samples"] == 2 * 48
    w = wl.load(str(spec))
    sw = from_workload(w, local_batch=int(cfg["local_batch"]), step_time_s=float(cfg["compute_step_time_s"]))
    ss = simulate([("x", strategy, dict(cfg["options"]))], wl=sw, profile=load_profile("laptop-pfs"), nodes=1,
                  ranks_per_node=1, epochs=2, seed=int(cfg["seed"]))["x"]
    assert ms["bytes_by_tier"] == {k: int(v) for k, v in ss["bytes_by_tier"].items()}
    assert ms["read_bytes"] == ss["read_bytes"] == 2 * 48 * 512
    assert ms["shared_read_requests"] == ss["shared_read_requests"] == (96 if strategy == "naive" else 48)
    shared = ms["io_counters"]["by_class"]["shared"]
    n = ms["shared_read_requests"]
    if via == "library":     # copies out of the map, with their page faults; no read calls
        assert (shared["MMAP_READS"], shared["MMAP_BYTES_READ"], shared["POSIX_READS"]) == (n, n * 512, 0)
        assert "MMAP_MINOR_FAULTS" in shared and "MMAP_DEVICE_BYTES_READ" in shared
        assert f"mmap (shared): {n} copies out of maps" in r.output       # the counter table's line
    else:
        assert "mmap (shared)" not in r.output
        assert (shared["POSIX_READS"], shared["POSIX_BYTES_READ"], shared["MMAP_READS"]) == (n, n * 512, 0)


def test_builtin_megatron_tiny(cli, tmp_path):
    d = tmp_path / "meg"
    r = cli(["generate", "--workload", "megatron", "--scale", "tiny", "--data-dir", d, "--no-progress"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in d.iterdir()) == ["data-000000.bin", "data-000000.idx", "dlbench-manifest.json"]
    r = cli(["run", "--workload", "megatron", "--scale", "tiny", "--data-dir", d, "-e", "1", "--compute-time",
             "0.001", "--no-progress", "-o", tmp_path / "res"])
    assert r.exit_code == 0, r.output
    s = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())["summary"]
    assert s["read_bytes"] == 2048 * 2048 and s["io_counters"]["by_class"]["shared"]["MMAP_READS"] == 2048


SHRINK = ["++workload.dataset.num_samples_per_file=64", "++workload.dataset.record_length=2048",
          "++workload.train.epochs=2", "++workload.train.computation_time=0.001", "++workload.reader.batch_size=8"]
FIXUPS = {   # what DLIO 2.0's configs hold that dlbench refuses, taken out by overrides
    # the checkpoint section (ZeRO/layer shapes, steps_between_checkpoints) is the checkpoint engine's: disabled
    "megatron_deepspeed": ["++workload.workflow.checkpoint=False", "~workload.checkpoint"],
    # evaluation and a step cap are not emulated (and do_eval/eval_* are keys DLIO's LoadConfig does not read)
    "dlrm": ["~workload.workflow.do_eval", "~workload.dataset.eval_num_samples_per_file", "~workload.dataset.num_files_eval",
             "~workload.train.total_eval_steps", "~workload.evaluation", "~workload.train.total_training_steps"]}


@pytest.mark.parametrize("name,layout", [("megatron_deepspeed", "mmap_indexed_binary"), ("dlrm", "indexed_binary")])
def test_dlio_token_configs_run_shrunk(cli, tmp_path, monkeypatch, name, layout):
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    r = cli(["run", "--dlio-config", FIX / f"{name}.yaml", *FIXUPS[name], *SHRINK, "-o", tmp_path / "res",
             "--no-progress"])
    assert r.exit_code == 0, r.output
    run = json.loads(next((tmp_path / "res").rglob("run.json")).read_text())
    assert run["config"]["workload_spec"]["layout"] == layout
    assert run["summary"]["read_bytes"] == 2 * 64 * 2048


GPT = SPEC + "tokens: {{sample_index: megatron, seq_length: {seq}}}\n"


@pytest.mark.parametrize("via", ["library", "pread"])
def test_megatron_sample_index_reads_token_ranges_across_documents(cli, tmp_path, monkeypatch, via):
    """tokens.sample_index megatron: a sample is seq_length + 1 tokens cut across shuffled documents (1-2
    ranges here: documents are one sample long), each range its own read; --verify checks the bytes."""
    from dlbench.data.gpt_index import GptIndex

    spec = tmp_path / "gpt.yaml"
    spec.write_text(GPT.format(tag="gpt", layout="mmap_indexed_binary", seq=255))
    d = tmp_path / "data"
    assert cli(["generate", "--workload", spec, "--data-dir", d, "--no-progress"]).exit_code == 0
    out = tmp_path / "res"
    r = cli(["run", "--workload", spec, "--data-dir", d, "-e", "1", "--compute-time", "0", "--verify",
             "--no-progress", "--read-via", via, "-o", out])
    assert r.exit_code == 0, r.output
    s = json.loads(next(out.rglob("run.json")).read_text())["summary"]
    seed = json.loads((d / "dlbench-manifest.json").read_text())["seed"]
    gi = GptIndex([256] * 48, 255, 48, seed)
    ranges = sum(len(gi.pieces(i)) for i in range(48))
    assert s["verified_samples"] == 48 and s["read_bytes"] == 48 * 512
    assert 48 < ranges < 2 * 48 + 1          # most samples span two documents
    shared = s["io_counters"]["by_class"]["shared"]
    reads, nbytes = (shared["MMAP_READS"], shared["MMAP_BYTES_READ"]) if via == "library" else \
        (shared["POSIX_READS"], shared["POSIX_BYTES_READ"])
    assert (reads, nbytes) == (ranges, 48 * 512)
    # a seq_length whose samples are not the stored sequence's bytes: one line
    spec.write_text(GPT.format(tag="gpt", layout="mmap_indexed_binary", seq=300))
    r = cli(["run", "--workload", spec, "--data-dir", d, "-e", "1", "--no-progress", "-o", out])
    assert r.exit_code == 2 and "tokens.seq_length=300" in r.output and "Traceback" not in r.output
