"""Each rank's parameters hold exactly its slice of the checkpoint, read without the rest of the tensor;
what cannot be split says so before any weight is read."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime import distributed as state
from model_optimizer.runtime.distributed import TensorParallel
from tests.runtime.spawn import run_ranks


def _load_and_record_reads(model_dir: str):
    """This rank's parameters and, per checkpoint tensor name, the shapes the loader read from the file."""
    from unittest import mock

    import torch

    from model_optimizer.runtime.layers.lazy_tensor import LazyTensor
    from model_optimizer.runtime.models import loader

    names: dict[int, str] = {}
    reads: dict[str, list[tuple[int, ...]]] = {}
    iterate, load = loader.iterate_lazy_checkpoint, LazyTensor.load

    def named(model_dir):
        for path, name, lazy in iterate(model_dir):
            names[id(lazy.source)] = name
            yield path, name, lazy

    def spy(self, dtype=None):
        out = load(self, dtype)
        reads.setdefault(names[id(self.source)], []).append(tuple(out.shape))
        return out

    with mock.patch.object(loader, "iterate_lazy_checkpoint", named), mock.patch.object(LazyTensor, "load", spy):
        model = loader.load_model(model_dir, "float32", torch.device("cpu"))
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    return params, reads, model.local_num_kv_heads


def _checkpoint(model_dir: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(f"{model_dir}/model.safetensors")


@pytest.mark.slow
def test_each_rank_holds_its_slice(tiny_model):
    """mistral: 4 heads of 32, 2 KV heads, intermediate 128, vocabulary 1032, untied head."""
    model_dir = str(tiny_model("mistral"))
    ckpt = _checkpoint(model_dir)
    hd, q, kv, inter, vocab = 32, 4 * 32, 2 * 32, 128, 1032
    for rank, (params, _, kv_heads) in enumerate(run_ranks(_load_and_record_reads, 2, model_dir)):
        assert kv_heads == 1
        layer = "model.layers.1."
        qkv = params[layer + "self_attn.qkv_proj.weight"]
        assert qkv.shape == ((q + 2 * kv) // 2, 64)
        torch.testing.assert_close(qkv[: q // 2], ckpt[layer + "self_attn.q_proj.weight"][rank * q // 2 :][: q // 2])
        torch.testing.assert_close(qkv[q // 2 : q // 2 + hd], ckpt[layer + "self_attn.k_proj.weight"][rank * hd :][:hd])
        torch.testing.assert_close(qkv[q // 2 + hd :], ckpt[layer + "self_attn.v_proj.weight"][rank * hd :][:hd])
        o_proj = ckpt[layer + "self_attn.o_proj.weight"]
        torch.testing.assert_close(params[layer + "self_attn.o_proj.weight"], o_proj[:, rank * q // 2 :][:, : q // 2])
        gate_up = params[layer + "mlp.gate_up_proj.weight"]
        half = inter // 2
        torch.testing.assert_close(gate_up[:half], ckpt[layer + "mlp.gate_proj.weight"][rank * half :][:half])
        torch.testing.assert_close(gate_up[half:], ckpt[layer + "mlp.up_proj.weight"][rank * half :][:half])
        down = ckpt[layer + "mlp.down_proj.weight"]
        torch.testing.assert_close(params[layer + "mlp.down_proj.weight"], down[:, rank * half :][:, :half])
        torch.testing.assert_close(
            params["model.embed_tokens.weight"], ckpt["model.embed_tokens.weight"][rank * 516 :][:516]
        )
        torch.testing.assert_close(params["lm_head.weight"], ckpt["lm_head.weight"][rank * 516 :][:516])
        torch.testing.assert_close(params[layer + "input_layernorm.weight"], ckpt[layer + "input_layernorm.weight"])
        assert ckpt["lm_head.weight"].shape[0] == vocab


HALVED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.slow
def test_no_rank_reads_a_whole_split_tensor(tiny_model):
    model_dir = str(tiny_model("qwen2"))  # vocabulary 1031: the last rank's block is one row short
    full = {name: tuple(t.shape) for name, t in _checkpoint(model_dir).items()}
    results = run_ranks(_load_and_record_reads, 2, model_dir)
    for rank, (_, reads, _) in enumerate(results):
        assert set(reads) == set(full)  # every tensor read once (tied lm_head: none in the file)
        for name, shapes in reads.items():
            assert len(shapes) == 1
            if any(part in name for part in HALVED):
                assert 2 * torch.Size(shapes[0]).numel() == torch.Size(full[name]).numel(), (rank, name, shapes)
            elif name != "model.embed_tokens.weight":
                assert shapes == [full[name]], name
    assert results[0][1]["model.embed_tokens.weight"] == [(516, 64)]
    assert results[1][1]["model.embed_tokens.weight"] == [(515, 64)]
    padding = results[1][0]["model.embed_tokens.weight"][515:]
    assert padding.shape == (1, 64) and torch.count_nonzero(padding) == 0


def test_one_process_loads_every_tensor_whole(tiny_model):
    """tp=1: the same shapes as the checkpoint, each tensor read once, whole."""
    model_dir = str(tiny_model("qwen3"))
    full = {name: tuple(t.shape) for name, t in _checkpoint(model_dir).items()}
    params, reads, kv_heads = _load_and_record_reads(model_dir)
    assert kv_heads == 2
    assert params["model.layers.0.self_attn.qkv_proj.weight"].shape == ((4 + 2 + 2) * 32, 64)
    assert reads == {name: [shape] for name, shape in full.items()}


@pytest.mark.parametrize(
    ("size", "overrides", "message"),
    [
        (3, {}, "num_attention_heads of 4 does not divide by tensor_parallel_size 3"),
        (2, {"num_attention_heads": 6, "num_key_value_heads": 3, "head_dim": 16}, "num_key_value_heads of 3"),
        (4, {"num_attention_heads": 8, "num_key_value_heads": 3, "head_dim": 16}, "neither a divisor nor a multiple"),
        (2, {"intermediate_size": 129}, "gate output size of 129 does not divide by tensor_parallel_size 2"),
    ],
)
def test_a_model_that_does_not_split_is_refused(tiny_model, monkeypatch, size, overrides, message):
    """Built as rank 0 of `size` (no group needed: nothing is communicated while building)."""
    import re

    from model_optimizer.runtime.models.llama import LlamaForCausalLM
    from model_optimizer.runtime.models.model_config import DecoderArgs, read_config

    config = {**read_config(tiny_model("mistral")), **overrides}
    monkeypatch.setattr(state, "_current", TensorParallel(0, size))
    with pytest.raises(ValueError, match=re.escape(message)):
        LlamaForCausalLM(DecoderArgs.from_dict(config, source="config.json"))


@pytest.mark.parametrize(
    ("size", "overrides", "message"),
    [
        (0, {}, "tensor_parallel_size must be at least 1, got 0"),
        (3, {}, "num_attention_heads of 4 does not divide by tensor_parallel_size 3"),
        (4, {"num_attention_heads": 8, "num_key_value_heads": 3, "head_dim": 16}, "neither a divisor nor a multiple"),
        (2, {"intermediate_size": 129}, "intermediate_size of 129 does not divide by tensor_parallel_size 2"),
        (2, {"architectures": ["BertModel"]}, "not supported for generation"),
    ],
)
def test_the_driver_learns_from_config_json_that_a_model_does_not_split(tiny_model, tmp_path, size, overrides, message):
    """check_tensor_parallel runs in a process that never joins a group: before any worker starts."""
    import json
    import re

    from model_optimizer.runtime.models.loader import check_tensor_parallel

    config = {**json.loads((tiny_model("mistral") / "config.json").read_text()), **overrides}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=re.escape(message)):
        check_tensor_parallel(tmp_path, size)


def test_the_driver_check_passes_what_splits(tiny_model):
    from model_optimizer.runtime.models.loader import check_tensor_parallel

    for name, size in [("mistral", 2), ("llama3", 4), ("qwen2", 4), ("qwen3", 1)]:
        check_tensor_parallel(tiny_model(name), size)  # no error


def _dummy_shapes(model_dir: str) -> dict[str, tuple[int, ...]]:
    import torch

    from model_optimizer.runtime.models.loader import load_model

    model = load_model(model_dir, "float32", torch.device("cpu"), load_format="dummy")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


@pytest.mark.slow
def test_dummy_weights_fill_each_rank_shard(tiny_model):
    """No checkpoint read: each rank draws its own shard, in the sharded shapes."""
    model_dir = str(tiny_model("llama3"))  # 4 heads of 16, one KV head (replicated), vocabulary 1032
    for shapes in run_ranks(_dummy_shapes, 2, model_dir):
        assert shapes["model.layers.0.self_attn.qkv_proj.weight"] == ((2 + 1 + 1) * 16, 64)
        assert shapes["model.layers.0.self_attn.o_proj.weight"] == (64, 32)
        assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 64)
        assert shapes["lm_head.weight"] == (516, 64)
