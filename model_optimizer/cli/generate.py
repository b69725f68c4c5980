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
import json
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from model_optimizer.cli._generate_prompts import STDIN, PromptLine, line_params, read_prompt_lines
from model_optimizer.cli._generate_results import Results, print_stats
from model_optimizer.cli._interrupts import Terminated, stop_code, stop_word
from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.common.processes import sigterm_raises
from model_optimizer.common.progress import batch_progress
from model_optimizer.runtime.config import EngineConfig, field_docs
from model_optimizer.runtime.sampling_params import SamplingParams

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
UNLIMITED = "None"
"""--max-tokens None: generate until EOS or the end of the context."""
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
SEED_RANGE = (-(2**63), 2**63 - 1)
"""--seed also seeds the engine's sampler (torch.Generator.manual_seed), which takes a 64-bit integer;
the same range as the server's `seed`."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "generate",
        help="generate text offline with the engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_input_args(parser)
    _add_sampling_args(parser)
    add_dataclass_args(parser, EngineConfig, skip=("seed",))  # --seed seeds both
    return parser


def _add_input_args(parser: argparse.ArgumentParser) -> None:
    """Where the prompts come from and the results go."""
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
    parser.add_argument(
        "--chat-template",
        default=None,
        metavar="TEMPLATE",
        help="the chat template of every conversation instead of the tokenizer's: a shipped one by name "
        "(chatml, llama3, mistral), a file, or the Jinja template itself (as serve's --chat-template)",
    )
    parser.add_argument("--prompts-file", help="JSONL file of prompts (see above), or stdin with '-'")
    parser.add_argument("--output", help="write results as JSONL to this file (atomically), or to stdout with '-'")


def _add_sampling_args(parser: argparse.ArgumentParser) -> None:
    """The SAMPLING_FLAGS, --stop, and --seed, which also seeds the engine."""
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
    """Check every prompt, load the model, generate and hand out the results (see the module docstring).
    Exit code 0; 1 when a prompt failed; 130 on Ctrl-C and 143 on SIGTERM."""
    from rich.console import Console

    from model_optimizer.runtime.generation_defaults import config_generation_defaults
    from model_optimizer.runtime.hub import localize, resolve_model_dir
    from model_optimizer.runtime.llm import LLM

    console = Console(stderr=True)
    _check_paths(args)
    check_seed(args.seed)
    lines = _prompt_lines(args)
    engine_config = dataclass_from_args(EngineConfig, args, seed=args.seed or 0)
    model_id = localize(engine_config)  # a Hub id becomes its snapshot folder, downloaded or from the cache
    model_dir = resolve_model_dir(engine_config.model)
    check_generation_model(model_dir)
    # the model's defaults are read before it loads, so that a bad line fails in a second, not after the load
    defaults = config_generation_defaults(engine_config, model_dir)
    cli = sampling_overrides(args)
    params = [line_params(line, {**defaults, **_seed_of(args.seed, i)}, cli) for i, line in enumerate(lines)]
    _log(f"loading model {model_id or engine_config.model or '(built-in)'}")
    with sigterm_raises(Terminated):
        try:
            with console.status("loading model"), _startup_phases_shown(console):
                llm = LLM(**asdict(engine_config))
        except KeyboardInterrupt as exc:
            _log(f"{stop_word(exc)} while loading the model; nothing was generated or written")
            return stop_code(exc)
        prompt_ids, prompt_texts = zip(*(_prompt_ids(llm, line, p) for line, p in zip(lines, params)))
        results = Results(args.output, llm, prompt_texts, params)
        start = time.perf_counter()
        if (code := _generate(console, llm, list(prompt_ids), params, results)) is not None:
            return code
    elapsed = time.perf_counter() - start
    results.close()
    return _report(console, llm, lines, results.finished, elapsed)


def _check_paths(args: argparse.Namespace) -> None:
    """ValueError (or OSError) for an --output that cannot be written or a --prompts-file that is empty or
    a folder: found out now, not after the load and the generation."""
    if args.output is not None and args.output != "-":
        from model_optimizer.common.fileio import check_writable_file_path

        check_writable_file_path(args.output, "--output")  # '' is refused, not read as stdout
    if args.prompts_file is not None and not args.prompts_file.strip():  # Path("") would be the current folder
        raise ValueError("--prompts-file is empty; give a JSONL file, or - for stdin")
    if args.prompts_file and args.prompts_file != STDIN and Path(args.prompts_file).is_dir():
        raise ValueError(f"--prompts-file {args.prompts_file} is a folder, not a JSONL file")


def _prompt_lines(args: argparse.Namespace) -> list[PromptLine]:
    """The prompts of --prompt and --prompts-file; each conversation with --chat-template (loaded now: a bad
    one fails before the model loads) and --chat-template-kwargs under its own."""
    from model_optimizer.runtime.models.chat_templates import load_template

    lines = read_prompt_lines(args.prompt, args.prompts_file, args.chat)
    template = load_template(args.chat_template) if args.chat_template is not None else None
    for line in (line for line in lines if line.messages is not None):
        if template is not None:
            line.chat["template"] = template
        if args.chat_template_kwargs:
            line.chat["template_kwargs"] = {**args.chat_template_kwargs, **line.chat.get("template_kwargs", {})}
    return lines


def _generate(
    console: Any, llm: Any, prompt_ids: list[list[int]], params: list[SamplingParams], results: Results
) -> int | None:
    """Generate for every prompt, each result handed to `results` as it finishes. None when all finished;
    after Ctrl-C or SIGTERM, the exit code, once the finished prompts' results are out."""
    num_prompts = len(prompt_ids)
    try:  # the line inside the try: a Ctrl-C right after it is still answered below
        _log(f"generating for {num_prompts} prompt{'s' if num_prompts > 1 else ''}")
        with batch_progress(console, num_prompts, "generating", _log) as advance:
            llm.generate(
                prompt_ids,
                params,
                on_progress=lambda i, out: (results.add(i, out), advance()),
                use_tqdm=False,
            )
    except KeyboardInterrupt as exc:
        finished = results.finished
        if not finished:
            _log(f"{stop_word(exc)}; none had finished; nothing was written")
            return stop_code(exc)
        where = results.close()
        _log(f"{stop_word(exc)}; {len(finished)} of {num_prompts} prompts had finished, {where}")
        return stop_code(exc)
    return None


def _report(console: Any, llm: Any, lines: list[PromptLine], finished: dict[int, Any], elapsed: float) -> int:
    """The statistics table and a line for each prompt that failed; the exit code: 1 when one did, else 0."""
    print_stats(console, llm, list(finished.values()), elapsed)
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
    from model_optimizer.runtime.models.model_config import is_embedding_folder, read_config

    if is_embedding_folder(model_dir):
        arch = read_config(model_dir)["architectures"][0]
        raise ValueError(
            f"--model {model_dir} is an embedding model ({arch}), which cannot generate text: embed with "
            "`mopt embed`, or serve it with `mopt serve` and use /v1/embeddings"
        )


def _seed_of(seed: int | None, index: int) -> dict[str, int]:
    """Prompt `index`'s sampling seed from --seed: (seed + index) mod 2**63, never negative (-1 would be
    SamplingParams' "no seed"); none without --seed."""
    return {} if seed is None else {"seed": (seed + index) % 2**63}


def _prompt_ids(llm: Any, line: PromptLine, params: SamplingParams) -> tuple[list[int], str | None]:
    """(token ids, prompt text or None) of one line, with the engine's own checks (those it makes as it queues
    a request included: a prompt that fits no step with chunked prefill off, say); errors name the line."""
    from model_optimizer.runtime.engine.input_processor import encode_prompt

    info = llm.engine.info
    try:
        params.check_vocab(info.vocab_size)  # logit_bias, allowed_token_ids, ... against this model's vocabulary
        text = _chat_text(llm, line.messages, line.chat) if line.messages is not None else line.prompt
        if line.messages is not None:
            ids = list(llm.tokenizer.encode(text, add_special_tokens=False))  # the template has the special tokens
        else:
            ids = encode_prompt(llm.tokenizer, line.prompt, info.vocab_size)
        ids = llm.engine.inputs.request(line.source, ids, params).prompt_token_ids  # truncated, and checked
    except ValueError as exc:
        raise ValueError(f"{line.source}: {exc}") from None
    return ids, text if isinstance(text, str) else None


def _chat_text(llm: Any, messages: list[dict], options: dict[str, Any]) -> str:
    """A "messages" line rendered through its chat template (--chat-template's, else the tokenizer's) with the
    line's options."""
    tokenizer = llm.tokenizer
    if tokenizer is None or not (options.get("template") or getattr(tokenizer, "chat_template", None)):
        raise ValueError(
            f"'messages' needs a chat template and the tokenizer of {llm.model_dir} has no chat template; "
            "give one with --chat-template, or the conversation as 'prompt' text"
        )
    from model_optimizer.runtime.engine.input_processor import chat_text
    from model_optimizer.runtime.llm_inputs import check_template_kwargs

    check_template_kwargs(options.get("template_kwargs"))  # as LLM.chat: refused, not dropped
    return chat_text(tokenizer, messages, **options)


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
