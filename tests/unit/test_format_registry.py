"""The format registry: every layout a workload may name is registered, a miss lists the valid names."""
import pytest

from dlbench.data import registry
from dlbench.errors import ConfigError
from dlbench.workload import LAYOUTS


def test_layouts_come_from_the_registry():
    assert LAYOUTS == registry.names()
    assert {"hdf5_per_sample", "hdf5_shared", "hdf5_blocks", "jpeg_folders", "npy", "npz"} <= set(LAYOUTS)


def test_unknown_format_lists_valid_names():
    with pytest.raises(ConfigError) as e:
        registry.get_format("hdf5_block")
    msg = str(e.value)
    assert "unknown layout 'hdf5_block'" in msg and "jpeg_folders" in msg and "did you mean 'hdf5_blocks'" in msg


def test_capabilities():
    assert registry.get_format("jpeg_folders").decodes
    assert registry.get_format("tfrecord").decodes   # the Example is parsed for its image (decode phase)
    assert not any(registry.get_format(n).decodes for n in LAYOUTS if n not in ("jpeg_folders", "tfrecord"))
    assert registry.get_format("hdf5_shared").reads_by_offset
    assert registry.get_format("hdf5_per_sample").samples_per_file == "one"


def test_reader_classes_resolve():
    from dlbench.data import fmt_hdf5, fmt_jpeg

    assert registry.get_format("hdf5_blocks").reader_class() is fmt_hdf5.BlockReader
    assert registry.get_format("jpeg_folders").reader_class() is fmt_jpeg.JpegReader
    assert registry.get_format("hdf5_per_sample").reader_class() is fmt_hdf5.PerSampleReader


def test_register_twice_refused():
    with pytest.raises(ValueError):
        registry.register(registry.get_format("jpeg_folders"))


def test_read_via_help_comes_from_every_format():
    """``--read-via``'s help says, for every registered layout, what auto/library/pread mean (from the
    registry: a new format's line appears without editing the CLI)."""
    from click.testing import CliRunner

    from dlbench.cli import main

    assert all(f.read_via for f in registry.FORMATS.values())
    out = " ".join(CliRunner().invoke(main, ["run", "--help"]).output.split())
    for f in registry.FORMATS.values():
        assert f"{f.name}: {f.read_via}." in out
