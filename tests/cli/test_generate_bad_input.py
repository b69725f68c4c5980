"""`mopt generate` with JSONL lines the engine cannot run and engine flags the machine cannot hold: one
line `mopt generate: error: FILE:LINE: ...` and exit code 2 (not a traceback out of the sampler, an
empty "error" output with exit code 0, or the OOM killer); a prompt that fails in the engine is named
and the exit code is 1. The built-in model (vocabulary 8192) on the CPU."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from model_optimizer.cli.main import main
from tests.cli_errors import error_line

SMALL = ["--temperature", "0", "--kv-cache-memory", str(1 << 22), "--max-model-len", "512"]


def _lines(tmp_path, *rows) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"allowed_token_ids": [99999999]}, "allowed_token_ids: token id 99999999 is outside the vocabulary"),
        ({"allowed_token_ids": []}, "allowed_token_ids is empty: no token could be sampled"),
        ({"bad_words_token_ids": [[99999]]}, "bad_words_token_ids: token id 99999 is outside the vocabulary"),
        ({"logit_bias": {"99999": 5}}, "logit_bias: token id 99999 is outside the vocabulary"),
        ({"logit_bias": {"x": 5}}, "logit_bias keys must be token ids"),
        (
            {"thinking_token_budget": 1, "thinking_end_token_ids": 5},
            "thinking_end_token_ids must be a list of token ids",
        ),
        ({"structured_outputs": {"regex": "("}}, "invalid regex: .*unclosed group"),
        ({"output_kind": "delta"}, "unknown key 'output_kind'"),
        ({"min_tokens_barred": [1]}, "unknown key 'min_tokens_barred'"),
    ],
)
def test_a_line_the_engine_cannot_run_is_one_error_naming_it(tmp_path, capsys, fields, message):
    file = _lines(tmp_path, {"prompt": "ok", "max_tokens": 2}, {"prompt": "hi", "max_tokens": 2, **fields})
    line = error_line(["generate", "--prompts-file", file, *SMALL], capsys)
    assert line.startswith(f"mopt generate: error: {file}:2: ")
    assert re.search(message, line), line


def test_logit_bias_keys_of_a_json_line_are_token_ids(tmp_path, capsys):
    file = _lines(tmp_path, {"prompt": "hi", "max_tokens": 2, "logit_bias": {"5": 100}})
    assert main(["generate", "--prompts-file", file, "--output", "-", *SMALL]) == 0
    [row] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert row["outputs"][0]["token_ids"] == [5, 5]


def test_a_prompt_the_engine_fails_is_named_and_the_exit_code_is_1(tmp_path, capsys):
    """The grammar check without the tokenizer passes; the engine's, with it, refuses a choice that spells EOS."""
    file = _lines(
        tmp_path,
        {"prompt": "hi", "max_tokens": 4, "structured_outputs": {"choice": ["<|im_end|>"]}},
        {"prompt": "yo", "max_tokens": 2},
    )
    assert main(["generate", "--prompts-file", file, "--output", "-", *SMALL]) == 1
    captured = capsys.readouterr()
    rows = [json.loads(x) for x in captured.out.splitlines()]
    assert rows[0]["outputs"][0]["finish_reason"] == "error" and "ends the output" in rows[0]["error"]
    assert rows[1]["outputs"][0]["finish_reason"] == "length" and "error" not in rows[1]
    assert f"mopt generate: {file}:1 failed: " in captured.err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--kv-cache-memory", "1024TiB"],
            "--kv-cache-memory 1024TiB would take 1048576.0 GiB of host memory, but only",
        ),
        (["--kv-offloading-size", "inf"], "kv_offloading_size must be a number of GiB >= 0"),
        (["--cpu-offload-gb", "nan"], "cpu_offload_gb must be a number of GiB >= 0"),
    ],
)
def test_memory_flags_the_machine_cannot_hold_are_one_error(capsys, flags, message):
    line = error_line(["generate", "--prompt", "hi", "--temperature", "0", *flags], capsys)
    assert message in line


@pytest.mark.parametrize("kind", ["BertModel", "Qwen3Model"])
def test_an_embedding_model_is_refused_before_its_weights_load(tiny_model, tmp_path, capsys, kind):
    """LLM builds no generation engine for an encoder: an AttributeError traceback (exit 1) before; a
    decoder without its LM head was refused only after the start-up. The weights are cut short here,
    so the refusal cannot come from loading them."""
    from tests.tiny_checkpoints import build_encoder

    if kind == "BertModel":
        model = build_encoder(tmp_path / "bert", hidden_size=64, intermediate_size=128)
    else:  # Qwen3-Embedding's layout: the decoder saved as its base model
        model = shutil.copytree(tiny_model("qwen3"), tmp_path / "qwen3_embedding")
        config = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**config, "architectures": [kind]}))
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    line = error_line(["generate", "--model", str(model), "--prompt", "a", "--max-tokens", "4"], capsys)
    assert f"--model {model} is an embedding model ({kind})" in line
    assert "mopt embed" in line and "/v1/embeddings" in line


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "\ud800"}, r"prompt is not valid Unicode text \(a lone surrogate '\\ud800' at character 0\)"),
        (
            {"messages": [{"role": "user", "content": "\udc00x"}]},
            r"messages\[0\]\.content is not valid Unicode text \(a lone surrogate '\\udc00' at character 0\)",
        ),
    ],
)
def test_a_lone_surrogate_in_a_line_is_an_error_naming_it(tmp_path, capsys, row, message):
    """JSON's \\ud800 escapes parse to a str the tokenizer refuses with a TypeError traceback."""
    file = _lines(tmp_path, {"prompt": "ok"}, row)
    out = tmp_path / "out.jsonl"
    line = error_line(["generate", "--prompts-file", file, "--output", str(out), *SMALL], capsys)
    assert re.search(f"error: {re.escape(file)}:2: {message}$", line), line
    assert not out.exists()


def test_a_prompt_argument_that_is_not_utf8(capsys):
    """Python hands `--prompt $'a\\xff'` over as 'a\\udcff' (surrogateescape)."""
    line = error_line(["generate", "--prompt", "ok", "--prompt", "a\udcff\udcfe", *SMALL], capsys)
    assert line.endswith("error: --prompt is not valid UTF-8 text (byte 0xff at character 1)")


@pytest.mark.parametrize("seed", [2**63, -(2**63) - 1, 10**23])
def test_a_seed_beyond_64_bits_names_seed(capsys, seed):
    line = error_line(["generate", "--prompt", "hi", "--seed", str(seed), *SMALL], capsys)
    assert line.endswith(f"--seed must be an integer from {-(2**63)} to {2**63 - 1} (64 bits), got {seed}")


def test_the_largest_seed_generates(capsys):
    assert main(["generate", "--prompt", "hi", "--seed", str(2**63 - 1), "--max-tokens", "2", *SMALL]) == 0
    assert "'hi' -> " in capsys.readouterr().out
