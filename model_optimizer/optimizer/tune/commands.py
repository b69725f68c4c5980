"""Command lines for a candidate's settings: `mopt serve`, a user's `--server-cmd` template, `vllm serve`.

The vLLM translation reads the one table `mopt deploy` uses (deploy/vllm_flags.py), so a tuned
`best.yaml` translates the same way whether it is deployed or printed here.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass

from model_optimizer.optimizer.deploy.vllm_flags import (
    JSON_LIST_FLAGS,
    ONLY_TRUE,
    TRANSLATED,
    UNTRANSLATED,
    VLLM_QUANTIZATION,
)

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def flag_args(settings: dict) -> list[str]:
    """`--name value` for each setting (booleans as --name / --no-name), as `mopt serve` reads them."""
    argv: list[str] = []
    for name, value in settings.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, list):
            argv += [flag, ",".join(map(str, value))]
        else:
            argv += [flag, str(value)]
    return argv


def mopt_serve_argv(model: str | None, settings: dict, port: int | None = None, python: bool = False) -> list[str]:
    """`mopt serve` for `settings`; `python` runs it as `python -m` with this interpreter (trials)."""
    head = [sys.executable, "-m", "model_optimizer.cli.main", "serve"] if python else ["mopt", "serve"]
    argv = head + (["--model", model] if model else [])
    if port is not None:
        argv += ["--host", "127.0.0.1", "--port", str(port)]
    return argv + flag_args({k: v for k, v in settings.items() if k not in ("model", "host", "port")})


@dataclass
class VllmTranslation:
    argv: list[str]
    translated: dict[str, str]
    """Setting -> the vLLM flag it became."""
    untranslated: dict[str, str]
    """Setting -> why vLLM cannot express it."""


def vllm_serve(model: str | None, settings: dict) -> VllmTranslation:
    """`vllm serve MODEL ...` for `settings`, with which settings translate and which do not."""
    argv = ["vllm", "serve", model or "MODEL"]
    translated: dict[str, str] = {}
    untranslated: dict[str, str] = {}
    for name, value in settings.items():
        if name in ("model",) or value is None:
            continue
        if name not in TRANSLATED:
            untranslated[name] = UNTRANSLATED.get(name, "no vLLM equivalent known")
            continue
        flag = TRANSLATED[name]
        if name == "quantization" and value not in VLLM_QUANTIZATION:
            if value != "none":  # "none" (never quantize) is what vLLM does without the flag
                untranslated[name] = "vLLM quantizes only fp8 on the fly; write a folder with mopt quantize"
            continue
        translated[name] = flag
        if name in JSON_LIST_FLAGS:
            argv += [flag, json.dumps(value)]  # vLLM parses this flag as a JSON list
        elif isinstance(value, bool):
            if value or name not in ONLY_TRUE:
                argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return VllmTranslation(argv, translated, untranslated)


def template_argv(template: str, model: str | None, settings: dict, port: int) -> list[str]:
    """A `--server-cmd` template filled in: {model}, {host}, {port}, {python}, {flags} (every setting as
    `mopt serve` flags), {vllm_flags} (as `vllm serve` flags) and {NAME} for any setting's value
    (booleans as true/false). An unknown placeholder is a ValueError listing the known ones."""
    values = {name: _text(value) for name, value in settings.items()}
    values |= {
        "model": model or "",
        "host": "127.0.0.1",
        "port": str(port),
        "python": sys.executable,
        "flags": " ".join(map(shlex.quote, flag_args(settings))),
        "vllm_flags": " ".join(map(shlex.quote, vllm_serve(model, settings).argv[3:])),
    }
    unknown = sorted(set(PLACEHOLDER.findall(template)) - set(values))
    if unknown:
        raise ValueError(
            f"--server-cmd names {', '.join('{' + u + '}' for u in unknown)}, which is not set; known: "
            f"{', '.join('{' + k + '}' for k in sorted(values))} (fix a setting with --fix NAME=VALUE)"
        )
    raw = {"flags", "vllm_flags"}  # already quoted word by word
    filled = PLACEHOLDER.sub(lambda m: values[m[1]] if m[1] in raw else shlex.quote(values[m[1]]), template)
    return shlex.split(filled)


def template_uses(template: str) -> set[str]:
    """The placeholder names a template mentions."""
    return set(PLACEHOLDER.findall(template))


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
