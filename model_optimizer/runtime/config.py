"""Configuration dataclasses: the one place where every engine default lives.

Each field's docstring (the string literal under it) is also its CLI help, so flags,
config files and documentation share one definition. Names follow vLLM's flags.
"""

from __future__ import annotations

import ast
import inspect
import typing
from dataclasses import dataclass
from functools import cache
from typing import Literal

DType = Literal["auto", "bfloat16", "float16", "float32"]


@dataclass
class EngineConfig:
    """Everything that shapes how a model is loaded and served."""

    model: str | None = None
    """Checkpoint folder (config.json, *.safetensors, tokenizer). Empty: the built-in default model."""

    tokenizer: str | None = None
    """Tokenizer folder, when it differs from the model folder."""

    dtype: DType = "auto"
    """Weight and activation dtype; auto takes torch_dtype from config.json (float32 on CPU if it is float16)."""

    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    """How to get weights: from *.safetensors, or random ones built from config.json alone (dummy, for benchmarks)."""

    quantization: Literal["none", "fp8", "int8", "awq", "rtn-int4"] | None = None
    """Weight quantization (vLLM's --quantization). Empty: as config.json's quantization_config says; fp8, int8
    and rtn-int4 quantize a float checkpoint at load time; awq needs a folder written by `mopt quantize`."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device to run on; auto picks CUDA when torch sees a GPU."""

    max_model_len: int | None = None
    """Longest prompt plus output, in tokens. Empty: max_position_embeddings from config.json."""

    block_size: int = 16
    """Tokens per KV-cache block."""

    max_num_seqs: int = 256
    """Most requests running at once."""

    max_num_batched_tokens: int = 8192
    """Token budget of one engine step; long prompts are cut into chunks that fit it."""

    enable_chunked_prefill: bool = True
    """Split prompts longer than the step budget across several steps."""

    max_num_partial_prefills: int = 1
    """Long prefills (see long_prefill_token_threshold) that take a first chunk of each step ahead of
    shorter requests; further long prompts keep their queue place while shorter ones behind them get
    into the batch, then all long prefills share what the step leaves (the budget is filled as before).
    Raise it to favour long prompts' time to first token over short ones'."""

    long_prefill_token_threshold: int = 0
    """A prefill with more tokens than this left to compute is long: it takes at most this many tokens of a
    step before shorter requests are served, and the rest from what they leave. 0: 4% of max_model_len;
    max_model_len or more: strict first-come first-served."""

    enable_prefix_caching: bool = True
    """Reuse the KV cache of full blocks shared with earlier prompts."""

    gpu_memory_utilization: float = 0.9
    """Fraction of GPU memory the engine may use (weights, activations and KV cache)."""

    kv_cache_memory: int = 1 << 30
    """Bytes for the KV cache when running on the CPU."""

    num_kv_blocks: int | None = None
    """Exact number of KV-cache blocks, overriding the memory-based sizing."""

    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    """KV-cache element type: auto is the model dtype; fp8 (e4m3 with scales) halves it on GPUs that support it."""

    enforce_eager: bool = False
    """Run eagerly: no CUDA graphs (as vLLM's flag); starts fastest, decodes slowest."""

    async_scheduling: bool = True
    """Schedule and prepare the next step while the device computes this one (outputs trail by one step)."""

    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"
    """Waiting-queue order: first come first served, or by request priority (lower first), then arrival."""

    seed: int = 0
    """Seed of the sampler for requests without a seed of their own."""

    tensor_parallel_size: int = 1
    """GPUs to split every layer across (one worker process each; gloo processes on the CPU). 1: this
    process runs the model itself. Heads, KV heads and the MLP width must divide by it (KV heads may
    instead be fewer, then each is replicated)."""

    one_shot_all_reduce: bool = False
    """Sum decode-sized tensor-parallel messages with torch's symmetric-memory one-shot kernel instead of
    NCCL. On two H200s the kernel alone is about twice as fast (6-13 us against 13-27 us, inside CUDA
    graphs), but whole decode steps did not follow: Llama-3.1-8B at batch 1 3.67 against 3.59 ms,
    Llama-3.1-70B 21.68 against 21.78 ms (benchmarks/results/tp_h200x2/), so NCCL stays the default."""

    speculative_config: str | dict | None = None
    """Speculative decoding, as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": 4,
    "prompt_lookup_max": 4} (prompt lookup) or {"model": DRAFT_FOLDER, "num_speculative_tokens": 4} (a
    smaller model with the same vocabulary). Greedy output is unchanged and sampling keeps the model's
    distribution; speculation turns itself off for batch sizes where it measures slower. Empty: off."""

    def __post_init__(self) -> None:
        check_positive(
            self,
            "block_size",
            "max_num_seqs",
            "max_num_batched_tokens",
            "kv_cache_memory",
            "max_num_partial_prefills",
            "tensor_parallel_size",
        )
        value = self.long_prefill_token_threshold
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"long_prefill_token_threshold must be an integer >= 0 (0: 4% of max_model_len), got {value!r}"
            )
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise ValueError(f"max_model_len must be a positive integer, got {self.max_model_len}")
        if self.num_kv_blocks is not None and self.num_kv_blocks <= 0:
            raise ValueError(f"num_kv_blocks must be a positive integer, got {self.num_kv_blocks}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        check_choice(self, "dtype", "load_format", "device", "kv_cache_dtype", "scheduling_policy")
        spec = self.speculative  # checked now, so a bad value fails at start-up
        if spec is not None and spec.is_draft_model and self.tensor_parallel_size > 1:
            raise ValueError(
                "speculative_config: a draft model runs with tensor_parallel_size 1 only; with tensor parallelism "
                'use {"method": "ngram", ...}'
            )

    @property
    def speculative(self):  # noqa: ANN201 - SpeculativeConfig | None, imported lazily (cheap, torch-free)
        """`speculative_config` read and checked: a SpeculativeConfig, or None when speculation is off."""
        from model_optimizer.runtime.spec_decode.config import parse_speculative_config

        return parse_speculative_config(self.speculative_config)


def check_positive(obj: object, *names: str) -> None:
    """Raise ValueError naming the first field that is not a positive integer."""
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_non_negative(obj: object, *names: str) -> None:
    """Raise ValueError naming the first field that is set and is not an integer >= 0 (0 switches it off)."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"{name} must be an integer >= 0 (0: off), got {value!r}")


def check_choice(obj: object, *names: str) -> None:
    """Raise ValueError when a Literal-typed field holds a value outside its choices."""
    for name in names:
        allowed = field_choices(type(obj), name)
        value = getattr(obj, name)
        if allowed and value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def field_choices(cls: type, name: str) -> tuple:
    """The allowed values of a Literal-typed field, or () for free-form fields."""
    hint = typing.get_type_hints(cls)[name]
    return typing.get_args(hint) if typing.get_origin(hint) is Literal else ()


@cache
def field_docs(cls: type) -> dict[str, str]:
    """Map each dataclass field to the docstring written under it in the class body."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:]):
        is_doc = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_doc:
            docs[node.target.id] = " ".join(str(following.value.value).split())
    return docs
