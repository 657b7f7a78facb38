"""DLIO 2.0.0's checkpoint shape (checkpoint.type / optimization_groups / num_layers / layer_parameters /
tensor_parallelism / pipeline_parallelism): dlbench.dlio translates it into a spec, and
dlbench.run.checkpoint.dlio2_files gives each rank the files DLIO 2.0.0's BaseCheckpointing writes."""

import pytest

from dlbench import dlio
from dlbench.errors import ConfigError
from dlbench.run.checkpoint import dlio2_files

# DLIO 2.0.0's megatron_deepspeed.yaml, its shape as shipped (only the dataset shrunk)
MEGATRON = {"model": "megatron_deepspeed", "framework": "pytorch",
            "workflow": {"generate_data": False, "train": True, "checkpoint": True},
            "dataset": {"format": "mmap_indexed_binary", "num_files_train": 1, "num_samples_per_file": 64,
                        "record_length": 2048},
            "reader": {"data_loader": "pytorch", "batch_size": 8, "read_threads": 1, "file_shuffle": "seed",
                       "sample_shuffle": "seed"},
            "train": {"epochs": 1, "computation_time": 0.03},
            "checkpoint": {"checkpoint_folder": "checkpoints/megatron-deepspeed", "steps_between_checkpoints": 4,
                           "model_size": 30102, "type": "all_ranks",
                           "optimization_groups": [1009254400, 865075200, 793600], "num_layers": 44,
                           "layer_parameters": [129761280, 20971520]}}


def _spec(**ckpt):
    return {"type": "all_ranks", "model_size": 100, "optimization_groups": [40, 0, 20], "num_layers": 4,
            "layer_parameters": [10, 0, 5], "tp": 1, "pp": 1, **ckpt}


def _sizes(spec, rank):
    return {f.name: f.nbytes for f in dlio2_files(spec, rank)}


def test_dlio_byte_formula_all_ranks():
    # model: model_size; optimizer: 3 x sum(groups > 0); a layer file: sum(layer_parameters > 0), num_layers of them
    want = {"model-{r}.pt": 100, "optimizer-{r}.pt": 3 * 60, **{f"layer-{i}-{{r}}.pt": 15 for i in range(4)}}
    for r in (0, 1, 5):
        assert _sizes(_spec(), r) == {k.format(r=r): v for k, v in want.items()}
    files = dlio2_files(_spec(), 0)   # packed one after the other in the rank's buffer
    assert [f.offset for f in files] == [0, 100, 280, 295, 310, 325]


def test_rank_zero_writes_alone():
    assert len(dlio2_files(_spec(type="rank_zero"), 0)) == 6
    assert dlio2_files(_spec(type="rank_zero"), 1) == [] and dlio2_files(_spec(type="rank_zero"), 3) == []


def test_pipeline_and_tensor_parallelism():
    pp = _spec(pp=2)   # only ranks % PP == 0 write layer files
    assert sum(n.startswith("layer-") for n in _sizes(pp, 0)) == 4
    assert _sizes(pp, 1) == {"model-1.pt": 100, "optimizer-1.pt": 180}
    assert sum(n.startswith("layer-") for n in _sizes(pp, 2)) == 4
    tp = _spec(tp=2)   # TP > 1 adds TP layer files (DLIO's total_layers = num_layers + TP)
    assert sorted(n for n in _sizes(tp, 1) if n.startswith("layer-")) == [f"layer-{i}-1.pt" for i in range(6)]
    assert sum(n.startswith("layer-") for n in _sizes(_spec(tp=1), 0)) == 4


def test_nothing_to_write_is_no_file():
    s = _spec(model_size=0, optimization_groups=[], layer_parameters=[0], num_layers=4)
    assert dlio2_files(s, 0) == []
    assert _sizes(_spec(num_layers=0), 0) == {"model-0.pt": 100, "optimizer-0.pt": 180}


def test_megatron_2_0_0_translates_to_the_spec():
    t = dlio.translate(MEGATRON)
    assert not t.unsupported
    spec = t.run["checkpoint_model"]
    assert spec == {"type": "all_ranks", "optimization_groups": [1009254400, 865075200, 793600], "num_layers": 44,
                    "layer_parameters": [129761280, 20971520], "tp": 1, "pp": 1, "model_size": 30102}
    assert t.run["checkpoint_every_steps"] == 4
    rank0 = 30102 + 3 * (1009254400 + 865075200 + 793600) + 44 * (129761280 + 20971520)
    assert sum(f.nbytes for f in dlio2_files(spec, 0)) == rank0
    assert t.workload["model"]["parameters"] == -(-rank0 // 12)


def test_defaults_and_spellings():
    ck = {k: v for k, v in MEGATRON["checkpoint"].items() if k not in ("type", "num_layers", "layer_parameters")}
    spec = dlio.translate({**MEGATRON, "checkpoint": ck}).run["checkpoint_model"]
    # DLIO 2.0.0's defaults: rank 0 writes, 1 layer of [17371, 24740228] parameters
    assert spec["type"] == "rank_zero" and spec["num_layers"] == 1 and spec["layer_parameters"] == [17371, 24740228]
    # TP / PP from model.parallelism.* as well as checkpoint.*_parallelism; the model.* spellings of the shape
    cfg = {**MEGATRON, "checkpoint": {**MEGATRON["checkpoint"], "tensor_parallelism": 4},
           "model": {"name": "m", "parallelism": {"pipeline": 2}}}
    spec = dlio.translate(cfg).run["checkpoint_model"]
    assert (spec["tp"], spec["pp"]) == (4, 2)
    ck = {k: v for k, v in MEGATRON["checkpoint"].items() if k not in ("optimization_groups", "layer_parameters")}
    cfg = {**MEGATRON, "checkpoint": ck,
           "model": {"name": "m", "optimization_groups": [8, 4], "layer_parameters": [3], "num_layers": 2}}
    spec = dlio.translate(cfg).run["checkpoint_model"]
    assert (spec["optimization_groups"], spec["layer_parameters"], spec["num_layers"]) == ([8, 4], [3], 44)
    # without the workflow's checkpoint, nothing is written
    off = {**MEGATRON, "workflow": {**MEGATRON["workflow"], "checkpoint": False}}
    assert dlio.translate(off).run["checkpoint_model"] is None


@pytest.mark.parametrize("ckpt, match", [
    ({"type": "independent"}, r"checkpoint\.type='independent': DLIO allows rank_zero, all_ranks"),
    ({"optimization_groups": 5}, r"checkpoint\.optimization_groups=5: must be a list of integers"),
    ({"layer_parameters": [1.5]}, r"checkpoint\.layer_parameters=\[1\.5\]: must be a list of integers"),
    ({"num_layers": -1}, r"checkpoint\.num_layers=-1: must be an integer >= 0"),
    ({"pipeline_parallelism": 3}, r"checkpoint\.pipeline_parallelism=3: must divide the number of layers \(44\)"),
    ({"tensor_parallelism": 0}, r"checkpoint\.tensor_parallelism=0: must be an integer >= 1"),
    ({"model_size": -4}, r"checkpoint\.model_size=-4: must be an integer >= 0")])
def test_bad_shapes_are_one_line(ckpt, match):
    with pytest.raises(ConfigError, match=match):
        dlio.translate({**MEGATRON, "checkpoint": {**MEGATRON["checkpoint"], **ckpt}})


def test_two_shapes_are_refused():
    cfg = {**MEGATRON, "model": {"name": "m", "transformer": {"hidden_size": 64}}}
    with pytest.raises(ConfigError, match=r"model\.transformer\.\* .* give one checkpoint shape"):
        dlio.translate(cfg)


UNET3D_2_0_0 = {"model": "unet3d", "framework": "pytorch", "workflow": {"train": True, "checkpoint": True},
                "dataset": {"format": "npz", "num_files_train": 168, "num_samples_per_file": 1,
                            "record_length": 146600628, "record_length_stdev": 68341808},
                "reader": {"data_loader": "pytorch", "batch_size": 7, "read_threads": 4, "sample_shuffle": "seed"},
                "train": {"epochs": 5, "computation_time": 0.323},
                "checkpoint": {"checkpoint_after_epoch": 5, "epochs_between_checkpoints": 2, "model_size": 499153191}}


def test_a_2_0_0_file_without_a_shape_gets_dlio_2_0_0s_defaults():
    """DLIO 2.0.0's unet3d files give no shape: DLIO 2.0.0 still writes, on rank 0, its default layer
    (num_layers 1, layer_parameters [17371, 24740228]) beside the model; later DLIO's spelling keeps the one
    model file."""
    spec = dlio.translate(UNET3D_2_0_0).run["checkpoint_model"]
    assert _sizes(spec, 0) == {"model-0.pt": 499153191, "layer-0-0.pt": 17371 + 24740228}
    assert _sizes(spec, 1) == {}
    later = {**UNET3D_2_0_0, "dataset": {**UNET3D_2_0_0["dataset"], "record_length_bytes": 146600628,
                                         "record_length_bytes_stdev": 68341808},
             "model": {"name": "unet3d", "model_size_bytes": 499153191},
             "checkpoint": {"checkpoint_after_epoch": 5, "epochs_between_checkpoints": 2}}
    for k in ("record_length", "record_length_stdev"):
        del later["dataset"][k]
    assert dlio.translate(later).run["checkpoint_model"] is None
    # an LLM shape (model.transformer.*) on a 2.0.0-spelled file stays the LLM checkpoint
    llm = {**UNET3D_2_0_0, "model": {"name": "m", "num_layers": 2, "transformer": {
        "hidden_size": 64, "ffn_hidden_size": 128, "vocab_size": 500, "num_attention_heads": 4}}}
    assert "hidden" in dlio.translate(llm).run["checkpoint_model"]


def test_imported_workload_says_the_checkpoint_files_are_dlio_config_only():
    text = dlio.workload_yaml(dlio.translate(MEGATRON))
    assert "NOT EMULATED by `dlbench run --workload THIS.yaml`: DLIO's checkpoint files per rank" in text
    off = {**MEGATRON, "workflow": {**MEGATRON["workflow"], "checkpoint": False}}
    assert "checkpoint files per rank" not in dlio.workload_yaml(dlio.translate(off))
