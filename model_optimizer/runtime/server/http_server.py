"""The uvicorn server `mopt serve` runs in each frontend process: one log format, our HTTP limits, and a
drain on SIGTERM.

SIGTERM (or Ctrl-C) starts a drain: /ready turns 503, new requests get 503 with Retry-After,
in-flight ones (generation, embedding and tokenize requests, from the moment they were accepted: still
being parsed or tokenized too) may finish for `shutdown_timeout` seconds, then whatever is left is
aborted (finish_reason "abort"; an embedding request stops before its next batch and gets a 503 error
body; one not at the engine yet gets a 503 error body) and uvicorn stops. A second signal ends the drain
there and then the same way: what is left is aborted and answered before the server stops, exit code 0.
A third stops at once (uvicorn's force exit), cutting whatever is still being answered.

A first frontend with further ones (--api-server-count) passes its steps on (SIGTERM: drain, STOP_SIGNAL:
abort now) and waits for them before it stops. A further frontend counts no signals of its own: a Ctrl-C
or a service manager's SIGTERM reaches every process of the group, so it gets the user's signal and the
first frontend's; either starts its one drain, and only the first frontend's STOP_SIGNAL goes further.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
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
STOP_SIGNAL = signal.SIGUSR2
"""What a first frontend sends its further ones when a second signal ends its drain (SIGTERM starts theirs)."""


class Stage(enum.IntEnum):
    """How far a shutdown has gone: each SIGINT or SIGTERM to a (first) frontend takes it one stage on."""

    SERVING = 0
    DRAINING = 1
    """New requests get 503; those in flight may finish for `shutdown_timeout` seconds."""
    STOPPING = 2
    """What is left is aborted now and answered, then the server stops (exit code 0)."""
    FORCED = 3
    """uvicorn stops at once, cutting what is still being answered."""


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        state: ServerState,
        peers: Peers | None = None,
        announce: bool = False,
        follower: bool = False,
    ) -> None:
        super().__init__(config)
        self.state = state
        self.announce = announce
        """Log the address it listens on (the first frontend), as uvicorn does for a socket it opened itself."""
        self.peers = peers
        """The further frontends (--api-server-count) this one started: signalled and waited for in a drain."""
        self.follower = follower
        """A further frontend: SIGINT and SIGTERM only start its drain; the first frontend's STOP_SIGNAL ends it."""
        self.stage = Stage.SERVING
        self.hurry = threading.Event()
        """Set when the drain must end now (Stage.STOPPING): the drain thread aborts what is left at once."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if sockets and self.started and self.announce:
            host, port = sockets[0].getsockname()[:2]  # uvicorn names only the sockets it opened itself
            address = f"[{host}]" if ":" in host else host
            logging.getLogger("uvicorn.error").info(
                "Uvicorn running on %s://%s:%d (Press CTRL+C to quit)", self.state.config.scheme, address, port
            )

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's SIGINT and SIGTERM handlers, and STOP_SIGNAL's beside them (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            with super().capture_signals():
                yield
            return
        previous = signal.signal(STOP_SIGNAL, self.handle_exit)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(STOP_SIGNAL, previous)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        target = self._stage_for(sig)
        if target <= self.stage:
            return  # a further frontend hearing again what it does already (the group's signal, the first's)
        previous, self.stage = self.stage, target
        if target == Stage.FORCED:
            logger.warning("signal %d: stopping at once, cutting what is still being answered", sig)
            self.should_exit = self.force_exit = True
            return
        if previous < Stage.DRAINING:
            self._begin_drain(sig)
        if target == Stage.STOPPING:
            self._stop_now(sig)

    def _stage_for(self, sig: int) -> Stage:
        if sig == STOP_SIGNAL:
            return Stage.STOPPING
        if self.follower:
            return Stage.DRAINING
        if self.should_exit:  # uvicorn stops already (the drain is over, or the engine failed): cut its grace short
            return Stage.FORCED
        return Stage(min(self.stage + 1, Stage.FORCED))

    def _begin_drain(self, sig: int) -> None:
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

    def _stop_now(self, sig: int) -> None:
        """End the drain now: the drain thread aborts and answers what is left, then stops the server."""
        logger.warning(
            "signal %d again: aborting %d request(s) now (a further signal stops at once)", sig, self.num_in_flight()
        )
        if self.peers is not None:
            self.peers.signal_all(STOP_SIGNAL)
        self.hurry.set()

    def num_in_flight(self) -> int:
        """Requests the drain waits for: those accepted whose response has not ended (state.num_accepted),
        and, to be sure, at least the engine requests admitted and embedding requests being answered."""
        embedder = self.state.embedder
        held = self.state.num_admitted + (embedder.calls.num_in_flight if embedder is not None else 0)
        return max(self.state.num_accepted, held)

    def _drain(self) -> None:
        deadline = time.monotonic() + self.state.config.shutdown_timeout
        _wait_until(lambda: self.num_in_flight() == 0 or self.hurry.is_set(), deadline)
        if self.num_in_flight() > 0:
            if not self.hurry.is_set():
                logger.warning("drain timed out: aborting %d request(s)", self.num_in_flight())
            self._abort_leftovers()
        if self.peers is not None:  # the core stops with this process: after the others have drained
            self.peers.join(max(deadline - time.monotonic(), 0.0) + FLUSH_S + 5.0)
        self.should_exit = True

    def _abort_leftovers(self) -> None:
        """Abort what is in flight and wait (at most FLUSH_S) until each has had its last answer: uvicorn,
        once stopping, would cut a response still being written after its own grace."""
        self.state.drain_expired = True  # one still on its way to the engine gets a 503, not a start
        if self.state.engine is not None:
            self.state.engine.abort_all()
        if self.state.embedder is not None:
            self._cancel_embeddings()
        _wait_until(lambda: self.num_in_flight() == 0, time.monotonic() + FLUSH_S)

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
