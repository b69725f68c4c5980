"""A tiny OpenAI-compatible server for tune tests: /v1/models and streamed /v1/completions, no model.

Run as a --server-cmd: `{python} fake_openai_server.py --port {port} --model {model} {flags} [--hold FILE]
[--ignore-term] [--require-model-dir]`. Unknown flags ({flags}: every held and searched setting) are
accepted and ignored. `--hold FILE`: completions wait while FILE exists, and the first one writes
FILE.reached (its pid), so a test can stop the tuner in the middle of a trial as an event, not a race. `--require-model-dir`: exit 3 at start unless --model is
a folder (as a real server's load would fail). `--ignore-term`: a server that ignores SIGTERM.
`--refuse STATUS`: every completion is answered with that status and an OpenAI error body (a wrong key).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--model", default="fake")
parser.add_argument("--hold", default=None)
parser.add_argument("--ignore-term", action="store_true")
parser.add_argument("--require-model-dir", action="store_true")
parser.add_argument("--refuse", type=int, default=None)
args, _ = parser.parse_known_args()
if args.ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.require_model_dir and not os.path.isdir(args.model):
    print(f"model folder {args.model} does not exist", flush=True)
    sys.exit(3)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]}).encode()
        self.send_response(200 if self.path.startswith("/v1/models") else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if args.hold and os.path.exists(args.hold):
            with open(args.hold + ".tmp", "w") as reached:
                reached.write(f"{os.getpid()}\n")
            os.replace(args.hold + ".tmp", args.hold + ".reached")  # whole, for the test that waits on it
        while args.hold and os.path.exists(args.hold):
            time.sleep(0.05)
        if args.refuse:
            body = json.dumps({"error": {"message": "refused", "type": "invalid_request_error"}}).encode()
            self.send_response(args.refuse)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        num_tokens = int(request.get("max_tokens") or 4)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for _ in range(num_tokens):
            self._send({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": " t"}]})
        usage = {"prompt_tokens": 8, "completion_tokens": num_tokens, "total_tokens": 8 + num_tokens}
        self._send({"id": "x", "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send(self, event: dict) -> None:
        self._chunk(f"data: {json.dumps(event)}\n\n".encode())

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
