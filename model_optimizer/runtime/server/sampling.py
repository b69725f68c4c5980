"""Request fields -> SamplingParams, enforcing the server's caps and the model's context length.

Fields a request leaves out take the model's generation_config.json values (temperature, top_p,
top_k, min_p, repetition_penalty, max_new_tokens as the default max_tokens), as vLLM's
`--generation-config auto` does; without those, OpenAI's defaults.

A streamed request asks the engine for DELTA outputs (each holds only what is new, so a stream of
any length costs each token once and nothing is sliced here); a plain one for FINAL_ONLY (one
output, when all n completions have finished).
"""

from __future__ import annotations

from typing import Any

from model_optimizer.runtime.beam_search import MAX_BEAM_WIDTH, BeamSearchParams
from model_optimizer.runtime.engine.input_processor import bad_words_token_ids
from model_optimizer.runtime.sampling_checks import outside_vocab, unsatisfiable_rules
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams, logit_bias_from_json
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol import SamplingFields
from model_optimizer.runtime.server.state import ServerState
from model_optimizer.runtime.structured.params import StructuredOutputs


def check_caps(state: ServerState, body: SamplingFields, logprobs: int | None) -> list[str]:
    """Raise 400 past any configured cap; return the stop strings as a list."""
    config = state.config
    if body.n > config.max_n:
        raise APIError(400, f"n is {body.n}; this server allows at most {config.max_n}", "n")
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stop) > config.max_stop_strings:
        raise APIError(400, f"got {len(stop)} stop strings; at most {config.max_stop_strings} are allowed", "stop")
    if any(len(s) > config.max_stop_string_length for s in stop):
        raise APIError(400, f"stop strings may be at most {config.max_stop_string_length} characters long", "stop")
    if any(not s for s in stop):
        raise APIError(400, "stop strings must not be empty", "stop")
    if stop and state.model.tokenizer is None:  # the output has no text to match them against
        raise APIError(
            400, "stop strings need the output as text, and this model has no tokenizer; use stop_token_ids", "stop"
        )
    check_logprobs_cap(state, "logprobs", logprobs)
    check_logprobs_cap(state, "prompt_logprobs", body.prompt_logprobs)
    if body.stream_options is not None and not body.stream:  # as OpenAI and vLLM refuse it
        raise APIError(400, "stream_options is only allowed with stream: true", "stream_options")
    return stop


async def token_rules(state: ServerState, body: SamplingFields) -> dict[str, Any]:
    """The SamplingParams fields of the request's token rules, each checked once: logit_bias (ids as
    integers), allowed_token_ids, and bad_words as token sequences (each word alone and after a space, as
    vLLM bars them; tokenized off the event loop). 400 naming the field that is wrong, and naming
    allowed_token_ids when the other rules (one-token bad words; EOS and stop ids before min_tokens) bar
    every token it allows."""
    vocab = state.model.vocab_size
    bias = _logit_bias(body)
    allowed = body.allowed_token_ids
    if allowed is not None and not allowed:
        raise APIError(400, "allowed_token_ids is empty: no token could be sampled", "allowed_token_ids")
    for name, ids in (("logit_bias", bias or ()), ("allowed_token_ids", allowed or ())):
        if vocab and (error := outside_vocab(name, ids, vocab)):
            raise APIError(400, error, name)
    rules: dict[str, Any] = {"logit_bias": bias, "allowed_token_ids": list(allowed) if allowed is not None else None}
    if body.bad_words:
        rules["bad_words_token_ids"] = await _bad_words(state, body.bad_words)
    ends = [*(body.stop_token_ids or ()), *(() if body.ignore_eos else state.model.eos_token_ids)]
    conflict = unsatisfiable_rules(allowed, rules.get("bad_words_token_ids"), body.min_tokens, ends)
    if conflict is not None:  # every allowed token barred: refused, not sampled outside allowed_token_ids
        raise APIError(400, conflict, "allowed_token_ids")
    return rules


async def _bad_words(state: ServerState, words: list[str]) -> list[list[int]]:
    """The request's bad_words as token sequences (tokenized off the event loop); 400 past the caps."""
    config, tokenizer = state.config, state.model.tokenizer
    if tokenizer is None:
        raise APIError(400, "bad_words need the model's tokenizer; this model is served without one", "bad_words")
    if len(words) > config.max_stop_strings:  # capped as stop strings are
        raise APIError(400, f"got {len(words)} bad words; at most {config.max_stop_strings}", "bad_words")
    if any(len(w) > config.max_stop_string_length for w in words):
        raise APIError(400, f"bad words may be at most {config.max_stop_string_length} characters", "bad_words")
    return await state.run_blocking(lambda: bad_words_token_ids(tokenizer, words))


def _logit_bias(body: SamplingFields) -> dict[int, float] | None:
    """The request's logit_bias with token ids as integers (JSON keys are strings); 400 naming a bad one."""
    if not body.logit_bias:
        return None
    try:
        ids = logit_bias_from_json(body.logit_bias)
    except ValueError as exc:
        raise APIError(400, str(exc), "logit_bias") from None
    for token, value in ids.items():
        if not -100 <= value <= 100:
            raise APIError(400, f"logit_bias values must be in [-100, 100], got {value} for {token}", "logit_bias")
    return {token: float(value) for token, value in ids.items()}


def check_logprobs_cap(state: ServerState, field: str, value: int | None) -> None:
    """400 naming `field` when it asks for more top tokens than --max-logprobs (-1: the whole vocabulary)."""
    cap = state.config.max_logprobs
    if value is not None and (value == -1 or value > cap):
        asked = "the whole vocabulary (-1)" if value == -1 else str(value)
        raise APIError(400, f"{field} is {asked}; this server allows at most {cap}", field)


def resolve_max_tokens(
    state: ServerState, requested: int | None, num_prompt_tokens: int, field: str = "max_tokens", min_tokens: int = 0
) -> int:
    """max_tokens for one prompt: the request's, checked against the context, or the remaining context;
    either at most the generation config's max_new_tokens (vLLM's get_max_tokens takes the smallest); a 400
    where the request's `min_tokens` exceeds it.

    `field` is the name the client used (chat's max_completion_tokens), so errors name what was sent.
    """
    max_tokens = _max_tokens(state, requested, num_prompt_tokens, field)
    if min_tokens > max_tokens:
        bound = f"{field} ({requested})" if requested is not None else f"the {max_tokens} output tokens allowed here"
        raise APIError(400, f"min_tokens ({min_tokens}) must not exceed {bound}", "min_tokens")
    return max_tokens


def _max_tokens(state: ServerState, requested: int | None, num_prompt_tokens: int, field: str) -> int:
    max_model_len, limit = state.model.max_model_len, state.config.max_tokens_limit
    room = max_model_len - num_prompt_tokens
    if room < 1:
        raise APIError(
            400,
            f"the prompt has {num_prompt_tokens} tokens, but max_model_len is {max_model_len} "
            "(prompt plus at least one output token)",
            "prompt",
        )
    if requested is None:
        default = state.sampling_defaults.get("max_tokens")
        return min(n for n in (room, limit, default) if n is not None)
    if limit is not None and requested > limit:
        raise APIError(400, f"{field} is {requested}; this server allows at most {limit}", field)
    if num_prompt_tokens + requested > max_model_len:
        raise APIError(
            400,
            f"the prompt has {num_prompt_tokens} tokens and {field} is {requested}: together "
            f"{num_prompt_tokens + requested}, more than max_model_len {max_model_len}",
            field,
        )
    cap = state.sampling_defaults.get("max_tokens")  # the model's max_new_tokens caps every request, as in vLLM
    return requested if cap is None else min(requested, cap)


MODEL_DEFAULT_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
OPENAI_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


def sampling_params(
    body: SamplingFields,
    stop: list[str],
    max_tokens: int,
    logprobs: int | None,
    defaults: dict[str, Any] | None = None,
    structured_outputs: StructuredOutputs | None = None,
    keep_special_tokens: bool = False,
    prompt_logprobs: int | None = None,
    rules: dict[str, Any] | None = None,
) -> SamplingParams:
    """The request's SamplingParams; a field it did not send takes `defaults` (the model's), else OpenAI's.
    `structured_outputs` is the checked constraint (structured.py, tools.py); `rules` token_rules' fields; `keep_special_tokens` keeps
    them in the text for a tool-call parser whose markers are special tokens; `prompt_logprobs` is what the
    route asks for (completions: the field, or echo's logprobs)."""
    chosen = {**OPENAI_DEFAULTS, **{k: v for k, v in (defaults or {}).items() if k in MODEL_DEFAULT_FIELDS}}
    for name in MODEL_DEFAULT_FIELDS:
        value = getattr(body, name)
        if name in body.model_fields_set and value is not None:
            chosen[name] = value
    try:
        return SamplingParams(
            n=body.n,
            temperature=chosen["temperature"],
            top_p=chosen["top_p"],
            top_k=chosen["top_k"],
            min_p=chosen["min_p"],
            repetition_penalty=chosen["repetition_penalty"],
            presence_penalty=body.presence_penalty,
            frequency_penalty=body.frequency_penalty,
            **(rules or {}),
            seed=body.seed,
            max_tokens=max_tokens,
            min_tokens=body.min_tokens,
            stop=stop,
            stop_token_ids=list(body.stop_token_ids or []),
            include_stop_str_in_output=body.include_stop_str_in_output,
            ignore_eos=body.ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            skip_special_tokens=body.skip_special_tokens and not keep_special_tokens,
            spaces_between_special_tokens=body.spaces_between_special_tokens,
            structured_outputs=structured_outputs,
            output_kind=RequestOutputKind.DELTA if body.stream else RequestOutputKind.FINAL_ONLY,
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from None


BEAM_SEARCH_REFUSES = (
    "stop_token_ids",
    "min_tokens",
    "bad_words",
    "logit_bias",
    "allowed_token_ids",
    "prompt_logprobs",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
"""Request fields use_beam_search does not apply (nor does vLLM's beam search): a 400 rather than ignored."""


def beam_search_params(
    body: SamplingFields, sampling: SamplingParams, constraint_field: str | None
) -> BeamSearchParams:
    """The BeamSearchParams of a request with use_beam_search (vLLM's: n beams of max_tokens, its ignore_eos,
    length_penalty and include_stop_str_in_output), from the SamplingParams the request would sample with
    (its max_tokens, temperature, logprobs and stops, resolved as sampling resolves them); 400 naming a field
    beam search does not apply (`constraint_field`: the field whose constraint the output would follow)."""
    if body.n > MAX_BEAM_WIDTH:
        raise APIError(400, f"n is {body.n}; use_beam_search takes at most {MAX_BEAM_WIDTH} beams", "n")
    given = [name for name in BEAM_SEARCH_REFUSES if not _leaves_sampling_alone(body, name)]
    given += ["logprobs"] * (sampling.logprobs is not None) + ["stop"] * bool(sampling.stop)
    given += [constraint_field] if constraint_field else []
    if given:
        raise APIError(400, f"{given[0]} does not apply with use_beam_search: leave it out", given[0])
    try:
        return BeamSearchParams(
            beam_width=body.n,
            max_tokens=sampling.max_tokens,
            ignore_eos=body.ignore_eos,
            temperature=sampling.temperature,
            length_penalty=body.length_penalty,
            include_stop_str_in_output=body.include_stop_str_in_output,
            skip_special_tokens=sampling.skip_special_tokens,
        )
    except ValueError as exc:
        raise APIError(400, str(exc)) from None


def _leaves_sampling_alone(body: SamplingFields, name: str) -> bool:
    """Whether the request's field `name` is unset or at a value that changes nothing (its default,
    OpenAI's default, top_k -1)."""
    value = getattr(body, name)
    neutral = (type(body).model_fields[name].default, OPENAI_DEFAULTS.get(name), -1 if name == "top_k" else None)
    return value is None or value in ([], {}) or value in neutral
