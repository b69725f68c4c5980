"""LLM: the tokenizer's EOS ends outputs beside generation_config's; vLLM's use_tqdm factory, priority and
lora_request arguments."""

from __future__ import annotations

import json
import shutil

import pytest

from model_optimizer import LLM, SamplingParams


@pytest.fixture(scope="module")
def other_eos_llm(tiny_model, tmp_path_factory):
    """The tiny Qwen3 whose generation_config names token 0 as EOS; its tokenizer's EOS (<|im_end|>) is 2."""
    out = tmp_path_factory.mktemp("other_eos") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    llm = LLM(str(out), kv_cache_memory=1 << 24)
    yield llm
    llm.close()


def test_the_tokenizers_eos_ends_an_output_too(other_eos_llm):
    assert other_eos_llm.get_tokenizer().eos_token_id == 2
    params = SamplingParams(temperature=0, max_tokens=5, logit_bias={2: 100}, skip_special_tokens=False)
    [out] = other_eos_llm.generate("Hello", params, use_tqdm=False)
    assert out.outputs[0].token_ids == [2] and out.outputs[0].finish_reason == "stop"
    params = SamplingParams(temperature=0, max_tokens=3, logit_bias={0: 100})
    [out] = other_eos_llm.generate("Hello", params, use_tqdm=False)
    assert out.outputs[0].token_ids == [0] and out.outputs[0].finish_reason == "stop"


class Bar:
    made: list[Bar] = []

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.count, self.closed = total, desc, 0, False
        Bar.made.append(self)

    def update(self, count: int) -> None:
        self.count += count

    def close(self) -> None:
        self.closed = True


def test_use_tqdm_takes_a_bar_factory(qwen3_llm):
    Bar.made.clear()
    qwen3_llm.generate(["a", "b", "c"], SamplingParams(max_tokens=2), use_tqdm=Bar)
    [bar] = Bar.made
    assert (bar.total, bar.count, bar.closed) == (3, 3, True)


def test_priority_one_per_prompt_and_lora_refused(qwen3_llm):
    params = SamplingParams(temperature=0, max_tokens=3)
    plain = qwen3_llm.generate(["a", "b"], params, use_tqdm=False)
    ranked = qwen3_llm.generate(["a", "b"], params, False, None, [1, 0])
    assert [o.outputs[0].token_ids for o in ranked] == [o.outputs[0].token_ids for o in plain]
    with pytest.raises(ValueError, match="one per prompt"):
        qwen3_llm.generate(["a", "b"], params, use_tqdm=False, priority=[1])
    with pytest.raises(ValueError, match="LoRA"):
        qwen3_llm.generate("a", params, use_tqdm=False, lora_request=object())
    with pytest.raises(ValueError, match="LoRA"):
        qwen3_llm.chat([{"role": "user", "content": "hi"}], params, lora_request=object())
