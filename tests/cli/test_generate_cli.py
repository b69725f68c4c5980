"""`mopt generate` on a tiny real checkpoint: results on stdout (logs on stderr), logprobs shown,
escapes in --stop, --max-tokens None, chat-style lines, and a FILE:LINE error for every bad line."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from model_optimizer.cli.main import build_parser, main
from tests.tiny_checkpoints import CHAT_TEMPLATE

SMALL = ["--temperature", "0", "--ignore-eos", "--kv-cache-memory", str(1 << 22)]


def _generate(model, *args):
    return main(["generate", "--model", str(model), *SMALL, *args])


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_results_go_to_stdout_and_logs_to_stderr(tiny_model, capsys):
    assert _generate(tiny_model("qwen3"), "--prompt", "hello", "--prompt", "world", "--max-tokens", "3") == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("'hello' -> ") and "\n'world' -> " in captured.out
    assert "(length)" in captured.out
    assert "engine statistics" in captured.err and "engine statistics" not in captured.out
    assert "'hello' ->" not in captured.err


def test_output_dash_writes_jsonl_to_stdout(tiny_model, capsys):
    assert _generate(tiny_model("qwen3"), "--prompt", "hello", "--max-tokens", "2", "--output", "-") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and len(rows[0]["outputs"][0]["token_ids"]) == 2 and rows[0]["prompt_index"] == 0


def test_logprobs_in_text_and_jsonl(tiny_model, capsys, tmp_path):
    model = tiny_model("qwen3")
    assert _generate(model, "--prompt", "hello", "--max-tokens", "3", "--logprobs", "2") == 0
    out = capsys.readouterr().out
    token_lines = [line for line in out.splitlines() if line.startswith("    ")]
    assert len(token_lines) == 3  # one line per generated token
    assert all("top:" in line and line.count("-") >= 2 for line in token_lines)

    path = tmp_path / "out.jsonl"
    assert _generate(model, "--prompt", "hello", "--max-tokens", "3", "--logprobs", "2", "--output", str(path)) == 0
    completion = _rows(path)[0]["outputs"][0]
    assert [lp["token_id"] for lp in completion["logprobs"]] == completion["token_ids"]
    for lp in completion["logprobs"]:
        assert lp["logprob"] <= 0 and isinstance(lp["token"], str) and lp["rank"] >= 1
        assert len(lp["top"]) == 2 and lp["top"][0]["logprob"] >= lp["top"][1]["logprob"]
    # greedy: the chosen token is the most likely one
    assert all(lp["rank"] == 1 and lp["top"][0]["token_id"] == lp["token_id"] for lp in completion["logprobs"])
    assert completion["cumulative_logprob"] == pytest.approx(sum(lp["logprob"] for lp in completion["logprobs"]))

    assert _generate(model, "--prompt", "hello", "--max-tokens", "2", "--output", str(path)) == 0
    assert not {"logprobs", "cumulative_logprob"} & set(_rows(path)[0]["outputs"][0])  # only when asked for


def test_stop_interprets_backslash_escapes():
    from model_optimizer.cli.generate import sampling_overrides

    args = build_parser().parse_args(
        ["generate", "--stop", r"\n\n", "--stop", r"a\tb", "--stop", r"x\\ny", "--stop", r"\d"]
    )
    assert sampling_overrides(args)["stop"] == ["\n\n", "a\tb", "x\\ny", "\\d"]


def test_max_tokens_none_runs_to_the_context_end(tiny_model, tmp_path):
    path = tmp_path / "out.jsonl"
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(
        json.dumps({"prompt_token_ids": [5, 6, 7]})
        + "\n"
        + json.dumps({"prompt_token_ids": [5], "max_tokens": None})
        + "\n"
    )
    rc = _generate(
        tiny_model("qwen3"),
        "--prompts-file",
        str(prompts),
        "--max-tokens",
        "None",
        "--max-model-len",
        "40",
        "--output",
        str(path),
    )
    assert rc == 0
    rows = _rows(path)
    assert [len(r["outputs"][0]["token_ids"]) for r in rows] == [37, 39]
    assert {r["outputs"][0]["finish_reason"] for r in rows} == {"length"}


def test_max_tokens_rejects_other_words(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "hi", "--max-tokens", "lots"])
    assert exit_info.value.code == 2 and "integer >= 1 or None" in capsys.readouterr().err


def test_chat_messages_line_uses_the_chat_template(tiny_model, tmp_path):
    model = tiny_model("qwen3")
    prompts = tmp_path / "in.jsonl"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    prompts.write_text(json.dumps({"messages": messages, "max_tokens": 2}) + "\n")
    path = tmp_path / "out.jsonl"
    assert _generate(model, "--prompts-file", str(prompts), "--output", str(path)) == 0
    row = _rows(path)[0]
    expected = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert row["prompt"] == expected
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    assert row["prompt_token_ids"] == tokenizer.encode(expected, add_special_tokens=False)
    assert len(row["outputs"][0]["token_ids"]) == 2


def test_chat_messages_without_a_chat_template_is_a_clear_error(tiny_model, tmp_path, capsys):
    model = tmp_path / "no-template"
    shutil.copytree(tiny_model("qwen3"), model)
    for path in model.iterdir():  # transformers keeps the template in chat_template.jinja or tokenizer_config.json
        if path.name == "chat_template.jinja":
            path.unlink()
        elif path.name == "tokenizer_config.json":
            config = json.loads(path.read_text())
            config.pop("chat_template", None)
            path.write_text(json.dumps(config))
    assert CHAT_TEMPLATE not in "".join(
        p.read_text(errors="ignore") for p in model.iterdir() if p.suffix != ".safetensors"
    )
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "fine"}) + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"
    )
    assert _generate(model, "--prompts-file", str(prompts)) == 2
    err = capsys.readouterr().err
    assert f"{prompts}:2:" in err and "no chat template" in err and "Traceback" not in err


BAD_LINES = [
    ({"prompt_token_ids": []}, "prompt_token_ids must be a non-empty list of integers"),
    ({"prompt_token_ids": [1, "x"]}, "prompt_token_ids must be a non-empty list of integers"),
    ({"prompt_token_ids": [5, 100000]}, "outside the vocabulary"),
    ({"prompt": "hi", "temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
    ({"prompt": "hi", "max_token": 5}, "unknown key 'max_token' (did you mean 'max_tokens'?)"),
    ({"prompt": "hi", "min_tokens": 9, "max_tokens": 2}, "min_tokens (9) must not exceed max_tokens (2)"),
    ({"prompt": "hi", "stop": 5}, "stop must be"),
    ({"prompt": "hi", "n": True}, "n must be an integer"),
    ({"temperature": 0.5}, "give one of 'prompt', 'prompt_token_ids' or 'messages'"),
    ({"prompt": "hi", "prompt_token_ids": [1]}, "give only one of"),
    ({"prompt": 5}, "prompt must be a non-empty string"),
    ({"prompt": ""}, "prompt must be a non-empty string"),
    (["hi"], "expected a JSON object"),
    ({"messages": "hi"}, "messages must be a non-empty list"),
    ({"messages": [{"content": "hi"}]}, "messages[0] must be an object with a string 'role'"),
    ({"prompt": "hi", "tools": []}, "'tools' go(es) with 'messages', not with 'prompt'"),
    ({"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": []}, "chat_template_kwargs must be"),
    ({"prompt": "hi", "structured_outputs": {"regex": "a", "choice": ["a"]}}, "exactly one of json, regex"),
]


@pytest.mark.parametrize(("line", "message"), BAD_LINES, ids=[m for _, m in BAD_LINES])
def test_every_bad_line_names_file_and_line(tiny_model, tmp_path, capsys, line, message):
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(json.dumps({"prompt": "fine"}) + "\n\n" + json.dumps(line) + "\n")
    out = tmp_path / "out.jsonl"
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--output", str(out)) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # ids outside the vocabulary are found once the model is loaded
    assert last.startswith(f"mopt generate: error: {prompts}:3: ") and message in last, err
    assert "Traceback" not in err and not out.exists()


def test_a_line_may_constrain_its_output(tiny_model, tmp_path):
    prompts = tmp_path / "in.jsonl"
    lines = [
        {"prompt": "hello", "max_tokens": 20, "structured_outputs": {"regex": "[0-9]{2}-[a-z]{2}"}},
        {"prompt": "hello", "max_tokens": 20, "structured_outputs": {"choice": ["yes", "no"]}, "temperature": 1.0},
    ]
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    path = tmp_path / "out.jsonl"
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--output", str(path)) == 0
    first, second = (row["outputs"][0] for row in _rows(path))
    assert re.fullmatch("[0-9]{2}-[a-z]{2}", first["text"]) and second["text"] in ("yes", "no")
    assert first["finish_reason"] == second["finish_reason"] == "stop"


def test_stop_and_sampling_fields_in_a_line_override_the_flags(tiny_model, tmp_path):
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello", "max_tokens": 2, "stop_token_ids": [], "seed": 3}) + "\n")
    path = tmp_path / "out.jsonl"
    assert (
        _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--max-tokens", "6", "--output", str(path)) == 0
    )
    assert len(_rows(path)[0]["outputs"][0]["token_ids"]) == 2


def test_a_line_that_is_not_utf8_or_not_json_is_named(tmp_path, capsys):
    prompts = tmp_path / "in.jsonl"
    prompts.write_bytes(b'{"prompt": "fine"}\n{"prompt": "caf\xe9"}\n')
    assert main(["generate", "--prompts-file", str(prompts)]) == 2
    assert capsys.readouterr().err.startswith(f"mopt generate: error: {prompts}:2: not UTF-8 text")
    prompts.write_text('{"prompt": "fine"}\n{"prompt": \n')
    assert main(["generate", "--prompts-file", str(prompts)]) == 2
    assert capsys.readouterr().err.startswith(f"mopt generate: error: {prompts}:2: not JSON")
    prompts.write_text(json.dumps({"prompt": "a\u2028b"}, ensure_ascii=False) + "\n")  # U+2028 is not a line break
    assert main(["generate", "--prompts-file", str(prompts), "--model", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_speculative_config_flag_and_its_statistics(tiny_model, capsys):
    """--speculative-config takes vLLM's JSON; the table reports the mean acceptance length; output as without."""
    prompt = ["--prompt", "one two three one two three one two", "--max-tokens", "12"]
    assert _generate(tiny_model("qwen3"), *prompt) == 0
    plain = capsys.readouterr().out
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "adaptive": false}'
    assert _generate(tiny_model("qwen3"), *prompt, "--speculative-config", spec) == 0
    captured = capsys.readouterr()
    assert captured.out == plain
    assert "mean acceptance length" in captured.err and "proposals accepted" in captured.err


def test_bad_speculative_config_is_a_clear_error(tiny_model, capsys):
    assert _generate(tiny_model("qwen3"), "--prompt", "x", "--speculative-config", '{"method": "eagle"}') == 2
    assert "method 'eagle' is not supported" in capsys.readouterr().err


def test_a_line_asking_prompt_logprobs_gets_them(tiny_model, tmp_path, capsys, qwen3_llm):
    from model_optimizer import SamplingParams

    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"prompt": "The json module", "max_tokens": 1, "prompt_logprobs": 2}) + "\n")
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(path), "--output", "-") == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows, ids = row["prompt_logprobs"], row["prompt_token_ids"]
    assert rows[0] is None and len(rows) == len(ids) and [r["token_id"] for r in rows[1:]] == ids[1:]
    [engine] = qwen3_llm.generate([ids], SamplingParams(max_tokens=1, prompt_logprobs=2), use_tqdm=False)
    for r, entry, token in zip(rows[1:], engine.prompt_logprobs[1:], ids[1:]):
        assert r["logprob"] == pytest.approx(entry[token].logprob, abs=1e-5) and r["rank"] == entry[token].rank
        top = [t["logprob"] for t in r["top"]]
        assert len(top) == 2 and top == sorted(top, reverse=True)
        assert (token in [t["token_id"] for t in r["top"]]) == (r["rank"] <= 2)


def test_seed_gives_each_prompt_its_own_seed_and_runs_repeat(tiny_model, tmp_path):
    """--seed S: prompt i samples with seed S + i, so the same prompt three times gives three outputs, and a
    second run gives the same three; a line's own seed wins."""
    prompts = tmp_path / "in.jsonl"
    rows = [{"prompt": "hello"}] * 3 + [{"prompt": "hello", "seed": 7}]
    prompts.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runs = []
    for k in range(2):
        path = tmp_path / f"out{k}.jsonl"
        args = ["--prompts-file", str(prompts), "--temperature", "1", "--max-tokens", "8", "--output", str(path)]
        assert _generate(tiny_model("qwen3"), *args, "--seed", "7") == 0
        runs.append([row["outputs"][0]["token_ids"] for row in _rows(path)])
    assert runs[0] == runs[1]
    first, second, third, own = runs[0]
    assert len({tuple(first), tuple(second), tuple(third)}) == 3
    assert own == first  # seed 7, as prompt 0's


def test_a_negative_seed_never_gives_a_prompt_no_seed():
    """(S + i) mod 2**63: never -1, which SamplingParams reads as no seed (vLLM's)."""
    from model_optimizer.cli.generate import _seed_of

    assert _seed_of(-1, 0) == {"seed": 2**63 - 1} and _seed_of(-5, 4) == {"seed": 2**63 - 1}
    assert _seed_of(7, 2) == {"seed": 9} and _seed_of(None, 3) == {}


def test_a_prompts_file_that_begins_with_a_byte_order_mark(tiny_model, tmp_path):
    """Notepad, PowerShell and Excel's "CSV UTF-8" begin UTF-8 files with one; it was refused as not JSON."""
    prompts, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    prompts.write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "hello"}\n{"prompt": "world"}\n')
    assert (
        _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--max-tokens", "2", "--output", str(out)) == 0
    )
    assert [row["prompt"] for row in _rows(out)] == ["hello", "world"]


def _as_stdin(data: bytes):
    """Make fd 0 a pipe holding `data` (then its end); returns the call that puts the real stdin back."""
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, data)
    os.close(write_end)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    os.close(read_end)

    def restore():
        os.dup2(saved, 0)
        os.close(saved)

    return restore


def test_prompts_file_dash_reads_stdin_and_dot_slash_dash_is_a_file(tiny_model, tmp_path, monkeypatch):
    model, out = tiny_model("qwen3"), tmp_path / "out.jsonl"
    restore = _as_stdin(b'{"prompt": "from a pipe"}\n')
    try:
        assert _generate(model, "--prompts-file", "-", "--max-tokens", "2", "--output", str(out)) == 0
    finally:
        restore()
    assert [row["prompt"] for row in _rows(out)] == ["from a pipe"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "-").write_text('{"prompt": "from a file named -"}\n')
    assert _generate(model, "--prompts-file", "./-", "--max-tokens", "2", "--output", str(out)) == 0
    assert [row["prompt"] for row in _rows(out)] == ["from a file named -"]


def test_a_bad_line_from_stdin_is_named_by_its_line(capsys):
    from tests.cli_errors import error_line

    restore = _as_stdin(b'{"prompt": "ok"}\n{oops\n')
    try:
        line = error_line(["generate", "--prompts-file", "-"], capsys)
    finally:
        restore()
    assert line.startswith("mopt generate: error: <stdin>:2: not JSON")


def test_an_empty_prompts_file_path_is_refused(capsys):
    from tests.cli_errors import error_line

    assert error_line(["generate", "--prompt", "hi", "--prompts-file", ""], capsys).endswith(
        "--prompts-file is empty; give a JSONL file, or - for stdin"
    )


def test_start_up_lines_are_not_wrapped_when_stderr_is_no_terminal():
    """rich wraps at 80 columns without a terminal: a log file got each long start-up line in pieces."""
    import io
    import logging

    from rich.console import Console

    from model_optimizer.cli.generate import _startup_phases_shown

    buf = io.StringIO()
    message = "compiled the decode graphs for batch sizes " + ", ".join(str(n) for n in range(1, 40))
    with _startup_phases_shown(Console(file=buf, width=80)):
        logging.getLogger("model_optimizer.startup").info(message)
    assert buf.getvalue() == f"mopt generate: {message}\n"
