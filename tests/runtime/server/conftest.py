"""Live servers on the tiny Qwen3 (real tokenizer with a ChatML template)."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

ENGINE_ARGS = dict(max_model_len=128, num_kv_blocks=512, max_num_seqs=256)
CAPS = dict(
    max_n=4,
    max_stop_strings=4,
    max_stop_string_length=32,
    max_prompts=8,
    max_tokens_limit=64,
    max_body_bytes=64 * 1024,
    max_header_bytes=8 * 1024,
)


@pytest.fixture(scope="session")
def server_llm(tiny_model):
    from model_optimizer import LLM

    return LLM(str(tiny_model("qwen3")), **ENGINE_ARGS)


@pytest.fixture(scope="session")
def server(server_llm):
    """The main server: no API key, small caps; shared by tests (they leave it idle)."""
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", **CAPS))
    yield live
    live.stop()


API_KEY = "sk-test-0123456789"


@pytest.fixture(scope="session")
def strict_server(no_template_model):
    """API key, no chat template, room for only 2 running + 1 queued requests, the full 512-token context
    and no max_tokens cap (so a request can run long enough to be interrupted)."""
    from model_optimizer import LLM

    llm = LLM(str(no_template_model), max_model_len=512, num_kv_blocks=128, max_num_seqs=2)
    live = start_server(llm, ServerConfig(api_key=API_KEY, max_queued_requests=1, max_n=4))
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(server):
    import httpx

    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="session")
def own_llm(tiny_model):
    """An engine for the servers tests start and stop one at a time (the session server keeps its own)."""
    from model_optimizer import LLM

    return LLM(str(tiny_model("qwen3")), **ENGINE_ARGS)


@pytest.fixture
def swapped_tokenizer(own_llm):
    """own_llm with its tokenizer wrapped for one test (restored afterwards)."""
    original = own_llm.tokenizer

    def swap(wrapper_cls):
        own_llm.tokenizer = wrapper_cls(original)
        return own_llm.tokenizer

    yield swap
    own_llm.tokenizer = original
