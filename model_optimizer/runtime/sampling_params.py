"""SamplingParams: how one request picks its tokens and when it stops.

Validated on construction: a bad value raises ValueError saying what is allowed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from typing import Any

from model_optimizer.runtime.sampling_checks import (
    check_lengths_and_stops,
    check_sampling,
    check_thinking,
    check_token_rules,
    is_int,
    outside_vocab,
    plain,
    require,
    unsatisfiable_rules,
)
from model_optimizer.runtime.structured.params import StructuredOutputs
from model_optimizer.runtime.structured.vllm_params import GuidedDecodingParams, StructuredOutputsParams

__all__ = ["GuidedDecodingParams", "RequestOutputKind", "SamplingParams", "StructuredOutputsParams"]

MAX_LOGPROBS = 20


class RequestOutputKind(enum.Enum):
    """What each RequestOutput of a request holds (SamplingParams.output_kind).

    CUMULATIVE: everything so far (text, token ids, logprobs grow until finish_reason is set).
    DELTA: only what is new since the request's previous output; finish_reason on each completion's
    last delta. `outputs` then holds only the completions with something new (tokens or their finish),
    so with n > 1 a completion's index says which it is. Streaming servers use it: nothing is copied
    or sliced twice, whatever the output length.
    FINAL_ONLY: one output when the request (all n completions) has finished, cumulative.
    """

    CUMULATIVE = "cumulative"
    DELTA = "delta"
    FINAL_ONLY = "final_only"


@dataclass(kw_only=True)
class SamplingParams:
    """Per-request sampling and stopping settings, named as in vLLM and the OpenAI API. Keyword-only: vLLM's
    fields come in another order (n, presence_penalty, ...), so a positional value would land elsewhere."""

    n: int = 1
    """Completions to return for the prompt; they share the prompt's KV-cache blocks."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Keep the smallest set of tokens whose probability adds up to top_p."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 or -1 keeps all."""
    min_p: float = 0.0
    """Drop tokens less likely than min_p times the most likely one."""
    repetition_penalty: float = 1.0
    """Divide positive logits (multiply negative ones) of tokens seen in prompt or output; 1 is off."""
    presence_penalty: float = 0.0
    """Subtract from the logit of every token already generated."""
    frequency_penalty: float = 0.0
    """Subtract, times its count, from the logit of every token already generated."""
    logit_bias: dict[int, float] | None = None
    """Token id -> a finite value added to its logit before sampling (vLLM's; OpenAI's server takes [-100, 100]):
    -100 all but bans the token, 100 all but forces it. Logprobs stay the model's own, as vLLM reports them."""
    allowed_token_ids: list[int] | None = None
    """Only these tokens may be sampled (vLLM's); None: any. Refused when the other rules bar all of them from the
    first token (`unsatisfiable_rules`); where they leave none mid-output, this rule alone holds that step."""
    bad_words_token_ids: list[list[int]] | None = None
    """Token sequences the output must not contain: the last token of each is barred wherever the output
    so far ends with the rest (vLLM's bad_words, as token ids; the server tokenizes its words)."""
    bad_words: list[str] | None = None
    """Words the output must not contain (vLLM's): the engine tokenizes each, without its leading spaces, alone
    and after a space, into more bad_words_token_ids when the request is queued. Needs the model's tokenizer."""
    thinking_token_budget: int | None = None
    """Most tokens of thinking (vLLM's): once the output has thought this many tokens without ending its
    block, thinking_end_token_ids are forced, one a step. None: no bound."""
    thinking_end_token_ids: list[int] | None = None
    """The tokens that end a thinking block (`</think>`'s), which the budget forces."""
    thinking_start_token_ids: list[int] | None = None
    """Set: the output thinks only when it opens with these tokens (`<think>`'s), and the budget counts
    after them; unset: the output starts inside the block (the prompt opened it)."""
    thinking_other_end_token_ids: list[list[int]] | None = None
    """Other token sequences that end a thinking block too (Kimi-K2's tool section): once the thinking holds
    one, the budget forces nothing (its end inside a call would break the call)."""
    seed: int | None = None
    """Seed of this request's own random generator: the same seed gives the same output."""
    max_tokens: int | None = 16
    """Most tokens to generate; None means up to the model's context length."""
    min_tokens: int = 0
    """Tokens to generate before EOS or stop token ids may end the request: until then they are not drawn."""
    min_tokens_barred: tuple[int, ...] = ()
    """Set by the engine: the EOS (unless ignore_eos) and stop token ids that min_tokens keeps from being drawn."""
    stop: list[str] = field(default_factory=list)
    """Strings that end the output; they are cut from the text."""
    stop_token_ids: list[int] = field(default_factory=list)
    """Token ids that end the output (kept in the token ids, not in the text)."""
    include_stop_str_in_output: bool = False
    """Keep the matched stop string at the end of the text, and the text of the EOS or stop token id that
    ended it (left out otherwise, as in vLLM)."""
    ignore_eos: bool = False
    """Keep generating past the end-of-sequence token."""
    logprobs: int | None = None
    """Return this many most likely tokens' log-probabilities at each step (plus the chosen one)."""
    prompt_logprobs: int | None = None
    """Return each prompt token's log-probability (given the tokens before it) and this many most likely
    alternatives at each prompt position, in RequestOutput.prompt_logprobs. Computed from the prefill's
    logits, once per request (n > 1 completions share it); such a request computes its whole prompt (no
    prefix-cache hit), since every position's logits are needed."""
    truncate_prompt_tokens: int | None = None
    """Keep only the prompt's last this many tokens (vLLM's); -1: the most that leave room for one output
    token. None: a prompt longer than the context is refused."""
    skip_special_tokens: bool = True
    """Leave special tokens out of the text."""
    detokenize: bool = True
    """Produce text; off, outputs carry token ids only (and stop strings cannot be used)."""
    structured_outputs: StructuredOutputs | None = None
    """Constrain the output to a JSON schema, a regex, a choice or a grammar (see runtime/structured); a
    dict in vLLM's shape ({"json": schema}, {"regex": ...}, {"choice": [...]}, ...) or vLLM's
    StructuredOutputsParams (runtime/structured/vllm_params.py) is converted."""
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    """What each output holds: all so far (CUMULATIVE), only what is new (DELTA, for streaming), or one
    output when the request has finished (FINAL_ONLY)."""
    guided_decoding: Any = None
    """vLLM's older name for structured_outputs (a GuidedDecodingParams or a dict): moved there on
    construction, so it is always None after it (typed Any: the engine core's decoder takes no union of
    a dataclass and a dict)."""
    spaces_between_special_tokens: bool = True
    """vLLM's; taken, and changes nothing here: the text is what the model's fast tokenizer (tokenizer.json)
    decodes around special tokens (skip_special_tokens off), as transformers' decode gives it: no spaces of
    its own for byte-level BPE, WordPiece's own spacing ("[CLS] hello [SEP]")."""
    extra_args: dict[str, Any] | None = None
    """vLLM's: values for custom sampling plugins, carried with the request; nothing here reads them."""

    def __post_init__(self) -> None:
        self._plain_numbers()
        if self.stop is None:  # vLLM's types allow None for both lists
            self.stop = []
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        if is_int(self.seed) and self.seed == -1:  # vLLM's: -1 is no seed (random)
            self.seed = None
        require(
            isinstance(self.stop, (list, tuple)),
            f"stop must be a string or a list of non-empty strings, got {self.stop!r}",
        )
        require(
            isinstance(self.stop_token_ids, (list, tuple)),
            f"stop_token_ids must be a list of non-negative integers, got {self.stop_token_ids!r}",
        )
        self.stop = list(self.stop)
        self.stop_token_ids = list(self.stop_token_ids)
        if is_int(self.top_k) and self.top_k == -1:
            self.top_k = 0
        if self.guided_decoding is not None:
            require(self.structured_outputs is None, "give structured_outputs or guided_decoding, not both")
            self.structured_outputs, self.guided_decoding = self.guided_decoding, None  # type: ignore[assignment]
        if isinstance(self.structured_outputs, dict):
            self.structured_outputs = StructuredOutputs.from_dict(self.structured_outputs)
        elif isinstance(self.structured_outputs, StructuredOutputsParams):
            self.structured_outputs = self.structured_outputs.to_structured_outputs()
        self._validate()

    def _plain_numbers(self) -> None:
        """NumPy's (and other) integers, reals and bools as Python's, where a field takes a number, also inside
        its lists and dicts (`stop_token_ids=np.array([7, 9])`, `logit_bias={np.int64(5): np.float32(2)}`), and
        tuples and sets as lists: vLLM's settings take them (`seed=np.int64(3)`), and the checks below and the engine
        core's encoder want int, float, bool and list. extra_args and the structured-output fields stay as
        given (nothing here reads extra_args; the others convert themselves)."""
        for f in fields(self):
            if f.name in _KEPT_AS_GIVEN:
                continue
            value = getattr(self, f.name)
            converted = plain(value)
            if f.name == "min_tokens_barred" and isinstance(converted, list):
                converted = tuple(converted)  # the engine's own field: a tuple
            if converted is not value:
                setattr(self, f.name, converted)

    @property
    def greedy(self) -> bool:
        return self.temperature < 1e-5

    @property
    def needs_history(self) -> bool:
        """Whether sampling reads the tokens generated so far (penalties, bad words)."""
        return (
            self.repetition_penalty != 1.0
            or bool(self.presence_penalty)
            or bool(self.frequency_penalty)
            or bool(self.bad_words_token_ids)
            or self.thinking_token_budget is not None
        )

    @property
    def adjusts_logits(self) -> bool:
        """Whether sampling changes the logits per token beyond temperature and filtering, at every token:
        penalties, a logit_bias, allowed tokens (neither the fused kernel nor speculative verification
        applies them). min_tokens's barred ids count only before it is reached: `adjusts_logits_at`."""
        return self.needs_history or bool(self.logit_bias) or self.allowed_token_ids is not None

    def adjusts_logits_at(self, output_index: int) -> bool:
        """`adjusts_logits` for output token `output_index`: also true while min_tokens bars EOS and stop ids,
        so a request takes the fast sampling paths again once it has its min_tokens."""
        return self.adjusts_logits or (output_index < self.min_tokens and bool(self.min_tokens_barred))

    def for_completion(self, index: int) -> SamplingParams:
        """Completion `index`'s own settings among the n: completion 0 keeps the seed (so it equals the
        n = 1 request), the others draw theirs from (seed, index), which no other request's seed repeats
        by accident (seed + index made request (seed 0, n 2)'s second completion request seed 1's first)."""
        if self.seed is None or index == 0:
            return self
        return self.clone(seed=hash((self.seed, index)) & (2**63 - 1))  # ints hash alike in every process

    def clone(self, **changes: object) -> SamplingParams:
        return replace(self, **changes)

    def check_vocab(self, vocab_size: int) -> None:
        """ValueError naming the field when a token id it gives lies outside the model's vocabulary: the
        sampler indexes the logits with them (an IndexError mid-step otherwise). Stop token ids only end
        the output, so one the model never samples is harmless and allowed."""
        ids_by_field = {
            "logit_bias": list(self.logit_bias or ()),
            "allowed_token_ids": self.allowed_token_ids or [],
            "bad_words_token_ids": [t for seq in self.bad_words_token_ids or [] for t in seq],
            "thinking_end_token_ids": self.thinking_end_token_ids or [],
            "thinking_start_token_ids": self.thinking_start_token_ids or [],
            "thinking_other_end_token_ids": [t for seq in self.thinking_other_end_token_ids or [] for t in seq],
        }
        for name, ids in ids_by_field.items():
            error = outside_vocab(name, ids, vocab_size)
            require(error is None, error or "")

    def _validate(self) -> None:
        # type checks come first and in the same condition as the range, so that a wrong type
        # (a JSON "hot" or true) is a ValueError with the allowed range, never a TypeError
        check_sampling(self)
        check_token_rules(self)
        check_thinking(self)
        check_lengths_and_stops(self)
        self._check_outputs()

    def _check_outputs(self) -> None:
        """Logprobs, the output kind, stop strings' need of text, the structured output, and last whether
        the token rules leave any token to sample."""
        require(
            self.logprobs is None or (is_int(self.logprobs) and 0 <= self.logprobs <= MAX_LOGPROBS),
            f"logprobs must be an integer in [0, {MAX_LOGPROBS}] or None, got {self.logprobs!r}",
        )
        require(
            isinstance(self.output_kind, RequestOutputKind),
            f"output_kind must be a RequestOutputKind (cumulative, delta, final_only), got {self.output_kind!r}",
        )
        require(self.detokenize or not self.stop, "stop strings need detokenize=True")
        require(
            self.structured_outputs is None or isinstance(self.structured_outputs, StructuredOutputs),
            f"structured_outputs must be a StructuredOutputs, got {type(self.structured_outputs).__name__}",
        )
        require(
            self.prompt_logprobs is None
            or (is_int(self.prompt_logprobs) and 0 <= self.prompt_logprobs <= MAX_LOGPROBS),
            f"prompt_logprobs must be an integer in [0, {MAX_LOGPROBS}] or None (the whole vocabulary, -1, is "
            f"not offered), got {self.prompt_logprobs!r}",
        )
        conflict = unsatisfiable_rules(
            self.allowed_token_ids,
            self.bad_words_token_ids,
            self.min_tokens,
            [*self.stop_token_ids, *self.min_tokens_barred],  # the engine adds the EOS ids to min_tokens_barred
        )
        require(conflict is None, conflict or "")


def generation_config_defaults(given: dict[str, Any]) -> dict[str, Any]:
    """The SamplingParams fields a generation_config's keys set (config.GENERATION_DEFAULT_FIELDS: temperature,
    max_new_tokens as max_tokens ...), checked as SamplingParams checks them: ValueError saying what is wrong.
    The one check of generation_defaults.generation_defaults (the engine's start) and `mopt inspect`'s generation rule."""
    from model_optimizer.runtime.config import GENERATION_DEFAULT_FIELDS

    values = {field: given[key] for key, field in GENERATION_DEFAULT_FIELDS.items() if given.get(key) is not None}
    try:
        SamplingParams(**values)
    except ValueError as exc:
        named = " (max_new_tokens is max_tokens)" if "max_tokens" in str(exc) else ""
        raise ValueError(f"{exc}{named}") from None
    return values


def logit_bias_from_json(bias: dict) -> dict:
    """logit_bias with its keys as token ids: a JSON object's keys are strings ({"50256": -100}, as the
    OpenAI API and a JSONL line give it). ValueError naming a key that is no token id; the values are
    SamplingParams' to check."""
    ids = {}
    for key, value in bias.items():
        token = key.strip() if isinstance(key, str) else ""
        if not token.isdigit() or len(token) > 12:  # (no int() of thousands of digits: Python refuses those)
            raise ValueError(f"logit_bias keys must be token ids (non-negative integers), got {key!r}")
        ids[int(token)] = value
    return ids


_KEPT_AS_GIVEN = frozenset({"extra_args", "structured_outputs", "guided_decoding", "output_kind"})
"""SamplingParams fields that _plain_numbers leaves alone."""
