"""summary.io_counters of real runs: exact counts for naive, DataLoader workers' reads shipped back
(persistent or not), the local and memory tiers, checkpoints, and the table of `dlbench report`."""

import json

import pytest

from tests.unit.test_io_counters import SEQ4K

N, EPOCHS = 64, 2


@pytest.fixture(scope="module")
def seq4k(tmp_path_factory):
    from click.testing import CliRunner

    from dlbench.cli import main

    d = tmp_path_factory.mktemp("seq4k-cli")
    y = d / "seq4k.yaml"
    y.write_text(SEQ4K)
    r = CliRunner().invoke(main, ["generate", "--workload", str(y), "--scale", "tiny", "--data-dir", str(d / "data"),
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    return y, d / "data"


def _run(cli, seq4k, tmp_path, *extra):
    y, data = seq4k
    r = cli(["run", "--workload", y, "--data-dir", data, "--epochs", EPOCHS, "--compute-time", "0", "--out",
             tmp_path / "res", *extra])
    assert r.exit_code == 0, r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith("results: ")][-1]
    rd = line.split("results: ", 1)[1]
    return rd, json.loads(open(f"{rd}/run.json").read())["summary"]["io_counters"]


def test_naive_counts_exact(seq4k, tmp_path, cli):
    rd, ioc = _run(cli, seq4k, tmp_path, "--strategy", "naive")
    sh = ioc["by_class"]["shared"]
    assert list(ioc["by_class"]) == ["shared"]
    assert sh["POSIX_READS"] == N * EPOCHS and sh["POSIX_BYTES_READ"] == N * EPOCHS * 4096
    assert sh["POSIX_SIZE_READ_1K_10K"] == N * EPOCHS and sum(sh[b] for b in ioc["buckets"]) == N * EPOCHS
    assert sh["POSIX_OPENS"] == 2 and sh["H5D_OPENS"] == 1 and sh["H5D_READS"] == 0
    assert 0 < sh["POSIX_F_MAX_READ_TIME"] <= sh["POSIX_F_READ_TIME"]
    # the global shuffle reads the shared file out of order: few consecutive reads, about half sequential
    assert sh["POSIX_CONSEC_READS"] < 0.2 * N * EPOCHS and 0.2 * N * EPOCHS < sh["POSIX_SEQ_READS"] < 0.8 * N * EPOCHS
    assert len(ioc["by_rank"]) == 1 and ioc["by_rank"][0]["POSIX_READS"] == N * EPOCHS
    assert ioc["slowest_rank"]["rank"] == 0
    r = cli(["report", rd])
    assert r.exit_code == 0 and "I/O counters" in r.output and "1K_10K: 128" in r.output


@pytest.mark.parametrize("persistent", [False, True])
def test_prefetch_workers_counters_reach_the_trainer(seq4k, tmp_path, cli, persistent):
    """Regression: reads done in DataLoader worker processes must be counted once (cumulative snapshots of a
    persistent worker replace each other; fresh workers each epoch add up)."""
    extra = ["--persistent-workers"] if persistent else []
    _rd, ioc = _run(cli, seq4k, tmp_path, "--strategy", "prefetch", "--num-workers", 2, *extra)
    sh = ioc["by_class"]["shared"]
    assert sh["POSIX_READS"] == N * EPOCHS and sh["POSIX_BYTES_READ"] == N * EPOCHS * 4096
    # the trainer's probe reader opens the file (HDF5 + descriptor), then every worker process once
    assert sh["POSIX_OPENS"] == 2 + 2 * 2 * (1 if persistent else EPOCHS)


@pytest.mark.parametrize("tier", ["local", "memory"])
def test_local_copies_counted_per_class(seq4k, tmp_path, cli, tier):
    _rd, ioc = _run(cli, seq4k, tmp_path, "--strategy", "local", "--tier", tier, "--local-dir", tmp_path / "loc")
    assert ioc["by_class"]["shared"]["POSIX_READS"] == N  # staged once
    t = ioc["by_class"][tier]
    assert t["POSIX_READS"] == N * EPOCHS and t["POSIX_BYTES_READ"] == N * EPOCHS * 4096
    assert t["POSIX_WRITES"] == N and t["POSIX_BYTES_WRITTEN"] == N * 4096
    assert t["POSIX_OPENS"] == (N + N * EPOCHS if tier == "local" else 0)  # one per file written, one per read
