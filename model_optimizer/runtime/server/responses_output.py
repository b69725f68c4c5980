"""The Responses API's answer, built from chat's (ChatFormat): a response object whose output items are a
reasoning item (with --reasoning-parser), the message (one output_text part; its logprobs when the request's
`include` asks, else `[]`) and a function_call (or custom_tool_call) item per tool call; or, streamed,
OpenAI's events, each named on its `event:` line: response.created and response.in_progress; per item
output_item.added (and content_part.added: a message's output_text, a reasoning item's reasoning_text), its
deltas (output_text, reasoning_text, function_call_arguments), their done events (content_part.done) and
output_item.done, one item at a time; then response.completed (or response.incomplete, cut by
max_output_tokens; response.failed, aborted by the server) with the whole response and its usage.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict

from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.server.chat_format import ChatFormat
from model_optimizer.runtime.server.errors import failure_status
from model_optimizer.runtime.server.logprobs import chat_logprobs_dict
from model_optimizer.runtime.server.protocol_outputs import ChatCompletionResponse, UsageInfo
from model_optimizer.runtime.server.protocol_responses import ResponsesRequest, echoed_format
from model_optimizer.runtime.server.streaming import ChoiceDelta, sse


class ResponseObject(BaseModel):
    """A Responses API response (or a stream event), as the plain dict ResponsesFormat builds."""

    model_config = ConfigDict(extra="allow")


ABORTED = "the generation was aborted before it ended (the server stopped it, as a drain that ran out of time does)"
"""The error of a response whose generation the server aborted (finish_reason "abort"): OpenAI's statuses
have no other for it (`cancelled` is a client's cancel, and has no closing stream event)."""


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_usage(usage: UsageInfo) -> dict[str, Any]:
    """Chat's usage in the Responses API's names."""
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    reasoning = usage.completion_tokens_details.reasoning_tokens if usage.completion_tokens_details else 0
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": usage.total_tokens,
    }


class ResponsesFormat:
    """The Responses API's response and stream events (a ResponseFormat), from chat's (ChatFormat)."""

    def __init__(self, body: ResponsesRequest, chat: ChatFormat, response_id: str) -> None:
        self.body = body
        self.chat = chat
        self.id = response_id
        self.created_at = int(time.time())
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        """Stream: the output items so far (the open one last)."""
        self.open: dict[str, Any] | None = None
        """Stream: the item taking deltas (reasoning or message), closed by anything else and at the end."""
        self.calls: dict[int, dict[str, Any]] = {}
        """Stream: function_call items by chat's tool-call index."""
        self.finish_reason: str | None = None
        self.held_logprobs: list[dict[str, Any]] = []
        """Stream: logprobs of tokens whose text is held back (part of a character), sent with the next text."""
        self.text_only = chat.reasoning is None and chat.plan.parser is None
        """No reasoning or tool call is parsed out of the text: its logprobs are the message's, token for token
        (otherwise output_text carries none: chat's logprobs also cover the thinking and the calls)."""

    def _envelope(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
        body = self.body
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        error = {"code": "server_error", "message": ABORTED} if status == "failed" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "model": self.chat.base.model,
            "output": output,
            "parallel_tool_calls": body.parallel_tool_calls,
            "previous_response_id": None,
            "reasoning": {
                "effort": body.reasoning.effort if body.reasoning else None,
                "summary": body.reasoning.summary if body.reasoning else None,
            },
            "store": False,
            "temperature": body.temperature,
            "text": {
                "format": echoed_format(body.text.format if body.text else None),
                "verbosity": body.text.verbosity if body.text else None,
            },
            "top_logprobs": body.top_logprobs,
            "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
            "tools": body.tools or [],
            "top_p": body.top_p,
            "truncation": body.truncation or "disabled",
            "usage": usage,
            "user": body.user,
            "metadata": body.metadata or {},
        }

    # whole responses

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        chat: ChatCompletionResponse = self.chat.response(finals, usage)  # type: ignore[assignment]
        [choice] = chat.choices
        message, output = choice.message, []
        if message.reasoning_content:
            output.append(_reasoning_item(_id("rs"), message.reasoning_content, "completed"))
        if message.content or not (message.tool_calls or message.reasoning_content):  # cut while thinking: none
            logprobs = (
                choice.logprobs.model_dump()["content"] if choice.logprobs is not None and self.text_only else None
            )
            output.append(_message_item(_id("msg"), message.content or "", "completed", logprobs))
        for call in message.tool_calls:
            if call.custom is not None:
                output.append(_custom_call_item(call.id, call.custom.name, call.custom.input, "completed"))
            else:
                output.append(_call_item(call.id, call.function.name, call.function.arguments, "completed"))  # type: ignore[union-attr]
        status = _status(choice.finish_reason)
        if status != "completed":  # the item the token bound (or the abort) cut, as the stream closes it
            output[-1]["status"] = "incomplete"
        return ResponseObject(**self._envelope(status, output, response_usage(chat.usage)))

    # streams

    def _event(self, kind: str, **fields: Any) -> str:
        """One numbered event as its SSE text (chunk's events; head's and the closing one go through sse too)."""
        return sse(_Event(self, kind, **fields))

    def head(self) -> list[BaseModel]:
        envelope = self._envelope("in_progress", [], None)
        return [
            _Event(self, "response.created", response=envelope),
            _Event(self, "response.in_progress", response=envelope),
        ]

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes | None:
        numbered = self.sequence
        try:
            return self._chunk(deltas)
        except Exception:
            self.sequence = numbered  # the events it numbered are never sent: response.failed follows on
            raise

    def _chunk(self, deltas: list[ChoiceDelta]) -> bytes | None:
        events: list[str] = []
        for d in deltas:
            c = d.completion
            delta, finish_reason = self.chat.delta(c)
            if delta.get("reasoning_content"):
                events += self._text_delta("reasoning", delta["reasoning_content"], None)
            if c.logprobs is not None and self.text_only:
                self.held_logprobs += chat_logprobs_dict(self.chat.texts, c.logprobs, self.chat.num_top)["content"]
            if delta.get("content"):
                events += self._text_delta("message", delta["content"], self.held_logprobs)
                self.held_logprobs = []
            for call in delta.get("tool_calls", []):
                events += self._call_delta(call)
            if finish_reason is not None:
                self.finish_reason = finish_reason
                if not self.items:  # nothing was said: an empty message, as the whole response has
                    events += self._open("message")
                if self.held_logprobs and self.open is not None and self.open["type"] == "message":
                    self.open["content"][0]["logprobs"] += self.held_logprobs  # the text they held never came
                    self.held_logprobs = []
                events += self._close_open()
                for index in sorted(self.calls):
                    events += self._close_call(index)
        return "".join(events).encode() if events else None

    def usage_chunk(self, usage: UsageInfo) -> BaseModel:
        """The closing event: the whole response, its status and usage."""
        status = _status(self.finish_reason)
        envelope = self._envelope(status, self.items, response_usage(self.chat.usage(usage)))
        return _Event(self, f"response.{status}", response=envelope)

    last = ""
    """Nothing after the closing event: OpenAI's streams send no [DONE]."""

    def failure(self, message: str) -> str:
        """response.failed: the response so far, its error with the reason: `invalid_prompt` where the
        request's constraint outgrew the grammar engine (errors.failure_status's 400), else `server_error`."""
        envelope = self._envelope("failed", self.items, None)
        code = "invalid_prompt" if failure_status(message) == 400 else "server_error"
        envelope["error"] = {"code": code, "message": message}
        return self._event("response.failed", response=envelope)

    def _open(self, kind: str) -> list[str]:
        """A reasoning or message item opened (and its part), after the open one is closed."""
        events = self._close_open()
        item_id = _id("rs" if kind == "reasoning" else "msg")
        self.open = (
            _reasoning_item(item_id, "", "in_progress")
            if kind == "reasoning"
            else _message_item(item_id, "", "in_progress", [])
        )
        self.items.append(self.open)
        where = {"output_index": len(self.items) - 1}
        events.append(self._event("response.output_item.added", item=_shell(self.open), **where))
        # its part, still empty, as OpenAI adds a message's output_text and a reasoning item's reasoning_text
        part = self.open["content"][0]
        events.append(self._event("response.content_part.added", item_id=item_id, content_index=0, part=part, **where))
        return events

    def _text_delta(self, kind: str, text: str, logprobs: list | None) -> list[str]:
        """Events of text for a reasoning or message item: the item opened if it is not the open one, then
        the delta."""
        events = self._open(kind) if self.open is None or self.open["type"] != kind else []
        part = self.open["content"][0]  # type: ignore[index]
        part["text"] += text
        where = {"item_id": self.open["id"], "output_index": self.items.index(self.open), "content_index": 0}
        if kind == "reasoning":
            events.append(self._event("response.reasoning_text.delta", delta=text, **where))
        else:
            part["logprobs"] += logprobs or []
            events.append(self._event("response.output_text.delta", delta=text, logprobs=logprobs or [], **where))
        return events

    def _close_open(self) -> list[str]:
        """The done events of the open reasoning or message item, if any."""
        item, self.open = self.open, None
        if item is None:
            return []
        item["status"] = self._item_status(item)
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": self.items.index(item), "content_index": 0}
        if item["type"] == "reasoning":
            events = [self._event("response.reasoning_text.done", text=part["text"], **where)]
        else:
            events = [self._event("response.output_text.done", text=part["text"], logprobs=part["logprobs"], **where)]
        events.append(self._event("response.content_part.done", part=part, **where))
        events.append(self._event("response.output_item.done", output_index=where["output_index"], item=item))
        return events

    def _item_status(self, item: dict[str, Any]) -> str:
        """The last item of a response the token bound (or an abort) cut is incomplete (the one it cut), the
        others complete."""
        cut = item is self.items[-1] and _status(self.finish_reason) != "completed"
        return "incomplete" if cut else "completed"

    def _call_delta(self, call: dict[str, Any]) -> list[str]:
        """A function call's item and its arguments' pieces; a custom tool's, and its input's."""
        events = []
        item = self.calls.get(call["index"])
        if item is None:
            # one item at a time, as OpenAI streams them: a new call means the calls before it are whole (a
            # parser only ever extends its last call), so their done events come before its added
            events += self._close_open()
            for index in sorted(self.calls):
                events += self._close_call(index)
            if call.get("type") == "custom":
                item = _custom_call_item(call["id"], call["custom"]["name"], "", "in_progress")
            else:
                item = _call_item(call["id"], call["function"]["name"], "", "in_progress")
            self.calls[call["index"]] = item
            self.items.append(item)
            events.append(self._event("response.output_item.added", output_index=len(self.items) - 1, item=dict(item)))
        key, event = _CALL_TEXT[item["type"]]
        piece = call.get("custom" if item["type"] == "custom_tool_call" else "function", {}).get(key)
        if piece:
            item[key] += piece
            events.append(self._event(f"{event}.delta", item_id=item["id"], output_index=self.items.index(item),
                                      delta=piece))  # fmt: skip
        return events

    def _close_call(self, index: int) -> list[str]:
        item = self.calls.pop(index)
        item["status"] = self._item_status(item)
        output_index = self.items.index(item)
        key, event = _CALL_TEXT[item["type"]]
        return [
            self._event(f"{event}.done", item_id=item["id"], output_index=output_index, **{key: item[key]}),
            self._event("response.output_item.done", output_index=output_index, item=item),
        ]


_CALL_TEXT = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}
"""A call item's streamed text: its key, and the events that carry it (`.delta`, then `.done`)."""


class _Event(ResponseObject):
    """An event sent through sse() (head and closing events): numbered in the stream's order, named on its
    `event:` line."""

    def __init__(self, fmt: ResponsesFormat, kind: str, **fields: Any) -> None:
        super().__init__(type=kind, sequence_number=fmt.sequence, **fields)
        fmt.sequence += 1

    @property
    def event_name(self) -> str:
        return self.type  # type: ignore[attr-defined]


def _status(finish_reason: str | None) -> str:
    """A response's status from its choice's finish reason: cut by max_output_tokens, aborted by the server
    before its end (failed, ABORTED: never "completed" for a cut text), or complete."""
    return {"length": "incomplete", "abort": "failed"}.get(finish_reason or "", "completed")


def _shell(item: dict[str, Any]) -> dict[str, Any]:
    """A message or reasoning item as output_item.added shows it: no part yet (content_part.added brings it,
    so a client that appends each added part, as OpenAI's SDKs do, holds one)."""
    return {**item, "content": []}


def _message_item(item_id: str, text: str, status: str, logprobs: list | None) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": [part]}


def _reasoning_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }


def _custom_call_item(call_id: str, name: str, text: str, status: str) -> dict[str, Any]:
    return {"id": _id("ctc"), "type": "custom_tool_call", "call_id": call_id, "name": name, "input": text,
            "status": status}  # fmt: skip


def _call_item(call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": _id("fc"),
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }
