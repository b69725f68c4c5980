"""The shipped chat templates render the formats their families were trained on, through
transformers' own apply_chat_template."""

from __future__ import annotations

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
