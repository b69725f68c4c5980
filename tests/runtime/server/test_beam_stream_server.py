"""use_beam_search answers as sampled completions are answered: text decoded the same way (special tokens
skipped or kept), token ids and usage counting a final EOS, the prefix cache's hits on the prompt in the
usage, and a search admitted as the engine requests each of its steps holds."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from model_optimizer import SamplingParams
from model_optimizer.runtime.beam_search import BeamSearch, BeamSearchParams
from model_optimizer.runtime.sampler_output import Logprob
from tests.runtime.server.live import start_server, wait_for
from tests.runtime.server.test_disconnect import wait_idle
from tests.runtime.server.test_errors import assert_error

PROMPT = [5, 17, 42, 8, 99, 3]
"""Greedy's second token after it is made a special token."""
EOS_PROMPT = [250, 12, 7]
"""Greedy's first token after it is made the EOS."""
LONG_PROMPT = list(range(300, 340))
"""Two full blocks of 16 the prefix cache can serve."""
GREEDY = {"temperature": 0, "ignore_eos": True, "max_tokens": 3}


@pytest.fixture(scope="module")
def special_model(tiny_model, qwen3_llm, tmp_path_factory):
    """(folder, greedy's 3 tokens after PROMPT, the EOS): the tiny Qwen3 whose tokenizer marks greedy's second
    token after PROMPT as special, and whose EOS is greedy's first token after EOS_PROMPT."""
    greedy = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    tokens = qwen3_llm.generate([{"prompt_token_ids": PROMPT}], greedy, use_tqdm=False)[0].outputs[0].token_ids
    eos = qwen3_llm.generate([{"prompt_token_ids": EOS_PROMPT}], greedy, use_tqdm=False)[0].outputs[0].token_ids[0]
    assert eos not in tokens, "pick other prompts: greedy after PROMPT must not meet the EOS"
    out = tmp_path_factory.mktemp("beam_special") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    spec = json.loads((out / "tokenizer.json").read_text())
    content = {v: k for k, v in spec["model"]["vocab"].items()}[tokens[1]]
    flags = dict(single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
    spec["added_tokens"].append({"id": tokens[1], "content": content, **flags})
    (out / "tokenizer.json").write_text(json.dumps(spec))
    config_file = out / "generation_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    config_file.write_text(json.dumps({**config, "eos_token_id": eos}))
    return out, tokens, eos


@pytest.fixture(scope="module")
def special_server(special_model):
    """Room for 2 running and 1 queued engine requests; prompt_tokens_details on."""
    from model_optimizer import LLM
    from model_optimizer.runtime.server.config import ServerConfig

    llm = LLM(str(special_model[0]), max_model_len=128, num_kv_blocks=256, max_num_seqs=2)
    config = ServerConfig(served_model_name="tiny", max_queued_requests=1, max_n=4, enable_prompt_tokens_details=True)
    live = start_server(llm, config)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def client(special_server):
    with httpx.Client(base_url=special_server.url, timeout=60) as c:
        yield c


def completion(client, prompt: list[int], beam: bool, **fields) -> dict:
    body = {"prompt": prompt, "n": 1, "return_token_ids": True, **fields, "use_beam_search": beam}
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_beam_text_skips_special_tokens_as_sampled_text_does(client, special_model):
    _, tokens, _ = special_model
    sampled = completion(client, PROMPT, False, **GREEDY)["choices"][0]
    beam = completion(client, PROMPT, True, **GREEDY)["choices"][0]
    assert sampled["token_ids"] == beam["token_ids"] == tokens
    kept = completion(client, PROMPT, False, **GREEDY, skip_special_tokens=False)["choices"][0]["text"]
    assert beam["text"] == sampled["text"] != kept  # the special token's text is left out


def test_beam_text_keeps_special_tokens_when_asked(client):
    sampled = completion(client, PROMPT, False, **GREEDY, skip_special_tokens=False)["choices"][0]
    beam = completion(client, PROMPT, True, **GREEDY, skip_special_tokens=False)["choices"][0]
    assert beam["text"] == sampled["text"]


def test_search_text_follows_skip_special_tokens(special_model):
    """BeamSearch.result decodes as the output processor does, with the params' skip_special_tokens."""
    from transformers import AutoTokenizer

    folder, tokens, _ = special_model
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    texts = {}
    for skip in (True, False):
        search = BeamSearch(PROMPT, BeamSearchParams(1, 3, ignore_eos=True, skip_special_tokens=skip), set(), 100)
        for token in tokens:
            search.advance([Logprob(token, -0.5, 1, {token: -0.5})])
        texts[skip] = search.result(tokenizer).sequences[0].text
    assert texts[True] == tokenizer.decode(tokens, skip_special_tokens=True)
    assert texts[False] == tokenizer.decode(tokens, skip_special_tokens=False) != texts[True]
    with pytest.raises(ValueError, match="skip_special_tokens"):
        BeamSearchParams(1, 3, skip_special_tokens="no")


def test_an_eos_ended_beam_counts_its_eos_as_sampling_does(client, special_model):
    _, _, eos = special_model
    sampled = completion(client, EOS_PROMPT, False, temperature=0, max_tokens=4)
    beams = completion(client, EOS_PROMPT, True, temperature=0, max_tokens=4, n=3, length_penalty=0.0)
    best = beams["choices"][0]
    assert sampled["choices"][0]["token_ids"] == best["token_ids"] == [eos]
    assert sampled["choices"][0]["text"] == best["text"] == ""
    assert (best["finish_reason"], sampled["choices"][0]["finish_reason"]) == ("stop", "stop")
    assert beams["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in beams["choices"])


def test_beam_usage_reports_the_prompts_cached_tokens(client):
    def cached(body: dict) -> int:
        return body["usage"]["prompt_tokens_details"]["cached_tokens"]

    completion(client, LONG_PROMPT, False, **GREEDY)  # the prompt's blocks now sit in the prefix cache
    sampled = completion(client, LONG_PROMPT, False, **GREEDY)
    beam = completion(client, LONG_PROMPT, True, **GREEDY, n=2)
    assert cached(beam) == cached(sampled) > 0
    assert beam["usage"]["prompt_tokens"] == sampled["usage"]["prompt_tokens"] == len(LONG_PROMPT)
    request = {"prompt": LONG_PROMPT, **GREEDY, "n": 2, "use_beam_search": True, "stream": True}
    request["stream_options"] = {"include_usage": True}
    with client.stream("POST", "/v1/completions", json=request) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    assert cached(json.loads(lines[-1][len("data: ") :])) == cached(sampled)


def test_a_search_is_admitted_as_its_beams_engine_requests(special_server, client):
    wait_idle(special_server)
    engine = special_server.state.engine
    request = {"prompt": PROMPT, "n": 3, "temperature": 0, "ignore_eos": True, "max_tokens": 60}
    try:
        with httpx.stream(
            "POST", special_server.url + "/v1/completions", json={**request, "use_beam_search": True, "stream": True}
        ) as response:
            assert response.status_code == 200
            wait_for(lambda: engine.num_in_flight > 0, "a beam step reached the engine")
            assert special_server.state.num_admitted == 3  # width 3: three engine requests a step
            assert_error(client.post("/v1/completions", json={**request, "n": 1}), 503, "at capacity")
    finally:
        wait_idle(special_server)
    too_wide = {**request, "n": 4, "use_beam_search": True}
    assert_error(client.post("/v1/completions", json=too_wide), 400, "needs 4 engine requests")
