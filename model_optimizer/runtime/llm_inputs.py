"""The offline API's arguments, checked and brought to one shape before anything is queued: `LLM()`'s
keywords, prompts (vLLM's prompt dicts too), conversations, sampling params, priorities.
Errors name the argument as the caller wrote it (`prompts[2]`, `sampling_params`, `priority`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Required, TypedDict

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.sampling_checks import is_int, plain
from model_optimizer.runtime.sampling_params import SamplingParams

Prompt = str | list[int]

PROMPTS_HINT = "a string, a list of token ids, a {'prompt': ...} or {'prompt_token_ids': ...} dict, or a list of those"
PROMPT_KEYS = ("prompt", "prompt_token_ids")
"""vLLM's TextPrompt and TokensPrompt dicts: {"prompt": text} or {"prompt_token_ids": ids} (and its text)."""


class TextPrompt(TypedDict):
    """vLLM's TextPrompt, for code written against `from vllm import TextPrompt`: a plain dict at run time."""

    prompt: str


class TokensPrompt(TypedDict, total=False):
    """vLLM's TokensPrompt: the ids run; `prompt`, when given, is the text the output reports."""

    prompt_token_ids: Required[list[int]]
    prompt: str


EMPTY_KEYS = ("multi_modal_data", "mm_processor_kwargs", "multi_modal_uuids")
"""vLLM's prompt-dict keys for images and audio: taken when empty (None, {}), as code written for vLLM passes them."""


def check_engine_args(engine_args: Mapping[str, Any]) -> None:
    """TypeError naming `LLM()` and the closest setting for a keyword (the vLLM-only settings already split
    off) that is no EngineConfig field: EngineConfig's own error named a class the caller never saw, and
    suggested nothing for `max_model_length`."""
    import difflib
    from dataclasses import fields

    known = [f.name for f in fields(EngineConfig) if f.name != "model"]
    for name in engine_args:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see EngineConfig for the settings taken"
            raise TypeError(f"LLM() got an unexpected keyword argument {name!r} ({hint})")


def refuse_lora(lora_request: object) -> None:
    """ValueError for a LoRA adapter: vLLM's lora_request is taken only as None."""
    if lora_request is not None:
        raise ValueError(
            "LoRA adapters are not supported: merge the adapter into the weights, and pass lora_request=None"
        )


def as_prompt(prompt: Prompt | dict) -> Prompt:
    """A prompt as text or token ids (NumPy's or torch's too), a vLLM prompt dict unpacked (ValueError for a
    malformed one, or one that needs more than text: check_prompt_dict)."""
    if not isinstance(prompt, dict):
        return prompt if isinstance(prompt, str) else plain(prompt)
    check_prompt_dict(prompt)
    if "prompt_token_ids" in prompt:
        value = plain(prompt["prompt_token_ids"])  # a tuple or an array as a list, as a bare prompt is taken
        if not isinstance(value, list):
            raise ValueError(f"prompt_token_ids must be a list of integers, got {type(value).__name__}")
        return value
    return prompt["prompt"]


def check_prompt_dict(prompt: dict) -> None:
    """ValueError unless `prompt` is vLLM's TextPrompt ({"prompt": text}) or TokensPrompt ({"prompt_token_ids":
    ids}, with the ids' text under "prompt" if the caller has it), its multimodal keys empty: this engine reads
    text only, and its prefix cache is one for all requests (no cache_salt)."""
    unknown = sorted(set(prompt) - set(PROMPT_KEYS) - set(EMPTY_KEYS) - {"cache_salt"})
    if unknown or not set(PROMPT_KEYS) & set(prompt):
        raise ValueError(
            f"a prompt dict is vLLM's TextPrompt {{'prompt': text}} or TokensPrompt {{'prompt_token_ids': ids}} "
            f"(its text under 'prompt' if you have it), got keys {sorted(prompt)}"
            + (f" (unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))})" if unknown else "")
        )
    if not isinstance(prompt.get("prompt", ""), str):
        raise ValueError(f"prompt must be text, got {type(prompt['prompt']).__name__}")
    if given := [key for key in EMPTY_KEYS if prompt.get(key)]:
        raise ValueError(f"{', '.join(given)} given, but this engine reads text only: give the prompt's text or ids")
    if prompt.get("cache_salt") is not None:
        raise ValueError("cache_salt is not supported: the prefix cache is shared by every request")


def prompt_items(prompts: Prompt | dict | Sequence[Prompt | dict]) -> list[Prompt | dict]:
    """One prompt or a list of them (a flat list of ints, or a 1-D array, is one prompt's token ids) as a
    list, each a text, token ids or vLLM prompt dict; TypeError for anything that is no prompt."""
    if isinstance(prompts, (str, dict)):
        return [prompts]
    prompts = plain(prompts) if callable(getattr(prompts, "tolist", None)) else prompts  # NumPy's, torch's
    # bytes would pass as a list of token ids (its byte values); None or a number is no prompt at all
    if isinstance(prompts, (bytes, bytearray)) or not isinstance(prompts, Iterable):
        raise TypeError(f"prompts must be {PROMPTS_HINT}, got {type(prompts).__name__}")
    prompts = [p if isinstance(p, (str, dict)) else plain(p) for p in prompts]
    if prompts and all(isinstance(t, int) for t in prompts):  # bools too: check_token_ids names them
        return [prompts]  # one prompt given as token ids
    for index, p in enumerate(prompts):
        if not isinstance(p, (str, dict, list)):
            raise TypeError(f"prompts[{index}] must be {PROMPTS_HINT}, got {type(p).__name__}")
    return prompts


def as_prompt_list(prompts: Prompt | dict | Sequence[Prompt | dict]) -> list[Prompt]:
    """prompt_items, each as text or token ids."""
    return [as_prompt(p) for p in prompt_items(prompts)]


def given_text(item: Prompt | dict) -> str | None:
    """The text a TokensPrompt dict gives for its ids, which its output reports as its prompt; else None."""
    return item.get("prompt") if isinstance(item, dict) and "prompt_token_ids" in item else None


def as_conversations(messages: Sequence[Mapping] | Sequence[Sequence[Mapping]]) -> list[list[Any]]:
    """One conversation (a list of message dicts) or a list of them, as a list of conversations."""
    if not _is_list_of_something(messages):
        raise ValueError("messages must be a non-empty list of message dicts, or a list of such lists")
    if all(_is_message(m) for m in messages):
        return [list(messages)]
    for index, conversation in enumerate(messages):
        if not _is_list_of_something(conversation):
            raise ValueError(f"messages[{index}] must be a non-empty list of message dicts (one conversation)")
    return [list(conversation) for conversation in messages]


def _is_list_of_something(value: object) -> bool:
    """A non-empty sequence that is neither text nor a message itself."""
    return (
        isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and not _is_message(value) and bool(value)
    )


def _is_message(value: object) -> bool:
    """A chat message: a mapping, or an object with model_dump (a pydantic message, as the openai package's)."""
    return isinstance(value, Mapping) or hasattr(value, "model_dump")


def check_template_kwargs(template_kwargs: Mapping[str, Any] | None) -> None:
    """ValueError for chat_template_kwargs that set a variable the rendering sets itself (an argument of the
    call, such as add_generation_prompt): refused, as dropping them would silently change nothing."""
    from model_optimizer.runtime.engine.input_processor import RESERVED_TEMPLATE_KWARGS

    reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(template_kwargs or {}))
    if reserved:
        raise ValueError(f"chat_template_kwargs may not set {', '.join(reserved)}: they are the rendering's own")


def as_params_list(params: SamplingParams | Sequence[SamplingParams], num_prompts: int) -> list[SamplingParams]:
    """One SamplingParams per prompt; TypeError naming sampling_params for anything else (a dict of
    fields is not converted: SamplingParams(**fields) says which field is wrong)."""
    if isinstance(params, SamplingParams):
        return [params] * num_prompts
    if not isinstance(params, (list, tuple)):
        raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(params).__name__}")
    for index, p in enumerate(params):
        if not isinstance(p, SamplingParams):
            raise TypeError(f"sampling_params[{index}] must be a SamplingParams, got {type(p).__name__}")
    if len(params) != num_prompts:
        raise ValueError(f"got {len(params)} sampling params for {num_prompts} prompts")
    return list(params)


def check_params(params_list: list[SamplingParams], vocab_size: int) -> None:
    """ValueError for params that name a token id past the vocabulary, or a bad regex or grammar: found
    before any request is queued, so that no engine step fails or gives an "error" output."""
    for p in {id(p): p for p in params_list}.values():
        p.check_vocab(vocab_size)
        if p.structured_outputs is not None:
            from model_optimizer.runtime.structured.grammar import check_offline

            check_offline(p.structured_outputs)


def as_priorities(priority: Sequence[int] | None, num_prompts: int) -> list[int]:
    """One scheduling priority per prompt (0 each when none is given); ValueError for another count or a
    value that is no integer."""
    priorities = [0] * num_prompts if priority is None else plain(list(priority))
    if len(priorities) != num_prompts or not all(is_int(p) for p in priorities):
        raise ValueError(f"priority must be a list of {num_prompts} integers (one per prompt), got {priority!r}")
    return priorities


def check_concurrency_limit(concurrency_limit: int | None) -> None:
    """ValueError unless beam_search's concurrency_limit is None (every prompt at once) or an integer >= 1."""
    if concurrency_limit is not None and not (is_int(concurrency_limit) and concurrency_limit >= 1):
        raise ValueError(f"concurrency_limit must be an integer >= 1 or None (all prompts), got {concurrency_limit!r}")
