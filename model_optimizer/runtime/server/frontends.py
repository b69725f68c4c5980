"""More HTTP frontends for one engine core (`--api-server-count N`, vLLM's flag).

The first frontend (the `mopt serve` process) binds the port, starts the core with N clients and
then starts N - 1 more frontend processes here. Every frontend serves the same listening socket (the
kernel hands each new connection to one of them), tokenizes, detokenizes and streams its own
connections, and talks to the core over its own output socket. Metrics are written through
prometheus_client's multiprocess mode into one folder, so /metrics, whichever frontend answers it,
sums over all of them (the folder is set before prometheus_client is first imported: `mopt serve`
does it).

Faults: a frontend that dies makes the first one exit non-zero (a supervisor restarts the lot); the
others watch the first one (and end with it) and the core (its process ending fails their streams).
SIGTERM to the first frontend is passed on: each frontend drains its own requests, the first one
waits for the others, then stops the core; a second signal to it is passed on as http_server's
STOP_SIGNAL (each aborts what it has left). A further frontend's own SIGINT or SIGTERM (a Ctrl-C reaches the
whole process group) only starts its drain, so the first frontend's SIGTERM is never a second signal to it.
"""

from __future__ import annotations

import logging
import logging.config
import multiprocessing
import os
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from model_optimizer.common.processes import exit_with_parent
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig

logger = logging.getLogger(__name__)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
JOIN_TIMEOUT_S = 10.0
BACKLOG = 2048
"""Connections the kernel queues before a frontend accepts them (uvicorn's default)."""


def use_multiprocess_metrics(folder: str) -> None:
    """Keep prometheus_client's values in `folder`, summed over processes at scrape time. The further
    frontends inherit the variable; this process may have imported prometheus_client already (`mopt`'s
    parser does), so its choice of value class is made again here, before any metric exists."""
    os.environ[MULTIPROC_ENV] = folder
    from prometheus_client import values

    values.ValueClass = values.get_value_class()


def reserve(host: str, port: int) -> socket.socket:
    """The server's socket, bound to host:port but not listening: taken before the model loads, so that an
    address the server cannot use (a name that does not resolve, an address not on this machine, a port in
    use or privileged) is a ValueError naming --host/--port at once (uvicorn found out only after the load,
    and exited with code 3), and the port stays ours while the model loads. `listen` opens it once the model
    can answer: a load balancer never reaches a server without a model. The family follows the host's form
    ("localhost" is bound as IPv4); SO_REUSEADDR, as uvicorn sets it, lets a restart bind over TIME_WAIT."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (socket.gaierror, UnicodeError) as exc:
        sock.close()
        raise ValueError(f"--host {host!r} is not an address or a name this machine can resolve ({exc})") from None
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} (--host, --port): {exc.strerror or exc}") from None
    return sock


def listen(sock: socket.socket) -> None:
    """Open the reserved socket for connections (every frontend accepts from it). A server that bound the
    same port with SO_REUSEADDR while the model loaded and listens first is a ValueError naming the port."""
    try:
        sock.listen(BACKLOG)
    except OSError as exc:
        host, port = sock.getsockname()[:2]
        raise ValueError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server took the port while the model loaded)"
        ) from None
    sock.set_inheritable(True)


@dataclass(frozen=True)
class FrontendSpec:
    """What a further frontend needs (pickled into its process)."""

    index: int
    config: ServerConfig
    engine_config: EngineConfig
    core: Any
    """core_process.CoreConnection."""
    sock: socket.socket
    parent_pid: int


class Frontends:
    """The N - 1 frontend processes the first one started; watched, signalled and joined from here."""

    def __init__(self, config: ServerConfig, engine_config: EngineConfig, core: Any, sock: socket.socket) -> None:
        from model_optimizer.runtime.core_process import CoreConnection

        ctx = multiprocessing.get_context("spawn")
        connection = CoreConnection.of(core)
        self.processes = []
        self._stopping = threading.Event()
        for index in range(1, config.api_server_count):
            spec = FrontendSpec(index, config, engine_config, connection, sock, os.getpid())
            process = ctx.Process(target=run_frontend, args=(spec,), name=f"mopt-frontend-{index}")
            process.start()
            self.processes.append(process)
        logger.info("%d more frontends: pids %s", len(self.processes), [p.pid for p in self.processes])

    def watch(self, on_death: Callable[[str], None]) -> None:
        """Call `on_death(message)` once if a frontend exits before stop() (from a thread of its own)."""

        def run() -> None:
            ended = wait([p.sentinel for p in self.processes])
            if not self._stopping.is_set():
                dead = next(p for p in self.processes if p.sentinel in ended)
                dead.join(1.0)
                on_death(f"frontend {dead.name} (pid {dead.pid}) exited with code {dead.exitcode}")

        threading.Thread(target=run, name="mopt-frontend-watch", daemon=True).start()

    def signal_all(self, sig: int) -> None:
        self._stopping.set()
        for process in self.processes:
            if process.is_alive():
                os.kill(process.pid, sig)

    def join(self, timeout: float) -> None:
        """Wait for every frontend to end (they drain first); then make sure they have."""
        self._stopping.set()
        for process in self.processes:
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join()


def run_frontend(spec: FrontendSpec) -> None:
    """Entry point of a further frontend process."""
    exit_with_parent(spec.parent_pid)
    from model_optimizer.runtime.server.http_server import DrainingServer, log_config, uvicorn_config

    logging.config.dictConfig(log_config(spec.config.log_level))
    from model_optimizer.runtime.server.app import create_app

    app = create_app(spec.config, spec.engine_config, core=spec.core, frontend=spec.index)
    state = app.state.server
    server = DrainingServer(uvicorn_config(app, spec.config), state, follower=True)
    state.fatal_hooks.append(lambda exc: setattr(server, "should_exit", True))
    server.run(sockets=[spec.sock])
    sys.exit(1 if state.dead else 0)


__all__ = ["MULTIPROC_ENV", "Frontends", "listen", "reserve", "run_frontend", "use_multiprocess_metrics"]
