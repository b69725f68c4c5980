"""Every endpoint of the live server, through httpx and the official openai client."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.runtime.server.live import metric

MULTIBYTE_PROMPT = "日本語のテキストと中文文本 emoji 😀🚀✨ naïve café"


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def sse_events(response: httpx.Response) -> list:
    """Parsed `data:` payloads of an SSE body; the last one must be [DONE]."""
    events = [line[len("data: ") :] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_models_health_ready_version(client, server):
    assert client.get("/health").status_code == 200
    assert client.get("/ready").json() == {"status": "ready"}
    for path in ("/health", "/ready"):  # load balancers probe with HEAD: the status, no body
        head = client.head(path)
        assert head.status_code == 200 and head.content == b"", path
    assert client.get("/version").json()["version"]
    models = client.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert models["data"][0]["max_model_len"] == 128


def test_openapi_lists_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/models",
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/embeddings",
        "/health",
        "/ready",
        "/version",
        "/metrics",
    ):
        assert path in paths


@pytest.mark.parametrize("prompt", ["The quick brown fox", MULTIBYTE_PROMPT])
def test_completion_stream_equals_full_text(oai, prompt):
    kwargs = dict(
        model="tiny", prompt=prompt, max_tokens=24, temperature=0.8, seed=1234, n=2, extra_body={"ignore_eos": True}
    )
    full = oai.completions.create(**kwargs)
    parts = {0: "", 1: ""}
    finish = {}
    for chunk in oai.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            parts[choice.index] += choice.text
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert [c.text for c in sorted(full.choices, key=lambda c: c.index)] == [parts[0], parts[1]]
    assert finish == {0: "length", 1: "length"}
    assert full.usage.completion_tokens == 48


def test_multibyte_text_survives_streaming(oai, server_llm):
    """Concatenated deltas equal the full text, even where tokens split multibyte characters."""
    kwargs = dict(
        model="tiny",
        messages=[{"role": "user", "content": MULTIBYTE_PROMPT}],
        max_tokens=40,
        temperature=1.0,
        seed=7,
        extra_body={"ignore_eos": True},
    )
    full = oai.chat.completions.create(**kwargs).choices[0].message.content
    streamed = "".join(
        c.choices[0].delta.content or "" for c in oai.chat.completions.create(stream=True, **kwargs) if c.choices
    )
    assert streamed == full
    assert "\ufffd" not in streamed or "\ufffd" in full


def test_usage_matches_tokenizer(client, server_llm):
    tok = server_llm.tokenizer
    prompt = "Count these tokens, please."
    body = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 5, "ignore_eos": True}).json()
    assert body["usage"] == {
        "prompt_tokens": len(tok.encode(prompt)),
        "completion_tokens": 5,
        "total_tokens": len(tok.encode(prompt)) + 5,
    }
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": prompt}]
    chat = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 3, "ignore_eos": True}).json()
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = len(tok.encode(rendered, add_special_tokens=False))
    assert chat["usage"]["prompt_tokens"] == expected
    assert chat["usage"]["completion_tokens"] == 3
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["choices"][0]["finish_reason"] == "length"


def test_prompt_shapes_and_choice_indices(client, server_llm):
    ids = server_llm.tokenizer.encode("hello there")
    for prompt, num_prompts in (("hello there", 1), (["hello", "there"], 2), (ids, 1), ([ids, ids[:2]], 2)):
        body = client.post(
            "/v1/completions", json={"prompt": prompt, "max_tokens": 2, "n": 2, "ignore_eos": True}
        ).json()
        assert sorted(c["index"] for c in body["choices"]) == list(range(2 * num_prompts))
        assert body["usage"]["completion_tokens"] == 4 * num_prompts


def test_token_id_prompt_equals_text_prompt(client, server_llm):
    text = "same prompt either way"
    ids = server_llm.tokenizer.encode(text)
    common = {"max_tokens": 8, "temperature": 0}
    a = client.post("/v1/completions", json={"prompt": text, **common}).json()["choices"][0]["text"]
    b = client.post("/v1/completions", json={"prompt": ids, **common}).json()["choices"][0]["text"]
    assert a == b


def test_echo_and_logprobs(client):
    body = client.post(
        "/v1/completions",
        json={"prompt": "echo me", "max_tokens": 3, "echo": True, "temperature": 0, "ignore_eos": True},
    ).json()
    assert body["choices"][0]["text"].startswith("echo me")
    events = sse_events(
        client.post(
            "/v1/completions",
            json={
                "prompt": "echo me",
                "max_tokens": 3,
                "echo": True,
                "temperature": 0,
                "stream": True,
                "ignore_eos": True,
            },
        )
    )
    assert "".join(e["choices"][0]["text"] for e in events) == body["choices"][0]["text"]
    body = client.post(
        "/v1/completions",
        json={"prompt": "logprobs", "max_tokens": 4, "logprobs": 3, "temperature": 0, "ignore_eos": True},
    ).json()  # greedy: a sampled token from the model's untrained ids (>= 1024) would decode to "" and share a key
    lp = body["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == 4
    assert all(v <= 0 for v in lp["token_logprobs"])
    assert all(len(top) >= 3 for top in lp["top_logprobs"])
    chat = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            "logprobs": True,
            "top_logprobs": 2,
            "ignore_eos": True,
        },
    ).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 2 and all(len(c["top_logprobs"]) == 2 for c in content)


def test_seed_reproducible_and_stop_string(client):
    req = {"prompt": "seeded", "max_tokens": 16, "temperature": 1.0, "seed": 99, "ignore_eos": True}
    first = client.post("/v1/completions", json=req).json()["choices"][0]["text"]
    assert client.post("/v1/completions", json=req).json()["choices"][0]["text"] == first
    stop = first[3:6]
    assert stop
    stopped = client.post("/v1/completions", json={**req, "stop": [stop]}).json()["choices"][0]
    assert stopped["finish_reason"] == "stop" and stopped["stop_reason"] == stop
    assert stop not in stopped["text"] and first.startswith(stopped["text"])


def test_logit_bias_allowed_token_ids_and_bad_words_steer_the_draw(client, server_llm):
    """OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words, each against the same greedy run."""
    req = {"prompt": "steer", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    plain = client.post("/v1/completions", json=req).json()["choices"][0]
    forced = client.post("/v1/completions", json={**req, "logit_bias": {"42": 100}}).json()["choices"][0]
    assert forced["token_ids"] == [42] * 12
    allowed = [7, 9, 11]
    sampled = {**req, "temperature": 1.0, "seed": 5, "allowed_token_ids": allowed}
    assert set(client.post("/v1/completions", json=sampled).json()["choices"][0]["token_ids"]) <= set(allowed)
    word = server_llm.tokenizer.decode(plain["token_ids"][2:4])  # two tokens the greedy output has
    barred = server_llm.tokenizer.encode(word, add_special_tokens=False)
    again = client.post("/v1/completions", json={**req, "bad_words": [word]}).json()["choices"][0]["token_ids"]
    assert again[:2] == plain["token_ids"][:2] and not any(
        again[i : i + len(barred)] == barred for i in range(len(again))
    )


def test_default_max_tokens_is_capped(client):
    """No max_tokens: up to the remaining context, here capped by --max-tokens-limit (64)."""
    body = client.post("/v1/completions", json={"prompt": "go on", "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 64


def test_chat_stream_role_first_then_finish_and_usage(client):
    events = sse_events(
        client.post(
            "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                "max_tokens": 4,
                "stream": True,
                "ignore_eos": True,
                "stream_options": {"include_usage": True},
            },
        )
    )
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in e["choices"][0]["delta"] for e in events[1:-1])
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_stats_puts_the_usage_so_far_on_every_chunk(client, path):
    """vLLM's stream_options.continuous_usage_stats: every chunk carries the usage so far, its completion
    tokens growing to the whole, which the last usage chunk repeats."""
    body = {"max_tokens": 5, "ignore_eos": True, "stream": True, "n": 2}
    if path == "/v1/completions":
        body["prompt"] = "count"
    else:
        body["messages"] = [{"role": "user", "content": "count"}]
    body["stream_options"] = {"continuous_usage_stats": True}  # include_usage on when left out, as vLLM's
    events = sse_events(client.post(path, json=body))
    for event in events:
        usage = event["usage"]
        assert usage["prompt_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    counts = [e["usage"]["completion_tokens"] for e in events if e["choices"]]
    assert counts == sorted(counts) and counts[-1] == 10
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 10
    plain = dict(body, stream_options={"include_usage": True})
    assert all(e.get("usage") is None for e in sse_events(client.post(path, json=plain))[:-1])
    refused = client.post(path, json=dict(body, stream=False))  # stream_options without a stream
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream_options"


NULLABLE = ["n", "stream", "logprobs", "presence_penalty", "frequency_penalty", "parallel_tool_calls", "min_p",
            "repetition_penalty", "include_reasoning", "add_generation_prompt", "skip_special_tokens", "seed", "top_p"]  # fmt: skip


def test_optional_fields_sent_as_null_take_their_defaults(client):
    """OpenAI's clients and vLLM's server read null as not given; a 400 for `"n": null` broke such clients."""
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0, "ignore_eos": True}
    plain = client.post("/v1/chat/completions", json=body).json()
    nulls = client.post("/v1/chat/completions", json=body | dict.fromkeys(NULLABLE)).json()
    assert nulls["choices"][0]["message"] == plain["choices"][0]["message"] and len(nulls["choices"]) == 1
    assert (
        client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, "n": None, "echo": None}).status_code
        == 200
    )
    nested = {"response_format": {"type": "json_schema", "json_schema": {"name": "o", "strict": None, "schema": {}}}}
    assert client.post("/v1/chat/completions", json=body | nested).status_code == 200
    off = sse_events(
        client.post("/v1/chat/completions", json=body | {"stream": True, "stream_options": {"include_usage": None}})
    )
    assert all(e["choices"] for e in off)  # include_usage null is off, as vLLM reads it
    missing = client.post("/v1/chat/completions", json={"messages": None})  # required: null is not a value
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "messages"


def test_openai_client_chat(oai):
    reply = oai.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=3)
    assert reply.choices[0].message.role == "assistant"
    assert reply.usage.completion_tokens <= 3


def test_metrics_names(client):
    client.post("/v1/completions", json={"prompt": "metrics", "max_tokens": 2})
    text = client.get("/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_success_total",
        "mopt:kv_cache_free_blocks",
    ):
        assert name + "{" in text, name
    assert 'model_name="tiny"' in text
    assert metric(text, "vllm:generation_tokens_total") >= 2
    assert metric(text, "vllm:e2e_request_latency_seconds_count") >= 1


def test_embeddings_on_a_generation_model_is_400(client):
    r = client.post("/v1/embeddings", json={"input": "text"})
    assert r.status_code == 400
    assert "does not support embeddings" in r.json()["error"]["message"]
    assert client.post("/v1/embeddings", json={"model": "other", "input": "x"}).status_code == 404


def test_streamed_text_offsets_are_the_whole_responses_with_bytes_that_make_no_character(client):
    """A random model writes tokens holding parts of characters, and bytes that begin none: the stream holds
    their text back and sends it with a later chunk, yet every token's text_offset is the one the whole
    response gives (it counted the held text at the later token before)."""
    odd = 0
    for seed in range(8):
        body = {"model": "tiny", "prompt": "hello there", "temperature": 1.0, "seed": seed, "max_tokens": 10}
        body["logprobs"] = 0
        whole = client.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]
        chunks = sse_events(client.post("/v1/completions", json={**body, "stream": True}))
        streamed = [o for chunk in chunks for c in chunk["choices"] for o in c["logprobs"]["text_offset"]]
        assert streamed == whole["text_offset"], seed
        odd += any("\ufffd" in t for t in whole["tokens"])
    assert odd  # the case in question is there
