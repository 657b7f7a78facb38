"""Issue 26: workload figures checked against MLPerf Storage v1.0 (DLIO v2.0.0's configs) and sustain's
bandwidth need in MiB/s."""

import pytest

from dlbench import sustain as S
from dlbench import workload as W

MIB = 2**20


def test_imagenet_h100_step_time_is_mlperf_storage_v1s():
    """Regression: 0.103 s at batch 64 (DLIO before v2.0.0) where MLPerf Storage v1.0 ran 0.224 s at batch 400:
    the bandwidth per accelerator read 0.32x the published one."""
    st = W.load("imagenet").compute["h100"]
    assert (st.step_time_s, st.batch_size) == (0.224, 400) and "v2.0.0" in st.source


def test_cosmoflow_mlperf_is_mlperf_storages_shape():
    """MLPerf Storage's cosmoflow is one ~2.8 MB TFRecord per sample (DLIO cosmoflow_*.yaml), not the 16 MiB
    HDF5 cube of the built-in cosmoflow (MLPerf HPC): its own workload, and each one says which it is."""
    m = W.load("cosmoflow_mlperf", scale="full")
    hpc = W.load("cosmoflow", scale="full")
    assert m.layout == "tfrecord" and m.samples == 524288 and m.samples_per_file == 1 and m.batch_size == 1
    assert m.record_size.mean_bytes == 2828486 and m.record_size.std_bytes == 71311
    assert {a: m.compute[a].step_time_s for a in ("v100", "a100", "h100")} == \
        {"v100": 0.00936, "a100": 0.00551, "h100": 0.00350}
    assert m.au_threshold == hpc.au_threshold == 0.70
    assert hpc.sample_nbytes / m.sample_nbytes == pytest.approx(5.93, abs=0.01)   # the "5.8x higher"
    assert "cosmoflow_mlperf" in W.load_spec("cosmoflow")[0].description


@pytest.mark.parametrize("workload,acc,mib_s", [("unet3d", "h100", 2726.9), ("imagenet", "h100", 168.6),
                                                ("cosmoflow_mlperf", "h100", 539.5)])
def test_sustain_needs_mib_per_s_at_the_threshold(workload, acc, mib_s):
    wl = W.load(workload, scale="full")
    need, how = S.need_bytes_per_s(wl, acc, wl.au_threshold)
    st = wl.compute[acc]
    assert need == pytest.approx(wl.au_threshold * st.batch_size * wl.sample_nbytes / st.step_time_s)
    assert need / MIB == pytest.approx(mib_s, abs=0.05)
    row = {"scale": 1.0, "base_profile": "local", "calibrated_pfs": "x", "fit_rms_au": 0.0, "identified": True,
           "strategy": "naive", "workload": workload, "accelerator": acc, "threshold": wl.au_threshold,
           "threshold_source": "t", "sustained_scale": "full", "sustained": 1, "sustained_kind": "modelled",
           "measured_scale": "tiny", "measured_passing": 1, "fit_rms_au_strategy": 0.0,
           "need_bytes_per_s_per_accelerator": need, "need_how": how,
           "points": [{"accelerators": 2, "kind": "modelled", "scale": "full", "au": 0.5, "samples_per_s": 1.0,
                       "shared_bytes_per_s": 4 * MIB, "bytes_per_s_per_accelerator": 2 * MIB}]}
    text = S.render([row])
    assert f"an accelerator needs {mib_s:,.1f} MiB/s at the AU threshold" in text
    assert "MiB/s per accel" in text and "MB/s" not in text.replace("MiB/s", "")
    assert text.splitlines()[-1].split()[-2:] == ["4.0", "2.00"]   # binary: 4 MiB/s shared, 2 per accelerator
