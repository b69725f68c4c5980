"""The HTTP layer under uvicorn: httptools' C parser with a bound on a request's head, h11 without it.

Every streamed chunk goes through the HTTP protocol's send, and at hundreds of streams that is a
large share of the event loop; httptools' send costs less CPU per chunk than h11's, and steps got
shorter with it (benchmarks/serving_overhead.py; figures in README "Serving benchmark and logprobs",
benchmarks/results/serving_overhead_gpu_h200_{h11,serve}.json). uvicorn's httptools protocol has no
bound on how many bytes a request line and headers may take (h11 has one,
`h11_max_incomplete_event_size`), so `bounded_httptools` adds it: bytes of a request's head are
counted as they arrive, before the parser buffers them, and a head over the bound is answered 431
with an OpenAI-style error body and the connection closed. Without httptools installed the server
keeps h11 and its bound.
"""

from __future__ import annotations

import json
from typing import Any

HEAD_END = b"\r\n\r\n"


def uvicorn_http_options(max_header_bytes: int) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for the HTTP layer (mopt serve and the tests' live server)."""
    try:
        return {"http": bounded_httptools(max_header_bytes)}
    except ImportError:
        return {"http": "h11", "h11_max_incomplete_event_size": max_header_bytes}


def bounded_httptools(max_head_bytes: int) -> type:
    """uvicorn's httptools protocol refusing a request whose line and headers exceed `max_head_bytes`.

    uvicorn builds one protocol object per connection from the class, so the bound is a class attribute
    of a subclass made per server. Raises ImportError when httptools is not installed."""
    import httptools  # noqa: F401  (uvicorn's module imports it too; fail here, not per connection)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from model_optimizer.runtime.server.errors import error_body

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        max_head = max_head_bytes

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = True
            self._head_bytes = 0
            self._head_tail = b""  # the head's last 3 bytes: its blank line may be split across reads

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                window = self._head_tail + data
                end = window.find(HEAD_END)
                self._head_bytes += len(data) if end < 0 else end + len(HEAD_END) - len(self._head_tail)
                if self._head_bytes > self.max_head:
                    self._refuse_head()
                    return
                if end < 0:
                    self._head_tail = window[-(len(HEAD_END) - 1) :]
                else:
                    self._in_head = False
            super().data_received(data)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            # the next request on this connection starts its own count (a request pipelined into the
            # same read as this one's end is counted from the next read on: still bounded by a read)
            self._in_head, self._head_bytes, self._head_tail = True, 0, b""

        def _refuse_head(self) -> None:
            if self.cycle is not None and not self.cycle.response_complete:
                # a head pipelined behind a response still being sent: a 431 would land inside that
                # response's bytes, so the connection is dropped instead
                self.transport.close()
                return
            body = json.dumps(error_body(431, f"request line and headers exceed {self.max_head} bytes")).encode()
            self.logger.warning("refused a request whose head exceeds %d bytes", self.max_head)
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n"
                b"connection: close\r\n\r\n" + body
            )
            self.transport.close()

    return BoundedHttpToolsProtocol
