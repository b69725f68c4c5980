"""Command lines for a candidate's settings: `mopt serve`, a user's `--server-cmd` template, `vllm serve`.

Both builders are `mopt deploy`'s (deploy/settings.py's `flags`, deploy/vllm_flags.py's `vllm_serve`),
so a tuned `best.yaml` translates the same way whether it is deployed or printed here.
"""

from __future__ import annotations

import re
import shlex
import sys

from model_optimizer.optimizer.deploy.settings import flags as flag_args
from model_optimizer.optimizer.deploy.vllm_flags import vllm_serve

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def mopt_serve_argv(model: str | None, settings: dict, port: int | None = None, python: bool = False) -> list[str]:
    """`mopt serve` for `settings`; `python` runs it as `python -m` with this interpreter (trials)."""
    head = [sys.executable, "-m", "model_optimizer.cli.main", "serve"] if python else ["mopt", "serve"]
    argv = head + (["--model", model] if model else [])
    if port is not None:
        argv += ["--host", "127.0.0.1", "--port", str(port)]
    return argv + flag_args({k: v for k, v in settings.items() if k not in ("model", "host", "port")})


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
            f"{', '.join('{' + k + '}' for k in sorted(values))} (hold a setting with --set NAME=VALUE)"
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
