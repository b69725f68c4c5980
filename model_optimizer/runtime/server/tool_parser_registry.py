"""The `--tool-call-parser` choices: each model family's format by the name vLLM gives it.

A module of its own because the parsers live in four (tool_parsers.py for JSON formats,
tool_parsers_kv.py for key/value tags, tool_parsers_pythonic.py, tool_parsers_xlam.py), which build on
the first.
"""

from __future__ import annotations

from model_optimizer.runtime.server.tool_parsers import (
    DeepSeekV3Parser,
    DeepSeekV31Parser,
    HermesParser,
    KimiK2Parser,
    Llama3JsonParser,
    MistralParser,
    ToolParser,
)
from model_optimizer.runtime.server.tool_parsers_kv import Glm45Parser, Qwen3CoderParser
from model_optimizer.runtime.server.tool_parsers_pythonic import PythonicParser
from model_optimizer.runtime.server.tool_parsers_xlam import XlamParser

PARSERS: dict[str, type[ToolParser]] = {
    p.name: p
    for p in (
        HermesParser,
        Llama3JsonParser,
        MistralParser,
        DeepSeekV3Parser,
        DeepSeekV31Parser,
        Glm45Parser,
        Qwen3CoderParser,
        PythonicParser,
        KimiK2Parser,
        XlamParser,
    )
} | {"qwen3_xml": Qwen3CoderParser}
"""--tool-call-parser choices (qwen3_xml: the name vLLM's docs now give Qwen3-Coder's format)."""
