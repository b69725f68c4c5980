"""The shipped chat templates render the formats their families were trained on, through
transformers' own apply_chat_template."""

from __future__ import annotations

import json

import pytest

from model_optimizer.runtime.models.chat_templates import family_template, load_template, shipped_templates

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
]
EXPECTED = {
    "chatml": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    "Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "mistral": "<s>[INST] Be brief.\n\nHi [/INST]Hello.<|im_end|>[INST] Bye [/INST]",
}


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_template_renders_its_family_format(tokenizer, name):
    text = tokenizer.apply_chat_template(
        MESSAGES, chat_template=load_template(name), tokenize=False, add_generation_prompt=True
    )
    assert text == EXPECTED[name]


def test_chatml_closes_an_empty_think_block_when_thinking_is_off(tokenizer):
    """As Qwen3's own template: enable_thinking false writes an empty think block after the generation
    prompt; left out or true, the prompt is plain ChatML."""

    def render(**kwargs) -> str:
        return tokenizer.apply_chat_template(
            MESSAGES, chat_template=load_template("chatml"), tokenize=False, add_generation_prompt=True, **kwargs
        )

    assert render() == render(enable_thinking=True) == EXPECTED["chatml"]
    assert render(enable_thinking=False) == EXPECTED["chatml"] + "<think>\n\n</think>\n\n"


def test_numpy_template_kwargs_are_taken_as_their_python_values(tokenizer):
    """np.bool_(False) from a config or a sweep turns thinking off as False does (it was dropped)."""
    import numpy as np

    from model_optimizer.runtime.engine.input_processor import chat_text

    template = load_template("chatml")
    off = chat_text(tokenizer, MESSAGES, template, template_kwargs={"enable_thinking": np.bool_(False)})
    assert off == chat_text(tokenizer, MESSAGES, template, template_kwargs={"enable_thinking": False})
    assert off.endswith("<think>\n\n</think>\n\n")


def test_families_and_files(tmp_path):
    assert shipped_templates() == ["chatml", "llama3", "mistral"]
    assert [family_template({"model_type": t}) for t in ("qwen3", "qwen2", "llama", "mistral", "gpt2")] == [
        "chatml",
        "chatml",
        "llama3",
        "mistral",
        None,
    ]
    (tmp_path / "t.jinja").write_text("{{ messages[0]['content'] }}")
    assert load_template(str(tmp_path / "t.jinja")) == "{{ messages[0]['content'] }}"
    inline = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert load_template(inline) == inline  # the template itself, as vLLM takes --chat-template
    long = "{{ messages[0]['content'] }}" + "x" * 400  # longer than any legal file name
    assert load_template(long) == long
    (tmp_path / "latin1.jinja").write_bytes(b"{{ messages[0].content }} \xe9\xff")
    with pytest.raises(ValueError, match="not UTF-8"):
        load_template(str(tmp_path / "latin1.jinja"))
    with pytest.raises(ValueError, match="neither a shipped template"):
        load_template("vicuna")


def test_a_server_takes_a_shipped_template_by_name(tiny_model):
    """`mopt serve --chat-template llama3`: the shipped template renders the chat, not the tokenizer's."""
    import httpx

    from model_optimizer import LLM
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    llm = LLM(str(tiny_model("qwen3")), max_model_len=256, num_kv_blocks=32, max_num_seqs=2)
    server = start_server(llm, ServerConfig(served_model_name="tiny", chat_template="llama3"))
    try:
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}
        tokens = httpx.post(server.url + "/tokenize", json=body).json()["tokens"]
        text = httpx.post(server.url + "/detokenize", json={"model": "tiny", "tokens": tokens}).json()["prompt"]
        assert "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" in text
    finally:
        server.stop()


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
TOOL_TURNS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo and Rome?"},
    {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "12C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "20C"},
    {"role": "assistant", "content": "Oslo 12C, Rome 20C."},
]
TOOL_FORMATS = {
    "chatml": [
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more of the functions below.",
        "<tools>\n" + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>",
        '<|im_start|>assistant\nChecking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n12C\n</tool_response>\n<tool_response>\n20C\n</tool_response><|im_end|>\n",
    ],
    "llama3": [
        "<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n\nBe brief.<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\nYou may answer by calling one of the functions below.",
        json.dumps(WEATHER, indent=4) + "\n\nWeather in Oslo and Rome?<|eot_id|>",
        '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Oslo"}}; '
        '{"name": "get_weather", "parameters": {"city": "Oslo"}}<|eot_id|>',
        "<|start_header_id|>ipython<|end_header_id|>\n\n12C<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n20C",
    ],
}


@pytest.mark.parametrize("name", sorted(TOOL_FORMATS))
def test_tools_and_tool_turns_render_in_the_familys_format(tokenizer, name):
    """The same text through transformers' apply_chat_template and the server's own renderer; the tool
    section once, the calls and their results where the family's own templates put them."""
    from model_optimizer.runtime.models.chat_render import render_chat

    template = load_template(name)
    theirs = tokenizer.apply_chat_template(
        TOOL_TURNS, tools=[WEATHER], chat_template=template, tokenize=False, add_generation_prompt=True
    )
    ours = render_chat(template, TOOL_TURNS, {}, add_generation_prompt=True, tools=[WEATHER])
    assert ours == theirs
    for piece in TOOL_FORMATS[name]:
        assert piece in theirs, piece
    assert theirs.count("Be brief.") == 1
    plain = tokenizer.apply_chat_template(MESSAGES, chat_template=template, tokenize=False, add_generation_prompt=True)
    assert plain == EXPECTED[name]  # without tools, as before


def test_llama3_without_a_system_message_opens_with_the_environment_line(tokenizer):
    text = tokenizer.apply_chat_template(
        TOOL_TURNS[1:2], tools=[WEATHER], chat_template=load_template("llama3"), tokenize=False
    )
    assert text.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython<|eot_id|>"
    )


def test_the_llama3_json_parser_reads_the_calls_llama3_writes():
    from model_optimizer.runtime.models.chat_render import render_chat
    from model_optimizer.runtime.server.chat_output import ChatOutput
    from model_optimizer.runtime.server.tool_parsers import Llama3JsonParser

    turn = render_chat(load_template("llama3"), TOOL_TURNS[:3], {}, tools=[WEATHER])
    written = turn.split("<|start_header_id|>assistant<|end_header_id|>\n\n")[1].split("<|eot_id|>")[0]
    message = ChatOutput(tools=Llama3JsonParser([WEATHER])).message(written)
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.tool_calls]
    assert calls == [("get_weather", {"city": "Oslo"})] * 2


def test_the_hermes_parser_reads_the_calls_chatml_writes():
    """A model that learnt from this template writes its calls as the template shows them: the parser that
    `--tool-call-parser hermes` names reads them back, name and arguments."""
    from model_optimizer.runtime.models.chat_render import render_chat
    from model_optimizer.runtime.server.chat_output import ChatOutput
    from model_optimizer.runtime.server.tool_parsers import HermesParser

    turn = render_chat(load_template("chatml"), TOOL_TURNS[2:3], {}, tools=[WEATHER])
    written = turn.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    message = ChatOutput(tools=HermesParser([WEATHER])).message(written)
    assert message.content == "Checking."
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.tool_calls]
    assert calls == [("get_weather", {"city": "Oslo"})] * 2


def test_a_server_on_the_shipped_chatml_shows_the_model_its_tools(tiny_model):
    """`mopt serve --chat-template chatml --enable-auto-tool-choice --tool-call-parser hermes`: the prompt
    lists the tools, and a required call comes back as the client's tool call."""
    import httpx
    import openai

    from model_optimizer import LLM
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    llm = LLM(str(tiny_model("qwen3")), max_model_len=512, num_kv_blocks=64, max_num_seqs=2)
    config = ServerConfig(
        served_model_name="tiny", chat_template="chatml", enable_auto_tool_choice=True, tool_call_parser="hermes"
    )
    server = start_server(llm, config)
    try:
        body = {"model": "tiny", "messages": TOOL_TURNS[1:2], "tools": [WEATHER]}
        tokens = httpx.post(server.url + "/tokenize", json=body).json()["tokens"]
        text = httpx.post(server.url + "/detokenize", json={"model": "tiny", "tokens": tokens}).json()["prompt"]
        assert "<tools>\n" + json.dumps(WEATHER, ensure_ascii=False) + "\n</tools>" in text
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
        cities = {"type": "object", "properties": {"city": {"enum": ["Oslo", "Rome"]}}, "required": ["city"]}
        cities["additionalProperties"] = False
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": cities}}
        completion = client.chat.completions.create(
            model="tiny", messages=TOOL_TURNS[1:2], tools=[tool], tool_choice="required", parallel_tool_calls=False
        )
        [call] = completion.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Oslo", "Rome")
    finally:
        server.stop()
