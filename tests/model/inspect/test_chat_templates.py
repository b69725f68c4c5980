"""The shipped chat templates render the formats their families were trained on, through
transformers' own apply_chat_template."""

from __future__ import annotations

import pytest

from model_optimizer.model.inspect.chat_templates import family_template, load_template, shipped_templates

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
    with pytest.raises(ValueError, match="neither a shipped template"):
        load_template("vicuna")
