"""issue 26 ("Trust"), what a new user hit: generate --force under a running run, first-use generation, HOME="",
duplicate YAML keys, and output-side failures (a full device, a full disk, a name too long). Each one line,
exit != 0, nothing partial left."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["DLBENCH_NO_MPI"] = "1"
    env.update(extra)
    return env


def _dlbench(args, cwd, timeout=120, stdout=subprocess.PIPE, **kw):
    return subprocess.run([sys.executable, "-m", "dlbench.cli", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, env=_env(**kw.pop("env", {})), cwd=cwd, timeout=timeout,
                          **kw)


# ----- generate --force while a run reads the dataset ------------------------------------------------------

def test_generate_force_refuses_while_a_run_reads_the_dataset(tiny, tmp_path, cli):
    """Regression: `generate --force` deleted the dataset a `run` was reading (the run died with "damaged or
    truncated"). Now every process of a run holds a shared lock on the dataset; generate refuses in one line
    naming the run (pid, host, command), and the run finishes untouched."""
    from dlbench.data.generate import READERS_DIR

    before = {p.name: p.stat().st_mtime_ns for p in tiny.iterdir() if p.is_file()}
    p = subprocess.Popen([sys.executable, "-m", "dlbench.cli", "run", "--workload", "cosmoflow", "--data-dir", tiny,
                          "--epochs", "1000", "--batch-size", "1", "--compute-time", "0.002", "--out",
                          tmp_path / "res", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env(), cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("res/*/*/*/run.json")) and time.monotonic() < deadline:
            time.sleep(0.05)   # the run folder's first record: the run is past its set-up, reading
        assert list((tiny / READERS_DIR).iterdir()), "no reader record"
        r = cli(["generate", "--workload", "cosmoflow", "--scale", "small", "--data-dir", tiny, "--force",
                 "--no-progress"])
        assert p.poll() is None, "the run stopped"
    finally:
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=60)
    assert r.exit_code == 3, r.output
    line = r.output.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith(f"dlbench: error: --data-dir {tiny}: a `dlbench run` is reading this dataset (pid "
                           f"{p.pid} on "), line
    assert "dlbench run --workload cosmoflow" in line, line
    assert {q.name: q.stat().st_mtime_ns for q in tiny.iterdir() if q.is_file()} == before
    assert p.returncode == 143 and "damaged" not in err, err
    assert not (tiny / READERS_DIR).exists()   # the run's record went with it
    r = cli(["generate", "--workload", "cosmoflow", "--scale", "tiny", "--data-dir", tiny, "--no-progress"])
    assert r.exit_code == 0, r.output       # nobody reads it now: generate goes on


def test_run_refuses_a_dataset_being_generated(tiny, tmp_path, cli):
    """The other side of the lock: a run started while a generation writes the directory stops at once, naming
    the generation, instead of reading files that are being replaced."""
    from dlbench.data.generate import GenerateLock

    held = GenerateLock(tiny)
    try:
        r = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", "1", "--compute-time", "0",
                 "--out", tmp_path / "res", "--no-progress"])
    finally:
        held.release()
    assert r.exit_code == 3, r.output
    assert r.output.strip() == (f"dlbench: error: --data-dir {tiny}: a `dlbench generate` is writing this dataset "
                                f"(pid {os.getpid()} on {os.uname().nodename}, since "
                                + r.output.strip().split(", since ", 1)[1]), r.output
    assert "wait for it to finish, then run" in r.output


# ----- output-side failures: stdout on a full device, a full disk, a name too long ----------------------------

def _one_error_line(r):
    assert "Traceback" not in r.stderr and "Exception ignored" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("dlbench: error: "), r.stderr
    return lines[0]


def test_stdout_on_a_full_device_is_one_line(tiny, tmp_path):
    """Regression: `dlbench run ... > /dev/full` and `dlbench report RUN > /dev/full` ended in an OSError
    traceback. Now one line, exit 6; the run's results are kept and named."""
    with open("/dev/full", "w") as full:
        r = _dlbench(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", "1", "--compute-time", "0",
                      "--out", tmp_path / "res", "--no-progress"], tmp_path, stdout=full)
    assert r.returncode == 6, r.stderr
    line = _one_error_line(r)
    (run_dir,) = list((tmp_path / "res").glob("*/*/*"))
    assert line.startswith("dlbench: error: cannot write to standard output: No space left on device; the run "
                           "finished and its results are in "), line
    assert (run_dir / "run.json").is_file()
    with open("/dev/full", "w") as full:
        r = _dlbench(["report", run_dir], tmp_path, stdout=full)
    assert r.returncode == 6, r.stderr
    assert _one_error_line(r) == "dlbench: error: cannot write to standard output: No space left on device (errno ENOSPC)"


def _full_disk(limit):
    """A file system that takes ``limit`` bytes per file, then fails every write (RLIMIT_FSIZE: EFBIG; Python
    ignores SIGXFSZ): the same code path as ENOSPC, deterministic, no mount needed."""
    import resource

    def pre():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


def _left(root: Path) -> list:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_full_disk_under_every_writer_is_one_line_and_leaves_nothing(tiny, tmp_path, cli):
    """Regression: a full disk under `simulate --out`, `import -o`, `plot -o` and `jobscript -o` ended in a
    traceback, leaving a half-written run folder (summary.json without run.json) or `.study.yaml.<pid>.tmp`.
    Now each is one line naming --out, exit 6, and nothing of the command is left."""
    tl = tmp_path / "tl.csv"
    tl.write_text("Epoch, Rank, Action Name, Action Description, Start Time, End Time, Time Taken\n"
                  "0,0, train, Training Iteration,10.0,11.0,1.0\n0,0, load, Load File,10.0,10.4,0.4\n"
                  "0,0, read, HDF5 File Read,10.0,10.3,0.3\n0,0, next, Call to Next Batch,10.0,10.1,0.1\n")
    run = cli(["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", "1", "--compute-time", "0",
               "--out", tmp_path / "res", "--no-progress"])
    assert run.exit_code == 0, run.output
    (run_dir,) = list((tmp_path / "res").glob("*/*/*"))
    cases = {"sim": ["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", "--strategies",
                     "naive,prefetch", "--out"],
             "imp": ["import", "timelogger", tl, "--name", "tl", "--out"],
             "job": ["jobscript", "scaling-strong", "--scheduler", "slurm", "--nodes-list", "1,2", "-o"]}
    try:
        import matplotlib  # noqa: F401
        cases["plot"] = ["plot", run_dir, "--kind", "bars", "-o"]
    except ImportError:
        pass
    for name, args in cases.items():
        out = tmp_path / "full" / name
        r = _dlbench([*args, out], tmp_path, preexec_fn=_full_disk(400 if name == "job" else 1500))
        assert r.returncode == 6, (name, r.stderr)
        line = _one_error_line(r)
        assert line.startswith(f"dlbench: error: --out {out}: cannot write there: File too large"), (name, line)
        assert "nothing was kept" in line, line
        assert _left(out) == [], (name, _left(out))


def test_a_300_character_name_is_one_line(tiny, tmp_path):
    """Regression: a path component of 300 characters (ENAMETOOLONG) ended in a traceback (from Path.exists
    and mkdir). Now one line naming --out, exit != 0."""
    long = tmp_path / ("x" * 300)
    for args in (["run", "--workload", "cosmoflow", "--data-dir", tiny, "--epochs", "1", "--compute-time", "0",
                  "--no-progress", "--out", long],
                 ["simulate", "--system", "laptop-pfs", "--workload", "cosmoflow", "--nodes", "2", "--out", long],
                 ["jobscript", "scaling-strong", "--scheduler", "slurm", "--nodes-list", "1", "-o", long]):
        r = _dlbench(args, tmp_path)
        assert r.returncode != 0, (args[0], r.stderr)
        line = _one_error_line(r)
        assert line.startswith(f"dlbench: error: --out {long}: cannot write") and "File name too long" in line, line


# ----- first use, HOME="", duplicate YAML keys, jobscript and --ranks-per-node bounds ---------------------------

def test_first_use_generation_says_what_and_where(tmp_path, cli, monkeypatch):
    """Regression: `dlbench run` with no --data-dir generated the tiny dataset on first use without a word.
    Now one line says what is generated where (and how to use another folder), one what it took; a second run
    finds it and says nothing."""
    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "data"))
    args = ["run", "--workload", "hep_cnn", "--epochs", "1", "--compute-time", "0", "--out", tmp_path / "res",
            "--no-progress"]
    r = cli(args)
    assert r.exit_code == 0, r.output
    where = tmp_path / "data" / "hep_cnn-tiny-seed0"
    assert (f"dlbench: first use of hep_cnn (tiny, seed 0): generating its dataset of 64 samples, 0.8 MiB, in "
            f"{where} (--data-dir DIR uses another)") in r.stderr, r.stderr
    assert "dlbench: generated hep_cnn (tiny, seed 0): 4 files" in r.stderr, r.stderr
    r = cli(args)
    assert r.exit_code == 0 and "first use" not in r.stderr, r.output


def test_empty_home_is_refused_not_slash_cache(tmp_path, cli, monkeypatch):
    """Regression: HOME="" put the default datasets in /.cache (or under the current folder). Now one line
    naming HOME and what to set instead; nothing is generated."""
    monkeypatch.delenv("DLBENCH_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    for home in ("", "relative/dir", "/"):
        monkeypatch.setenv("HOME", home)
        r = cli(["run", "--workload", "hep_cnn", "--epochs", "1", "--compute-time", "0", "--out", tmp_path / "res",
                 "--no-progress"])
        assert r.exit_code == 2, r.output
        assert r.output.strip() == (f"dlbench: error: HOME={home!r}: not a usable home folder for the default "
                                    f"dataset root (~/.cache/dlbench/data); allowed: an absolute HOME other than /, "
                                    f"or set DLBENCH_DATA_DIR=DIR (or pass --data-dir) to say where datasets go")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("HOME", str(tmp_path))
    from dlbench.host import data_root

    assert data_root() == tmp_path / ".cache" / "dlbench" / "data"


def test_duplicate_yaml_keys_are_refused(tmp_path, cli):
    """Regression: a key given twice in a workload, study or DLIO YAML silently kept the last value. Now one
    line naming the key, the file and both lines."""
    wl = tmp_path / "wl.yaml"
    wl.write_text("name: mine\ndescription: x\nlayout: npy\nname: other\n")
    r = cli(["show", wl])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == (f"dlbench: error: workload file '{wl}': key 'name' appears twice in one mapping "
                                f"(lines 1 and 4); allowed: each key once (YAML would keep the last value silently)")
    study = tmp_path / "st.yaml"
    study.write_text("name: st\nworkload: cosmoflow\nepochs: 1\nruns:\n  - {strategy: naive}\nepochs: 3\n")
    r = cli(["jobscript", study, "--scheduler", "slurm", "--nodes-list", "1", "-o", tmp_path / "jobs"])
    assert r.exit_code == 2 and f"study '{study}': key 'epochs' appears twice" in r.output, r.output
    assert not (tmp_path / "jobs").exists()
    dl = tmp_path / "dlio.yaml"
    dl.write_text("model: {name: m}\nframework: pytorch\nworkflow: {train: true}\ndataset:\n  num_files_train: 4\n"
                  "  record_length: 1024\n  num_files_train: 8\n")
    r = cli(["import", "dlio-config", dl, "-o", tmp_path / "w.yaml"])
    assert r.exit_code == 2, r.output
    assert f"DLIO config '{dl}': key 'num_files_train' appears twice in one mapping (lines 5 and 7)" in r.output
    # a YAML merge key is not a duplicate
    from dlbench.config import load_yaml

    merged = tmp_path / "merge.yaml"
    merged.write_text("base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\n")
    assert load_yaml(merged)["x"] == {"a": 1, "b": 3}


def test_jobscript_refuses_more_ranks_than_the_dataset_feeds(tmp_path, cli):
    """Regression: `jobscript --nodes-list 100000` wrote a job whose 100,000 ranks get no batch from the study's
    4,096 samples (the job would fail after its wait in the queue). Now one line naming --nodes-list, the value
    and the largest world allowed; nothing written."""
    r = cli(["jobscript", "scaling-strong", "--scheduler", "slurm", "--nodes-list", "1,100000", "-o",
             tmp_path / "jobs"])
    assert r.exit_code == 2, r.output
    assert r.output.strip() == ("dlbench: error: --nodes-list=100000: 100,000 ranks (1 per node) get fewer than one "
                                "local batch of 4 each from study scaling-strong's 4,096 cosmoflow samples; allowed: "
                                "at most 1,024 ranks (1,024 nodes of 1)")
    assert not (tmp_path / "jobs").exists()
    r = cli(["jobscript", "scaling-strong", "--scheduler", "slurm", "--nodes-list", "1,1024", "-o", tmp_path / "jobs"])
    assert r.exit_code == 0, r.output
