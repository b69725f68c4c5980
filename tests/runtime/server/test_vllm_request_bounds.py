"""Request fields read as vLLM's server reads them, on a real server: its bounds (temperature >= 0,
repetition_penalty > 0, none above: what SamplingParams takes offline), whole-number floats in integer fields,
spaces_between_special_tokens, and token rules that bar every allowed token refused naming allowed_token_ids."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.runtime.server.test_errors import assert_error

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION = {"model": "tiny", "prompt": "hi", "max_tokens": 2}


def ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("path, body", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)])
@pytest.mark.parametrize("field, value", [("temperature", 2.5), ("temperature", 100), ("repetition_penalty", 11)])
def test_values_above_openai_bounds_are_taken_as_vllm_and_sampling_params_take_them(client, path, body, field, value):
    from model_optimizer import SamplingParams

    SamplingParams(**{field: value})  # offline takes it too
    assert ok(client.post(path, json={**body, field: value, "seed": 1}))["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize(
    "field, value", [("temperature", -0.1), ("repetition_penalty", 0), ("repetition_penalty", -1.0)]
)
def test_negative_temperature_and_non_positive_repetition_penalty_stay_refused(client, field, value):
    assert assert_error(client.post("/v1/completions", json={**COMPLETION, field: value}), 400)["param"] == field


@pytest.mark.parametrize("field", ["temperature", "repetition_penalty", "max_tokens", "seed"])
@pytest.mark.parametrize("raw", [b"NaN", b"Infinity"])
def test_nan_and_infinity_stay_refused(client, field, raw):
    body = b'{"model": "tiny", "prompt": "hi", "max_tokens": 2, "%s": %s}' % (field.encode(), raw)
    response = client.post("/v1/completions", content=body, headers={"content-type": "application/json"})
    assert_error(response, 400)


def test_whole_number_floats_are_their_integers(client):
    base = {**COMPLETION, "temperature": 1.0, "ignore_eos": True, "return_token_ids": True}
    asked = ok(client.post("/v1/completions", json={**base, "max_tokens": 5.0, "n": 2.0, "seed": 1e3}))
    assert [len(c["token_ids"]) for c in asked["choices"]] == [5, 5]
    same = ok(client.post("/v1/completions", json={**base, "max_tokens": 5, "n": 2, "seed": 1000}))
    assert [c["token_ids"] for c in asked["choices"]] == [c["token_ids"] for c in same["choices"]]
    chat = ok(client.post("/v1/chat/completions", json={**CHAT, "max_completion_tokens": 3.0, "ignore_eos": True}))
    assert chat["usage"]["completion_tokens"] == 3
    greedy = {**base, "temperature": 0, "n": 1, "max_tokens": 6}
    first = ok(client.post("/v1/completions", json=greedy))["choices"][0]["token_ids"][0]
    stopped = ok(client.post("/v1/completions", json={**greedy, "stop_token_ids": [float(first)]}))["choices"][0]
    assert stopped["finish_reason"] == "stop" and stopped["token_ids"] == [first]


def test_the_openai_client_may_send_whole_floats(server):
    api = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    out = api.completions.create(
        model="tiny", prompt="hi", max_tokens=4.0, temperature=0, extra_body={"ignore_eos": True}
    )
    assert out.usage.completion_tokens == 4


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_tokens", 5.5),
        ("n", 2.5),
        ("seed", 0.5),
        ("max_tokens", True),
        ("n", "2"),
        ("min_tokens", 1e-3),
        ("max_tokens", 1e30),
    ],
)
def test_other_numbers_in_integer_fields_stay_refused(client, field, value):
    assert assert_error(client.post("/v1/completions", json={**COMPLETION, field: value}), 400)["param"] == field


def test_spaces_between_special_tokens_is_a_field(client):
    for value in (True, False):
        ok(client.post("/v1/completions", json={**COMPLETION, "spaces_between_special_tokens": value}))
        ok(client.post("/v1/chat/completions", json={**CHAT, "spaces_between_special_tokens": value}))
    for path, body in (("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)):
        error = assert_error(client.post(path, json={**body, "spaces_between_special_tokens": "x"}), 400)
        assert error["param"] == "spaces_between_special_tokens"


def test_spaces_between_special_tokens_reaches_sampling_params():
    from model_optimizer.runtime.server.protocol import CompletionRequest
    from model_optimizer.runtime.server.sampling import sampling_params

    for value in (True, False):
        body = CompletionRequest.model_validate({"prompt": "hi", "spaces_between_special_tokens": value})
        assert sampling_params(body, [], 4, None).spaces_between_special_tokens is value


@pytest.mark.parametrize("path, body", [("/v1/completions", COMPLETION), ("/v1/chat/completions", CHAT)])
@pytest.mark.parametrize(
    "rules, reason",
    [
        ({"allowed_token_ids": [67], "bad_words": ["a"]}, "one-token bad_words"),  # 67 is "a"
        ({"allowed_token_ids": [2], "min_tokens": 2}, "EOS or stop token id before min_tokens (2)"),  # 2 is EOS
        ({"allowed_token_ids": [5], "stop_token_ids": [5], "min_tokens": 2}, "EOS or stop token id"),
        ({"allowed_token_ids": [2, 67], "bad_words": ["a"], "min_tokens": 1}, "bad_words or an EOS"),
    ],
)
def test_rules_that_bar_every_allowed_token_are_a_400_naming_allowed_token_ids(client, path, body, rules, reason):
    error = assert_error(client.post(path, json={**body, "max_tokens": 4, "temperature": 0, **rules}), 400, reason)
    assert error["param"] == "allowed_token_ids"


@pytest.mark.parametrize(
    "rules, allowed",
    [
        ({"allowed_token_ids": [67, 68], "bad_words": ["a"]}, {68}),
        ({"allowed_token_ids": [2, 5], "min_tokens": 2, "ignore_eos": True}, {2, 5}),  # EOS no end: allowed
        ({"allowed_token_ids": [2, 5], "min_tokens": 4}, {5}),
        ({"allowed_token_ids": [5], "stop_token_ids": [5]}, {5}),  # no min_tokens: 5 may end it
    ],
)
def test_rules_that_leave_an_allowed_token_are_followed(client, rules, allowed):
    body = {**COMPLETION, "max_tokens": 4, "temperature": 1.0, "seed": 3, "return_token_ids": True, **rules}
    choice = ok(client.post("/v1/completions", json=body))["choices"][0]
    assert choice["token_ids"] and set(choice["token_ids"]) <= allowed
