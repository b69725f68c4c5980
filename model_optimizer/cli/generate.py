"""`mopt generate`: offline generation from the command line.

    mopt generate --prompt "def fibonacci(n):" --max-tokens 32
    mopt generate --model DIR --prompts-file in.jsonl --output out.jsonl
    producer | mopt generate --model DIR --prompts-file - --output -

Results go to stdout (text, or JSONL with --output -) or to the --output file; progress, logs and
the statistics table go to stderr, so `mopt generate ... > out.txt` holds only the results.

--prompts-file - reads the JSONL from stdin (./- is a file named '-'); a UTF-8 byte order mark at the start
of the file is skipped. Each JSONL input line is an object with exactly one of
  "prompt": "text"    "prompt_token_ids": [1, 2, 3]    "messages": [{"role": "user", "content": "..."}]
("messages" goes through the tokenizer's chat template, with the assistant turn opened, as LLM.chat renders
it: content parts, tool calls and tool results included; such a line may add "tools",
"chat_template_kwargs", "add_generation_prompt" and "continue_final_message"), plus any SamplingParams
field ("max_tokens", "temperature", "stop", ...) for that line alone. --chat sends each --prompt as a
user message.

Sampling values come from, last one winning: SamplingParams' defaults, the model's
generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty, max_new_tokens),
the command line, the JSONL line. --stop understands \\n, \\t, \\r and \\\\.

Results on stdout come out in prompt order as the prompts finish; --output FILE is written at the end.
Ctrl-C stops with exit code 130, SIGTERM with 143; the prompts that had finished are written (atomically)
or printed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.common.fileio import atomic_write, jsonl_values, read_input
from model_optimizer.common.processes import sigterm_raises
from model_optimizer.common.progress import batch_progress
from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.config import EngineConfig, field_docs
from model_optimizer.runtime.sampling_params import SamplingParams, logit_bias_from_json

SAMPLING_FLAGS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "min_tokens",
    "n",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "ignore_eos",
    "logprobs",
)
PROMPT_KEYS = ("prompt", "prompt_token_ids", "messages")
CHAT_KEYS = ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message")
"""A "messages" line's rendering options, as LLM.chat and a chat completion request take them."""
ENGINE_FIELDS = ("output_kind", "min_tokens_barred")
"""SamplingParams fields the engine sets (LLM.generate asks for final outputs; min_tokens bars EOS): not line keys."""
LINE_KEYS = PROMPT_KEYS + CHAT_KEYS + tuple(f.name for f in fields(SamplingParams) if f.name not in ENGINE_FIELDS)
UNLIMITED = "None"
"""--max-tokens None: generate until EOS or the end of the context."""
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
SEED_RANGE = (-(2**63), 2**63 - 1)
"""--seed also seeds the engine's sampler (torch.Generator.manual_seed), which takes a 64-bit integer;
the same range as the server's `seed`."""


@dataclass
class PromptLine:
    """One prompt as the user gave it, where it came from (for errors) and its own sampling fields."""

    source: str
    """'FILE:LINE' or '--prompt #k'."""
    prompt: str | list[int] | None = None
    messages: list[dict] | None = None
    chat: dict[str, Any] = field(default_factory=dict)
    """The line's CHAT_KEYS: keyword arguments of chat_text."""
    sampling: dict[str, Any] = field(default_factory=dict)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        help="generate text offline with the engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    parser.add_argument(
        "--chat",
        action="store_true",
        help="send each --prompt as a user message through the tokenizer's chat template (assistant turn "
        "opened), as a JSONL 'messages' line is",
    )
    parser.add_argument(
        "--chat-template-kwargs",
        type=_json_object_arg,
        default=None,
        metavar="JSON",
        help="variables for the chat template of every conversation, e.g. '{\"enable_thinking\": false}' "
        "(a line's own chat_template_kwargs win)",
    )
    parser.add_argument("--prompts-file", help="JSONL file of prompts (see above), or stdin with '-'")
    parser.add_argument("--output", help="write results as JSONL to this file (atomically), or to stdout with '-'")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        type=unescape,
        help=r"a stop string (repeatable); \n, \t, \r and \\ are escapes",
    )
    parser.add_argument(
        "--max-tokens",
        type=_max_tokens_arg,
        default=None,
        help=f"{field_docs(SamplingParams)['max_tokens']} Give None to run until EOS or the end of "
        "the context. (default: the model's max_new_tokens, else 16)",
    )
    add_dataclass_args(
        parser,
        SamplingParams,
        skip=tuple(f.name for f in fields(SamplingParams) if f.name not in SAMPLING_FLAGS or f.name == "max_tokens"),
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="prompt i (from 0) samples with seed (SEED + i) mod 2**63: prompts differ from one another, and each output is "
        "the same in every run, whatever else runs beside it (a line's own seed wins); also seeds the engine",
    )
    add_dataclass_args(parser, EngineConfig, skip=("seed",))  # --seed above seeds both
    return parser


def unescape(text: str) -> str:
    r"""A --stop value with \n, \t, \r and \\ turned into their characters (shells pass them literally);
    any other backslash stays as it is."""
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(0)), text)


def _json_object_arg(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def _max_tokens_arg(text: str) -> int | str:
    if text.strip().lower() == "none":
        return UNLIMITED
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be an integer >= 1 or None (until EOS or the end of the context), got {text!r}"
        )
    return value


def sampling_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The SamplingParams fields set on the command line (and only those)."""
    values = {name: getattr(args, name) for name in SAMPLING_FLAGS if getattr(args, name, None) is not None}
    if values.get("max_tokens") == UNLIMITED:
        values["max_tokens"] = None
    if args.stop:
        values["stop"] = list(args.stop)
    return values


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from model_optimizer.runtime.hub import localize, resolve_model_dir
    from model_optimizer.runtime.llm import LLM, config_generation_defaults

    console = Console(stderr=True)
    if args.output is not None and args.output != "-":  # found out now, not after the generation
        from model_optimizer.common.fileio import check_writable_file_path

        check_writable_file_path(args.output, "--output")  # '' is refused, not read as stdout
    if args.prompts_file is not None and not args.prompts_file.strip():  # Path("") would be the current folder
        raise ValueError("--prompts-file is empty; give a JSONL file, or - for stdin")
    if args.prompts_file and args.prompts_file != STDIN and Path(args.prompts_file).is_dir():
        raise ValueError(f"--prompts-file {args.prompts_file} is a folder, not a JSONL file")
    check_seed(args.seed)
    lines = read_prompt_lines(args.prompt, args.prompts_file, args.chat)
    if args.chat_template_kwargs:
        for line in lines:
            if line.messages is not None:
                given = line.chat.get("template_kwargs", {})
                line.chat["template_kwargs"] = {**args.chat_template_kwargs, **given}
    engine_config = dataclass_from_args(EngineConfig, args, seed=args.seed or 0)
    model_id = localize(engine_config)  # a Hub id becomes its snapshot folder, downloaded or from the cache
    model_dir = resolve_model_dir(engine_config.model)
    check_generation_model(model_dir)
    # the model's defaults are read before it loads, so that a bad line fails in a second, not after the load
    defaults = config_generation_defaults(engine_config, model_dir)
    cli = sampling_overrides(args)
    params = [_line_params(line, {**defaults, **cli, **_seed_of(args.seed, i)}) for i, line in enumerate(lines)]
    _log(f"loading model {model_id or engine_config.model or '(built-in)'}")
    with sigterm_raises(Terminated):
        try:
            with console.status("loading model"), _startup_phases_shown(console):
                llm = LLM(**asdict(engine_config))
        except KeyboardInterrupt as exc:
            _log(f"{_interruption(exc)} while loading the model; nothing was generated or written")
            return _exit_code(exc)
        prompt_ids, prompt_texts = zip(*(_prompt_ids(llm, line, p) for line, p in zip(lines, params)))
        results = Results(args.output, llm, prompt_texts, params)
        finished = results.finished
        start = time.perf_counter()
        try:  # the line inside the try: a Ctrl-C right after it is still answered below
            _log(f"generating for {len(lines)} prompt{'s' if len(lines) > 1 else ''}")
            with batch_progress(console, len(lines), "generating", _log) as advance:
                llm.generate(
                    list(prompt_ids),
                    params,
                    on_progress=lambda i, out: (results.add(i, out), advance()),
                    use_tqdm=False,
                )
        except KeyboardInterrupt as exc:
            if not finished:
                _log(f"{_interruption(exc)}; none had finished; nothing was written")
                return _exit_code(exc)
            where = results.close()
            _log(f"{_interruption(exc)}; {len(finished)} of {len(lines)} prompts had finished, {where}")
            return _exit_code(exc)
    elapsed = time.perf_counter() - start
    results.close()
    _print_stats(console, llm, list(finished.values()), elapsed)
    failed = [i for i in sorted(finished) if finished[i].error]
    for i in failed:  # finish_reason "error": said, and not exit code 0 as if every prompt had an answer
        _log(f"{lines[i].source} failed: {finished[i].error}")
    return 1 if failed else 0


def check_seed(seed: int | None) -> None:
    """ValueError naming --seed when it does not fit the sampler's 64-bit seed (torch's "Overflow when
    unpacking long long" otherwise, after the load)."""
    low, high = SEED_RANGE
    if seed is not None and not low <= seed <= high:
        raise ValueError(f"--seed must be an integer from {low} to {high} (64 bits), got {seed}")


def check_generation_model(model_dir: Path) -> None:
    """ValueError before the weights load when the folder holds an embedding model: an encoder (BERT
    family), for which LLM builds no generation engine, or a decoder saved without its LM head
    (Qwen3-Embedding's Qwen3Model)."""
    from model_optimizer.runtime.models.model_config import is_encoder_folder, read_config
    from model_optimizer.runtime.models.registry import DECODER_BASE_NAMES

    arch = read_config(model_dir)["architectures"][0]
    if is_encoder_folder(model_dir) or arch in DECODER_BASE_NAMES:
        raise ValueError(
            f"--model {model_dir} is an embedding model ({arch}), which cannot generate text: embed with "
            "`mopt embed`, or serve it with `mopt serve` and use /v1/embeddings"
        )


STDIN = "-"
"""--prompts-file's name for stdin, as --output's for stdout."""


def read_prompt_lines(prompts: list[str], prompts_file: str | Path | None, chat: bool = False) -> list[PromptLine]:
    """--prompt values (with `chat`, each a user message) and JSONL lines, each checked for its shape
    (ValueError naming FILE:LINE, <stdin>:LINE for `-`)."""
    lines = [PromptLine(f"--prompt #{k}", _text(p, "--prompt")) for k, p in enumerate(prompts, start=1)]
    if chat:
        for line in lines:
            line.prompt, line.messages = None, [{"role": "user", "content": line.prompt}]
    if prompts_file:
        path, name = (Path("/dev/stdin"), "<stdin>") if prompts_file == STDIN else (Path(prompts_file), prompts_file)
        for number, row in jsonl_values(_utf8_lines(path, name), name):
            source = f"{name}:{number}"
            try:
                lines.append(_parse_line(row, source))
            except ValueError as exc:
                raise ValueError(f"{source}: {exc}") from None
    if not lines:
        raise ValueError("no prompts: give --prompt TEXT or --prompts-file FILE")
    return lines


def _utf8_lines(path: Path, name: str | Path) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 is an error naming it (`name`). (Split as bytes: a
    U+2028 inside a JSON string is not a line break.)"""
    for number, raw in enumerate(read_input(path).splitlines(), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{name}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _parse_line(row: Any, source: str) -> PromptLine:
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with one of {_names(PROMPT_KEYS)}, got {type(row).__name__}")
    for key in row:
        if key not in LINE_KEYS:
            close = difflib.get_close_matches(key, LINE_KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(LINE_KEYS)}"
            raise ValueError(f"unknown key {key!r} ({hint})")
    given = [k for k in PROMPT_KEYS if k in row]
    if len(given) != 1:
        what = "give only one of" if given else "give one of"
        raise ValueError(f"{what} {_names(PROMPT_KEYS)}")
    sampling = {k: v for k, v in row.items() if k not in PROMPT_KEYS + CHAT_KEYS}
    chat = {k: v for k, v in row.items() if k in CHAT_KEYS}
    if chat and "messages" not in row:
        raise ValueError(f"{', '.join(map(repr, chat))} go(es) with 'messages', not with {given[0]!r}")
    if "prompt" in row:
        return PromptLine(source, prompt=_text(row["prompt"], "prompt"), sampling=sampling)
    if "prompt_token_ids" in row:
        ids = row["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"prompt_token_ids must be a non-empty list of integers, got {_clip(ids)}")
        return PromptLine(source, prompt=ids, sampling=sampling)
    return PromptLine(source, messages=_messages(row["messages"]), chat=_chat_options(chat), sampling=sampling)


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {_clip(value)}")
    _check_unicode(value, name)
    return value


def _check_unicode(value: str, name: str) -> None:
    """ValueError unless `value` is valid Unicode text, which the tokenizer needs (it raises a TypeError
    otherwise). A JSON \\ud800 escape gives a lone surrogate; a command-line byte that is not UTF-8
    reaches Python as one too (U+DC80..U+DCFF, the surrogateescape of that byte)."""
    at = not_utf8_at(value)
    if at is None:
        return
    char = value[at]
    if name.startswith("--") and "\udc80" <= char <= "\udcff":
        reason = f"not valid UTF-8 text (byte 0x{ord(char) - 0xDC00:02x} at character {at})"
    else:
        reason = f"not valid Unicode text (a lone surrogate {char!r} at character {at})"
    raise ValueError(f"{name} is {reason}")


def _messages(messages: Any) -> list[dict]:
    """The shape every message needs (an object with a string role); the rest (content as text, null or a
    list of parts, tool_calls, tool_call_id, ...) is checked as LLM.chat and the server check it, when
    the conversation is rendered."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f'messages must be a non-empty list of {{"role": ..., "content": ...}} objects, got {_clip(messages)}'
        )
    for k, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
            raise ValueError(f"messages[{k}] must be an object with a string 'role', got {_clip(message)}")
        _check_unicode_within(message, f"messages[{k}]")
    return messages


def _chat_options(chat: dict[str, Any]) -> dict[str, Any]:
    """A line's CHAT_KEYS, checked for their JSON types, as chat_text's keyword arguments."""
    for key, kind in (("tools", list), ("chat_template_kwargs", dict)):
        if key in chat and not isinstance(chat[key], kind):
            raise ValueError(f"{key} must be a JSON {'list' if kind is list else 'object'}, got {_clip(chat[key])}")
    for key in ("add_generation_prompt", "continue_final_message"):
        if key in chat and not isinstance(chat[key], bool):
            raise ValueError(f"{key} must be true or false, got {_clip(chat[key])}")
    if chat.get("continue_final_message") and "add_generation_prompt" not in chat:
        chat = {**chat, "add_generation_prompt": False}  # continuing the last message opens no new turn
    _check_unicode_within(chat, "the chat options")
    return {("template_kwargs" if k == "chat_template_kwargs" else k): v for k, v in chat.items()}


def _check_unicode_within(value: Any, name: str) -> None:
    """_check_unicode on every string within `value` (JSON: objects, lists, strings), named by its path."""
    if isinstance(value, str):
        _check_unicode(value, name)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode_within(item, f"{name}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_unicode_within(item, f"{name}[{index}]")


def _seed_of(seed: int | None, index: int) -> dict[str, int]:
    """Prompt `index`'s sampling seed from --seed: (seed + index) mod 2**63, never negative (-1 would be
    SamplingParams' "no seed"); none without --seed."""
    return {} if seed is None else {"seed": (seed + index) % 2**63}


def _line_params(line: PromptLine, base: dict[str, Any]) -> SamplingParams:
    try:
        params = SamplingParams(**{**base, **_json_sampling(line.sampling)})
        if params.structured_outputs is not None:  # a bad regex or grammar: refused now, not an empty "error" output
            from model_optimizer.runtime.structured.grammar import check_offline

            check_offline(params.structured_outputs)
        return params
    except ValueError as exc:
        raise ValueError(f"{line.source}: {exc}") from None


def _json_sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    """A line's sampling fields with logit_bias's keys as token ids (JSON object keys are strings)."""
    bias = sampling.get("logit_bias")
    return {**sampling, "logit_bias": logit_bias_from_json(bias)} if isinstance(bias, dict) else sampling


def _prompt_ids(llm: Any, line: PromptLine, params: SamplingParams) -> tuple[list[int], str | None]:
    """(token ids, prompt text or None) of one line, with the engine's own checks; errors name the line."""
    from model_optimizer.runtime.engine.input_processor import check_prompt_fits, encode_prompt, truncated_prompt

    info = llm.engine.info
    try:
        params.check_vocab(info.vocab_size)  # logit_bias, allowed_token_ids, ... against this model's vocabulary
        text = _chat_text(llm, line.messages, line.chat) if line.messages is not None else line.prompt
        if line.messages is not None:
            ids = list(llm.tokenizer.encode(text, add_special_tokens=False))  # the template has the special tokens
        else:
            ids = encode_prompt(llm.tokenizer, line.prompt, info.vocab_size)
        ids = truncated_prompt(ids, params.truncate_prompt_tokens, info.max_model_len)
        check_prompt_fits(len(ids), info.max_model_len)
    except ValueError as exc:
        raise ValueError(f"{line.source}: {exc}") from None
    return ids, text if isinstance(text, str) else None


def _chat_text(llm: Any, messages: list[dict], options: dict[str, Any]) -> str:
    tokenizer = llm.tokenizer
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"'messages' needs a chat template and the tokenizer of {llm.model_dir} has no chat template; "
            "give the conversation as 'prompt' text instead"
        )
    from model_optimizer.runtime.engine.input_processor import RESERVED_TEMPLATE_KWARGS, chat_text

    reserved = sorted(RESERVED_TEMPLATE_KWARGS & set(options.get("template_kwargs") or {}))
    if reserved:  # as LLM.chat: refused, not dropped
        raise ValueError(f"chat_template_kwargs may not set {', '.join(reserved)}: they are the rendering's own")
    return chat_text(tokenizer, messages, **options)


class Results:
    """The finished prompts' results, in prompt order, where --output says: on stdout each as soon as every
    prompt before it has finished (a reader at the other end of a pipe gets them while the batch runs, not
    all at its end), in a file all at once, atomically, at `close`."""

    def __init__(self, output: str | None, llm: Any, prompt_texts: tuple, params: list[SamplingParams]) -> None:
        self.output, self.llm, self.prompt_texts, self.params = output, llm, prompt_texts, params
        self.to_file = bool(output) and output != "-"
        self.finished: dict[int, Any] = {}
        """Prompt index -> its RequestOutput."""
        self.num_printed = 0
        """Prompts 0 .. num_printed - 1 are on stdout."""

    def add(self, index: int, output: Any) -> None:
        self.finished[index] = output
        if self.to_file:
            return
        while self.num_printed in self.finished:
            self._print(self.num_printed)
            self.num_printed += 1
        sys.stdout.flush()

    def close(self) -> str:
        """Hand out what has not gone out yet (after an interrupt, the finished prompts past one that had
        not); returns where the results went."""
        if self.to_file:
            if not self.finished:
                return f"{self.output} was not written"
            rows = (self._result(i) for i in sorted(self.finished))
            atomic_write(self.output, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
            return f"their results are in {self.output}"
        for index in sorted(i for i in self.finished if i >= self.num_printed):
            self._print(index)
        self.num_printed = len(self.prompt_texts)
        sys.stdout.flush()
        return "their results were printed"

    def _result(self, index: int) -> dict:
        tokenizer = self.llm.tokenizer
        return _result(index, self.prompt_texts[index], self.finished[index], self.params[index], tokenizer)

    def _print(self, index: int) -> None:
        result = self._result(index)
        if self.output == "-":
            print(json.dumps(result, ensure_ascii=False))
        else:
            _print_text(result)


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a batch scheduler's end of job), answered as Ctrl-C is: the finished
    results are written, and the exit code is 143 (128 + SIGTERM) instead of 130."""


def _interruption(exc: KeyboardInterrupt) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def _exit_code(exc: KeyboardInterrupt) -> int:
    return 143 if isinstance(exc, Terminated) else 130


def _result(index: int, prompt: str | None, output: Any, params: SamplingParams, tokenizer: Any) -> dict:
    return {
        "prompt_index": index,
        "prompt": prompt,
        "prompt_token_ids": output.prompt_token_ids,
        "num_cached_tokens": output.num_cached_tokens,
        "outputs": [
            {
                "index": c.index,
                "text": c.text,
                "token_ids": c.token_ids,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
                **(
                    {
                        "cumulative_logprob": _finite(c.cumulative_logprob),
                        "logprobs": _logprobs(c.logprobs, params.logprobs, tokenizer),
                    }
                    if c.logprobs is not None
                    else {}
                ),
            }
            for c in output.outputs
        ],
        **({"error": output.error} if output.error else {}),
        **(
            {"prompt_logprobs": _prompt_logprobs(output, params.prompt_logprobs, tokenizer)}
            if output.prompt_logprobs is not None
            else {}
        ),
        "ttft_s": output.metrics.ttft,
        "latency_s": (output.metrics.finished_time or 0) - output.metrics.arrival_time,
    }


def _logprobs(logprobs: list, num_top: int | None, tokenizer: Any) -> list[dict]:
    """Each generated token with its logprob and rank, and the num_top most likely tokens at that step."""
    from model_optimizer.runtime.engine.detokenizer import TokenTexts

    text = TokenTexts(tokenizer)
    return [
        _logprob_row(
            text, lp.token_id, lp.logprob, lp.rank, sorted(lp.top.items(), key=lambda kv: -kv[1])[: num_top or 0]
        )
        for lp in logprobs
    ]


def _prompt_logprobs(output: Any, num_top: int | None, tokenizer: Any) -> list[dict | None]:
    """Each prompt token after the first with its logprob and rank given the tokens before it, and the
    num_top most likely tokens there (rows as _logprobs'); None for the first token."""
    from model_optimizer.runtime.engine.detokenizer import TokenTexts

    text = TokenTexts(tokenizer)
    rows: list[dict | None] = []
    for token, entry in zip(output.prompt_token_ids, output.prompt_logprobs):
        if entry is None:
            rows.append(None)
            continue
        top = sorted(((t, lp) for t, lp in entry.items() if lp.rank <= (num_top or 0)), key=lambda kv: kv[1].rank)
        chosen = entry[token]
        rows.append(_logprob_row(text, token, chosen.logprob, chosen.rank, [(t, lp.logprob) for t, lp in top]))
    return rows


def _logprob_row(text: Any, token: int, logprob: float, rank: int, top: list[tuple[int, float]]) -> dict:
    """One token's row in a JSONL result: its text, logprob and rank, and the most likely tokens there."""
    return {
        "token_id": token,
        "token": text(token),
        "logprob": _finite(logprob),
        "rank": rank,
        "top": [{"token_id": t, "token": text(t), "logprob": _finite(v)} for t, v in top],
    }


def _print_text(result: dict) -> None:
    prompt = result["prompt"] if result["prompt"] is not None else result["prompt_token_ids"]
    shown = _clip(prompt, 80)
    for c in result["outputs"]:
        tag = f"[{c['index']}] " if len(result["outputs"]) > 1 else ""
        print(f"{shown} -> {tag}{c['text']!r} ({c['finish_reason']})")
        for lp in c.get("logprobs", []):
            top = "  ".join(f"{t['token']!r} {_fmt(t['logprob'])}" for t in lp["top"])
            print(f"    {lp['token']!r:>14} {_fmt(lp['logprob'])}  rank {lp['rank']}  top: {top}")


def _print_stats(console: Any, llm: Any, outputs: list, elapsed: float) -> None:
    from rich.table import Table

    stats = llm.engine.stats()
    generated = sum(o.num_output_tokens for o in outputs)
    table = Table(title="engine statistics", show_header=False)
    table.add_row("requests", str(len(outputs)))
    table.add_row("prompt tokens computed", str(stats.num_prompt_tokens))
    table.add_row("generated tokens", str(generated))
    table.add_row("wall time", f"{elapsed:.2f} s")
    table.add_row("output tokens/s", f"{generated / elapsed:.1f}" if elapsed else "-")
    table.add_row("prefix-cache hit rate", f"{stats.prefix_cache_hit_rate:.1%}")
    table.add_row("preemptions", str(stats.num_preemptions))
    table.add_row("engine steps", str(stats.num_steps))
    table.add_row("KV-cache blocks", f"{stats.num_blocks} x {llm.config.block_size} tokens")
    if llm.config.speculative is not None:
        proposed, accepted = stats.spec_num_draft_tokens, stats.spec_num_accepted_tokens
        table.add_row("spec decode: mean acceptance length", f"{stats.spec_mean_acceptance_length:.2f}")
        table.add_row(
            "spec decode: proposals accepted",
            f"{accepted} of {proposed}" + (f" ({accepted / proposed:.1%})" if proposed else ""),
        )
    console.print(table)


@contextmanager
def _startup_phases_shown(console: Any) -> Iterator[None]:
    """Print the engine's start-up phase lines (model_optimizer.startup, INFO) while the model loads.

    Through the rich console, so that on a terminal each line lands above the "loading model" spinner; soft
    wrap, as rich wraps at 80 columns when stderr is no terminal, which would split each line of a log file.
    """
    import logging

    class ConsoleHandler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            console.print(f"mopt generate: {record.getMessage()}", highlight=False, markup=False, soft_wrap=True)

    logger = logging.getLogger("model_optimizer.startup")
    handler, level = ConsoleHandler(logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _log(message: str) -> None:
    print(f"mopt generate: {message}", file=sys.stderr, flush=True)


def _names(keys: tuple[str, ...]) -> str:
    return ", ".join(repr(k) for k in keys[:-1]) + f" or {keys[-1]!r}"


def _clip(value: Any, limit: int = 60) -> str:
    """repr(value), shortened to `limit` characters for messages and the text view."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no -Infinity


def _fmt(value: float | None) -> str:
    return "-inf" if value is None else f"{value:.3f}"
