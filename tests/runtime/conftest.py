"""Fixtures of the runtime's tests that are not a model of their own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NAMED_TOOL_USE = (
    "{% if tools is not none %}<|im_start|>system\n# Tools{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The `tool_use` template of named_templates_tokenizer: its tools as a system turn, also for an empty list."""


@pytest.fixture(scope="session")
def named_templates_tokenizer(tiny_model, tmp_path_factory) -> Path:
    """Factory: named_templates_tokenizer(default=True) -> a folder with the tiny Qwen3's tokenizer and named
    chat templates, as transformers 5 saves them: its own template the `default` (chat_template.jinja;
    left out for default=False), NAMED_TOOL_USE the `tool_use` (additional_chat_templates/)."""
    root = tmp_path_factory.mktemp("named_templates")

    def make(default: bool = True) -> Path:
        out = root / ("with_default" if default else "tool_use_only")
        if not out.is_dir():
            (out / "additional_chat_templates").mkdir(parents=True)
            names = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")[: 3 if default else 2]
            for name in names:
                shutil.copy(tiny_model("qwen3") / name, out / name)
            (out / "additional_chat_templates" / "tool_use.jinja").write_text(NAMED_TOOL_USE)
        return out

    return make
