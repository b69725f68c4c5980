"""On-the-fly quantization of a float checkpoint under tensor parallelism: each rank rounds its own shard.

Column-parallel layers round whole output rows, so each rank's codes and scales are exactly its rows
of the one-device ones. Row-parallel layers round half a row (per-channel scales over this rank's
input columns), which differs from one device by rounding only: the logits stay as close to the float
model as one device's. Pre-quantized checkpoints cannot be split yet and are refused.
"""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime import distributed as state
from model_optimizer.runtime.distributed import TensorParallel
from tests.runtime.sharded import prefill_logits
from tests.runtime.spawn import run_ranks

COLUMN_PARALLEL = ("model.layers.0.self_attn.qkv_proj", "model.layers.1.mlp.gate_up_proj")


def _quantized_column_layers(model_dir: str, method: str) -> dict[str, tuple[torch.Tensor, torch.Tensor, dict]]:
    from model_optimizer.runtime.models.loader import load_model

    model = load_model(model_dir, "float32", torch.device("cpu"), quantization=method)
    modules = dict(model.named_modules())
    return {n: (modules[n].qweight, modules[n].scales, modules[n].shard_rows) for n in COLUMN_PARALLEL}


@pytest.mark.slow
@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_column_parallel_codes_are_the_rows_of_one_device(tiny_model, method):
    model_dir = str(tiny_model("qwen3"))
    single = _quantized_column_layers(model_dir, method)
    for rank_layers in run_ranks(_quantized_column_layers, 2, model_dir, method):
        for name, (qweight, scales, rows) in rank_layers.items():
            whole_q, whole_s, whole_rows = single[name]
            offset, parts_q, parts_s = 0, [], []
            for shard, (_, size) in whole_rows.items():  # one device: shard i at [offset, offset + size)
                start, length = rows[shard]
                parts_q.append(whole_q[offset + start : offset + start + length])
                parts_s.append(whole_s[offset + start : offset + start + length])
                offset += size
            assert torch.equal(qweight.view(torch.uint8), torch.cat(parts_q).view(torch.uint8)), name
            assert torch.equal(scales, torch.cat(parts_s)), name


@pytest.mark.slow
@pytest.mark.parametrize("method", ["int8", "fp8", "int8-w8a8"])  # int8-w8a8: each rank rounds its own slice of x
def test_sharded_quantized_logits_are_as_close_to_float(tiny_model, method):
    model_dir = str(tiny_model("qwen3"))
    dense = prefill_logits(model_dir)
    single = prefill_logits(model_dir, method)
    sharded, _ = run_ranks(prefill_logits, 2, model_dir, method)
    assert not torch.equal(sharded, dense)  # it did quantize
    single_error = (single - dense).abs().max()
    assert (sharded - dense).abs().max() <= 2 * single_error


def test_a_pre_quantized_checkpoint_is_refused_under_tensor_parallelism(tiny_model, monkeypatch, tmp_path):
    """The AutoAWQ layout is staged whole per layer; split, it would load a wrong model."""
    import json
    import shutil

    from model_optimizer.runtime.models.loader import load_model

    folder = tmp_path / "awq"
    shutil.copytree(tiny_model("qwen3"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm"}
    (folder / "config.json").write_text(json.dumps(config))
    from model_optimizer.runtime.models.loader import check_tensor_parallel

    refused = "tensor_parallel_size 2 does not support pre-quantized checkpoints"
    with pytest.raises(ValueError, match=refused):
        check_tensor_parallel(folder, 2)  # in the driver
    monkeypatch.setattr(state, "_current", TensorParallel(0, 2))
    with pytest.raises(ValueError, match=refused):
        load_model(folder, "float32", torch.device("cpu"))  # in a worker


def test_planes_packing_of_a_shard_is_the_shard_of_the_packing():
    """The GPU kernels' int4 packing is made per rank after its shard loaded: rows (column-parallel)
    and whole 128-column blocks (row-parallel: in_features / tp a multiple of the group size) of the
    packed weight are the packing of those rows and columns, so every rank reads exactly its codes."""
    from model_optimizer.runtime.kernels import quant_reference as ref

    codes = torch.randint(0, 16, (48, 512), generator=torch.Generator().manual_seed(3))
    whole = ref.pack_int4_planes(codes)
    rows = ref.pack_int4_planes(codes[16:32])
    assert torch.equal(rows, whole[16:32])
    half = ref.pack_int4_planes(codes[:, 256:])  # rank 1 of 2 along K
    assert torch.equal(half, whole[:, 256 // 8 :])
    assert torch.equal(ref.repack_int4(half, "planes", "sequential"), ref.pack_int4(codes[:, 256:]))
