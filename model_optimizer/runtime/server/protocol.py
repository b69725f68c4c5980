"""Pydantic models of the OpenAI API (the subset we serve): the fields every generating request shares
(`SamplingFields`), and the requests that take a plain prompt (completions, embeddings).

The other models: chat's requests in protocol_chat.py, /tokenize's in protocol_tokenize.py, what the
server answers in protocol_outputs.py, tools and structured outputs in protocol_structured.py, the
Responses API's request in protocol_responses.py, scoring's in protocol_score.py.

Static bounds live here (they also shape /openapi.json); caps that depend on the server's
configuration (n, logprobs, stop strings, prompts) are checked in `server.sampling`.
Unknown fields are ignored, as OpenAI clients send newer fields than any server knows. Known
fields are strict: `"max_tokens": "5"`, `"n": true` or `"stream": "yes"` are 400s naming the field,
not guesses (pydantic's lax mode would turn true into 1 and "5" into 5). One lax reading is kept, as
vLLM's: a whole-number float in an integer field (`"max_tokens": 5.0`, `"seed": 1e3`) is that integer
(`WholeFloats`); 5.5 stays a 400.
"""

from __future__ import annotations

import re
import types
import typing
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag, model_validator

from model_optimizer.runtime.server.body import in_slices
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol_structured import ResponseFormat, StructuredOutputsField, _Request

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenIds = Annotated[list[TokenId], in_slices()]
Texts = Annotated[list[str], in_slices()]
FORMAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""OpenAI's rule for the name of a json_schema output format (chat's response_format.json_schema.name, the
Responses API's text.format.name)."""


def checked_format_name(name: object, param: str) -> str:
    """`name` when it follows OpenAI's rule for a json_schema format's name (FORMAT_NAME), else APIError
    (400) naming `param`, the field as the request spells it."""
    if not isinstance(name, str) or not FORMAT_NAME.fullmatch(name):
        raise APIError(400, f"{param} must be 1 to 64 letters, digits, underscores or dashes, got {name!r}", param)
    return name


def _prompt_shape(value: Any) -> str | None:
    """Which of the four prompt shapes `value` is, from its type and first item: validated as that
    one alone, a million token ids cost one pass (a plain union tried each list shape on every item)
    and an error speaks of the shape the client sent."""
    if isinstance(value, str):
        return "text"
    if not isinstance(value, list):
        return None
    if value and isinstance(value[0], str):
        return "texts"
    if value and isinstance(value[0], list):
        return "token_id_lists"
    return "token_ids"


PromptInput = Annotated[
    Annotated[str, Tag("text")]
    | Annotated[Texts, Tag("texts")]
    | Annotated[TokenIds, Tag("token_ids")]
    | Annotated[Annotated[list[TokenIds], in_slices()], Tag("token_id_lists")],
    Discriminator(
        _prompt_shape,
        custom_error_type="prompt_shape",
        custom_error_message="must be a string, a list of strings, a list of token ids or a list of lists of token ids",
    ),
]
"""OpenAI's four prompt (and embedding input) shapes."""


class StreamOptions(_Request):
    include_usage: bool | None = True
    """Send one last chunk with token usage before [DONE]: on when left out of stream_options, off when
    false or null (vLLM's reading)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        """Null stays null here: include_usage null is off, as vLLM reads it (left out, it is on)."""
        return data

    continuous_usage_stats: bool = False
    """vLLM's: with include_usage, every chunk also carries the usage so far."""


class WholeFloats(_Request):
    """A request model whose integer fields (and lists of integers) take a float with no fractional part as
    that integer, as vLLM's (pydantic's lax mode) do: `"n": 2.0` is n 2, `"seed": 1e3` is seed 1000. Any other
    float (5.5, NaN, inf), a bool or a string stays the strict 400 naming the field."""

    @model_validator(mode="before")
    @classmethod
    def _whole_floats_as_ints(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        changed = {}
        for name, is_list in _int_fields(cls).items():
            value = data.get(name)
            if is_list and isinstance(value, list) and any(type(v) is float for v in value):
                changed[name] = [_whole(v) for v in value]
            elif not is_list and type(value) is float:
                changed[name] = _whole(value)
        return {**data, **changed} if changed else data


def _whole(value: Any) -> Any:
    """A whole-number float as its int; anything else as it is (for the strict check to refuse)."""
    return int(value) if type(value) is float and value.is_integer() else value


@cache
def _int_fields(model: type[BaseModel]) -> dict[str, bool]:
    """`model`'s fields that take an integer (False) or a list of integers (True), by name. A prompt (one shape
    of several, up to millions of ids) is left strict: scanning it would cost every request."""
    found = {}
    for name, info in model.model_fields.items():
        kinds = [k for k in _members(info.annotation) if k is not type(None)]
        if int in kinds:
            found[name] = False
        elif (
            len(kinds) == 1 and typing.get_origin(kinds[0]) is list and _members(typing.get_args(kinds[0])[0]) == [int]
        ):
            found[name] = True
    return found


def _members(annotation: Any) -> list[Any]:
    """The types an annotation admits, its unions and Annotated unwrapped (`int | None` -> [int, NoneType])."""
    if typing.get_origin(annotation) is Annotated:
        return _members(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


class SamplingFields(WholeFloats):
    """Fields shared by completions and chat completions (OpenAI's plus vLLM's extras)."""

    model: str | None = Field(default=None, max_length=512)
    max_tokens: int | None = Field(default=None, ge=1, le=INT64_MAX)
    temperature: float | None = Field(default=None, ge=0.0)
    """vLLM's bound: none above (a high temperature only flattens the distribution); NaN and inf are 400s."""
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=1024)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | Texts | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    user: str | None = Field(default=None, max_length=512)
    logit_bias: dict[str, float] | None = None
    # vLLM extras
    top_k: int | None = Field(default=None, ge=-1, le=1 << 20)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    """vLLM's bound: > 0, none above (as SamplingParams)."""
    min_tokens: int = Field(default=0, ge=0, le=INT64_MAX)
    use_beam_search: bool = False
    """vLLM's: answer with the n best beams of a beam search (runtime/beam_search.py) instead of n samples."""
    length_penalty: float = Field(default=1.0, ge=-10.0, le=10.0)
    """vLLM's, with use_beam_search: a beam's summed logprob is divided by its length to this power."""
    stop_token_ids: list[TokenId] | None = Field(default=None, max_length=1024)
    allowed_token_ids: list[TokenId] | None = Field(default=None, max_length=1 << 20)
    """Only these tokens may be sampled."""
    bad_words: list[Annotated[str, Field(min_length=1)]] | None = None
    """Words the output must not contain (tokenized alone and after a space, as vLLM does); capped as stop
    strings are (--max-stop-strings, --max-stop-string-length)."""
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    """vLLM's; passed to SamplingParams, where it changes nothing (the fast tokenizer's text has no spaces of its
    own around special tokens)."""
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: keep only the prompt's last this many tokens (-1: as many as leave room for one output token)
    instead of refusing a longer prompt."""
    prompt_logprobs: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: logprobs of the prompt's tokens and this many alternatives (-1: the whole vocabulary, refused
    like any value past --max-logprobs). Completions return them on each choice (streamed: on its first
    chunk); chat puts them on the response, beside the choices, and (as vLLM) refuses more than 0 with stream."""
    return_token_ids: bool = Field(
        default=False, description="Put the generated token ids on each choice as token_ids (vLLM's field)."
    )
    """Put each choice's generated token ids on it as `token_ids` (vLLM's field); streamed, each chunk
    carries the ids new in it. Always on for a model served without a tokenizer (its text is empty)."""
    return_tokens_as_token_ids: bool | None = None
    """Name each token in logprobs as "token_id:N" (vLLM's field); unset: --return-tokens-as-token-ids."""
    # structured outputs (structured.py): OpenAI's response_format, vLLM's structured_outputs and guided_*
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputsField | None = None
    guided_json: dict[str, Any] | bool | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = Field(default=None, max_length=4096)
    guided_grammar: str | None = None
    guided_decoding_backend: str | None = None
    """Ignored: llguidance is the one backend."""
    guided_whitespace_pattern: str | None = None
    """With guided_json: a regular expression for the whitespace between JSON tokens."""


class CompletionRequest(SamplingFields):
    prompt: PromptInput
    max_tokens: int | None = Field(default=None, ge=0, le=INT64_MAX)
    """0 only with echo: the prompt comes back alone (with its logprobs when asked), nothing is generated."""
    echo: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=20)
    add_special_tokens: bool = True
    """vLLM's: the tokenizer adds its special tokens (a BOS) to a text prompt; false for a prompt that holds them."""
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1, le=1024)


class EmbeddingRequest(WholeFloats):
    model: str | None = Field(default=None, max_length=512)
    input: PromptInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = Field(default=None, max_length=512)
    truncate_prompt_tokens: int | None = Field(default=None, ge=-1, le=INT64_MAX)
    """vLLM's: cut each input to this many tokens (-1: the model's limit) instead of refusing a longer one."""
