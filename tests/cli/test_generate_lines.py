"""`mopt generate` as a vLLM user runs it: a line the engine would refuse is named FILE:LINE before anything
generates, a prompts file without prompts is named, and --chat-template renders conversations for a model
whose tokenizer has no template (or with another template)."""

from __future__ import annotations

import json

from model_optimizer.cli.main import main
from tests.cli_errors import error_line

SMALL = ["--temperature", "0", "--ignore-eos", "--kv-cache-memory", str(1 << 22), "--max-tokens", "2"]
TEMPLATE = (
    "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


def _jsonl(path, *rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_line_the_engine_would_refuse_is_named_before_anything_generates(tiny_model, tmp_path, capsys):
    """With chunked prefill off a prompt must fit one step: the engine's refusal came after the load,
    naming no line, and the short prompts before it were lost."""
    file = _jsonl(tmp_path / "in.jsonl", {"prompt": "short"}, {"prompt": "hello world " * 20})
    flags = ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "32", "--max-model-len", "512"]
    line = error_line(["generate", "--model", str(tiny_model("qwen3")), "--prompts-file", file, *SMALL, *flags], capsys)
    assert line.startswith(f"mopt generate: error: {file}:2: prompt has ")
    assert "chunked prefill is off" in line


def test_a_prompts_file_without_prompts_is_named(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    line = error_line(["generate", "--prompts-file", str(empty)], capsys)
    assert line == f"mopt generate: error: {empty} holds no prompts (no JSON lines)"


def test_chat_template_renders_each_conversation(tiny_model, tmp_path, capsys):
    template_file = tmp_path / "brackets.jinja"
    template_file.write_text(TEMPLATE)
    lines = _jsonl(tmp_path / "in.jsonl", {"messages": [{"role": "user", "content": "from a line"}]})
    for template in (TEMPLATE, str(template_file)):
        args = ["--prompt", "hi", "--chat", "--prompts-file", lines, "--chat-template", template, "--output", "-"]
        assert main(["generate", "--model", str(tiny_model("qwen3")), *SMALL, *args]) == 0
        rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        assert [r["prompt"] for r in rows] == ["[user] hi\n[assistant] ", "[user] from a line\n[assistant] "]


def test_chat_template_gives_a_model_without_one_its_conversations(no_template_model, capsys):
    args = ["--prompt", "hi", "--chat", "--chat-template", "chatml", "--output", "-"]
    assert main(["generate", "--model", str(no_template_model), *SMALL, *args]) == 0
    [row] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert row["prompt"].startswith("<|im_start|>user\nhi<|im_end|>")


def test_a_chat_template_that_is_none_is_refused_before_the_load(no_template_model, capsys):
    args = ["generate", "--model", str(no_template_model), "--prompt", "hi", "--chat", "--chat-template", "nope"]
    line = error_line(args, capsys)
    assert "--chat-template 'nope' is neither a shipped template" in line
    assert "loading model" not in capsys.readouterr().err


def test_without_a_template_the_error_points_to_the_flag(no_template_model, capsys):
    line = error_line(["generate", "--model", str(no_template_model), "--prompt", "hi", "--chat", *SMALL], capsys)
    assert "no chat template" in line and "--chat-template" in line


def test_a_bad_sampling_flag_is_named_as_the_flag_not_as_the_first_line(tmp_path, capsys):
    file = _jsonl(tmp_path / "in.jsonl", {"prompt": "fine"})
    line = error_line(["generate", "--prompts-file", file, "--temperature", "-1"], capsys)
    assert line == (
        "mopt generate: error: the sampling flags (--temperature): temperature must be a finite number >= 0, got -1.0"
    )
    line = error_line(["generate", "--prompt", "hi", "--min-tokens", "5", "--max-tokens", "2"], capsys)
    assert line.endswith(
        "the sampling flags (--max-tokens, --min-tokens): min_tokens (5) must not exceed max_tokens (2)"
    )


def test_a_line_may_set_what_makes_the_flags_valid(tiny_model, tmp_path, capsys):
    file = _jsonl(tmp_path / "in.jsonl", {"prompt": "fine", "max_tokens": 4})
    flags = ["--min-tokens", "3", "--max-tokens", "2", "--temperature", "0", "--kv-cache-memory", str(1 << 22)]
    assert main(["generate", "--model", str(tiny_model("qwen3")), "--prompts-file", file, *flags, "--output", "-"]) == 0
    [row] = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(row["outputs"][0]["token_ids"]) >= 3
