"""CLI help and run summary for the cache family (issue 9)."""

from dlbench.report import render_summary


def test_shared_option_help_states_every_owners_default(cli):
    """regression: a flag shared by several strategies showed its first owner's default for all of them
    (--loader-threads said default 2 for lbann; --mode said default ordered for lbann)"""
    out = " ".join(cli(["run", "--help"]).output.split())
    assert "default 2 (clairvoyant), 0 (deepio, lbann, local, locality, pls, staging, surrogatetrain)" in out
    # each owner's meaning under its own flag, and only its own (issue 16: --mode's help described the other's)
    assert "(deepio) ordered (exact global shuffle" in out and "(lbann) preload (each rank" in out
    assert "default ordered" in out and "default preload" in out
    assert out.count("preload (each rank") == 1 and out.count("opportunistic (batches") == 1


def test_summary_prints_order_semantics_and_bytes_by_source():
    s = {"workload": "w", "strategy": "deepio", "ranks": 2, "nodes": 2, "epochs": 2,
         "bytes_by_tier": {"shared": 2 * 2**20, "local": 2**20, "memory": 3 * 2**20, "peer": 2**19},
         "semantics": {"each_epoch_a_full_permutation": "no", "global_batch_is_global_shuffles": "no",
                       "order_changes": "yes"},
         "order_quality": {"fraction_of_dataset_seen_per_rank_after_epoch": [0.2, 0.25],
                           "global_shuffle_expected_after_epoch": [0.5, 0.75]}}
    txt = render_summary({"summary": s})
    assert "shared FS 2.0, own tiers 4.0 (local 1.0, memory 3.0), peers 0.5" in txt
    assert "full permutation each epoch: no; global batch = global shuffle's: no; order changes: yes" in txt
    assert "25.0% (global shuffle: 75.0%)" in txt


def test_dry_run_states_the_cache_a_strategy_needs(tmp_path, cli):
    import json

    out = tmp_path / "res"
    r = cli(["run", "--workload", "cosmoflow", "--data-dir", tmp_path / "none", "--dry-run", "--out", out,
             "--strategy", "clairvoyant", "--cache-capacity", 3 * 266240])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["capacity"]["cache_peak_samples"] == [3] and info["capacity"]["cache_capacity_source"] == \
        "--cache-capacity"
    assert info["semantics"]["order_changes"] == "no" and info["bytes_by_tier"]["memory"] > 0
    assert not out.exists() and not (tmp_path / "none").exists()
