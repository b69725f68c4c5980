"""`mopt serve` start-up as a real process: configuration errors are a message and exit code 2, the model
loads before the port is bound, logs share one format, and a periodic stats line reports activity."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.server.test_process import REPO

LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (core )?[\w.]+: ")
"""One format for every line, ours and uvicorn's; the engine-core process tags its lines `core`."""
WAIT = 120.0  # seconds; only a bound on a hang


def run_serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "serve", *args, "--port", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


def assert_config_error(run: subprocess.CompletedProcess, *fragments: str) -> None:
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "supervisor" not in run.stderr, run.stderr
    for fragment in fragments:
        assert fragment in run.stderr, run.stderr
    assert "Uvicorn running" not in run.stderr  # refused before anything listened


@pytest.mark.slow
def test_unsupported_architecture_is_a_configuration_error(tiny_model, tmp_path):
    model = tmp_path / "foo"
    shutil.copytree(tiny_model("qwen3"), model)
    config = json.loads((model / "config.json").read_text())
    config["architectures"] = ["FooForCausalLM"]
    (model / "config.json").write_text(json.dumps(config))
    assert_config_error(
        run_serve(str(model)), "FooForCausalLM", "not supported", "Qwen3ForCausalLM", "LlamaForCausalLM"
    )


@pytest.mark.slow
def test_engine_value_error_is_a_configuration_error(tiny_model):
    assert_config_error(
        run_serve("--model", str(tiny_model("qwen3")), "--max-model-len", "100000"), "max_model_len", "100000", "512"
    )


@pytest.mark.slow
def test_bad_chat_template_is_found_at_start_up(tiny_model, tmp_path):
    template = tmp_path / "broken.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }")  # unclosed
    assert_config_error(
        run_serve(str(tiny_model("qwen3")), "--chat-template", str(template)), "chat template", str(template)
    )
    template.write_text("{{ messages[0]['content'] | nosuchfilter }}")
    assert_config_error(run_serve(str(tiny_model("qwen3")), "--chat-template", str(template)), "chat template")


@pytest.mark.slow
def test_two_different_models_are_refused(tiny_model, tmp_path):
    assert_config_error(run_serve(str(tiny_model("qwen3")), "--model", str(tmp_path)), "two models")


class Server:
    """`mopt serve` in a subprocess whose output is read as it comes (so the pipe never fills)."""

    def __init__(self, *args: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(  # port 0: the one the kernel gives before the load, logged by uvicorn
            [sys.executable, "-m", "model_optimizer.cli.main", "serve", *args, "--port", "0"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def url(self) -> str:
        """The address uvicorn says it runs on (with --port 0, the port reserved before the load)."""
        line = self.lines[self.wait_for_line("Uvicorn running on ")]
        return re.search(r"http://[\d.]+:(\d+)", line).group(0)

    def wait_for_line(self, fragment: str) -> int:
        deadline = time.monotonic() + WAIT
        while True:
            for i, line in enumerate(list(self.lines)):
                if fragment in line:
                    return i
            assert self.proc.poll() is None, "\n".join(self.lines)
            assert time.monotonic() < deadline, f"no line with {fragment!r}:\n" + "\n".join(self.lines)
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def served(tiny_model):
    server = Server(
        str(tiny_model("qwen3")),
        "--max-model-len",
        "256",
        "--num-kv-blocks",
        "64",
        "--log-level",
        "info",
        "--log-interval",
        "0.2",
    )
    yield server
    server.stop()


@pytest.mark.slow
def test_model_loads_before_the_port_is_bound(served, tiny_model):
    loaded = served.wait_for_line("loaded model")
    running = served.wait_for_line("Uvicorn running")
    assert loaded < running
    line = served.lines[loaded]
    assert str(Path(tiny_model("qwen3")).resolve()) in line
    assert "float32" in line and re.search(r"[\d,]+ parameters", line) and re.search(r"in \d+\.\d s", line)
    assert not served.url.endswith(":0")  # --port 0: the port the kernel gave, where the server listens
    assert httpx.get(served.url + "/health").status_code == 200
    assert httpx.get(served.url + "/ready").json() == {"status": "ready"}


@pytest.mark.slow
def test_one_log_format_for_uvicorn_and_ours(served):
    served.wait_for_line("Uvicorn running")
    assert httpx.get(served.url + "/version").status_code == 200
    served.wait_for_line('"GET /version HTTP/1.1" 200')  # uvicorn's access log
    logged = [line for line in served.lines if not line.startswith(" ")]
    assert logged and all(LINE.match(line) for line in logged), "\n".join(logged)
    assert any("uvicorn" in line for line in logged) and any("model_optimizer" in line for line in logged)


@pytest.mark.slow
def test_periodic_stats_line_after_activity(served):
    served.wait_for_line("Uvicorn running")
    r = httpx.post(
        served.url + "/v1/completions",
        json={"prompt": "stats please", "max_tokens": 8, "ignore_eos": True},
        timeout=WAIT,
    )
    assert r.status_code == 200
    line = served.lines[served.wait_for_line("generation throughput")]
    for fragment in (
        "prompt throughput",
        "tokens/s",
        "running:",
        "waiting:",
        "KV cache usage",
        "prefix cache hit rate",
    ):
        assert fragment in line


def test_stats_line_only_when_something_happened():
    from types import SimpleNamespace

    from model_optimizer.runtime.server.stats_log import stats_line

    idle = SimpleNamespace(
        num_running=0,
        num_waiting=0,
        kv_cache_usage=0.0,
        prefix_cache_queries=4,
        prefix_cache_hits=1,
        num_prompt_tokens=100,
        num_generation_tokens=50,
    )
    assert stats_line(idle, idle, 10.0) is None
    busy = SimpleNamespace(
        num_running=2,
        num_waiting=1,
        kv_cache_usage=0.25,
        prefix_cache_queries=8,
        prefix_cache_hits=3,
        num_prompt_tokens=300,
        num_generation_tokens=150,
    )
    assert stats_line(idle, busy, 10.0) == (
        "prompt throughput: 20.0 tokens/s, generation throughput: 10.0 tokens/s, running: 2 reqs, "
        "waiting: 1 reqs, KV cache usage: 25.0%, prefix cache hit rate: 50.0%"
    )
    waiting_only = SimpleNamespace(**{**vars(idle), "num_waiting": 1})
    assert stats_line(idle, waiting_only, 10.0) is not None  # a stuck queue is worth a line
    # the core's first report (its first outputs) may already hold a whole short request: counted from 0
    assert stats_line(None, idle, 10.0).startswith("prompt throughput: 10.0 tokens/s, generation throughput: 5.0")
    assert stats_line(idle, None, 10.0) is None  # no report yet


@pytest.mark.slow
def test_help_lists_the_positional_model_and_server_flags():
    run = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert run.returncode == 0, run.stderr
    for fragment in ("MODEL", "--allowed-origins", "--log-interval", "--chat-template"):
        assert fragment in run.stdout
