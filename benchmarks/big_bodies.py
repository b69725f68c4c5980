"""How long a big request body holds the server's event loop: /health latency while one is parsed.

    .venv/bin/python benchmarks/big_bodies.py [--code DIR] [--label before] [--repeats 3]

Starts `mopt serve` (a tiny random Qwen3, max_model_len 512, --max-body-bytes 16 MiB) from the
package in `--code` (default: this checkout; another checkout measures the code before a change),
then for each body (a 5 MB and an 8 MB token-id prompt, a 250,000-message chat, a 5 MB text
prompt) sends it once per repeat while a second client asks GET /health on a fresh connection (a
raw socket) every 10 ms: the slowest /health answer while the big request is in flight is how long
the event loop was held. None of the prompts fits max_model_len, so each big request ends in a 400 once parsed.

Writes benchmarks/results/big_bodies[_LABEL].json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

from common import RESULTS, environment, write_json  # noqa: E402


def token_ids(num_bytes: int) -> list[int]:
    """Ids as a real vocabulary's (up to 151,643, Qwen's), about `num_bytes` of JSON ("123456, " each)."""
    rng = random.Random(0)
    return [rng.randrange(1000, 151_643) for _ in range(num_bytes // 8)]


BODIES = {
    "token_ids_5MB": ("/v1/completions", lambda: {"prompt": token_ids(5_400_000), "max_tokens": 1}),
    "token_ids_8MB": ("/v1/completions", lambda: {"prompt": token_ids(8_000_000), "max_tokens": 1}),
    "chat_250k_messages": (
        "/v1/chat/completions",
        lambda: {"messages": [{"role": "user", "content": "a"}] * 250_000, "max_tokens": 1},
    ),
    "text_5MB": ("/v1/completions", lambda: {"prompt": "hello " * 850_000, "max_tokens": 1}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(code: Path, model_dir: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--model", str(model_dir), "--port", str(port)]
    cmd += ["--max-model-len", "512", "--num-kv-blocks", "64", "--max-body-bytes", str(16 << 20)]
    cmd += ["--log-level", "warning", "--served-model-name", "tiny"]
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    # cwd: `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start")


def health_seconds(url: str) -> float:
    """Seconds for GET /health on a fresh connection, over a raw socket (an httpx call would add
    milliseconds of its own set-up, more on a loaded machine, to what is measured)."""
    host, port = url.removeprefix("http://").split(":")
    start = time.perf_counter()
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while sock.recv(65536):
            pass
    return time.perf_counter() - start


def one_run(url: str, path: str, body: bytes) -> dict:
    """Send `body` once; poll /health until it is answered. Seconds: the big request, the worst /health."""
    import httpx

    done = threading.Event()
    result: dict = {}

    def big() -> None:
        start = time.perf_counter()
        r = httpx.post(url + path, content=body, headers={"Content-Type": "application/json"}, timeout=300)
        result.update(status=r.status_code, request_s=time.perf_counter() - start)
        done.set()

    thread = threading.Thread(target=big)
    thread.start()
    worst = 0.0
    while not done.is_set():
        worst = max(worst, health_seconds(url))
        time.sleep(0.01)
    thread.join()
    return {**result, "worst_health_s": round(worst, 4), "request_s": round(result["request_s"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout whose model_optimizer serves")
    parser.add_argument("--label", default="", help="suffix of the results file")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from tests import tiny_checkpoints as tiny
    from tests.conftest import TINY_MODELS

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "qwen3"
        kind, overrides = TINY_MODELS["qwen3"]
        tiny.build_checkpoint(model_dir, tiny.tiny_config(kind, **overrides), seed=1, with_tokenizer=False)
        tiny.build_tokenizer(model_dir)
        proc, url = start_server(args.code.resolve(), model_dir)
        try:
            cases = {}
            for name, (path, make) in BODIES.items():
                body = json.dumps({"model": "tiny", **make()}).encode()
                runs = [one_run(url, path, body) for _ in range(args.repeats)]
                worst = [r["worst_health_s"] for r in runs]
                cases[name] = {
                    "path": path,
                    "body_bytes": len(body),
                    "statuses": sorted({r["status"] for r in runs}),
                    "worst_health_s_median": statistics.median(worst),
                    "worst_health_s_max": max(worst),
                    "runs": runs,
                }
                print(f"{name}: {len(body) / 1e6:.1f} MB, /health held up to {max(worst):.3f} s", flush=True)
        finally:
            proc.terminate()
            proc.wait(60)
    out = RESULTS / f"big_bodies{'_' + args.label if args.label else ''}.json"
    write_json(out, {"environment": environment(), "code": str(args.code), "cases": cases})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
