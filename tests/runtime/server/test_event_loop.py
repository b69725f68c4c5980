"""Prompts are tokenized off the event loop: other clients keep being answered meanwhile.

The proof does not time anything: the server's tokenizer threads are replaced by ones whose jobs
wait at a gate the test opens, so /health is asked while a tokenization is provably unfinished.
Were the prompt tokenized on the event loop, /health would not be answered until the gate opens.
"""

from __future__ import annotations

import threading

import httpx

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import CAPS
from tests.runtime.server.live import HeldExecutor, start_server

WAIT = 30.0  # seconds; only a bound on a hang


def test_health_stays_responsive_while_a_prompt_is_tokenized(server_llm):
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", **CAPS))
    held = HeldExecutor()
    live.state.executor.shutdown()
    live.state.executor = held
    prompt = "naïve café 😀 the json module encodes objects " * 3  # fits max_model_len (128)
    result: dict = {}

    def send() -> None:
        r = httpx.post(
            f"{live.url}/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1}, timeout=WAIT * 2
        )
        result["status"], result["body"] = r.status_code, r.json()

    thread = threading.Thread(target=send)
    try:
        thread.start()
        assert held.entered.wait(WAIT), "the prompt never reached the tokenizer threads"
        with httpx.Client(timeout=WAIT) as client:
            for _ in range(5):  # each answered while the tokenizer job is still unfinished
                assert client.get(f"{live.url}/health").status_code == 200
                assert not held.results and thread.is_alive()
        held.proceed.set()
        thread.join(WAIT * 2)
        assert result["status"] == 200, result
        assert result["body"]["usage"]["prompt_tokens"] == len(held.results[0]) > 20
    finally:
        held.proceed.set()
        thread.join(WAIT * 2)
        live.stop()
        held.shutdown()
