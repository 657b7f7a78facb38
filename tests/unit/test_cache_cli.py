"""CLI help and run summary for the cache family (issue 9)."""

from dlbench.report import render_summary


def test_shared_option_help_states_every_owners_default(cli):
    """regression: a flag shared by several strategies showed its first owner's default for all of them
    (--loader-threads said default 2 for lbann; --mode said default ordered for lbann)"""
    out = " ".join(cli(["run", "--help"]).output.split())
    assert "default 2 (clairvoyant), 0 (deepio, lbann, local, locality, pls, staging)" in out
    assert "default ordered (deepio), preload (lbann)" in out
    assert "deepio: ordered" in out and "lbann: preload" in out


def test_summary_prints_order_semantics_and_bytes_by_source():
    s = {"workload": "w", "strategy": "deepio", "ranks": 2, "nodes": 2, "epochs": 2,
         "bytes_by_tier": {"shared": 2e6, "local": 1e6, "memory": 3e6, "peer": 5e5},
         "semantics": {"each_epoch_a_full_permutation": "no", "global_batch_is_global_shuffles": "no",
                       "order_changes": "yes"},
         "order_quality": {"fraction_of_dataset_seen_per_rank_after_epoch": [0.2, 0.25],
                           "global_shuffle_expected_after_epoch": [0.5, 0.75]}}
    txt = render_summary({"summary": s})
    assert "shared FS 2.0, own tiers 4.0 (local 1.0, memory 3.0), peers 0.5" in txt
    assert "full permutation each epoch: no; global batch = global shuffle's: no; order changes: yes" in txt
    assert "25.0% (global shuffle: 75.0%)" in txt
