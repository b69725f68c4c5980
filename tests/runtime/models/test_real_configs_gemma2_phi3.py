"""Gemma 2 and Phi-3 / Phi-4 at the releases' real sizes (real_configs.py: their config.json key for key).

Each builds on the meta device at its published parameter count and serves vLLM's context; at its real
attention widths its greedy tokens are transformers'; `mopt inspect` finds nothing wrong with its folder;
the tuner's cost model counts what the engine builds; tensor parallelism splits it where vLLM does and
names why where it does not; benchmarks/configs' gemma-2-9b and phi-4-mini run by name."""

from __future__ import annotations

import json
import math
import re
import zlib
from pathlib import Path

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.model.inspect.consumption import build_meta_model
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.model.inspect.plan_shape import model_shape
from model_optimizer.optimizer.tune.collectives import tensor_parallel_problem
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.runtime.models.loader import check_tensor_parallel
from model_optimizer.runtime.models.model_config import read_config
from tests import tiny_checkpoints as tiny
from tests.runtime.models.real_configs import (
    CONFIGS,
    CONTEXT,
    GENERATION_CONFIGS,
    HEADS,
    PUBLISHED_PARAMS,
    checkpoint_tensors,
    write_release,
)
from tests.runtime.models.test_matches_transformers import assert_matches_transformers, prompts

REPO = Path(__file__).resolve().parents[3]
BENCHMARK_CONFIGS = {"gemma-2-9b": "gemma-2-9b-it", "phi-4-mini": "Phi-4-mini-instruct"}
"""The benchmark folders added for the GPU benchmarks -> the release whose shapes they hold."""
SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
SHAPE_KEYS += ("num_key_value_heads", "head_dim", "max_position_embeddings", "partial_rotary_factor")


def _folder(root: Path, config: dict) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_release_builds_at_its_published_size_and_context(name):
    """The memory plan (the engine's model on meta), the tuner's cost model and transformers' own model count
    the same parameters, within 1% of the model card's; the context is vLLM's default max_model_len."""
    config = CONFIGS[name]
    plan, cost = plan_memory(config), model_cost(config)
    model = build_meta_model(config)
    assert plan.num_params == sum(p.numel() for p in model.parameters())
    assert plan.num_params == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)
    assert cost.num_params == pytest.approx(plan.num_params, rel=1e-3)  # the cost model leaves out the norms
    assert cost.kv_bytes_per_token == plan.kv_bytes_per_token
    assert model.args.max_position_embeddings == plan.max_model_len == cost.max_position_embeddings == CONTEXT[name]
    reference = checkpoint_tensors(config)  # transformers' model, as the release saves it
    assert model.args.tie_word_embeddings == ("lm_head.weight" not in reference)
    assert plan.num_params == sum(math.prod(shape) for shape in reference.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_each_release_loads_dummy_weights_and_generates(name, tmp_path):
    """--load-format dummy at every real width (2 layers and a small vocabulary, so the CPU holds it), serving
    past longrope's original length where the context allows (the long factors)."""
    config = CONFIGS[name] | {"num_hidden_layers": 2, "vocab_size": 4096}
    folder = _folder(tmp_path / name, config)
    max_model_len = min(CONTEXT[name], 4608)
    llm = LLM(str(folder), load_format="dummy", dtype="bfloat16", max_model_len=max_model_len, num_kv_blocks=300)
    out = llm.generate([list(range(1, 40))], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 4
    args = llm.runner.args
    assert (args.num_heads, args.num_kv_heads, args.max_position_embeddings) == (*HEADS[name], CONTEXT[name])


REAL_WIDTHS = ["gemma-2-27b-it", "Phi-3-medium-128k-instruct", "Phi-4-mini-instruct"]
"""Gemma 2 27B: q narrower than the hidden state (32 x 128 < 4,608) and query_pre_attn_scalar 144; Phi-3-medium:
"su" longrope, 64 factors, 4 query heads per KV head; Phi-4-mini: 0.75 of 128-wide heads rotated, tied."""


@pytest.mark.slow
@pytest.mark.parametrize("name", REAL_WIDTHS)
def test_greedy_matches_transformers_at_the_real_attention_widths(name, tmp_path):
    """The release's config, but 2 layers, a narrow MLP and the test vocabulary: random weights saved by
    transformers; fp32 greedy tokens identical, logprobs within 1e-4 (max_model_len 512: short factors)."""
    small = {"num_hidden_layers": 2, "intermediate_size": 256, "vocab_size": tiny.TOKENIZER_VOCAB + 8}
    ids = {"torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    config = {k: v for k, v in (CONFIGS[name] | small | ids).items() if k != "auto_map"}
    import transformers

    folder = tiny.build_checkpoint(
        tmp_path / name, transformers.AutoConfig.for_model(**config), zlib.crc32(name.encode()) % 1000, False
    )
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 25, max_model_len=512, skip_tokenizer_init=True)
    batch = prompts(llm.runner.vocab_size, seed=3)
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=5)
    ours = llm.generate([{"prompt_token_ids": p} for p in batch], params, use_tqdm=False)
    assert_matches_transformers(folder, batch, ours)


INSPECT_WARNINGS = {"tokenizer.missing", "tokens.pad_is_eos", "chat_template.missing"}
"""What inspect rightly says of these folders: no tokenizer (config only), Phi's pad that is its eos (true of the
releases: a fine-tuning hazard), no chat template (the word tokenizer has none)."""


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_inspect_of_the_release_folder_finds_nothing_wrong(name, tmp_path):
    """Sharded safetensors of the release's tensors at their shapes: every one maps to the engine's parameters,
    no error, no warning beyond INSPECT_WARNINGS, and the parameter count is the plan's."""
    report = inspect_checkpoint(write_release(tmp_path / name, CONFIGS[name]))
    assert report.raw_check.loads and report.exit_code == 0, report.raw_check
    assert report.raw_check.num_params == plan_memory(CONFIGS[name]).num_params
    flagged = {f.id for f in report.findings if f.severity in ("warn", "error")}
    assert flagged <= INSPECT_WARNINGS, [f.title for f in report.findings if f.id in flagged - INSPECT_WARNINGS]


@pytest.mark.parametrize("name", sorted(GENERATION_CONFIGS))
def test_inspect_with_a_tokenizer_and_the_generation_config(name, tmp_path):
    """A word-per-id tokenizer of the vocabulary (benchmarks/word_tokenizer_model.py, eos the config's) and the
    release's generation_config.json with its extra stop ids: the eos ids agree, nothing else is flagged."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("word_tokenizer_model", REPO / "benchmarks/word_tokenizer_model.py")
    words = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(words)
    words.write(_folder(tmp_path / "config", CONFIGS[name]), tmp_path / "tokenizer")
    folder = write_release(tmp_path / name, CONFIGS[name])
    for file in (tmp_path / "tokenizer").glob("tok*"):
        file.rename(folder / file.name)
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIGS[name]))
    report = inspect_checkpoint(folder)
    flagged = {f.id for f in report.findings if f.severity in ("warn", "error")}
    assert report.exit_code == 0 and flagged <= INSPECT_WARNINGS - {"tokenizer.missing"}
    assert "tokens.eos" in {f.id for f in report.findings}


def _divides_as_vllm(config: dict, size: int) -> bool:
    """vLLM's rule: query heads and the MLP split evenly; KV heads split evenly, or, fewer than the GPUs, each
    replicated over an equal group of them."""
    heads, kv, inter = config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]
    return heads % size == 0 and inter % size == 0 and (kv % size == 0 if kv >= size else size % kv == 0)


@pytest.mark.parametrize("size", [2, 3, 4, 8])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_tensor_parallel_splits_where_vllm_does(name, size, tmp_path):
    """Accepted sizes build rank 0's shard with its share of the heads (a KV head replicated when fewer than the
    GPUs); refused ones fail before any process starts, naming the count that does not divide, in the engine,
    the memory plan and the tuner alike (TP=3 everywhere; Phi-3-medium and Phi-4's 10 KV heads at 4 and 8)."""
    config = CONFIGS[name]
    folder = _folder(tmp_path / name, config)
    shape = {"num_heads": config["num_attention_heads"], "num_kv_heads": config["num_key_value_heads"]}
    problem = tensor_parallel_problem(size, shape | {"intermediate_size": config["intermediate_size"]}, None)
    if not _divides_as_vllm(config, size):
        with pytest.raises(ValueError, match=f"does not divide by tensor_parallel_size {size}") as refused:
            check_tensor_parallel(folder, size)
        with pytest.raises(ValueError, match=re.escape(str(refused.value))):
            model_shape(config, "bfloat16", size)
        assert problem is not None and str(refused.value) in problem
        return
    check_tensor_parallel(folder, size)
    heads, kv_heads = HEADS[name]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    rank = model_shape(config, "bfloat16", size)
    assert problem is None
    assert (rank.q_size, rank.kv_size) == (heads // size * head_dim, max(kv_heads // size, 1) * head_dim)


def test_llm_refuses_a_size_that_does_not_divide_before_loading(tmp_path):
    config = CONFIGS["gemma-2-9b-it"]
    folder = _folder(tmp_path / "gemma-2-9b-it", config)
    with pytest.raises(ValueError, match="num_attention_heads of 16 does not divide by tensor_parallel_size 3"):
        LLM(str(folder), load_format="dummy", tensor_parallel_size=3, device="cpu")


@pytest.mark.parametrize(("folder", "release"), sorted(BENCHMARK_CONFIGS.items()))
def test_benchmark_configs_hold_the_release_shapes(folder, release):
    """benchmarks/configs/NAME (what decode_latency.py --models NAME, tp.py and throughput.py --model NAME load
    with dummy bf16 weights) reads as the engine reads a model folder, with the release's shapes and size."""
    config = read_config(REPO / "benchmarks" / "configs" / folder)
    assert {k: config.get(k) for k in SHAPE_KEYS} == {k: CONFIGS[release].get(k) for k in SHAPE_KEYS}
    assert config["torch_dtype"] == "bfloat16"
    assert plan_memory(config).num_params == plan_memory(CONFIGS[release]).num_params


@pytest.mark.slow  # two subprocesses compiling some 45 Triton kernels for sm_90
@pytest.mark.parametrize("folder", sorted(BENCHMARK_CONFIGS))
def test_benchmark_configs_compile_an_engine_start_for_the_gpu(folder, tmp_path):
    """`mopt compile-cache build` walks a GPU start's forward passes on the meta device, through the GPU kernels
    at the real shapes (head_dim 256 with soft-capped scores; 0.75 of 128-wide heads rotated)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("triton.backends.compiler")
    flags = ["--max-num-seqs", "2", "--max-model-len", "256", "--max-num-batched-tokens", "64", "--dtype", "bfloat16"]
    model, out = REPO / "benchmarks" / "configs" / folder, tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "model_optimizer.cli.main", "compile-cache", "build", "--model", str(model)]
    done = subprocess.run(
        [*command, *flags, "--output", str(out), "--jobs", "1"], env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    launched = json.loads((out / "aot_manifest.json").read_text())["kernel_launches"]
    assert {"_paged_attention_kernel", "_gumbel_argmax_kernel"} <= set(launched)
