"""The `--tool-call-parser` choices: each model family's format by the name vLLM gives it.

A module of its own because the parsers live in seven (tool_parsers.py for JSON formats,
tool_parsers_deepseek.py for DeepSeek's and Kimi-K2's special-token markers, tool_parsers_tagged.py for
more JSON formats behind markers, tool_parsers_kv.py for key/value tags, tool_parsers_pythonic.py,
tool_parsers_xlam.py, harmony.py), which build on the first.
"""

from __future__ import annotations

from model_optimizer.runtime.server.harmony import HarmonyToolParser
from model_optimizer.runtime.server.tool_parsers import HermesParser, Llama3JsonParser, MistralParser, ToolParser
from model_optimizer.runtime.server.tool_parsers_deepseek import DeepSeekV3Parser, DeepSeekV31Parser, KimiK2Parser
from model_optimizer.runtime.server.tool_parsers_kv import Glm45Parser, Qwen3CoderParser, SeedOssParser
from model_optimizer.runtime.server.tool_parsers_pythonic import PythonicParser
from model_optimizer.runtime.server.tool_parsers_tagged import (
    Ernie45Parser,
    GigaChat3Parser,
    Granite20bFCParser,
    GraniteParser,
    HunyuanA13BParser,
    InternLMParser,
    JambaParser,
    LongcatParser,
    MinimaxParser,
    Phi4MiniJsonParser,
)
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
        GraniteParser,
        Granite20bFCParser,
        JambaParser,
        HunyuanA13BParser,
        MinimaxParser,
        Phi4MiniJsonParser,
        InternLMParser,
        LongcatParser,
        Ernie45Parser,
        SeedOssParser,
        GigaChat3Parser,
        HarmonyToolParser,
    )
} | {
    "qwen3_xml": Qwen3CoderParser,
    "llama4_json": Llama3JsonParser,
    "llama4_pythonic": PythonicParser,
    "glm47": Glm45Parser,
}
"""--tool-call-parser choices. Other names vLLM gives formats read here: qwen3_xml (its docs' newer name for
Qwen3-Coder's), llama4_json and llama4_pythonic (Llama 4's JSON and Python-list calls, the latter after
`<|python_start|>`), glm47 (GLM-4.7's calls, whose name needs no newline after it, as glm45 reads them too)."""
