"""Configuration dataclasses: the one place where every engine default lives.

Each field's docstring (the string literal under it) is also its CLI help, so flags,
config files and documentation share one definition. Names follow vLLM's flags.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import math
import typing
from dataclasses import dataclass
from functools import cache
from typing import Literal

from model_optimizer.runtime.units import ByteSize, parse_size_fields

DType = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["none", "fp8", "int8", "int8-w8a8", "awq", "rtn-int4"]
VLLM_SPELLINGS = {"dtype": {"half": "float16", "float": "float32"}, "kv_cache_dtype": {"fp8_e4m3": "fp8"}}
"""vLLM's other names for some choices, taken as ours (`--dtype half` is in many vLLM guides)."""
MAX_NUM_SEQS = 1 << 20
"""Most sequences a batch may hold: the runner's per-sequence buffers are made at this size when it starts,
and far larger values failed only after the load, in torch ("Maximum allowed dimension exceeded")."""


@dataclass
class EngineConfig:
    """Everything that shapes how a model is loaded and served."""

    model: str | None = None
    """Checkpoint folder (config.json, *.safetensors, tokenizer) or Hugging Face Hub id (Qwen/Qwen3-0.6B:
    downloaded to the Hub cache, read from it offline). Empty: the built-in default model."""

    tokenizer: str | None = None
    """Tokenizer folder or Hugging Face Hub id, when it differs from the model."""

    revision: str | None = None
    """Branch, tag or commit of a Hugging Face Hub model id (and of the tokenizer when it is the same id).
    Empty: the default branch."""

    skip_tokenizer_init: bool = False
    """Load no tokenizer (vLLM's flag): prompts are token ids and outputs carry token ids without text."""

    dtype: DType = "auto"
    """Weight and activation dtype; auto takes torch_dtype from config.json, except on the CPU: float16 becomes
    float32, and bfloat16 stays only where this CPU measured bfloat16 matmuls faster (`mopt doctor` shows it)."""

    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    """How to get weights: from *.safetensors, or random ones built from config.json alone (dummy, for benchmarks)."""

    quantization: Quantization | None = None
    """Weight quantization (vLLM's --quantization). Not given: as config.json's quantization_config says; none:
    never quantize; fp8, int8, int8-w8a8 (int8 weights, activations quantized per token where that is faster)
    and rtn-int4 quantize a float checkpoint at load time; awq reads an AWQ checkpoint (AutoAWQ's GEMM layout,
    or a folder written by `mopt quantize`)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device to run on; auto picks CUDA when torch sees a GPU."""

    max_model_len: int | None = None
    """Longest prompt plus output, in tokens (the flag also takes 32k = 32,000, 32K = 32,768). Empty, auto or
    -1: max_position_embeddings from config.json (vLLM's auto / -1 is the longest that fits in memory)."""

    block_size: int = 16
    """Tokens per KV-cache block."""

    max_num_seqs: int = 256
    """Most requests running at once."""

    max_num_batched_tokens: int = 8192
    """Token budget of one engine step; long prompts are cut into chunks that fit it (the flag takes 8k, 8K too).
    Left at 8192 with chunked prefill off and a larger max_model_len given, it is max_model_len, as vLLM's
    default then is (a whole prompt must fit one step)."""

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

    max_decode_stall: float | None = None
    """While requests decode, a step may take at most this many times as long as a decode-only step: the
    engine times its steps and caps the prefill tokens of each, so a long prompt proceeds in smaller
    chunks and running streams keep their pace. Empty: 2 on the CPU, where a step's time grows fastest
    with its tokens, off on GPUs (there max_num_batched_tokens bounds a step); 0: off. It works by cutting
    chunks, so it needs chunked prefill (without it a prompt comes whole)."""

    enable_prefix_caching: bool = True
    """Reuse the KV cache of full blocks shared with earlier prompts."""

    gpu_memory_utilization: float = 0.9
    """Fraction of GPU memory the engine may use (weights, activations and KV cache)."""

    kv_cache_memory: ByteSize = 1 << 30
    """Memory for the KV cache when running on the CPU: bytes, or a size such as 8GiB or 512MB."""

    num_kv_blocks: int | None = None
    """Exact number of KV-cache blocks, overriding the memory-based sizing."""

    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    """KV-cache element type: auto is the model dtype; fp8 (e4m3 with scales) halves it on GPUs that support it."""

    cpu_offload_gb: float = 0
    """GiB of decoder-layer weights (per GPU) to keep in host memory and copy to the GPU ahead of each
    layer's use, overlapped with compute: a model larger than the GPU runs, each step paying about
    offloaded bytes / host-to-device bandwidth. Whole layers, spread evenly over the depth. 0: off."""

    kv_offloading_size: float = 0
    """GiB of host memory per tensor-parallel rank for a second prefix cache: cached KV blocks the GPU evicts
    are saved there and copied back on a later prefix hit instead of being recomputed. 0: off. vLLM's
    --kv-offloading-size is the total over all ranks (the vLLM translation multiplies by tensor_parallel_size)."""

    preemption_mode: Literal["recompute", "swap"] = "recompute"
    """What happens to a request preempted when the KV cache runs out of blocks: recompute drops its KV and
    computes its prompt and generated tokens again when it resumes; swap copies its blocks to the host KV
    tier's memory (needs kv_offloading_size) and copies them back instead (vLLM V0's flag of the same name)."""

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

    enable_expert_parallel: bool = False
    """Mixture-of-experts models under tensor parallelism: each GPU holds whole experts (1/N of them)
    instead of a 1/N slice of every expert; the rest of each layer stays split as before. The
    number of experts must divide by tensor_parallel_size. Same name as vLLM's flag."""

    one_shot_all_reduce: bool = False
    """Sum decode-sized tensor-parallel messages with torch's symmetric-memory one-shot kernel instead of
    NCCL. The kernel alone beats NCCL at decode sizes, but whole decode steps did not get faster, so
    NCCL stays the default (figures: README "Tensor parallelism", benchmarks/results/tp_h200x2/)."""

    generation_config: str = "auto"
    """Where the sampling defaults come from (vLLM's flag): auto, the model folder's generation_config.json;
    vllm, none (SamplingParams' own); or a folder holding a generation_config.json."""

    override_generation_config: str | dict | None = None
    """Sampling defaults set over generation_config's, as JSON (vLLM's flag), e.g. '{"temperature": 0.6}';
    keys as in generation_config.json: temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens."""

    speculative_config: str | dict | None = None
    """Speculative decoding, as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": 4,
    "prompt_lookup_max": 4} (prompt lookup) or {"model": DRAFT, "num_speculative_tokens": 4} (a
    smaller model with the same vocabulary: a folder or a Hub id). Greedy output is unchanged and sampling keeps the model's
    distribution; speculation turns itself off for batch sizes where it measures slower. Empty: off."""

    def __post_init__(self) -> None:
        parse_size_fields(self)
        for name in ("model", "tokenizer"):  # "" (an unset shell variable) is "not given", not the current folder
            if isinstance(getattr(self, name), str) and not getattr(self, name).strip():
                setattr(self, name, None)
        self._check_counts()
        self._check_memory()
        self._check_choices()

    def _check_counts(self) -> None:
        """The sizes of a batch and of the context, the step budget (max_model_len's where chunked prefill
        is off and it was left at its default), and the seed."""
        check_positive(
            self,
            "block_size",
            "max_num_seqs",
            "max_num_batched_tokens",
            "kv_cache_memory",
            "max_num_partial_prefills",
            "tensor_parallel_size",
        )
        if self.max_num_seqs > MAX_NUM_SEQS:
            raise ValueError(f"max_num_seqs must be at most {MAX_NUM_SEQS:,}, got {self.max_num_seqs:,}")
        value = self.long_prefill_token_threshold
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(
                f"long_prefill_token_threshold must be an integer >= 0 (0: 4% of max_model_len), got {value!r}"
            )
        # type first, in the same check: "1.5" or 2.5 (the Python API, a config file) is a ValueError naming
        # the field, not a TypeError or torch's error from deep in the load
        auto = isinstance(self.max_model_len, str) and self.max_model_len.strip().lower() == "auto"
        if auto or (isinstance(self.max_model_len, int) and self.max_model_len == -1):
            self.max_model_len = None  # vLLM's auto / -1; other text ("100") is refused below, as any wrong type
        for name in ("max_model_len", "num_kv_blocks"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        default_budget = next(f.default for f in dataclasses.fields(self) if f.name == "max_num_batched_tokens")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens == default_budget and self.max_model_len:
            self.max_num_batched_tokens = max(self.max_model_len, default_budget)  # vLLM's default, chunking off
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    def _check_memory(self) -> None:
        """Host offload of weights and KV blocks (and swap preemption, which needs the latter), the GPU
        memory share and the decode-stall cap."""
        offload = self.cpu_offload_gb  # NaN and infinity passed `< 0` and failed in the loader's int()
        if isinstance(offload, bool) or not isinstance(offload, (int, float)) or not 0 <= offload < math.inf:
            raise ValueError(f"cpu_offload_gb must be a number of GiB >= 0 (0: off), got {offload!r}")
        tier = self.kv_offloading_size
        if isinstance(tier, bool) or not isinstance(tier, (int, float)) or not 0 <= tier < math.inf:
            raise ValueError(f"kv_offloading_size must be a number of GiB >= 0 (0: off), got {tier!r}")
        if tier and not self.enable_prefix_caching:
            raise ValueError("kv_offloading_size keeps prefix-cache blocks: it needs enable_prefix_caching")
        if self.preemption_mode == "swap" and not tier:
            raise ValueError(
                "preemption_mode swap copies preempted requests' KV blocks to host memory: set kv_offloading_size "
                "to the GiB it may use (or keep preemption_mode recompute)"
            )
        utilization = self.gpu_memory_utilization
        if isinstance(utilization, bool) or not isinstance(utilization, (int, float)) or not 0.0 < utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization!r}")
        stall = self.max_decode_stall
        if stall is not None and (
            isinstance(stall, bool) or not isinstance(stall, (int, float)) or not (stall == 0 or stall > 1)
        ):
            raise ValueError(f"max_decode_stall must be 0 (off) or a number above 1, got {stall!r}")

    def _check_choices(self) -> None:
        """The sampling defaults' source and overrides, the Literal-typed choices (vLLM's spellings taken),
        and the speculative config, read now so that a bad value fails at start-up."""
        if not isinstance(self.generation_config, str) or not self.generation_config.strip():
            raise ValueError("generation_config must be auto, vllm or a folder with a generation_config.json")
        self.override_generation_config = generation_overrides(self.override_generation_config)
        for name, spellings in VLLM_SPELLINGS.items():
            setattr(self, name, spellings.get(getattr(self, name), getattr(self, name)))
        check_choice(
            self,
            "dtype",
            "load_format",
            "device",
            "kv_cache_dtype",
            "scheduling_policy",
            "preemption_mode",
            "quantization",
        )
        spec = self.speculative
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


GENERATION_DEFAULT_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}
"""generation_config.json keys the engine takes as sampling defaults (those a model's authors chose, as vLLM
applies them) -> their SamplingParams fields; other keys (do_sample, max_length, token ids) are not defaults."""


def generation_overrides(value: str | dict | None) -> dict | None:
    """override_generation_config as a dict of generation_config.json keys; ValueError naming what is wrong."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"override_generation_config is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"override_generation_config must be a JSON object, got {value!r}")
    unknown = sorted(set(value) - set(GENERATION_DEFAULT_FIELDS))
    if unknown:
        raise ValueError(
            f"override_generation_config: unknown keys {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(GENERATION_DEFAULT_FIELDS)}"
        )
    return value


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
        if allowed and value is not None and value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}; got {value!r}")


def field_choices(cls: type, name: str) -> tuple:
    """The allowed values of a Literal-typed field (`Literal[...] | None` too: None is "not set"), or ()
    for free-form fields."""
    hint = typing.get_type_hints(cls)[name]
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    literals = [a for a in typing.get_args(hint) if typing.get_origin(a) is Literal]
    if len(literals) == 1 and set(typing.get_args(hint)) <= {literals[0], type(None)}:
        return typing.get_args(literals[0])
    return ()


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
