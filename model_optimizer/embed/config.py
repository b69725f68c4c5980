"""EmbedConfig: every knob of the embedder, each field's docstring doubling as its CLI help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from model_optimizer.config import check_choice, check_non_negative, check_positive

DEFAULT_INSTRUCTION_TEMPLATE = "Instruct: {task}\nQuery: {text}"


@dataclass
class EmbedConfig:
    """How an embedding model is loaded, batched and pooled."""

    tokenizer: str | None = None
    """Tokenizer folder, when it differs from the model folder."""

    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Weight and activation dtype; auto takes torch_dtype from config.json, except float32 runs in half precision on
    CUDA (as in vLLM: float16 for encoders, bfloat16 for decoders) and float16 as float32 on the CPU."""

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
    power-of-two bucket of tokens, inputs and longest input, at most 32). 0: off. On the H200 a replay
    beat eager 12x at one short text and 4.5x at 960 tokens, and lost at 7,680."""

    tokenizer_threads: int | None = None
    """Threads that tokenize a call's texts chunk by chunk while the model runs the chunks before. Empty: the CPU
    count, at most 8, on CUDA; 0 on the CPU, where the model needs the cores. 0: tokenize every chunk on the
    calling thread before the first forward pass."""

    instruction_template: str = DEFAULT_INSTRUCTION_TEMPLATE
    """How an instruction is put before a text; must contain {task} and {text}."""

    append_eos: bool | None = None
    """Append the end token to each text unless it is already last (Qwen3-Embedding style). Empty: yes for decoders."""

    eos_token: str | None = None
    """The token append_eos adds. Empty: <|endoftext|> when the vocabulary has it, else the tokenizer's eos_token."""

    def __post_init__(self) -> None:
        check_positive(self, "max_num_batched_tokens", "max_num_seqs")
        check_choice(self, "dtype", "load_format", "device", "pooling")
        check_non_negative(self, "cuda_graph_max_tokens", "tokenizer_threads")
        if self.max_seq_length is not None:
            check_positive(self, "max_seq_length")
        if "{task}" not in self.instruction_template or "{text}" not in self.instruction_template:
            raise ValueError(
                f"instruction_template must contain {{task}} and {{text}}, got {self.instruction_template!r}"
            )
