"""A real HTTP server on 127.0.0.1 with fixed answers per path, for `mopt top` against what is not a
healthy engine: another exporter, an error, a redirect."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from model_optimizer.cli.main import main


@dataclass
class Answer:
    status: int = 200
    bodies: list[str] = field(default_factory=lambda: [""])
    """Served in turn, the last one repeating (two scrapes of a counter that moved)."""
    headers: dict[str, str] = field(default_factory=dict)


class Site:
    """Answers each path in `routes`; any other path is a 404."""

    def __init__(self, routes: dict[str, Answer]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                answer = routes.get(self.path, Answer(404, ["not found"]))
                body = (answer.bodies.pop(0) if len(answer.bodies) > 1 else answer.bodies[0]).encode()
                self.send_response(answer.status)
                for name, value in {"Content-Type": "text/plain; version=0.0.4", **answer.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> Site:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def replaying(texts: list[str]) -> Site:
    """A server answering /metrics with `texts` in turn (the last one repeats): recorded scrapes replayed."""
    return Site({"/metrics": Answer(200, list(texts))})


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def once_json(capsys, url: str, *extra: str) -> tuple[int, dict]:
    """`mopt top --once --json`'s exit code and its JSON, parsed strictly (NaN and Infinity are no JSON)."""
    code = main(["top", "--url", url, "--once", "--json", "--interval", "0.05", "--no-gpu", *extra])
    return code, json.loads(capsys.readouterr().out, parse_constant=_no_constant)


def once_text(capsys, url: str, *extra: str) -> tuple[int, str]:
    """`mopt top --once`'s exit code and its panel as text."""
    code = main(["top", "--url", url, "--once", "--interval", "0.05", "--no-gpu", *extra])
    return code, capsys.readouterr().out
