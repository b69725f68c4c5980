"""vLLM's conventions beside the OpenAI API: /tokenize, /detokenize and /v1/models/{id}."""

from __future__ import annotations

import openai

from tests.runtime.server.test_errors import assert_error


def test_tokenize_and_detokenize(client, server_llm):
    tok = server_llm.tokenizer
    r = client.post("/tokenize", json={"prompt": "hello world"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == tok.encode("hello world") and body["count"] == len(body["tokens"])
    assert body["max_model_len"] == 128
    body = client.post(
        "/tokenize", json={"prompt": "hello world", "add_special_tokens": False, "return_token_strs": True}
    ).json()
    assert body["tokens"] == tok.encode("hello world", add_special_tokens=False)
    assert body["token_strs"] == tok.convert_ids_to_tokens(body["tokens"])
    chat = client.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]}).json()
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat["tokens"] == tok.encode(rendered, add_special_tokens=False)
    assert client.post("/detokenize", json={"tokens": body["tokens"]}).json() == {"prompt": "hello world"}
    assert_error(client.post("/detokenize", json={"tokens": [5000]}), 400, "vocabulary")
    assert_error(client.post("/tokenize", json={"prompt": "x", "model": "other"}), 404, "other")
    assert_error(client.post("/tokenize", json={}), 400)


def test_model_by_id(client):
    oai = openai.OpenAI(base_url=client.base_url.join("/v1").__str__(), api_key="unused", max_retries=0)
    assert oai.models.retrieve("tiny").id == "tiny"
    error = assert_error(client.get("/v1/models/nope"), 404, "nope")
    assert error["param"] == "model"
