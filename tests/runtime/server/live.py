"""A real server for tests: the app under uvicorn on 127.0.0.1 with an OS-chosen port, in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_layer import uvicorn_http_options
from model_optimizer.runtime.server.http_server import tls_options
from model_optimizer.runtime.server.state import ServerState


@dataclass
class LiveServer:
    url: str
    state: ServerState
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


HELD_WAIT = 30.0  # seconds; only a bound on a hang


class HeldExecutor(ThreadPoolExecutor):
    """The server's worker threads, with every job that starts recorded (`started`, `entered`) and, when
    `hold`, held until the test sets `proceed`: a test can ask something while a job is provably
    unfinished."""

    def __init__(self, hold: bool = True) -> None:
        super().__init__(2, thread_name_prefix="mopt-tokenize")
        self.entered = threading.Event()
        self.proceed = threading.Event()
        if not hold:
            self.proceed.set()
        self.started: list[str] = []
        self.results: list = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        def held():
            self.started.append(getattr(fn, "__name__", repr(fn)))
            self.entered.set()
            if not self.proceed.wait(HELD_WAIT):
                raise TimeoutError("the test never let the worker job proceed")
            result = fn(*args, **kwargs)
            self.results.append(result)
            return result

        return super().submit(held)


def start_server(
    llm: Any, config: ServerConfig, embedder: Any = None, engine_config: Any = None, http: dict | None = None
) -> LiveServer:
    """The app under uvicorn, with the HTTP layer `mopt serve` runs (or `http`: other uvicorn.Config
    options for it, e.g. the h11 fallback). `llm` (or `embedder`) built in this process; or, with
    neither, `engine_config` loaded into an engine-core process of its own, as `mopt serve` runs it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(config, engine_config, llm=llm, embedder=embedder)
    uv_config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=2,
        **(http or http_options(config)),
        **tls_options(config),
    )
    server = uvicorn.Server(uv_config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    return LiveServer(f"{config.scheme}://127.0.0.1:{port}", app.state.server, server, thread)


def http_options(config: ServerConfig) -> dict:
    """uvicorn.Config options of the HTTP layer, as mopt serve passes them."""
    return uvicorn_http_options(config.max_header_bytes, config.header_timeout, config.max_connections_per_client)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll until `condition()` holds; fail naming `what` after `timeout` seconds (a bound on a hang,
    never a measurement: a test waits for a state, then asserts on state)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(0.005)


def metric(text: str, name: str) -> float:
    """The value of the first sample named `name` in Prometheus text."""
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def sse_payloads(response: httpx.Response) -> list[str]:
    """The data of each server-sent event of a finished streaming response, `[DONE]` included (an event's
    `event:` line, which the Responses API's events have, is skipped)."""
    lines = (line for block in response.text.split("\n\n") for line in block.split("\n"))
    return [line[len("data: ") :] for line in lines if line.startswith("data: ")]
