"""host: /proc/meminfo entries and the default data root, read in one place (runner and simulate share them)."""

from pathlib import Path

from dlbench import host


def test_meminfo_one_helper_for_total_and_available(tmp_path):
    """Regression (duplicated helpers): simulate/core.py `_mem_available` and run/setup.py `_mem_total_bytes`
    each parsed /proc/meminfo; both now use host.meminfo(key)."""
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       16384 kB\nMemFree:  100 kB\nMemAvailable:    8192 kB\n")
    assert host.meminfo("MemTotal", f) == 16384 * 1024
    assert host.meminfo("MemAvailable", f) == 8192 * 1024
    assert host.meminfo("Mem", f) == 0                       # a key is matched whole, not as a prefix
    assert host.meminfo("MemTotal", tmp_path / "none") == 0  # not Linux: 0, no error
    f.write_text("MemTotal: lots\n")
    assert host.meminfo("MemTotal", f) == 0
    import dlbench.run.setup as setup
    import dlbench.simulate.core as core

    assert not hasattr(setup, "_mem_total_bytes") and not hasattr(core, "_mem_available")


def test_data_root_shared_by_run_and_sweeps(tmp_path, monkeypatch):
    """Regression (duplicated helpers): runstudy.default_sweep_data_root repeated run.setup.default_data_dir's
    $DLBENCH_DATA_DIR logic; both now use host.data_root()."""
    from dlbench.run.setup import default_data_dir
    from dlbench.study.measure import default_sweep_data_root

    monkeypatch.setenv("DLBENCH_DATA_DIR", str(tmp_path / "d"))
    assert host.data_root() == tmp_path / "d"
    assert default_data_dir("cosmoflow", "tiny", 0).parent == default_sweep_data_root().parent == tmp_path / "d"
    monkeypatch.delenv("DLBENCH_DATA_DIR")
    assert host.data_root() == Path.home() / ".cache" / "dlbench" / "data"
