"""--chat-template-content-format: a message's content reaches the template as one text or as OpenAI's
list of text parts, and `auto` reads which one the template expects, as vLLM does."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from model_optimizer.runtime.engine.chat_content import loops_over_content, resolved, shaped
from model_optimizer.runtime.engine.input_processor import chat_template_for, chat_text
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

# Gemma 3's way: a text is trimmed and printed, a list of parts printed part by part
PARTS = (
    "{%- for message in messages %}<{{ message.role }}>"
    "{%- if message['content'] is string %}S[{{ message['content'] | trim }}]"
    "{%- else %}{%- for item in message['content'] %}P[{{ item['text'] | trim }}]{%- endfor %}{%- endif %}"
    "{%- endfor %}"
)
# ChatML's way: the content printed as it is
TEXT = "{% for message in messages %}<{{ message.role }}>{{ message.content }}{% endfor %}"
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": " one "}, {"type": "text", "text": "two"}]},
    {"role": "tool", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
]


@pytest.mark.parametrize(
    ("template", "loops"),
    [
        (PARTS, True),
        (TEXT, False),
        # the rest after the system message, a list assigned from messages
        ("{% set rest = messages[1:] %}{% for m in rest %}{% for c in m.content %}{% endfor %}{% endfor %}", True),
        ("{% for m in messages[1:] | reverse %}{% for c in m['content'][1:] %}{% endfor %}{% endfor %}", True),
        # an item by index is not followed (vLLM's reading): the other messages' content is printed as text
        (
            "{% for c in messages[0].content %}{{ c.text }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
            False,
        ),  # fmt: skip
        ("{% set system = messages[0] %}{% for c in system.content %}{{ c.text }}{% endfor %}", False),
        ("{% for m in messages %}{% for call in m.tool_calls %}{{ call }}{% endfor %}{% endfor %}", False),
        ("{% for tool in tools %}{% for c in tool.content %}{% endfor %}{% endfor %}", False),  # not a message
        ("{% for m in messages %}{{ m['content'] }", False),  # does not parse: text, as most templates take it
        ("{% if x %}" * 3000 + "{% endif %}" * 3000, False),  # deeper than the parser goes: text too
    ],
)
def test_auto_finds_a_loop_over_a_message_s_content(template, loops):
    assert loops_over_content(template) is loops
    assert resolved("auto", template) == ("openai" if loops else "string")
    assert resolved("string", template) == "string" and resolved("openai", template) == "openai"


def test_of_named_templates_the_one_rendered_decides():
    """transformers renders `tool_use` when a request has tools (an empty list too) and the tokenizer has one,
    else `default`; `auto` reads the format from that one."""
    named = SimpleNamespace(chat_template={"default": TEXT, "tool_use": PARTS})
    assert chat_template_for(named) == TEXT and chat_template_for(named, tools=[]) == PARTS
    assert chat_template_for(SimpleNamespace(chat_template={"default": PARTS}), tools=[{"type": "function"}]) == PARTS
    assert chat_template_for(named, "given") == "given"
    with pytest.raises(ValueError, match=r"named chat templates \(tool_use\) have no 'default'"):
        chat_template_for(SimpleNamespace(chat_template={"tool_use": PARTS}))
    assert resolved("auto", PARTS) == "openai" and resolved("auto", TEXT) == "string"
    with pytest.raises(ValueError, match="one of auto, string, openai"):
        resolved("parts", TEXT)


def test_each_format_shapes_content_as_vllm_does():
    assistant = {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    openai = shaped([*CONVERSATION, assistant], "openai")
    assert openai[0]["content"] == [{"type": "text", "text": "be brief"}]
    assert openai[1]["content"] == CONVERSATION[1]["content"]
    assert openai[2]["content"] == "a\nb"  # a tool's result stays one text
    assert openai[3] == {"role": "assistant", "content": [], "tool_calls": [{"id": "c"}]}
    with pytest.raises(ValueError, match="got 'image_url'"):  # not text: refused, never dropped by a template
        shaped([image], "openai")
    text = shaped([*CONVERSATION, assistant], "string")
    assert [m["content"] for m in text] == ["be brief", " one \ntwo", "a\nb", ""]
    assert CONVERSATION[1]["content"][0] == {"type": "text", "text": " one "}  # the caller's messages untouched


@pytest.mark.parametrize(
    ("content_format", "rendered"),
    [
        ("auto", "<system>P[be brief]<user>P[one]P[two]<tool>S[a\nb]"),
        ("openai", "<system>P[be brief]<user>P[one]P[two]<tool>S[a\nb]"),
        ("string", "<system>S[be brief]<user>S[one \ntwo]<tool>S[a\nb]"),
    ],
)
def test_chat_text_renders_the_content_the_template_reads(own_llm, content_format, rendered):
    text = chat_text(own_llm.tokenizer, CONVERSATION, PARTS, False, content_format=content_format)
    assert text == rendered


def test_llm_chat_and_the_server_render_alike(own_llm):
    """LLM.chat and /tokenize (the path chat completions take) give the same prompt for each format."""
    tokenizer = own_llm.tokenizer
    expected = {
        "auto": "<system>P[be brief]<user>P[one]P[two]<tool>S[a\nb]",
        "string": "<system>S[be brief]<user>S[one \ntwo]<tool>S[a\nb]",
    }
    for content_format, rendered in expected.items():
        [output] = own_llm.chat(
            CONVERSATION,
            chat_template=PARTS,
            add_generation_prompt=False,
            chat_template_content_format=content_format,
            use_tqdm=False,
        )
        assert output.prompt == rendered
        live = start_server(own_llm, ServerConfig(chat_template=PARTS, chat_template_content_format=content_format))
        try:
            body = {"messages": CONVERSATION, "add_generation_prompt": False}
            tokens = httpx.post(f"{live.url}/tokenize", json=body, timeout=60).json()["tokens"]
        finally:
            live.stop()
        assert tokens == tokenizer.encode(rendered, add_special_tokens=False)


def test_an_unknown_format_is_refused_before_the_server_starts():
    with pytest.raises(ValueError, match="chat_template_content_format"):
        ServerConfig(chat_template_content_format="parts")


def test_a_template_that_cannot_take_the_format_stops_the_start_up(own_llm):
    """Mistral's shipped template adds content to text: with parts (openai) it fails, at start-up, not per request."""
    with pytest.raises(ValueError, match="does not render a sample conversation"):
        start_server(own_llm, ServerConfig(chat_template="mistral", chat_template_content_format="openai"))


def test_the_shipped_templates_join_parts_as_text(own_llm):
    """chatml, llama3 and the built-in model's template join a message's parts with newlines, whichever
    format reaches them, so `auto` gives them text, as it gives most templates."""
    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.chat_templates import load_template
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    conversation = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    built_in = load_tokenizer(reference_model_path()).chat_template
    for template in (load_template("chatml"), load_template("llama3"), built_in):
        assert not loops_over_content(template)
        rendered = {
            f: chat_text(own_llm.tokenizer, conversation, template, content_format=f) for f in ("openai", "string")
        }
        assert rendered["openai"] == rendered["string"] and "a\nb" in rendered["string"]


def test_an_assistant_message_without_content_gets_no_parts(own_llm):
    """A tool-calling assistant message sent back with content null: an empty list of parts, not one empty part
    (templates test `if message.content`)."""
    template = "{% for m in messages %}{% if m.content %}[{% for c in m.content %}{{ c.text }}{% endfor %}]{% endif %}{% endfor %}"
    conversation = [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]
    assert chat_text(own_llm.tokenizer, conversation, template, False) == "[q]"
    live = start_server(own_llm, ServerConfig(chat_template=template))
    try:
        body = {"messages": conversation, "add_generation_prompt": False}
        tokens = httpx.post(f"{live.url}/tokenize", json=body, timeout=60).json()["tokens"]
    finally:
        live.stop()
    assert tokens == own_llm.tokenizer.encode("[q]", add_special_tokens=False)


def test_refusal_and_responses_text_parts_are_text(own_llm):
    """An assistant's `refusal` part (OpenAI's) and `input_text`/`output_text` parts render as their text, as
    vLLM reads them; an image part is still a 400 naming the field."""
    live = start_server(own_llm, ServerConfig(chat_template=TEXT, chat_template_content_format="string"))
    try:
        parts = [{"type": "refusal", "refusal": "no"}, {"type": "output_text", "text": "x"}]
        body = {"messages": [{"role": "assistant", "content": parts}], "add_generation_prompt": False}
        tokens = httpx.post(f"{live.url}/tokenize", json=body, timeout=60).json()["tokens"]
        image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
        refused = httpx.post(f"{live.url}/v1/chat/completions", json=image, timeout=60)
    finally:
        live.stop()
    assert tokens == own_llm.tokenizer.encode("<assistant>no\nx", add_special_tokens=False)
    assert refused.status_code == 400 and "messages" in refused.json()["error"]["param"]
