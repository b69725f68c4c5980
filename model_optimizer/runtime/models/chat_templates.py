"""The chat templates we ship (assets/chat_templates/*.jinja) and which model family uses which."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

FAMILY_TEMPLATES = {"llama": "llama3", "qwen2": "chatml", "qwen3": "chatml", "mistral": "mistral"}
"""config.json model_type -> the template its instruct models use."""


def shipped_templates() -> list[str]:
    folder = resources.files("model_optimizer.assets").joinpath("chat_templates")
    return sorted(p.name.removesuffix(".jinja") for p in folder.iterdir() if p.name.endswith(".jinja"))


def family_template(config: dict) -> str | None:
    """The shipped template for this config's model family, or None when we ship none."""
    return FAMILY_TEMPLATES.get(str(config.get("model_type", "")).lower())


def load_template(value: str) -> str:
    """--chat-template's value as a template: a shipped one by name (chatml, llama3, mistral), the text of a
    file, or (as vLLM takes it) the template itself when it is neither and holds Jinja markup."""
    if value in shipped_templates():
        folder = resources.files("model_optimizer.assets").joinpath("chat_templates")
        return folder.joinpath(f"{value}.jinja").read_text(encoding="utf-8")
    if "{{" in value or "{%" in value:  # markup: no file name (a long one is not even a legal path)
        return value
    path = Path(value).expanduser()
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"chat template file {path} is not UTF-8 text: {exc}") from None
        if not text.strip():
            raise ValueError(f"chat template file {path} is empty")
        return text
    raise ValueError(
        f"--chat-template {value!r} is neither a shipped template ({', '.join(shipped_templates())}), a file, "
        "nor a Jinja template"
    )
