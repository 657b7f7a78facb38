"""dlbench.checkpoint.models: MLPerf Storage v3.0's Llama 3 checkpoints as DLIO sizes them, per rank."""

from pathlib import Path

import pytest

from dlbench.checkpoint import models as M
from dlbench.errors import ConfigError

GiB = 1 << 30


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b"])
def test_presets_match_mlperf_table_2(name):
    m = M.PRESETS[name]
    assert abs(M.total_bytes(m) / m.table_bytes - 1) < 0.01


def test_405b_is_5292_gib_and_parallelism_is_mlperfs():
    # Table 2 prints 5.29 (thousands of GiB: DLIO's own total is 5,292 GiB)
    m = M.PRESETS["llama3-405b"]
    assert round(M.total_bytes(m) / GiB) == 5292
    assert (m.tp, m.pp, m.dp, m.zero, m.world) == (8, 32, 2, 1, 512)
    assert (M.PRESETS["llama3-1t"].world, M.PRESETS["llama3-70b"].world, M.PRESETS["llama3-8b"].world) == (1024, 64, 8)


def _split_gib(m):
    """(model states, optimizer states) of the whole job, GiB."""
    every = [t for r in range(m.world) for _, ts in M.rank_files(m, r, "stream") for t in ts]
    opt = sum(t.nbytes for t in every if t.name.startswith("optim"))
    return (sum(t.nbytes for t in every) - opt) / GiB, opt / GiB


def test_1t_is_15427_gib_and_table_2s_18_tb_counts_the_model_states_twice():
    # mlpstorage's LLM_SIZE_BY_RANK (model GB, optimizer GB), the source of Rules Table 2's sizes
    llm_size_by_rank = {"llama3-405b": (755, 4533), "llama3-1t": (2571, 15426)}
    model, opt = _split_gib(M.PRESETS["llama3-405b"])
    assert abs(model - 755) < 2 and abs(opt - 4533) < 4          # 405B: DLIO's own split
    m = M.PRESETS["llama3-1t"]
    total = M.total_bytes(m) / GiB
    assert round(total) == 15427 == llm_size_by_rank["llama3-1t"][1] + 1   # their "optimizer" is our total
    assert abs(llm_size_by_rank["llama3-1t"][0] - total / 6) < 1          # and their "model" a sixth of it
    assert abs(sum(llm_size_by_rank["llama3-1t"]) / 1000 - 18) < 0.01     # 2571 + 15426: Table 2's "18 TB"


def test_zero1_is_uneven_data_parallel_rank_0_holds_the_model_states():
    m = M.PRESETS["llama3-405b"]
    r0, r_dp1 = 0, m.tp * m.pp          # same tp/pp coordinates, data-parallel rank 1
    assert m.coords(r_dp1) == (0, 0, 1)
    layers = sum(t.nbytes for _, ts in M.rank_files(m, r0, "shards") for t in ts if not t.name.startswith("optim"))
    assert M.rank_bytes(m, r0) - M.rank_bytes(m, r_dp1) == layers > 0
    # ZeRO-3: every rank writes its shard, all equal
    m8 = M.PRESETS["llama3-8b"]
    assert len({M.rank_bytes(m8, r) for r in range(m8.world)}) == 1


def test_shards_use_deepspeeds_names_and_scale_keeps_files():
    m = M.get_model("llama3-405b", scale=1e-6)
    full = M.PRESETS["llama3-405b"]
    names = [n for n, _ in M.rank_files(m, 0, "shards")]
    assert names == [n for n, _ in M.rank_files(full, 0, "shards")]
    assert names[0] == "layer_00-model_00_model_states.pt" and names[-1] == "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    assert len(M.rank_files(m, 0, "stream")) == 1
    assert 0 < M.rank_bytes(m, 0) < M.rank_bytes(full, 0) * 2e-6
    names8 = [n for n, _ in M.rank_files(M.PRESETS["llama3-8b"], 3, "shards")]
    assert names8 == ["zero_pp_rank_3_mp_rank_00_model_states.pt", "zero_pp_rank_3_mp_rank_00_optim_states.pt"]


def test_custom_model_and_subset_mode():
    m = M.get_model(None, layers=4, hidden=64, ffn=256, vocab=1000, heads=4, tp=2, pp=2, dp=2, zero=1)
    assert m.world == 8 and M.stage_layers(m, 0) == range(0, 3) and M.stage_layers(m, 1) == range(3, 7)
    assert M.ranks_to_run(M.PRESETS["llama3-70b"], 8, subset=True) == list(range(8))
    with pytest.raises(ConfigError, match="--subset"):
        M.ranks_to_run(M.PRESETS["llama3-70b"], 8, subset=False)


@pytest.mark.parametrize("kw, msg", [({"scale": 0}, "--scale=0"), ({"tp": 0}, "--tp=0"), ({"zero": 4}, "--zero=4")])
def test_bad_values_are_one_line(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        M.get_model("llama3-8b", **kw)
    with pytest.raises(ConfigError, match="llama3-8b"):
        M.get_model("llama3-9b")


def test_resharded_read_plan_covers_what_the_new_ranks_need():
    from dlbench.checkpoint.engine import needs, placement, read_plan

    m = M.get_model(None, layers=4, hidden=64, ffn=256, vocab=1000, heads=4, kv_heads=2, tp=2, pp=1, dp=2, zero=3)
    place = placement(m, list(range(m.world)), "shards", Path("/ckpt"))
    m2 = M.get_model(None, layers=4, hidden=64, ffn=256, vocab=1000, heads=4, kv_heads=2, tp=1, pp=2, dp=2, zero=3)
    for r in range(m2.world):
        rp = read_plan(place, needs(m2, r))
        assert rp.needed > 0 and rp.missing == 0 and rp.nbytes == rp.needed
        assert all(len(v) >= 1 for v in rp.ranges.values())
    # own restore: exactly the rank's files, one request per file
    own = read_plan(place, [t for _, ts in M.rank_files(m, 1, "shards") for t in ts])
    assert sorted(p.rsplit("/", 1)[1] for p in own.ranges) == sorted(n for n, _ in M.rank_files(m, 1, "shards"))
    assert all(len(v) == 1 for v in own.ranges.values())
