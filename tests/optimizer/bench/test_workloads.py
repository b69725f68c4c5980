"""Workloads: length specs, synthetic prompts, shared prefixes, traces and ShareGPT files."""

import json

import numpy as np
import pytest

from model_optimizer.optimizer.bench.datasets import load_sharegpt, load_trace
from model_optimizer.optimizer.bench.lengths import parse_length
from model_optimizer.optimizer.bench.prompts import WORDS
from model_optimizer.optimizer.bench.workloads import (
    BenchRequest,
    WorkloadConfig,
    build_workload,
    prompt_maker,
    repeated_prompts,
)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A real BPE tokenizer trained here on English words, saved as tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = np.random.default_rng(0)
    corpus = [" ".join(rng.choice(WORDS, size=30)) for _ in range(300)]
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["[UNK]"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    folder = tmp_path_factory.mktemp("tok")
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_length_specs():
    rng = np.random.default_rng(0)
    assert parse_length("64").sample(rng, 3).tolist() == [64, 64, 64]
    u = parse_length("uniform:10:20").sample(rng, 2000)
    assert u.min() == 10 and u.max() == 20
    n = parse_length("normal:500:50").sample(rng, 4000)
    assert abs(n.mean() - 500) < 5 and abs(n.std() - 50) < 5
    h = parse_length("hist:8=0.75,64=0.25").sample(rng, 4000)
    assert set(h.tolist()) == {8, 64} and abs((h == 8).mean() - 0.75) < 0.03
    assert parse_length("normal:2:10").sample(rng, 500).min() >= 1
    for bad in ("0", "uniform:20:10", "normal:5", "hist:8=0", "zipf:3", "ten"):
        with pytest.raises(ValueError, match="must be N, uniform"):
            parse_length(bad)


def test_synthetic_token_id_prompts_have_exact_lengths():
    cfg = WorkloadConfig(prompt_len="uniform:5:50", output_len="hist:7=1,9=1", random_vocab_size=600)
    reqs = build_workload(cfg, "completions", 200)
    assert len(reqs) == 200
    assert all(isinstance(r.prompt, list) and len(r.prompt) == r.prompt_len for r in reqs)
    assert all(100 <= t < 600 for r in reqs for t in r.prompt)  # [100, vocab size)
    assert max(t for r in reqs for t in r.prompt) == 599
    assert {r.output_len for r in reqs} == {7, 9}
    again = build_workload(cfg, "completions", 200)
    assert [r.prompt for r in again] == [r.prompt for r in reqs]  # same seed, same requests


def test_chat_gets_text_prompts_without_tokenizer():
    reqs = build_workload(WorkloadConfig(prompt_len="12"), "chat", 5)
    assert all(isinstance(r.prompt, str) and len(r.prompt.split()) == 12 for r in reqs)
    with pytest.raises(ValueError, match="chat endpoint takes text"):
        build_workload(WorkloadConfig(prompt_format="token_ids"), "chat", 1)


def test_tokenizer_text_prompts_have_exact_token_counts(tokenizer_dir):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    cfg = WorkloadConfig(prompt_len="uniform:10:80", prompt_format="text", tokenizer=str(tokenizer_dir))
    reqs = build_workload(cfg, "completions", 40)
    counts = [len(tok.encode(r.prompt, add_special_tokens=False).ids) for r in reqs]
    assert counts == [r.prompt_len for r in reqs]
    with pytest.raises(ValueError, match="no tokenizer.json"):
        build_workload(WorkloadConfig(tokenizer=str(tokenizer_dir / "missing")), "chat", 1)


def test_shared_prefix_groups():
    cfg = WorkloadConfig(prompt_len="20", num_prefix_groups=3, prefix_len=16, prefix_share_ratio=0.5, seed=1)
    reqs = build_workload(cfg, "completions", 600)
    shared = [r for r in reqs if r.prefix_group is not None]
    assert abs(len(shared) / len(reqs) - 0.5) < 0.07
    assert {r.prefix_group for r in shared} == {0, 1, 2}
    prefixes = {g: {tuple(r.prompt[:16]) for r in shared if r.prefix_group == g} for g in range(3)}
    assert all(len(p) == 1 for p in prefixes.values())  # one prefix per group
    assert len({next(iter(p)) for p in prefixes.values()}) == 3  # and the groups differ
    assert all(r.prompt_len == 36 and len(r.prompt) == 36 for r in shared)
    assert all(r.prompt_len == 20 for r in reqs if r.prefix_group is None)
    with pytest.raises(ValueError, match="prefix-len"):
        WorkloadConfig(num_prefix_groups=2)


def test_trace_loading(tmp_path):
    path = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": 1000, "input_length": 5, "output_length": 3},
        {"timestamp": 1250, "prompt": "hello there", "output_len": 4},
        {"timestamp": 1500, "prompt": [5, 6, 7], "output_len": 2},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    rows = load_trace(str(path), "ms")
    assert [r.timestamp for r in rows] == pytest.approx([0.0, 0.25, 0.5])
    reqs = build_workload(
        WorkloadConfig(dataset="trace", dataset_path=str(path), trace_time_unit="ms"), "completions", None
    )
    assert [r.output_len for r in reqs] == [3, 4, 2]
    assert reqs[0].prompt_len == 5 and len(reqs[0].prompt) == 5  # lengths only: random ids
    assert reqs[1].prompt == "hello there"  # each line keeps its own form for completions
    assert reqs[2].prompt == [5, 6, 7] and reqs[2].prompt_len == 3
    with pytest.raises(ValueError, match="need --tokenizer"):
        build_workload(WorkloadConfig(dataset="trace", dataset_path=str(path)), "chat", None)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "prompt_len": 3, "output_len": 2}\n{"timestamp": 1, "output_len": 2}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: needs 'prompt' or"):
        load_trace(str(bad))
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1: not JSON"):
        load_trace(str(bad))
    with pytest.raises(ValueError, match="dataset file not found"):
        load_trace(str(tmp_path / "none.jsonl"))


def test_trace_rows_are_sorted_by_time(tmp_path):
    """A trace written out of order: --num-requests N takes the N earliest, and ties keep the file's order."""
    path = tmp_path / "trace.jsonl"
    stamps = [5.0, 1.0, 3.0, 1.0, 2.0]
    path.write_text(
        "".join(json.dumps({"timestamp": t, "prompt": f"p{k}", "output_len": 2}) + "\n" for k, t in enumerate(stamps))
    )
    rows = load_trace(str(path))
    assert [r.prompt for r in rows] == ["p1", "p3", "p4", "p2", "p0"]
    assert [r.timestamp for r in rows] == [0.0, 0.0, 1.0, 2.0, 4.0]
    reqs = build_workload(WorkloadConfig(dataset="trace", dataset_path=str(path)), "completions", 2)
    assert [r.prompt for r in reqs] == ["p1", "p3"]


def test_repeated_prompts_count_each_prompt_sent_again():
    pool = [BenchRequest([100 + k, 7], 2, 4) for k in range(3)] + [BenchRequest([100, 7], 2, 4)]  # a duplicate
    assert repeated_prompts(pool, [0, 1, 2]) == 0
    assert repeated_prompts(pool, list(range(10))) == 10 - 3  # a duration run cycling the pool
    assert repeated_prompts(pool[:3] + [BenchRequest("text", 1, 4)], [0, 3, 4]) == 1


def test_sharegpt_loading(tmp_path, tokenizer_dir):
    data = [
        {"conversations": [{"from": "human", "value": "say the word"}, {"from": "gpt", "value": "the word was said"}]},
        {"conversations": [{"from": "gpt", "value": "no question"}]},
        {
            "conversations": [
                {"from": "system", "value": "x"},
                {"from": "human", "value": "one two"},
                {"from": "gpt", "value": "three"},
            ]
        },
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    rows = load_sharegpt(str(path))
    assert [(r.prompt, r.reply) for r in rows] == [("say the word", "the word was said"), ("one two", "three")]
    cfg = WorkloadConfig(dataset="sharegpt", dataset_path=str(path), tokenizer=str(tokenizer_dir))
    reqs = build_workload(cfg, "chat", 4)
    assert len(reqs) == 4 and all(isinstance(r.prompt, str) for r in reqs)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    expected = {"say the word": len(tok.encode("the word was said").ids), "one two": len(tok.encode("three").ids)}
    assert all(r.output_len == expected[r.prompt] for r in reqs)
    fixed = build_workload(WorkloadConfig(dataset="sharegpt", dataset_path=str(path), output_len="11"), "chat", 3)
    assert [r.output_len for r in fixed] == [11, 11, 11]
    path.write_text(json.dumps({"not": "a list"}))
    with pytest.raises(ValueError, match="JSON list"):
        load_sharegpt(str(path))


def test_token_ids_without_a_known_vocabulary_stay_below_1000(tokenizer_dir):
    # the old default drew ids up to 10,100: above the built-in model's 8,192 tokens
    reqs = build_workload(WorkloadConfig(prompt_len="200"), "completions", 50)
    ids = [t for r in reqs for t in r.prompt]
    assert min(ids) >= 100 and max(ids) < 1000 and len(set(ids)) > 800
    # with a tokenizer: its vocabulary without added special tokens ([UNK] here is part of the base vocab)
    maker = prompt_maker(WorkloadConfig(tokenizer=str(tokenizer_dir)))
    assert maker.id_range == (100, 400) and "tokenizer" in maker.vocab_source
    # [100, N) as --random-vocab-size's help says, also for an N below the tokenizer's vocabulary
    assert prompt_maker(WorkloadConfig(tokenizer=str(tokenizer_dir), random_vocab_size=150)).id_range == (100, 150)
    assert prompt_maker(WorkloadConfig(random_vocab_size=101)).token_ids(20) == [100] * 20
    with pytest.raises(ValueError, match="random-vocab-size must be an integer > 100"):
        WorkloadConfig(random_vocab_size=100)
