"""Fixes from the embeddings review: Qwen3-Embedding's instruction format, `dimensions` refused alike at
every entry point, truncation with a tokenizer that appends the end token itself, bad instruction
templates refused up front, and include_prompt false as sentence-transformers implements it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model_optimizer.cli.main import main
from tests.cli_errors import error_line

TASK = "Given a web search query, retrieve relevant passages"


def _link_copy(src: Path, out: Path, replace: dict[str, str]) -> Path:
    """`src` as symlinks in `out`, except the files in `replace` (relative path -> new text)."""
    for f in src.rglob("*"):
        rel = f.relative_to(src)
        if f.is_dir():
            (out / rel).mkdir(parents=True, exist_ok=True)
        elif str(rel) not in replace:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).symlink_to(f)
    for rel, text in replace.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return out


# 1. Qwen3-Embedding's instruction format


def test_default_instruction_is_qwen3_embeddings_official_format(qwen3):
    """ "Instruct: {task}\\nQuery:{text}", no space after "Query:" (model card, vLLM, sentence-transformers)."""
    from model_optimizer.runtime.embed.config import DEFAULT_INSTRUCTION_TEMPLATE

    assert DEFAULT_INSTRUCTION_TEMPLATE == "Instruct: {task}\nQuery:{text}"
    text = "what is a cat"
    out = qwen3.encode(text, instruction=TASK, keep_token_ids=True)
    end = qwen3.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    official = qwen3.tokenizer(f"Instruct: {TASK}\nQuery:{text}")["input_ids"]
    assert out.token_ids == [official + [end]]


# 2. `dimensions`: one check, in the Embedder


@pytest.fixture(scope="module")
def matryoshka_minilm(minilm_dir, tmp_path_factory) -> Path:
    """MiniLM whose config lists the lengths it was (said to be) trained for."""
    config = json.loads((minilm_dir / "config.json").read_text())
    config["matryoshka_dimensions"] = [384, 128, 64]
    return _link_copy(minilm_dir, tmp_path_factory.mktemp("matryoshka"), {"config.json": json.dumps(config)})


def test_dimensions_refused_by_every_entry_point_on_a_model_not_trained_for_it(minilm, minilm_dir, tmp_path, capsys):
    import asyncio

    from model_optimizer import LLM, PoolingParams

    refused = "dimensions is not supported by this model: its config declares no Matryoshka training"
    with pytest.raises(ValueError, match=refused):
        minilm.encode("a text", dimensions=64)
    with pytest.raises(ValueError, match=refused):
        minilm.embed(["a text"], dimensions=64)
    with pytest.raises(ValueError, match=refused):
        asyncio.run(minilm.aencode("a text", dimensions=64))
    llm = LLM(str(minilm_dir))
    with pytest.raises(ValueError, match=refused):
        llm.embed("a text", dimensions=64)
    with pytest.raises(ValueError, match=refused):
        llm.embed("a text", pooling_params=PoolingParams(dimensions=64))
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('"a text"\n')
    args = ["embed", "--model", str(minilm_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
    line = error_line([*args, "--dimensions", "64"], capsys)
    assert refused in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]  # refused before any file is made


def test_dimensions_a_config_lists_are_the_only_ones_taken(matryoshka_minilm, tmp_path, capsys):
    from model_optimizer.runtime.embed import Embedder

    emb = Embedder(matryoshka_minilm, device="cpu")
    full = emb.encode("a text").embeddings
    assert torch.allclose(emb.encode("a text", dimensions=64).embeddings, F.normalize(full[:, :64], dim=-1), atol=1e-6)
    with pytest.raises(ValueError, match=r"dimensions must be one of \[384, 128, 64\] for this model, got 32"):
        emb.encode("a text", dimensions=32)
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('"a text"\n')
    args = ["embed", "--model", str(matryoshka_minilm), "--input", str(src), "--output", str(out), "--device", "cpu"]
    assert "dimensions must be one of [384, 128, 64]" in error_line([*args, "--dimensions", "32"], capsys)
    assert main([*args, "--dimensions", "128"]) == 0
    assert len(json.loads(out.read_text())["embedding"]) == 128


def test_decoder_embedders_take_dimensions(qwen3, tiny_model):
    from model_optimizer import LLM, PoolingParams

    assert qwen3.encode("a text", dimensions=16).embeddings.shape == (1, 16)
    llm = LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22)
    [out] = llm.embed("a text", pooling_params=PoolingParams(dimensions=16))
    assert out.outputs.hidden_size == 16


# 3. truncate_prompt_tokens=k gives k tokens when the tokenizer appends the end token itself


@pytest.fixture(scope="module")
def qwen3_appending_dir(qwen3_dir, tmp_path_factory) -> Path:
    """The tiny Qwen3 whose tokenizer.json has a TemplateProcessing post-processor appending <|endoftext|>."""
    out = tmp_path_factory.mktemp("qwen3_pp") / "qwen3"
    shutil.copytree(qwen3_dir, out)
    tok = json.loads((out / "tokenizer.json").read_text())
    [eos] = [t["id"] for t in tok["added_tokens"] if t["content"] == "<|endoftext|>"]
    end = {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, end],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, end, {"Sequence": {"id": "B", "type_id": 0}}, end],
        "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [eos], "tokens": ["<|endoftext|>"]}},
    }
    (out / "tokenizer.json").write_text(json.dumps(tok))
    return out


@pytest.mark.parametrize("k", [2, 5, 10])
def test_truncation_to_k_gives_k_tokens_whoever_appends_the_end_token(qwen3, qwen3_appending_dir, k):
    from model_optimizer.runtime.embed import Embedder

    appending = Embedder(qwen3_appending_dir, device="cpu", dtype="float32")
    end = qwen3.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert appending.tokenizer("hi there")["input_ids"][-1] == end  # the post-processor appends it
    text = "hello world " * 50
    words = qwen3.tokenizer(text)["input_ids"]
    for emb in (qwen3, appending):
        out = emb.encode(text, truncate_prompt_tokens=k, keep_token_ids=True)
        assert out.num_tokens == [k]
        assert out.token_ids == [words[: k - 1] + [end]]  # the text's first k - 1 tokens, then the end token


# 4. a bad instruction template fails when the config is made, with a clear error


@pytest.mark.parametrize(
    "template, message",
    [
        ("{task} {text} {lang}", "has the placeholder {lang}"),
        ("{task}: {text} {}", "has the placeholder {}"),
        ("{task}: {text} {0}", "has the placeholder {0}"),
        ("{task} {text} {", "is not a valid template"),
        ("{task} {text} }", "is not a valid template"),
        ('{"task": {task}, "text": {text}}', "is not a valid template|has the placeholder"),
        ("{task.upper}{text}", "has the placeholder {task.upper}"),
        ("{task:d}{text}", "is not a valid template"),
        ("{{task}} {text}", "must contain {task} and {text}"),
        ("no placeholders", "must contain {task} and {text}"),
    ],
)
def test_a_bad_instruction_template_is_a_clear_value_error(template, message):
    from model_optimizer.runtime.embed.config import EmbedConfig

    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")) as exc:
        EmbedConfig(instruction_template=template)
    assert "instruction_template" in str(exc.value)


def test_a_template_with_literal_braces_written_doubled_works(qwen3_dir):
    from model_optimizer.runtime.embed import Embedder

    emb = Embedder(qwen3_dir, device="cpu", dtype="float32", instruction_template="{{{task}}} {text}")
    out = emb.encode("a cat", instruction="find", keep_token_ids=True)
    assert out.token_ids == emb.encode("{find} a cat", keep_token_ids=True).token_ids


def test_mopt_embed_with_a_bad_instruction_template_prints_one_line(qwen3_dir, tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text('"a text"\n')
    args = ["embed", "--model", str(qwen3_dir), "--input", str(src), "--output", str(out), "--device", "cpu"]
    line = error_line([*args, "--instruction", "find", "--instruction-template", "{task} {text} {lang}"], capsys)
    assert "instruction_template" in line and "{lang}" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


# 5. include_prompt false: the instruction's tokens are left out of pooling, as sentence-transformers does


def _no_prompt_minilm(minilm_dir: Path, out: Path, mode: str) -> Path:
    pooling = {"embedding_dimension": 384, "pooling_mode": mode, "include_prompt": False}
    return _link_copy(minilm_dir, out, {"1_Pooling/config.json": json.dumps(pooling)})


TEXTS = ["the cat sat on the mat", "Paged attention keeps the KV cache in blocks.", "", "naïve café 😀 " * 3]


@pytest.mark.parametrize("mode", ["mean", "max", "cls", "mean_sqrt_len_tokens"])
def test_include_prompt_false_matches_sentence_transformers(minilm_dir, tmp_path, mode):
    from sentence_transformers import SentenceTransformer

    from model_optimizer.runtime.embed import Embedder

    folder = _no_prompt_minilm(minilm_dir, tmp_path / "noinc", mode)
    st = SentenceTransformer(str(folder), device="cpu")
    emb = Embedder(folder, device="cpu", instruction_template="{task}{text}", max_num_seqs=3)
    assert not emb.include_prompt
    for prompt in ("query: ", "Represent this sentence for searching relevant passages: "):
        ours = emb.encode(TEXTS, instruction=prompt).embeddings
        ref = torch.from_numpy(np.asarray(st.encode(TEXTS, prompt=prompt)))
        assert F.cosine_similarity(ours, ref).min() > 0.99999, mode
    # without an instruction nothing is left out
    ref = torch.from_numpy(np.asarray(st.encode(TEXTS)))
    assert F.cosine_similarity(emb.encode(TEXTS).embeddings, ref).min() > 0.99999


def test_include_prompt_false_leaves_token_id_inputs_whole_and_refuses_a_cut_into_the_instruction(
    minilm, minilm_dir, tmp_path
):
    from model_optimizer.runtime.embed import Embedder

    emb = Embedder(_no_prompt_minilm(minilm_dir, tmp_path / "noinc", "mean"), device="cpu")
    ids = minilm.tokenizer("a text")["input_ids"]
    assert torch.allclose(emb.encode([ids], instruction="q").embeddings, minilm.encode([ids]).embeddings, atol=1e-6)
    # "Instruct: q\nQuery:" is [CLS] + 6 tokens: cut to 7 tokens nothing of the text would be pooled
    prompt_length = emb.prompt_length("q")
    assert prompt_length == len(minilm.tokenizer("Instruct: q\nQuery:")["input_ids"]) - 1
    with pytest.raises(ValueError, match="include_prompt false") as exc:
        emb.encode(["a long text " * 5], instruction="q", truncate_prompt_tokens=prompt_length)
    assert exc.value.param == "truncate_prompt_tokens"
    assert emb.encode(["a long text " * 5], instruction="q", truncate_prompt_tokens=prompt_length + 1).num_tokens == [
        prompt_length + 1
    ]
