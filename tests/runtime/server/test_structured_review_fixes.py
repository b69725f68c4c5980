"""A live server's constraint checks and tool calls, as a review found them wanting: a cheap new constraint
checked while slow ones are, ASCII `\\d` and `\\w` in regexes and `json_schema.name` required, with OpenAI's
rule for it."""

from __future__ import annotations

import threading
import time

import httpx
import openai
import pytest

from model_optimizer.runtime.server.structured import CHECK_THREADS
from tests.runtime.server.test_structured_outputs import USER, Weather, start_tools_server

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    server = start_tools_server(tiny_model, tmp_path_factory, 256, 16, tool_call_parser="hermes")
    yield server
    server.stop()


def _chat(live, **fields) -> httpx.Response:  # noqa: ANN001
    body = {"model": "tiny", "messages": USER, "max_tokens": 8, **fields}
    return httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60)


def test_a_cheap_new_constraint_is_checked_while_slow_ones_are(live):
    """Checks run on a pool: with two checks held (as a heavy schema holds one for up to its 10 s), a third,
    new constraint is checked and served meanwhile, and the server stays healthy."""
    assert CHECK_THREADS >= 3
    assert _chat(live, guided_regex="[a-z]").status_code == 200  # the checker exists
    checker = live.state.grammar_checker
    gate = threading.Event()
    check = checker._check

    def held(so):  # noqa: ANN001, ANN202
        if "slow" in so.spec:
            gate.wait(60)
        return check(so)

    checker._check = held
    results: dict[str, int] = {}
    slow = [f"[a-z]{{2}}slow{i}" for i in range(CHECK_THREADS - 1)]
    threads = [
        threading.Thread(target=lambda r=r: results.__setitem__(r, _chat(live, guided_regex=r).status_code))
        for r in slow
    ]
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30  # a bound on a hang only
        while sum(so.spec in slow for so in checker._pending) < len(slow) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sorted(so.spec for so in checker._pending) == sorted(slow)
        assert _chat(live, guided_regex="[a-z]{3}cheap").status_code == 200
        assert httpx.get(live.url + "/health").status_code == 200
        assert sorted(so.spec for so in checker._pending) == sorted(slow)  # still held: the cheap one did not wait
        assert not results
    finally:
        gate.set()
        for thread in threads:
            thread.join(60)
        checker._check = check
    assert results == dict.fromkeys(slow, 200)


def _tokens(live, text: str) -> list[int]:  # noqa: ANN001
    return httpx.post(live.url + "/tokenize", json={"model": "tiny", "prompt": text}, timeout=60).json()["tokens"]


@pytest.mark.parametrize(
    "constraint",
    [
        {"guided_regex": r"\d"},
        {"structured_outputs": {"regex": r"[\d_]"}},
        {"structured_outputs": {"grammar": "start: /\\d/"}},
    ],
    ids=["guided_regex", "class", "lark"],
)
def test_a_regex_digit_is_an_ascii_digit_as_in_a_schema_pattern(live, constraint):
    """The model pushed to Arabic-Indic three (its byte tokens, +100): `\\d` still gives an ASCII digit, as
    a JSON schema's `pattern` does (llguidance's own reading took the Arabic-Indic one)."""
    bias = {str(token): 100 for token in _tokens(live, "٣")}
    r = _chat(live, logit_bias=bias, temperature=0, **constraint)
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["message"]["content"]
    assert text in set("0123456789_"), text


def test_a_json_schema_without_its_name_is_a_400_and_parse_still_works(live):
    r = _chat(live, response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object"}}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "response_format.json_schema.name"
    assert "json_schema.name" in r.json()["error"]["message"]
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    parsed = client.chat.completions.parse(model="tiny", messages=USER, response_format=Weather, max_tokens=40)
    assert isinstance(parsed.choices[0].message.parsed, Weather)


@pytest.mark.parametrize("name", ["my schema", "x" * 65, "", "weather.v2"])
def test_a_json_schema_name_against_openais_rule_is_a_400_naming_it(live, name):
    """OpenAI's rule for the name (1 to 64 letters, digits, `_` or `-`; the one text.format.name follows on
    /v1/responses): a 400 in OpenAI's error shape naming the field; the server stays healthy and a name at
    the rule's edge is served."""
    schema = {"enum": [1, 2]}
    r = _chat(live, response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema}})
    assert r.status_code == 400, r.text
    message = f"response_format.json_schema.name must be 1 to 64 letters, digits, underscores or dashes, got {name!r}"
    assert r.json() == {
        "error": {"message": message, "type": "invalid_request_error", "param": "response_format.json_schema.name",
                  "code": 400}
    }  # fmt: skip
    assert httpx.get(live.url + "/health").status_code == 200
    edge = "A" * 62 + "_-"
    ok = _chat(live, response_format={"type": "json_schema", "json_schema": {"name": edge, "schema": schema}})
    assert ok.status_code == 200, ok.text
    assert ok.json()["choices"][0]["message"]["content"] in ("1", "2")
