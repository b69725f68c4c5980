"""CPU time of streaming one long tool call through each tool-call parser, as the server's event loop pays it.

A stream re-reads a choice's whole text at every delta (the parsers are views of the text so far), so a
call whose arguments hold a file of code costs O(length^2) character visits; what matters is how
many of those run in C. The text is ~18 KB of code in one argument, fed 4 characters (about a token) a
delta.

    python benchmarks/tool_parser_stream.py --output results/tool_parser_stream_cpu.json
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

CODE = "def f(x):\n    return x * 2  # some code here\n" * 400
ARGUMENTS = json.dumps({"path": "a.py", "content": CODE})
TEXTS = {
    "hermes": '<tool_call>{"name": "write_file", "arguments": ' + ARGUMENTS + "}</tool_call>",
    "llama3_json": '{"name": "write_file", "parameters": ' + ARGUMENTS + "}",
    "mistral": '[TOOL_CALLS][{"name": "write_file", "arguments": ' + ARGUMENTS + "}]",
    "pythonic": "[write_file(path='a.py', content=" + repr(CODE) + ")]",
    "qwen3_coder": "<tool_call>\n<function=write_file>\n<parameter=content>\n"
    + CODE
    + "\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>write_file\n<arg_key>content</arg_key><arg_value>" + CODE + "</arg_value></tool_call>",
}


def stream_seconds(name: str, text: str, step: int) -> tuple[float, float]:
    """(total CPU seconds, the slowest delta's) to stream `text` through parser `name`."""
    output = ChatOutput(None, PARSERS[name]([]))
    start, worst = time.process_time(), 0.0
    for i in range(0, len(text), step):
        before = time.process_time()
        output.feed(text[i : i + step])
        worst = max(worst, time.process_time() - before)
    output.finish()
    return time.process_time() - start, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=4, help="characters a delta")
    parser.add_argument("--repeats", type=int, default=3, help="runs per parser; the fastest is kept")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    rows = []
    for name, text in TEXTS.items():
        runs = [stream_seconds(name, text, args.step) for _ in range(args.repeats)]
        total, worst = min(runs)
        rows.append({"parser": name, "chars": len(text), "deltas": -(-len(text) // args.step), "cpu_s": total,
                     "worst_delta_ms": 1000 * worst})  # fmt: skip
        print(f"{name:12s} {len(text)} chars: {total:.3f} s CPU, slowest delta {1000 * worst:.2f} ms", flush=True)
    atomic_write(
        args.output, json.dumps({"machine": platform.processor() or platform.machine(), "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
