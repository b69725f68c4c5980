"""Run the app under uvicorn: load first, drain on SIGTERM, exit non-zero when the engine dies.

The model loads before uvicorn binds the port ("Uvicorn running" comes after "loaded model"): a
load balancer or probe never reaches a server without a model, and a configuration error (ValueError:
unsupported architecture, KV cache too small, bad chat template) ends the command with a clear
message and exit code 2 (`mopt` prints it) instead of a running server that refuses everything.
uvicorn's loggers write through the same handler and format as ours (LOG_FORMAT).

SIGTERM (or Ctrl-C) starts a drain: /ready turns 503, new requests get 503 with Retry-After,
in-flight ones may finish for `shutdown_timeout` seconds, then whatever is left is aborted
(finish_reason "abort") and uvicorn stops. A second signal stops at once.
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import signal
import threading
import time
from types import FrameType

import uvicorn

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_layer import uvicorn_http_options
from model_optimizer.runtime.server.state import ServerState

logger = logging.getLogger(__name__)
FLUSH_S = 1.0  # after aborting leftovers, time for their last chunks to reach the clients
FATAL_EXIT_DELAY_S = 1.0  # after an engine failure, /health answers 503 this long before the process exits


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.state.draining or self.should_exit:
            self.should_exit = True
            self.force_exit = sig == signal.SIGINT
            return
        logger.info(
            "signal %d: draining %d request(s) for up to %.0f s",
            sig,
            self.state.num_admitted,
            self.state.config.shutdown_timeout,
        )
        self.state.draining = True
        threading.Thread(target=self._drain, name="mopt-drain", daemon=True).start()

    def _drain(self) -> None:
        deadline = time.monotonic() + self.state.config.shutdown_timeout
        while self.state.num_admitted > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.state.num_admitted > 0 and self.state.engine is not None:
            logger.warning("drain timed out: aborting %d request(s)", self.state.num_admitted)
            self.state.engine.abort_all()
            time.sleep(FLUSH_S)
        self.should_exit = True


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere): the start-up a user waits for."""
    import os
    from pathlib import Path

    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_config(level: str) -> dict:
    """One stderr handler and format for our loggers and uvicorn's (error and access logs)."""
    level = level.upper()
    handler = {"handlers": ["stderr"], "level": level, "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"mopt": {"format": LOG_FORMAT}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "mopt", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {"uvicorn": handler, "uvicorn.error": {"level": level}, "uvicorn.access": dict(handler)},
    }


def serve(config: ServerConfig, engine_config: EngineConfig) -> int:
    """Load the model, then serve until SIGTERM/SIGINT (exit code 0) or an engine failure (exit code 1).

    Raises ValueError (or FileNotFoundError) for a configuration the server cannot start with.
    """
    logging.config.dictConfig(log_config(config.log_level))
    from model_optimizer.runtime.llm import resolve_model_dir

    model_dir = resolve_model_dir(engine_config.model)  # a missing folder is a clear CLI error, not a failed server
    logger.info("loading model %s", model_dir.resolve())
    try:
        app = create_app(config, engine_config)
    except ValueError as exc:
        raise ValueError(f"cannot serve {model_dir}: {exc}") from None
    state: ServerState = app.state.server
    uv_config = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        log_config=None,
        timeout_graceful_shutdown=5,
        **uvicorn_http_options(config.max_header_bytes),
    )
    server = DrainingServer(uv_config, state)

    def on_fatal(exc: BaseException) -> None:
        logger.error("engine failed (%s): exiting so a supervisor can restart the server", exc)
        asyncio.get_running_loop().call_later(FATAL_EXIT_DELAY_S, setattr, server, "should_exit", True)

    state.fatal_hooks.append(on_fatal)
    age = _process_age_s()
    if age is not None:  # the engine's phases plus interpreter start, imports and the app's own set-up
        logging.getLogger("model_optimizer.startup").info("start-up: process before listening %.2f s", age)
    server.run()
    if state.dead:
        return 1
    return 0
