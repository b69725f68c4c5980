"""The uvicorn server `mopt serve` runs in each frontend process: one log format, our HTTP limits, and a
drain on SIGTERM.

SIGTERM (or Ctrl-C) starts a drain: /ready turns 503, new requests get 503 with Retry-After,
in-flight ones (generation, embedding and tokenize requests, from the moment they were accepted: still
being parsed or tokenized too) may finish for `shutdown_timeout` seconds, then whatever is left is
aborted (finish_reason "abort"; an embedding request stops before its next batch and gets a 503 error
body; one not at the engine yet gets a 503 error body) and uvicorn stops. A second signal stops at once. A first frontend with
further ones (--api-server-count) passes the signal on and waits for them before it stops.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

import uvicorn

from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_layer import uvicorn_http_options
from model_optimizer.runtime.server.state import ServerState


class Peers(Protocol):
    """The other frontends of `--api-server-count` (frontends.py's Frontends), as this server drains them."""

    def signal_all(self, sig: int) -> None: ...

    def join(self, timeout: float) -> None: ...


logger = logging.getLogger("model_optimizer.runtime.server.launcher")

FLUSH_S = 1.0  # after aborting leftovers, time for their last chunks to reach the clients
BATCH_WAIT_S = 30.0  # after a drain cancels embedding requests, the longest it waits for their batches to end
FATAL_EXIT_DELAY_S = 1.0  # after an engine failure, /health answers 503 this long before the process exits


class DrainingServer(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, state: ServerState, peers: Peers | None = None, announce: bool = False
    ) -> None:
        super().__init__(config)
        self.state = state
        self.announce = announce
        """Log the address it listens on (the first frontend), as uvicorn does for a socket it opened itself."""
        self.peers = peers
        """The further frontends (--api-server-count) this one started: signalled and waited for in a drain."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if sockets and self.started and self.announce:
            host, port = sockets[0].getsockname()[:2]  # uvicorn names only the sockets it opened itself
            address = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", self.state.config.scheme, address, port
            )

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.state.draining or self.should_exit:
            self.should_exit = True
            self.force_exit = sig == signal.SIGINT
            return
        logger.info(
            "signal %d: draining %d request(s) for up to %.0f s",
            sig,
            self.num_in_flight(),
            self.state.config.shutdown_timeout,
        )
        self.state.draining = True
        engine = self.state.engine
        if engine is not None and engine.is_paused:  # paused, it would sit the drain out and abort all
            logger.info("resuming the paused engine: a drain lets running requests finish")
            engine.resume()
        if self.peers is not None:  # each drains its own requests
            self.peers.signal_all(signal.SIGTERM)
        threading.Thread(target=self._drain, name="mopt-drain", daemon=True).start()

    def num_in_flight(self) -> int:
        """Requests the drain waits for: those accepted whose response has not ended (state.num_accepted),
        and, to be sure, at least the engine requests admitted and embedding requests being answered."""
        embedder = self.state.embedder
        held = self.state.num_admitted + (embedder.calls.num_in_flight if embedder is not None else 0)
        return max(self.state.num_accepted, held)

    def _drain(self) -> None:
        deadline = time.monotonic() + self.state.config.shutdown_timeout
        _wait_until(lambda: self.num_in_flight() == 0, deadline)
        if self.num_in_flight() > 0:
            logger.warning("drain timed out: aborting %d request(s)", self.num_in_flight())
            self.state.drain_expired = True  # one still on its way to the engine gets a 503, not a start
            if self.state.engine is not None:
                self.state.engine.abort_all()
            if self.state.embedder is not None:
                self._cancel_embeddings()
            time.sleep(FLUSH_S)
        if self.peers is not None:  # the core stops with this process: after the others have drained
            self.peers.join(max(deadline - time.monotonic(), 0.0) + FLUSH_S + 5.0)
        self.should_exit = True

    def _cancel_embeddings(self) -> None:
        """Cancel the embedding requests in flight and wait (at most BATCH_WAIT_S) until each has its 503
        answer: a call stops only between batches, and one cut by uvicorn instead gets a plain-text 500."""
        calls = self.state.embedder.calls
        calls.cancel_all()
        _wait_until(lambda: calls.num_in_flight == 0, time.monotonic() + BATCH_WAIT_S)


def _wait_until(done: Callable[[], bool], deadline: float) -> None:
    """Poll `done` until it holds or the monotonic clock reaches `deadline`."""
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


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


def uvicorn_config(app: Any, config: ServerConfig) -> uvicorn.Config:
    """uvicorn's settings for the app: our log format, our head bound, a short graceful shutdown."""
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        log_config=None,
        timeout_graceful_shutdown=5,
        **tls_options(config),
        **uvicorn_http_options(config.max_header_bytes, config.header_timeout, config.max_connections_per_client),
    )


def tls_options(config: ServerConfig) -> dict[str, Any]:
    """uvicorn.Config's TLS settings from ours (none without --ssl-certfile: plain HTTP)."""
    if config.ssl_certfile is None:
        return {}
    return {
        "ssl_keyfile": config.ssl_keyfile,
        "ssl_certfile": config.ssl_certfile,
        "ssl_ca_certs": config.ssl_ca_certs,
        "ssl_cert_reqs": config.ssl_cert_reqs,
    }
