"""vLLM's offline API beyond prompts: generate's use_tqdm, SamplingParams' bad_words and
truncate_prompt_tokens, LLM.get_tokenizer; and the same two fields on a `mopt generate` JSONL line."""

from __future__ import annotations

import json
import shutil

import pytest
from transformers import AutoTokenizer

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), max_model_len=MAX_MODEL_LEN, num_kv_blocks=64)


def _greedy(**fields) -> SamplingParams:
    return SamplingParams(**{"max_tokens": 8, "temperature": 0.0, "ignore_eos": True, **fields})


def test_use_tqdm_writes_plain_progress_lines_off_a_terminal_and_false_writes_none(llm, capsys):
    llm.generate(["a", "b", "c"], _greedy(max_tokens=2))
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("LLM.generate:")]
    assert lines[0] == "LLM.generate: 1/3 prompts done" and lines[-1] == "LLM.generate: 3/3 prompts done"
    llm.generate(["a", "b", "c"], _greedy(max_tokens=2), use_tqdm=False)
    assert "LLM.generate:" not in capsys.readouterr().err


def test_bad_words_bar_the_words_as_transformers_tokenizes_them(llm, tiny_model):
    prompt = "The json module"
    free = llm.generate([prompt], _greedy(), use_tqdm=False)[0].outputs[0]
    word = llm.tokenizer.decode(free.token_ids[:1]).strip() or llm.tokenizer.decode(free.token_ids[:2]).strip()
    hf = AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))
    sequences = [hf.encode(t, add_special_tokens=False) for t in (word, " " + word)]
    by_words = llm.generate([prompt], _greedy(bad_words=[word]), use_tqdm=False)[0].outputs[0]
    by_ids = llm.generate([prompt], _greedy(bad_words_token_ids=sequences), use_tqdm=False)[0].outputs[0]
    assert by_words.token_ids == by_ids.token_ids != free.token_ids
    for seq in sequences:
        ids = by_words.token_ids
        assert not any(ids[i : i + len(seq)] == seq for i in range(len(ids) - len(seq) + 1))


def test_a_bad_word_is_barred_without_its_leading_spaces(llm):
    from model_optimizer.runtime.engine.input_processor import bad_words_token_ids

    padded = bad_words_token_ids(llm.tokenizer, ["  padded  "])
    assert padded == bad_words_token_ids(llm.tokenizer, ["padded  "])
    assert padded[0] == llm.tokenizer.encode("padded  ", add_special_tokens=False)


@pytest.mark.parametrize("bad", [[""], ["  "], "word", [3]])
def test_bad_words_of_the_wrong_shape_are_refused(bad):
    with pytest.raises(ValueError, match="bad_words must be a list of non-blank strings"):
        SamplingParams(bad_words=bad)


def test_truncate_prompt_tokens_keeps_the_last_tokens(llm):
    ids = [(7 * i) % 200 + 5 for i in range(3 * MAX_MODEL_LEN)]
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([ids], _greedy(), use_tqdm=False)
    [most] = llm.generate([ids], _greedy(max_tokens=1, truncate_prompt_tokens=-1), use_tqdm=False)
    assert most.prompt_token_ids == ids[-(MAX_MODEL_LEN - 1) :]
    [five] = llm.generate([ids], _greedy(truncate_prompt_tokens=5), use_tqdm=False)
    assert five.prompt_token_ids == ids[-5:]
    assert five.outputs[0].token_ids == llm.generate([ids[-5:]], _greedy(), use_tqdm=False)[0].outputs[0].token_ids
    with pytest.raises(ValueError, match=f"give -1 or 1 to {MAX_MODEL_LEN}"):  # only above max_model_len, as vLLM
        llm.generate([ids], _greedy(truncate_prompt_tokens=MAX_MODEL_LEN + 1), use_tqdm=False)
    with pytest.raises(ValueError, match=f"prompt has {MAX_MODEL_LEN} tokens"):  # taken; the cut prompt is too long
        llm.generate([ids], _greedy(truncate_prompt_tokens=MAX_MODEL_LEN), use_tqdm=False)


@pytest.mark.parametrize("bad", [0, -2, 1.5, "3"])
def test_truncate_prompt_tokens_of_the_wrong_kind_is_refused(bad):
    with pytest.raises(ValueError, match="truncate_prompt_tokens must be -1 or an integer >= 1"):
        SamplingParams(truncate_prompt_tokens=bad)


def test_get_tokenizer_and_bad_words_without_one(llm, tiny_model, tmp_path):
    hf = llm.get_tokenizer()
    assert type(hf).__module__.startswith("transformers") and llm.get_tokenizer() is hf
    assert hf("The json module").input_ids == llm.tokenizer.encode("The json module")
    messages = [{"role": "user", "content": "hi"}]
    assert (
        hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        == llm.chat(messages, _greedy(max_tokens=1), use_tqdm=False)[0].prompt
    )
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(tiny_model("qwen3"), folder)
    for name in TOKENIZER_FILES:
        (folder / name).unlink(missing_ok=True)
    bare = LLM(str(folder), max_model_len=MAX_MODEL_LEN, num_kv_blocks=64, skip_tokenizer_init=True)
    assert bare.get_tokenizer() is None
    with pytest.raises(ValueError, match="bad_words need a tokenizer"):
        bare.generate([[5, 6, 7]], _greedy(bad_words=["x"]), use_tqdm=False)


def test_a_jsonl_line_may_truncate_its_prompt_and_bar_words(tmp_path, capsys):
    long_prompt = "word " * 2000  # far past --max-model-len
    path = tmp_path / "in.jsonl"
    rows = [
        {"prompt": long_prompt, "max_tokens": 2, "truncate_prompt_tokens": 16},
        {"prompt": "hi", "max_tokens": 3, "bad_words": ["the"]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    flags = ["--temperature", "0", "--kv-cache-memory", str(1 << 22), "--max-model-len", "256"]
    assert main(["generate", "--prompts-file", str(path), "--output", "-", *flags]) == 0
    results = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [len(r["outputs"][0]["token_ids"]) for r in results] == [2, 3]


def test_sample_logprobs_read_as_vllm_dicts(llm):
    """vLLM's CompletionOutput.logprobs is one dict per token, token id -> Logprob(logprob, rank)."""
    [out] = llm.generate(["The json module"], _greedy(logprobs=3, temperature=1.0, seed=3), use_tqdm=False)
    completion = out.outputs[0]
    assert len(completion.logprobs) == len(completion.token_ids) == 8
    for token, position in zip(completion.token_ids, completion.logprobs):
        assert position[token].logprob == position.logprob and position[token].rank == position.rank
        assert token in position and set(position) == {token, *position.top}
        assert len(position) == len(set(position)) in (3, 4)
        assert [position[t].rank for t in position.top] == [1, 2, 3]  # most likely first
        assert {t: lp.logprob for t, lp in position.items()} == {token: position.logprob, **position.top}
        with pytest.raises(KeyError):
            position[-5]
        assert dict(position) == dict(position.items()) and not hasattr(position[token], "items")  # leaves


def test_cumulative_logprob_is_the_sum_of_the_tokens_logprobs(llm):
    params = _greedy(logprobs=0, temperature=1.0, seed=5)
    [out] = llm.generate(["The json module"], params, use_tqdm=False)
    completion = out.outputs[0]
    assert completion.cumulative_logprob == pytest.approx(sum(lp.logprob for lp in completion.logprobs))
    assert completion.cumulative_logprob < 0
    [plain] = llm.generate(["The json module"], _greedy(), use_tqdm=False)
    assert plain.outputs[0].cumulative_logprob is None


def test_a_completions_finished_is_a_method_and_the_requests_a_field(llm):
    [out] = llm.generate(["The json module"], _greedy(max_tokens=3), use_tqdm=False)
    assert out.finished is True  # vLLM: RequestOutput.finished is a bool, CompletionOutput.finished() a method
    assert out.outputs[0].finished() is True


def test_use_tqdm_is_the_third_positional_as_in_vllm(llm, capsys):
    messages = [{"role": "user", "content": "hi"}]
    llm.chat(messages, _greedy(max_tokens=2), False)
    llm.generate(["a"], _greedy(max_tokens=2), False)
    assert "LLM." not in capsys.readouterr().err
    llm.chat([messages, messages], _greedy(max_tokens=2))
    assert "LLM.chat: 2/2 prompts done" in capsys.readouterr().err


def test_chat_takes_any_mapping_or_pydantic_message(llm):
    from types import MappingProxyType

    from pydantic import BaseModel

    class Message(BaseModel):
        role: str
        content: str

    plain = [{"role": "user", "content": "hi"}]
    expected = llm.chat(plain, _greedy(), use_tqdm=False)[0]
    for messages in ([MappingProxyType(plain[0])], [Message(role="user", content="hi")]):
        [out] = llm.chat(messages, _greedy(), use_tqdm=False)
        assert out.prompt_token_ids == expected.prompt_token_ids


def test_progress_lines_count_batches_of_items():
    from model_optimizer.common.progress import batch_progress

    class Pipe:
        is_terminal = False

    lines: list[str] = []
    with batch_progress(Pipe(), 100, "embedding", lines.append, unit="texts") as advance:
        for count in (3, 5, 10, 30, 52):
            advance(count)
    assert lines == ["3/100 texts done", "18/100 texts done", "48/100 texts done", "100/100 texts done"]


def test_embed_takes_use_tqdm(llm, capsys):
    vectors = [o.outputs.embedding for o in llm.embed(["a", "b", "c"], use_tqdm=False)]
    assert len(vectors) == 3 and "LLM.embed" not in capsys.readouterr().err
    assert [o.outputs.embedding for o in llm.embed(["a", "b", "c"])] == vectors
    assert "LLM.embed: 3/3 prompts done" in capsys.readouterr().err


def test_a_torch_dtype_and_no_seed_are_taken_as_vllm_passes_them(tiny_model):
    import torch

    llm = LLM(str(tiny_model("qwen3")), max_model_len=MAX_MODEL_LEN, num_kv_blocks=64, dtype=torch.float32, seed=None)
    assert llm.config.dtype == "float32" and llm.config.seed == 0
