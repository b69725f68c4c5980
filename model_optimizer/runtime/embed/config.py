"""EmbedConfig: every knob of the embedder, each field's docstring doubling as its CLI help.

What it shares with EngineConfig, and why it is a config of its own:
- `SHARED_FIELDS` (tokenizer, dtype, load_format, device) mean the same as in EngineConfig, with the
  same choices and defaults (tests/runtime/embed/test_config.py holds them equal), and `from_engine` is the
  one place that carries them over: `mopt serve` of an embedding folder and `LLM.embed` use it.
- It is not merged into EngineConfig: an encoder has no KV cache, scheduler or sampler, so two
  thirds of EngineConfig's fields would be flags of `mopt embed` that do nothing, and pooling,
  normalisation, instructions and packing would be flags of `mopt serve` for generation that do
  nothing. A shared base class would have to live in config.py and reorder EngineConfig's fields
  (its flags and help) for four fields.
- `dtype`'s `auto` differs in one case, on purpose, and the rule is stated once, in the field below
  (implemented by embed/backbone.py `embed_dtype`, on top of the loader's rule): a float32 checkpoint
  runs in half precision on CUDA, as vLLM's `auto` does for every model. Pooled vectors keep their
  direction in half precision (MiniLM: cosine >= 0.999998 to float32), while the engine keeps float32
  so that generation stays token-for-token equal to transformers in the checkpoint's dtype; changing
  the engine's rule would change generation, which [arch] (issue 14) must not. `LLM.embed` on a
  decoder embeds with the engine's weights, hence in the engine's dtype.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from model_optimizer.runtime.config import DType, check_choice, check_non_negative, check_positive

if TYPE_CHECKING:
    from model_optimizer.runtime.config import EngineConfig

DEFAULT_INSTRUCTION_TEMPLATE = "Instruct: {task}\nQuery:{text}"
"""Qwen3-Embedding's query format, no space after "Query:" (its model card, vLLM's example and
sentence-transformers' `query` prompt all spell it so)."""

SHARED_FIELDS = ("tokenizer", "dtype", "load_format", "device")
"""EmbedConfig fields that mean the same as EngineConfig's: `from_engine` copies them."""


@dataclass
class EmbedConfig:
    """How an embedding model is loaded, batched and pooled."""

    tokenizer: str | None = None
    """Tokenizer folder, when it differs from the model folder."""

    dtype: DType = "auto"
    """Weight and activation dtype; auto is the engine's rule (torch_dtype from config.json, float16 as float32
    on the CPU) except that a float32 checkpoint runs in half precision on CUDA, as in vLLM: float16 for
    encoders, bfloat16 for decoders."""

    load_format: Literal["auto", "safetensors", "dummy"] = "auto"
    """Weights from *.safetensors, or random ones from config.json alone (dummy, for benchmarks)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Device to run on; auto picks CUDA when torch sees a GPU."""

    pooling: Literal["auto", "mean", "cls", "last", "max", "mean_sqrt_len"] = "auto"
    """How token states become one vector; auto reads 1_Pooling/config.json, else last for decoders and mean for encoders."""

    normalize: bool | None = None
    """L2-normalize embeddings. Empty: as the folder's modules.json says (Normalize module), else yes."""

    max_seq_length: int | None = None
    """Longest input in tokens. Empty: sentence_bert_config.json's max_seq_length, else the position table size."""

    max_num_batched_tokens: int = 16384
    """Token budget of one forward pass; inputs are packed end to end up to it (no padding)."""

    max_num_seqs: int = 512
    """Most inputs in one forward pass."""

    cuda_graph_max_tokens: int = 2048
    """Run packed batches of up to this many tokens as CUDA graph replays (fp16/bf16 on CUDA; one graph per
    power-of-two bucket of tokens, inputs and longest input, at most 32). 0: off. A replay saves the
    host's launches, which dominate small batches; past a few thousand tokens it stops paying
    (README "Embeddings", CUDA graphs)."""

    tokenizer_threads: int | None = None
    """Threads that tokenize a call's texts chunk by chunk while the model runs the chunks before. Empty: the CPU
    count, at most 8, on CUDA; 0 on the CPU, where the model needs the cores. 0: tokenize every chunk on the
    calling thread before the first forward pass."""

    instruction_template: str = DEFAULT_INSTRUCTION_TEMPLATE
    """How an instruction is put before a text; must contain {task} and {text} (a literal brace: {{ or }})."""

    append_eos: bool | None = None
    """Append the end token to each text unless it is already last (Qwen3-Embedding style). Empty: yes for decoders."""

    eos_token: str | None = None
    """The token append_eos adds. Empty: <|endoftext|> when the vocabulary has it, else the tokenizer's eos_token."""

    @classmethod
    def from_engine(cls, engine: EngineConfig, **fields: Any) -> EmbedConfig:
        """The embedder config of an engine config's model: SHARED_FIELDS as the engine has them, then `fields`."""
        return cls(**{name: getattr(engine, name) for name in SHARED_FIELDS} | fields)

    def __post_init__(self) -> None:
        check_positive(self, "max_num_batched_tokens", "max_num_seqs")
        check_choice(self, "dtype", "load_format", "device", "pooling")
        check_non_negative(self, "cuda_graph_max_tokens", "tokenizer_threads")
        if self.max_seq_length is not None:
            check_positive(self, "max_seq_length")
        check_instruction_template(self.instruction_template)


def check_instruction_template(template: str) -> None:
    """ValueError naming what is wrong when `template` is no str.format template with {task} and {text}
    as its only fields (a literal brace is written {{ or }}): checked here, so a bad one fails when the
    config is made, not at the first embedding with a KeyError."""
    hint = "only {task} and {text} are filled in; write a literal brace as {{ or }}"
    if not isinstance(template, str):
        raise ValueError(f"instruction_template must be a string, got {type(template).__name__}")
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
        for field in fields:
            if field not in ("task", "text"):
                raise ValueError(f"instruction_template {template!r} has the placeholder {{{field}}}; {hint}")
        template.format(task="task", text="text")  # a format spec the text cannot take ({task:d})
    except KeyError as exc:  # a field inside a format spec: {task:{width}}
        raise ValueError(f"instruction_template {template!r} has the placeholder {{{exc.args[0]}}}; {hint}") from None
    except (ValueError, IndexError, AttributeError, TypeError) as exc:
        if str(exc).startswith("instruction_template"):
            raise
        raise ValueError(f"instruction_template {template!r} is not a valid template ({exc}); {hint}") from None
    if "task" not in fields or "text" not in fields:
        raise ValueError(f"instruction_template must contain {{task}} and {{text}}, got {template!r}")


def refuse_load_time_quantization(quantization: str | None, model_dir: Any) -> None:
    """An embedding model loaded from its folder takes the folder's own quantization only: a
    `--quantization` / `quantization=` asked of it is an error saying what to do, never ignored."""
    if quantization not in (None, "none"):
        raise ValueError(
            f"quantization {quantization!r} does not apply to the embedding model in {model_dir}: quantize it "
            f"ahead of time (mopt quantize {model_dir} --method {quantization} --output DIR) and load DIR"
        )
