"""vLLM's `documents` field: a retrieval template's documents, through the live server, as transformers
passes them to apply_chat_template."""

from __future__ import annotations

import httpx
import pytest
from transformers import AutoTokenizer

from model_optimizer import LLM
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

TEMPLATE = (
    "{% for d in documents or [] %}[doc {{ d.title }}] {{ d.text }}\n{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MESSAGES = [{"role": "user", "content": "What does json do?"}]
DOCUMENTS = [{"title": "json", "text": "The json module encodes and decodes JSON."}]


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "rag.jinja"
    template.write_text(TEMPLATE)
    llm = LLM(str(tiny_model("qwen3")), max_model_len=256, num_kv_blocks=64)
    server = start_server(llm, ServerConfig(served_model_name="tiny", chat_template=str(template)))
    yield server
    server.stop()


@pytest.mark.parametrize("path", ["/tokenize", "/v1/chat/completions"])
def test_documents_reach_the_template(live, tiny_model, path):
    hf = AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))
    expected = hf.apply_chat_template(
        MESSAGES, tokenize=True, add_generation_prompt=True, chat_template=TEMPLATE, documents=DOCUMENTS,
        return_dict=True,
    )["input_ids"]  # fmt: skip
    body = {"model": "tiny", "messages": MESSAGES, "documents": DOCUMENTS, "max_tokens": 1}
    response = httpx.post(live.url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    if path == "/tokenize":
        assert response.json()["tokens"] == expected
    else:
        assert response.json()["usage"]["prompt_tokens"] == len(expected)
    without = httpx.post(live.url + "/tokenize", json={"model": "tiny", "messages": MESSAGES}, timeout=60).json()
    assert without["count"] < len(expected)
