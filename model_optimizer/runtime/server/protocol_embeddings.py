"""The /v1/embeddings request: OpenAI's fields (protocol.EmbeddingRequest) and vLLM's extras, each acted on.

vLLM's extras: `normalize` (`use_activation` in newer vLLM), `add_special_tokens`, `embed_dtype` and
`endianness` for base64 vectors, and a chat instead of `input` (`messages`, rendered through the chat
template, with the template fields chat completions take). Unknown fields are ignored, as everywhere, so a
field vLLM acts on is declared here rather than left to be dropped without a word.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol import EmbeddingRequest, PromptInput
from model_optimizer.runtime.server.protocol_chat import ChatMessages, ChatTemplateFields

EmbedDType = Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
"""vLLM's element types for base64 vectors (runtime/embed/vector_bytes.py encodes them)."""


class EmbeddingsBody(EmbeddingRequest, ChatTemplateFields):
    input: PromptInput | None = None
    """Required unless `messages` is given (exactly one of the two)."""
    messages: ChatMessages | None = Field(default=None, min_length=1)
    """vLLM's chat-style input: one embedding of the conversation rendered through the chat template."""
    add_generation_prompt: bool = False
    """With messages: end the rendered chat with the assistant's turn opening (vLLM's default for embeddings: no)."""
    continue_final_message: bool = False
    """With messages: the rendered text ends inside the last message (needs add_generation_prompt false)."""
    add_special_tokens: bool | None = None
    """Whether the tokenizer adds its special tokens ([CLS] ... [SEP], a decoder's end token) to each text.
    Default: yes for input, no for messages (the template already writes them), as vLLM's."""
    normalize: bool | None = None
    """vLLM's: L2-normalize the vectors (false: as pooled); default: as the model folder says."""
    use_activation: bool | None = None
    """Newer vLLM's name for `normalize`; both given must agree."""
    embed_dtype: EmbedDType = "float32"
    """vLLM's: the element type of base64 vectors (float32 is OpenAI's); float vectors are float32 always."""
    endianness: Literal["native", "big", "little"] = "native"
    """vLLM's: the byte order of base64 vectors; native is the server's (little on x86 and ARM servers)."""

    def checked_normalize(self) -> bool | None:
        """`normalize`, or `use_activation` under its newer name; a 400 when both are given and differ."""
        if self.normalize is not None and self.use_activation is not None and self.normalize != self.use_activation:
            raise APIError(
                400,
                f"normalize is {str(self.normalize).lower()} but use_activation (its newer name) is "
                f"{str(self.use_activation).lower()}: give one",
                "use_activation",
            )
        return self.normalize if self.normalize is not None else self.use_activation

    def check_one_input(self) -> None:
        """A 400 unless exactly one of `input` and `messages` is given, or for a template field not taken."""
        if self.input is not None and self.messages is not None:
            raise APIError(400, "give exactly one of input and messages (a chat to embed as one text)", "input")
        if self.input is None and self.messages is None:
            raise APIError(400, "input is required: give input (or messages, a chat to embed)", "input")
        refusal = self.template_refusal()
        if refusal is not None:
            raise APIError(400, *refusal)
