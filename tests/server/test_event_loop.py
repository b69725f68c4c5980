"""A huge prompt is tokenized off the event loop: other clients keep being answered meanwhile."""

from __future__ import annotations

import threading
import time

import httpx

from model_optimizer.server.config import ServerConfig
from tests.server.conftest import CAPS
from tests.server.live import start_server


def test_health_stays_responsive_while_a_huge_prompt_is_tokenized(server_llm):
    caps = {**CAPS, "max_body_bytes": 8 << 20}
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", **caps))
    try:
        prompt = "naïve café 😀 the json module encodes objects " * 60_000  # ~3 MB of text
        t0 = time.perf_counter()
        tokenize_alone = len(server_llm.tokenizer.encode(prompt))
        tokenize_seconds = time.perf_counter() - t0
        assert tokenize_alone > 128 and tokenize_seconds > 0.3  # long enough to matter
        result = {}

        def send_huge():
            r = httpx.post(f"{live.url}/v1/completions", json={"model": "tiny", "prompt": prompt, "max_tokens": 1},
                           timeout=120)
            result["status"], result["body"] = r.status_code, r.json()

        thread = threading.Thread(target=send_huge)
        thread.start()
        gaps = []
        with httpx.Client(timeout=30) as client:
            while thread.is_alive():
                t = time.perf_counter()
                assert client.get(f"{live.url}/health").status_code == 200
                gaps.append(time.perf_counter() - t)
                time.sleep(0.02)
        thread.join()
        assert result["status"] == 400 and "max_model_len" in result["body"]["error"]["message"]
        assert len(gaps) >= 5 and max(gaps) < max(0.25, tokenize_seconds / 3)
    finally:
        live.stop()
