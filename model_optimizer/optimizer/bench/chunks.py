"""Reading what a server answers: streamed chunks parsed and checked, output tokens per chunk, error bodies.

The client (client.py) times the bytes; this module says what they carry. A chunk or field of the
wrong shape is a `StreamError` (recorded as malformed_stream or stream_error on that request), never
an exception that stops the run.
"""

from __future__ import annotations

import json

from pydantic_core import from_json

from model_optimizer.optimizer.bench.record import RequestRecord


class StreamError(Exception):
    """The server's stream broke the SSE/OpenAI format or reported an error."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind


def parse_chunk(data: bytes) -> dict:
    """One chunk's JSON. pydantic_core's parser: a third of json.loads' time on a chunk, and a client
    parses one chunk per token of every stream (its own CPU per chunk is in benchmarks/bench_client_overhead.py)."""
    try:
        chunk = from_json(data)
    except ValueError:  # invalid JSON or UTF-8
        raise StreamError("malformed_stream", f"chunk is not JSON: {data[:100]!r}") from None
    if not isinstance(chunk, dict):
        raise StreamError("malformed_stream", f"chunk is not a JSON object: {data[:100]!r}")
    if chunk.get("error"):  # some servers send "error": null in every chunk
        raise StreamError("stream_error", json.dumps(chunk["error"])[:300])
    return chunk


def chunk_tokens(chunk: dict, chat: bool) -> tuple[str, list | None]:
    """The first choice's new text and new token ids (None when the chunk has no `token_ids`).

    A chunk carries tokens when either is non-empty: a server streaming a model without a tokenizer
    (or holding back half of a multibyte character) sends ids with empty text, and those are tokens
    to time all the same. A field of the wrong type is a malformed_stream."""
    choices = chunk.get("choices")
    if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
        return "", None
    choice = choices[0]
    ids = choice.get("token_ids")
    ids = ids if isinstance(ids, list) else None
    if not chat:
        return text_field(choice.get("text"), "text"), ids
    return _delta_text(choice.get("delta")), ids


def _delta_text(delta: object) -> str:
    """Every generated text of a chat delta: the answer, the reasoning and tool calls (name and
    arguments) are all tokens the model produced, so all of them time TTFT and ITL.

    Reasoning is `reasoning` (vLLM since late 2025) or `reasoning_content` (older vLLM, DeepSeek);
    servers in between send the same text under both names, so it is taken once."""
    if delta is None:
        return ""
    if not isinstance(delta, dict):
        raise StreamError("malformed_stream", f"delta is not a JSON object: {delta!r}"[:300])
    reasoning = text_field(delta.get("reasoning"), "delta.reasoning")
    reasoning = reasoning or text_field(delta.get("reasoning_content"), "delta.reasoning_content")
    return text_field(delta.get("content"), "delta.content") + reasoning + _tool_call_text(delta.get("tool_calls"))


def _tool_call_text(calls: object) -> str:
    """The function names and argument fragments of a delta's tool calls."""
    if calls is None:
        return ""
    if not isinstance(calls, list) or not all(isinstance(call, dict) for call in calls):
        raise StreamError("malformed_stream", f"delta.tool_calls is not a list of objects: {calls!r}"[:300])
    text = ""
    for call in calls:
        function = call.get("function")
        if function is None:
            continue
        if not isinstance(function, dict):
            raise StreamError("malformed_stream", f"tool call function is not an object: {function!r}"[:300])
        text += text_field(function.get("name"), "function.name")
        text += text_field(function.get("arguments"), "function.arguments")
    return text


def text_field(value: object, name: str) -> str:
    """A streamed text field: a string, or nothing (absent, null); anything else is malformed."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise StreamError("malformed_stream", f"{name} is not a string: {value!r}"[:300])
    return value


def num_logprobs(chunk: dict, chat: bool) -> int | None:
    """Logprob entries of the first choice (one per token), or None when the chunk has none."""
    logprobs = chunk["choices"][0].get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    entries = logprobs.get("content" if chat else "tokens")
    return len(entries) if isinstance(entries, list) else None


def read_usage(usage: object, rec: RequestRecord, output_key: str, prompt_key: str) -> None:
    """Take the output and prompt token counts of a stream's `usage` into `rec`, when it has them.

    A count that is not a whole number (null, text) is the stream's fault: it must fail this request
    as malformed_stream, not stop the whole run with a TypeError in int() or in summing prompt tokens."""
    if not isinstance(usage, dict) or output_key not in usage:
        return
    rec.output_tokens = token_count(usage, output_key)
    rec.prompt_tokens = token_count(usage, prompt_key) if usage.get(prompt_key) is not None else None
    rec.usage_reported = True


def token_count(usage: dict, key: str) -> int:
    """`usage[key]` as a token count; a StreamError when it is not a whole number >= 0."""
    value = usage.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise StreamError("malformed_stream", f"usage.{key} is not a token count: {value!r}"[:300])
    return value


def count_tokens(rec: RequestRecord, counted: list[int | None], texts: list[str]) -> None:
    """A finished stream's tokens per token-carrying chunk, and its output tokens: the server's usage wins,
    else the chunks' ids or logprobs when every chunk has them, else one per chunk for now, with the text
    kept for token_counts.count_with_tokenizer to count after the run (off the event loop's hot path)."""
    chars = [len(t) for t in texts]
    rec.chunk_tokens = chunk_token_counts(counted, chars, rec.output_tokens if rec.usage_reported else None)
    if rec.usage_reported:
        rec.token_count_source = "usage"
        return
    rec.output_tokens = sum(rec.chunk_tokens)
    if counted and all(c is not None for c in counted):
        rec.token_count_source = "token_ids"
        return
    rec.token_count_source = "chunks"
    rec.output_text, rec.chunk_chars = "".join(texts), chars


def chunk_token_counts(counted: list[int | None], chars: list[int], total: int | None) -> list[int]:
    """Output tokens per token-carrying chunk: `counted` where known (token_ids or logprobs sent).

    The unknown chunks hold at least one token each and, when the server's usage `total` says they
    held more, its tokens in proportion to their text length (a merged chunk carries more text),
    rounded by largest remainder to sum to it: ITL is then timed per token, and TPOT (from usage)
    is unchanged."""
    unknown = [i for i, c in enumerate(counted) if c is None]
    counts = [1 if c is None else c for c in counted]
    num_left = 0 if total is None else total - sum(c for c in counted if c is not None)
    if not unknown or num_left <= len(unknown):
        return counts
    weights = [chars[i] for i in unknown]
    if sum(weights) == 0:
        weights = [1] * len(unknown)
    shares = [num_left * w / sum(weights) for w in weights]
    for i, share in zip(unknown, shares):
        counts[i] = max(1, int(share))
    order = sorted(range(len(unknown)), key=lambda k: shares[k] - int(shares[k]), reverse=True)
    surplus = num_left - sum(counts[i] for i in unknown)
    for k in order[: max(surplus, 0)]:  # short: the largest remainders get one more
        counts[unknown[k]] += 1
    while surplus < 0:  # over (chunks raised to one): the others give back, smallest remainders first
        for k in reversed(order):
            if surplus < 0 and counts[unknown[k]] > 1:
                counts[unknown[k]] -= 1
                surplus += 1
    return counts


def error_message(body: str) -> str:
    """The `error.message` of an OpenAI-style error body (or `detail`, or `message`), else the body itself."""
    return json_error_message(body) or body.strip()


def json_error_message(body: str) -> str | None:
    """The `error.message` of an OpenAI-style error body (or `detail`, as FastAPI and vLLM send, or
    `message`); None when the body is not such JSON."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    error = data.get("error")
    for candidate in (
        error.get("message") if isinstance(error, dict) else error,
        data.get("detail"),
        data.get("message"),
    ):
        if isinstance(candidate, str) and candidate:
            return candidate
    return None
