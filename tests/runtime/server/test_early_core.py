"""`mopt serve` spawns the engine core of a causal LM before it sets up its HTTP side: what is spawned
early, that the app takes it once its checks pass, and that a start-up that fails first leaves no core.

Real processes (the engine core spawned on a tiny checkpoint); states asserted, never times."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from model_optimizer.cli.serve import _spawn_core_early
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.core_process import spawn_core
from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import ENGINE_ARGS
from tests.tiny_checkpoints import minilm_or_tiny_encoder

pytestmark = pytest.mark.slow


def _gone(start) -> bool:  # noqa: ANN001
    return not start.handle.process.is_alive() and not Path(start.handle.tmpdir).exists()


def test_only_a_causal_lm_folder_gets_its_core_spawned_early(tiny_model, tmp_path):
    server = ServerConfig()
    assert _spawn_core_early(server, EngineConfig(model=str(tmp_path / "missing"))) is None  # the app's error
    assert _spawn_core_early(server, EngineConfig(model=str(minilm_or_tiny_encoder(tmp_path)))) is None
    start = _spawn_core_early(server, EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS))
    assert start is not None and start.handle.process.is_alive()
    start.abandon()  # nobody took it: killed, its folder removed
    assert _gone(start)
    with pytest.raises(RuntimeError, match="already handed over"):
        start.ready()


@pytest.mark.parametrize("level", ["trace", "WARNING"])
def test_the_early_core_starts_at_every_log_level_the_server_takes(tiny_model, level):
    """`--log-level trace` is uvicorn's level below debug, which logging knows only once uvicorn is
    imported: the early spawn comes before that, and its core must still start (as the app's did)."""
    start = _spawn_core_early(
        ServerConfig(log_level=level), EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS)
    )
    core = start.ready()
    assert core.process.is_alive()
    core.stop()


def test_the_early_core_is_as_quiet_about_transformers_as_the_apps(tiny_model, monkeypatch):
    """The app sets TRANSFORMERS_VERBOSITY=error before it spawned the core (its tokenizer may load through
    transformers, whose warnings bypass our log format); the early spawn comes first and must set it too."""
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # recorded, so the test leaves the variable as it was
    monkeypatch.delenv("TRANSFORMERS_VERBOSITY")
    start = _spawn_core_early(ServerConfig(), EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS))
    try:
        environ = _environ(start.handle.process.pid)
        assert b"TRANSFORMERS_VERBOSITY=error" in environ
    finally:
        start.abandon()


def test_the_app_takes_the_spawned_core(tiny_model):
    engine = EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS)
    start = spawn_core(engine)
    app = create_app(ServerConfig(), engine, core_start=start)
    core = app.state.server.core
    assert core is start.handle and core.info.max_model_len == ENGINE_ARGS["max_model_len"]
    start.abandon()  # taken: nothing happens
    assert core.process.is_alive()
    core.stop()
    assert not core.process.is_alive()


def test_a_start_up_refused_before_the_core_is_needed_stops_it(tiny_model, tmp_path):
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }")  # unclosed
    engine = EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS)
    start = spawn_core(engine)
    with pytest.raises(ValueError, match="chat template"):
        create_app(ServerConfig(chat_template=str(template)), engine, core_start=start)
    assert _gone(start)


def _environ(pid: int, timeout: float = 10.0) -> list[bytes]:
    """The environment of process `pid`; /proc reads it empty until the new process has exec'd (a race
    that failed this test once in a full run), so read again until it is there."""
    deadline = time.monotonic() + timeout
    while True:
        environ = [v for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if v]
        if environ or time.monotonic() > deadline:
            return environ
        time.sleep(0.02)


def test_the_frontend_of_a_causal_lm_never_imports_torch(tiny_model, tmp_path):
    """Only the engine core needs torch: the frontend's start-up (the folder's kind, the tokenizer, the
    app) and its requests stay without it, so its start overlaps the core's without importing torch too
    (seconds of CPU on a host without compiled bytecode). A fresh interpreter: this one has torch."""
    from tests.runtime.server.test_process import REPO

    probe = tmp_path / "probe.py"
    probe.write_text(
        textwrap.dedent(
            f"""
            import sys

            def main():
                from fastapi.testclient import TestClient

                from model_optimizer.cli.serve import _spawn_core_early
                from model_optimizer.runtime.config import EngineConfig
                from model_optimizer.runtime.server.app import create_app
                from model_optimizer.runtime.server.config import ServerConfig

                engine = EngineConfig(model={str(tiny_model("qwen3"))!r}, max_model_len=128, num_kv_blocks=64)
                app = create_app(ServerConfig(), engine, core_start=_spawn_core_early(ServerConfig(), engine))
                print("start-up", "torch" in sys.modules)
                with TestClient(app) as client:
                    body = {{"model": app.state.server.model.name, "messages": [{{"role": "user", "content": "hi"}}],
                            "max_tokens": 3, "logprobs": True, "top_logprobs": 2}}
                    print("status", client.post("/v1/chat/completions", json=body).status_code)
                print("requests", "torch" in sys.modules)
                app.state.server.core.stop()

            if __name__ == "__main__":  # the core is spawned: it imports this file again
                main()
            """
        )
    )
    out = subprocess.run([sys.executable, str(probe)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["start-up", "False", "status", "200", "requests", "False"], out.stdout


def test_the_core_is_spawned_before_the_frontend_imports_the_engine():
    """`mopt serve` spawns the core after parsing and reading config.json: the engine's own modules (the
    scheduler, grammars, numpy) are the core's to import, not the frontend's before the spawn."""
    probe = (
        "import sys\n"
        "import model_optimizer.cli.main as m\n"
        "m.build_parser(['serve', '--model', 'x'])\n"
        "from model_optimizer.runtime.hub import resolve_model_dir\n"
        "from model_optimizer.runtime.core_process import spawn_core\n"
        "print(sorted(n for n in ('numpy', 'model_optimizer.runtime.engine.core', 'model_optimizer.runtime.llm')"
        " if n in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
