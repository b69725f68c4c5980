"""What the container does when it starts: with a required API key it refuses to start the server without
one, and the chat template it reads is the one `mopt serve` would (a shipped name, a file or the template)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from model_optimizer.cli.main import main

DOCKER = ["deploy", "--target", "docker", "--kernels-for", "none", "--driver", "570.133.20"]


def _instruction(dockerfile: Path, name: str) -> list[str]:
    line = next(line for line in dockerfile.read_text().splitlines() if line.startswith(f"{name} "))
    return json.loads(line[len(name) + 1 :])


def _start(entrypoint: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The image's ENTRYPOINT with a stand-in for the server as CMD, as docker runs them (exec form)."""
    server = [sys.executable, "-c", "print('server started')"]
    return subprocess.run(
        entrypoint + server, env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("engine, variable", [("mopt", "MOPT_API_KEY"), ("vllm", "VLLM_API_KEY")])
@pytest.mark.parametrize("flag", [["--api-key", "sk-never-in-a-file"], ["--metrics-auth"]])
def test_a_required_key_is_required_at_container_start(tmp_path, capsys, engine, variable, flag):
    """The README promised that the container does not start without the key, but `docker run -e
    MOPT_API_KEY` with the host variable unset passes nothing, and the server started open."""
    out = tmp_path / "out"
    assert main([*DOCKER, "--engine", engine, *flag, "--output", str(out)]) == 0
    entrypoint = _instruction(out / "Dockerfile", "ENTRYPOINT")
    for env in ({}, {variable: ""}):
        started = _start(entrypoint, env)
        assert started.returncode != 0 and "server started" not in started.stdout
        assert f"{variable}: unset or empty: this server requires an API key" in started.stderr
    started = _start(entrypoint, {variable: "sk-host"})
    assert started.returncode == 0 and started.stdout == "server started\n", started.stderr
    assert "the containers do not start without it" in (out / "README.md").read_text()


def test_an_optional_key_adds_no_entrypoint(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*DOCKER, "--engine", "vllm", "--output", str(out)]) == 0
    assert _instruction(out / "Dockerfile", "ENTRYPOINT") == []  # the vLLM image's own cleared, nothing added


def _shipped(name: str) -> str:
    return resources.files("model_optimizer.assets").joinpath(f"chat_templates/{name}.jinja").read_text()


@pytest.mark.parametrize("engine", ["mopt", "vllm"])
@pytest.mark.parametrize("form", ["name", "inline", "file"])
def test_chat_template_takes_the_forms_serve_takes(tmp_path, capsys, engine, form):
    """`--chat-template chatml` and an inline template failed with `[Errno 2] No such file or directory`."""
    inline = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    given, expected = {"name": ("chatml", _shipped("chatml")), "inline": (inline, inline)}.get(form, (None, None))
    if form == "file":
        given, expected = str(tmp_path / "mine.jinja"), "{{ messages[0].content }}"
        Path(given).write_text(expected)
    out = tmp_path / "out"
    assert main([*DOCKER, "--engine", engine, "--chat-template", given, "--output", str(out)]) == 0
    assert (out / "chat_template.jinja").read_text() == expected
    command = _instruction(out / "Dockerfile", "CMD")
    assert command[command.index("--chat-template") + 1] == "/etc/mopt/chat_template.jinja"


def test_a_chat_template_that_is_none_of_the_forms_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*DOCKER, "--engine", "vllm", "--chat-template", "chatmll", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mopt deploy: error: --chat-template 'chatmll' is neither a shipped template (chatml")
    assert len(err.splitlines()) == 1
    assert not out.exists()
