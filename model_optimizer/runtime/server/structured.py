"""A request's output constraint: read from its fields, checked before it reaches the engine.

One constraint per request, from whichever field carries it: OpenAI's `response_format` (json_object,
json_schema; `strict` or not, the schema is enforced; vLLM's structural_tag), vLLM's `structured_outputs`
object, or vLLM's older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`; a
tool_choice of "required" or a named function brings its own (tools.py). Two at once is a 400, as is
anything the grammar engine cannot enforce: each constraint is compiled against the model's tokenizer,
as far as its first mask, in a process of its own (structured/sandbox.py: llguidance can crash on some
inputs), within CHECK_TIMEOUT_S, up to CHECK_THREADS constraints at once, and the verdict is cached per constraint, so a client sending the same
schema again pays nothing and a pathological one costs one bounded check, never a stuck event loop, a
crashed server or a hung engine.
"""

from __future__ import annotations

import asyncio
import queue
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import Request

from model_optimizer.common.lru import LruCache
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol import SamplingFields
from model_optimizer.runtime.server.request_group import ClientDisconnected, until_disconnect
from model_optimizer.runtime.server.state import RETRY_AFTER_S, ServerState
from model_optimizer.runtime.structured.params import StructuredOutputs, spec_chars
from model_optimizer.runtime.structured.sandbox import SandboxUnavailable
from model_optimizer.runtime.structured.vllm_params import from_vllm_fields

CHECK_TIMEOUT_S = 10.0
"""Longest the server spends validating one constraint before refusing it as too complex."""
CHECK_THREADS = 3
"""Constraints checked at once, each in a sandbox process of its own (started on first need): a new, cheap
constraint is not queued behind a client's slow ones (each takes up to CHECK_TIMEOUT_S), and a burst of
heavy ones takes at most this many cores from the engine."""
CACHE_SIZE = 1024
CACHE_CHARS = 32 << 20
"""Most characters of constraint text the verdicts' keys may add up to (a request body may hold megabytes)."""


def requested_constraint(body: SamplingFields) -> tuple[StructuredOutputs, str] | None:
    """The constraint the request asks for and the field it came in, or None; 400 for two or a malformed one."""
    found: list[tuple[str, Any]] = []
    rf = body.response_format
    pattern = body.guided_whitespace_pattern
    if rf is not None and rf.type != "text":
        found.append(("response_format", lambda: _response_format(rf, pattern or "")))
    if body.structured_outputs is not None:
        found.append(("structured_outputs", lambda: _structured_outputs(body.structured_outputs)))
    for name, field in (
        ("guided_json", "json_schema"),
        ("guided_regex", "regex"),
        ("guided_choice", "choice"),
        ("guided_grammar", "grammar"),
    ):
        value = getattr(body, name)
        if value is not None:
            found.append(
                (name, lambda field=field, value=value: from_vllm_fields(**{field: value}, whitespace_pattern=pattern))
            )
    takes_pattern = [["guided_json"]]
    if rf is not None and rf.type in ("json_object", "json_schema"):
        takes_pattern.append(["response_format"])
    if pattern is not None and [name for name, _ in found] not in takes_pattern:
        raise APIError(
            400,
            "guided_whitespace_pattern goes with guided_json or a JSON response_format alone",
            "guided_whitespace_pattern",
        )
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise APIError(400, f"give one output constraint, not several ({names})", found[1][0])
    if not found:
        return None
    param, make = found[0]
    try:
        return make(), param
    except ValueError as exc:
        raise APIError(400, f"{param}: {exc}", param) from None


def _response_format(rf: Any, whitespace_pattern: str) -> StructuredOutputs:
    """The response_format's constraint; a JSON one with vLLM's guided_whitespace_pattern, when given."""
    if rf.type == "json_object":
        return StructuredOutputs.json_object(whitespace_pattern=whitespace_pattern)
    if rf.type == "structural_tag":
        if rf.format is not None:  # vLLM's newer form: a tree of formats
            return StructuredOutputs.tag_format(rf.format)
        return StructuredOutputs.structural_tag(rf.structures, rf.triggers)  # type: ignore[arg-type]
    if rf.json_schema is None or rf.json_schema.schema_ is None:
        raise ValueError("type json_schema needs json_schema.schema, the JSON schema of the output")
    if rf.json_schema.name is None:  # OpenAI's API and vLLM refuse a schema without its name
        raise APIError(
            400, "type json_schema needs json_schema.name, the name of the schema", "response_format.json_schema.name"
        )
    return StructuredOutputs.json(rf.json_schema.schema_, whitespace_pattern=whitespace_pattern)


def _structured_outputs(so: Any) -> StructuredOutputs:
    return from_vllm_fields(
        so.json_,
        so.regex,
        so.choice,
        so.grammar,
        so.json_object,
        so.structural_tag,
        so.disable_any_whitespace,
        so.whitespace_pattern,
        so.disable_additional_properties,
    )


async def check_constraint(
    state: ServerState, so: StructuredOutputs, param: str, request: Request | None = None
) -> None:
    """400 naming `param` with llguidance's reason when the constraint cannot be enforced on this model.
    `request`: the client's, watched while a new constraint is checked (ClientDisconnected when it leaves)."""
    tokenizer = state.model.tokenizer
    if tokenizer is None:
        raise APIError(
            400, "structured outputs need the model's tokenizer, and this model is served without one", param
        )
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or (backend.decoder is None and type(backend.model).__name__ == "WordLevel"):
        raise APIError(
            400,
            "structured outputs are not available for this model's tokenizer (its tokens do not concatenate "
            "into its text); byte-level BPE, SentencePiece and WordPiece tokenizers work",
            param,
        )
    checker = state.grammar_checker
    if checker is None:
        checker = state.grammar_checker = ConstraintChecker(state)
    try:
        verdict = await checker.verdict(so, request)
    except SandboxUnavailable as exc:  # no verdict: the server's trouble, not the constraint's
        raise APIError(503, str(exc), param, headers={"Retry-After": RETRY_AFTER_S}) from None
    if verdict:
        raise APIError(400, f"{param}: {verdict}", param)


class ConstraintChecker:
    """The server's verdicts on constraints: cached, each found once in a sandbox process, from a pool of
    CHECK_THREADS threads of its own (never the event loop, nor the tokenizing threads), each thread with
    its own sandbox; requests that bring the same new constraint at once share its one check."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self._verdicts: LruCache[StructuredOutputs, str] = LruCache(CACHE_SIZE, CACHE_CHARS, spec_chars)
        """Constraint -> "" when valid, else why not."""
        self._pending: dict[StructuredOutputs, asyncio.Future] = {}
        self._waiting: dict[asyncio.Future, int] = {}
        """A pending check -> the requests awaiting it."""
        self._threads = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="mopt-grammar-check")
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        """Sandboxes no check is using (at most one per thread is ever made)."""
        self._sandboxes: list[Any] = []
        """Every sandbox made, to close."""

    async def verdict(self, so: StructuredOutputs, request: Request | None = None) -> str:
        """ "" when the constraint is valid, else why not. `request`: its client's, watched while a new one is
        checked: a check whose every client has left is cancelled before it starts (the check threads must
        not spend themselves on them), and ClientDisconnected is raised."""
        verdict = self._verdicts.get(so)
        if verdict is not None:
            return verdict
        pending = self._pending.get(so)
        if pending is None:
            pending = self._pending[so] = asyncio.get_running_loop().run_in_executor(self._threads, self._check, so)
            pending.add_done_callback(lambda _: self._pending.pop(so, None))
            self._waiting[pending] = 0
            pending.add_done_callback(lambda done: self._waiting.pop(done, None))
        shared = asyncio.shield(pending)  # SandboxUnavailable: no verdict, nothing kept
        self._waiting[pending] += 1
        try:
            verdict = await (shared if request is None else until_disconnect(request, shared))
        except ClientDisconnected:
            self._waiting[pending] -= 1
            if not self._waiting[pending]:
                pending.cancel()  # its executor job, unless it has started
            raise
        self._verdicts.put(so, verdict)
        return verdict

    def _check(self, so: StructuredOutputs) -> str:
        """The verdict, from an idle sandbox (a new one when every one made is busy: one per thread at most)."""
        try:
            sandbox = self._idle.get_nowait()
        except queue.Empty:
            sandbox = self._new_sandbox()
        try:
            return sandbox.check(so)
        finally:
            self._idle.put(sandbox)

    def _new_sandbox(self) -> Any:
        from model_optimizer.runtime.structured.grammar import tokenizer_spec
        from model_optimizer.runtime.structured.sandbox import GrammarSandbox, TokenizerSpec

        model = self.state.model
        spec = TokenizerSpec(*tokenizer_spec(model.tokenizer, model.vocab_size, model.eos_token_ids))
        sandbox = GrammarSandbox(spec, CHECK_TIMEOUT_S)
        self._sandboxes.append(sandbox)
        return sandbox

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        for sandbox in list(self._sandboxes):
            sandbox.close()
