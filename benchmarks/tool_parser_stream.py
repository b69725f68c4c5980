"""CPU time of streaming one long tool call through each tool-call parser, as the server's event loop pays it.

A stream re-reads a choice's whole text at every delta (the parsers are views of the text so far); a
parser's scans resume where the last delta's stopped, so a call whose arguments hold a file of code
should cost about as much as the same text streamed as plain content (the `none` row: the copies every
delta makes of the text). The text is `--kb` KB of code in one argument, fed 4 characters (about a
token) a delta.

    python benchmarks/tool_parser_stream.py --kb 88 --output benchmarks/results/tool_parser_stream_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model_optimizer.common.fileio import atomic_write  # noqa: E402
from model_optimizer.runtime.server.chat_output import ChatOutput  # noqa: E402
from model_optimizer.runtime.server.tool_parser_registry import PARSERS  # noqa: E402

LINE = "def f(x):\n    return x * 2  # some code here\n"


def texts(kb: int) -> dict[str, str]:
    """Per parser, one write_file call in its format whose content is about `kb` KB of code."""
    code = LINE * (kb * 1000 // len(LINE))
    arguments = json.dumps({"path": "a.py", "content": code})
    call = '{"name": "write_file", "arguments": ' + arguments + "}"
    return {
        "none": code,  # no parser: plain content
        "hermes": "<tool_call>" + call + "</tool_call>",
        "llama3_json": '{"name": "write_file", "parameters": ' + arguments + "}",
        "mistral": "[TOOL_CALLS][" + call + "]",
        "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.write_file:0<|tool_call_argument_begin|>"
        + arguments
        + "<|tool_call_end|><|tool_calls_section_end|>",
        "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>write_file\n```json\n"
        + arguments
        + "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "pythonic": "[write_file(path='a.py', content=" + repr(code) + ")]",
        "qwen3_coder": "<tool_call>\n<function=write_file>\n<parameter=content>\n"
        + code
        + "\n</parameter>\n</function>\n</tool_call>",
        "glm45": "<tool_call>write_file\n<arg_key>content</arg_key><arg_value>" + code + "</arg_value></tool_call>",
        "xlam": "```json\n[" + call + "]\n```",
    }


def stream_seconds(name: str, text: str, step: int) -> tuple[float, float]:
    """(total CPU seconds, the slowest delta's) to stream `text` through parser `name` (`none`: no parser)."""
    output = ChatOutput(None, PARSERS[name]([]) if name in PARSERS else None)
    start, worst = time.process_time(), 0.0
    for i in range(0, len(text), step):
        before = time.process_time()
        output.feed(text[i : i + step])
        worst = max(worst, time.process_time() - before)
    output.finish()
    return time.process_time() - start, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=88, help="KB of code in the call's arguments")
    parser.add_argument("--step", type=int, default=4, help="characters a delta")
    parser.add_argument("--repeats", type=int, default=3, help="runs per parser; the fastest is kept")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    rows = []
    for name, text in texts(args.kb).items():
        runs = [stream_seconds(name, text, args.step) for _ in range(args.repeats)]
        total, worst = min(runs)
        rows.append({"parser": name, "chars": len(text), "deltas": -(-len(text) // args.step), "cpu_s": total,
                     "worst_delta_ms": 1000 * worst})  # fmt: skip
        print(f"{name:12s} {len(text)} chars: {total:.3f} s CPU, slowest delta {1000 * worst:.2f} ms", flush=True)
    machine = platform.processor() or platform.machine()
    result = {"machine": machine, "kb": args.kb, "step": args.step, "rows": rows}
    atomic_write(args.output, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
