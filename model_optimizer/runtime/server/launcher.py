"""Run the app under uvicorn: load first, drain on SIGTERM, exit non-zero when the engine dies.

The port is bound before the model loads (by `mopt serve`, or here) and listened on after it
("Uvicorn running" comes after "loaded model"): a load balancer or probe never reaches a server
without a model, and a configuration error (ValueError: unsupported architecture, KV cache too
small, bad chat template) ends the command with a clear message and exit code 2 (`mopt` prints it)
instead of a running server that refuses everything. uvicorn's loggers write through the same
handler and format as ours (http_server.py, which also holds the drain on SIGTERM). With
--api-server-count N, N - 1 more frontends start beside this one on the same socket (frontends.py).
"""

from __future__ import annotations

import asyncio
import logging
import logging.config
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.hang_watch import hang_timeout_s
from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.frontends import Frontends, listen, reserve
from model_optimizer.runtime.server.http_server import (
    FATAL_EXIT_DELAY_S,
    FLUSH_S,
    DrainingServer,
    log_config,
    uvicorn_config,
)
from model_optimizer.runtime.server.state import ServerState

if TYPE_CHECKING:
    from model_optimizer.runtime.core_process import CoreStart

logger = logging.getLogger(__name__)


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


def serve(
    config: ServerConfig,
    engine_config: EngineConfig,
    core_start: CoreStart | None = None,
    sock: socket.socket | None = None,
    notes: Sequence[str] = (),
) -> int:
    """Load the model, then serve until SIGTERM/SIGINT (exit code 0) or an engine failure (exit code 1).
    `core_start`: the engine core, spawned before this module was imported (see cli/serve.py); `sock`:
    the socket frontends.reserve bound to config's host and port (reserved here when None); `notes`:
    warnings found before the log was set up (cli/serve.py's), logged first.

    Raises ValueError (or FileNotFoundError) for a configuration the server cannot start with.
    """
    logging.config.dictConfig(log_config(config.log_level))
    for note in notes:
        logger.warning(note)
    hang_timeout_s()  # a bad MOPT_ENGINE_HANG_TIMEOUT_S is a clear error now, not a failed start-up later
    sock = reserve(config.host, config.port) if sock is None else sock
    from model_optimizer.runtime.hub import resolve_model_dir

    model_dir = resolve_model_dir(
        engine_config.model, engine_config.revision
    )  # a missing folder is a clear CLI error, not a failed server
    logger.info("loading model %s", model_dir.resolve())
    try:
        app = create_app(config, engine_config, core_start=core_start)
    except ValueError as exc:
        raise ValueError(f"cannot serve {model_dir}: {exc}") from None
    state: ServerState = app.state.server
    listen(sock)  # once the model can answer
    peers = None
    if config.api_server_count > 1 and state.core is not None:
        peers = Frontends(config, engine_config, state.core, sock)  # every frontend accepts from it
    server = DrainingServer(uvicorn_config(app, config), state, peers, announce=True)

    def on_fatal(exc: BaseException) -> None:
        logger.error("engine failed (%s): exiting so a supervisor can restart the server", exc)
        asyncio.get_running_loop().call_later(FATAL_EXIT_DELAY_S, setattr, server, "should_exit", True)

    state.fatal_hooks.append(on_fatal)
    if peers is not None:

        def peer_died(message: str) -> None:
            logger.error("%s: exiting so a supervisor can restart the server", message)
            state.load_error = RuntimeError(message)  # /health and /ready answer 503 until the exit
            server.should_exit = True

        peers.watch(peer_died)
    age = _process_age_s()
    if age is not None:  # the engine's phases plus interpreter start, imports and the app's own set-up
        logging.getLogger("model_optimizer.startup").info("start-up: process before listening %.2f s", age)
    server.run(sockets=[sock])
    if peers is not None:
        peers.join(FLUSH_S)
    if state.dead:
        return 1
    return 0
