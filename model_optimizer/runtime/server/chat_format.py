"""Chat's answer to one request, whole or streamed: the chat.completion response and the chunks of its
stream (the role first, then each choice's deltas), each choice's text split by --reasoning-parser and
the tool parser into content, reasoning_content and tool_calls (chat_output.py). /v1/chat/completions
answers with it, and /v1/responses reads its stream's events from its deltas."""

from __future__ import annotations

from pydantic import BaseModel

from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.logprobs import TokenTexts, chat_logprobs, chat_logprobs_dict, prompt_logprobs_json
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest, ChatMessage
from model_optimizer.runtime.server.protocol_outputs import (
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionResponse,
    ChatResponseMessage,
    ChatStreamChoice,
    CompletionTokensDetails,
    DeltaMessage,
    UsageInfo,
)
from model_optimizer.runtime.server.reasoning import ReasoningParser
from model_optimizer.runtime.server.streaming import ChoiceDelta, ChunkTemplate, ErrorThenDone
from model_optimizer.runtime.server.tools import ToolPlan


class ChatFormat(ErrorThenDone):
    """Chat's response and stream chunks (a ResponseFormat)."""

    def __init__(
        self,
        body: ChatCompletionRequest,
        request_id: str,
        model_name: str,
        texts: TokenTexts,
        plan: ToolPlan | None = None,
        reasoning: ReasoningParser | None = None,
        response_role: str = "assistant",
    ) -> None:
        self.body = body
        self.role = response_role if body.add_generation_prompt else body.messages[-1].role
        """The answer's role: --response-role after a generation prompt, else the last message's (vLLM's rule)."""
        last = body.messages[-1]
        self.echo = message_text(last) if body.echo and last.role == self.role else ""
        """With echo: the last message's text, which the answer's content starts with."""
        self.texts = texts
        self.num_top = body.top_logprobs or 0
        self.with_token_ids = body.return_token_ids or texts.tokenizer is None
        """Put token_ids on choices (chat needs a tokenizer for its template, so in practice: asked for)."""
        self.base = ChatCompletionChunk(id=request_id, model=model_name, choices=[])
        self.template = ChunkTemplate(self.base)
        self.plan = plan or ToolPlan()
        self.reasoning = reasoning
        """--reasoning-parser's parser for this prompt (stateless: every choice shares it), or None."""
        self.outputs: dict[int, ChatOutput] = {}
        """Per choice index: its text's parsers and what has been streamed of it."""

    def _output(self, index: int) -> ChatOutput:
        out = self.outputs.get(index)
        if out is None:
            out = self.outputs[index] = ChatOutput(
                self.reasoning,
                self.plan.parser,
                self.body.include_reasoning,
                None if self.body.parallel_tool_calls else 1,
            )
        return out

    def _finish_reason(self, c: CompletionOutput, has_calls: bool, complete: bool) -> str | None:
        """ "tool_calls" when whole calls came out of an output the engine stopped (not cut by length, nor
        cut inside a call by a stop string: then the engine's reason stays), as OpenAI."""
        if has_calls and complete and self.plan.finish_with_tool_calls and c.finish_reason == "stop":
            return "tool_calls"
        return c.finish_reason

    def _usage(self, usage: UsageInfo, outputs: list[tuple[str, list[int]]]) -> UsageInfo:
        """The usage with the reasoning tokens of these (text, token ids) outputs, under a reasoning parser."""
        if self.reasoning is None:
            return usage
        tokenizer = self.texts.tokenizer

        def encode(text: str) -> list[int]:
            return tokenizer.encode(text, add_special_tokens=False)

        count = sum(self.reasoning.count_tokens(text, ids, encode) for text, ids in outputs)
        return usage.model_copy(update={"completion_tokens_details": CompletionTokensDetails(reasoning_tokens=count)})

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        [final] = finals
        usage = self._usage(usage, [(c.text, c.token_ids) for c in final.outputs])
        choices = []
        for c in final.outputs:
            logprobs = chat_logprobs(self.texts, c.logprobs, self.num_top) if c.logprobs is not None else None
            out = self._output(c.index)
            fields = out.message(c.text) if not out.plain else None
            echo = self.echo
            message = (
                ChatResponseMessage(role=self.role, content=echo + c.text)
                if fields is None
                else ChatResponseMessage(
                    role=self.role,
                    content=echo + (fields.content or "") if echo else fields.content,
                    reasoning=fields.reasoning_content,
                    reasoning_content=fields.reasoning_content,
                    tool_calls=fields.tool_calls,
                )
            )
            choices.append(
                ChatChoice(
                    index=c.index,
                    message=message,
                    logprobs=logprobs,
                    finish_reason=self._finish_reason(
                        c, bool(fields and fields.tool_calls), fields is None or fields.calls_complete
                    ),
                    stop_reason=c.stop_reason,
                    token_ids=list(c.token_ids) if self.with_token_ids else None,
                )
            )
        prompt_logprobs = None
        if self.body.prompt_logprobs is not None:  # vLLM's: the response's, beside the choices (one prompt)
            prompt_logprobs = prompt_logprobs_json(self.texts, final.prompt_logprobs or [])
        return ChatCompletionResponse(
            id=self.base.id, model=self.base.model, choices=choices, usage=usage, prompt_logprobs=prompt_logprobs
        )

    def head(self) -> list[BaseModel]:
        """The role first, for every choice (as OpenAI sends it); then, with echo, the echoed text."""
        role = [ChatStreamChoice(index=i, delta=DeltaMessage(role=self.role, content="")) for i in range(self.body.n)]
        head = [self.base.model_copy(update={"choices": role})]
        if self.echo:
            echoed = [ChatStreamChoice(index=i, delta=DeltaMessage(content=self.echo)) for i in range(self.body.n)]
            head.append(self.base.model_copy(update={"choices": echoed}))
        return head

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes | None:
        """ChatStreamChoice's fields, in its order, as plain dicts (token_ids left out when not sent). A
        choice with nothing to send (its parser holds text back, inside a call's markers) is left out."""
        choices = []
        for d in deltas:
            c = d.completion
            logprobs = chat_logprobs_dict(self.texts, c.logprobs, self.num_top) if c.logprobs is not None else None
            delta, finish_reason = self.delta(c)
            if not (delta or finish_reason or logprobs or self.with_token_ids):
                continue
            choice = {
                "index": c.index,
                "delta": delta,
                "logprobs": logprobs,
                "finish_reason": finish_reason,
                "stop_reason": c.stop_reason,
            }
            if self.with_token_ids:
                choice["token_ids"] = c.token_ids
            choices.append(choice)
        return self.template.event(choices) if choices else None

    def delta(self, c: CompletionOutput) -> tuple[dict, str | None]:
        """A choice's news in this DELTA output as chat's delta fields (content, reasoning and
        reasoning_content, tool_calls) and its finish reason once it has ended; /v1/responses reads its
        stream's events from these too."""
        out = self._output(c.index)
        if out.plain:
            return ({"content": c.text} if c.text else {}), c.finish_reason
        delta = out.feed(c.text)
        if self.reasoning is not None:
            out.token_ids.extend(c.token_ids)
        if not c.finished():
            return delta, None
        finished = out.finish()
        return _merged(delta, finished), self._finish_reason(c, out.num_calls > 0, out.calls_complete)

    def usage(self, usage: UsageInfo) -> UsageInfo:
        """The stream's usage with its reasoning tokens counted (under a reasoning parser)."""
        return self._usage(usage, [(out.text, out.token_ids) for out in self.outputs.values()])

    def usage_chunk(self, usage: UsageInfo) -> BaseModel:
        return self.base.model_copy(update={"usage": self.usage(usage)})


def _merged(first: dict, then: dict) -> dict:
    """Two deltas of one chunk as one: texts joined, a call's argument (or custom input) pieces joined by index."""
    out = dict(first)
    for key in ("content", "reasoning", "reasoning_content"):
        if key in then:
            out[key] = out.get(key, "") + then[key]
    calls = {call["index"]: call for call in out.get("tool_calls", [])}
    for call in then.get("tool_calls", []):
        earlier = calls.get(call["index"])
        if earlier is None:
            calls[call["index"]] = call
            continue
        for kind, field in (("function", "arguments"), ("custom", "input")):
            piece = call.get(kind, {}).get(field)
            if piece:
                body = earlier.setdefault(kind, {})
                body[field] = body.get(field, "") + piece
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def message_text(message: ChatMessage) -> str:
    """A message's text, its parts joined with newlines."""
    content = message.content
    return "\n".join(part.text for part in content) if isinstance(content, list) else content or ""
