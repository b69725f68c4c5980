"""`mopt generate`: a "messages" line renders as LLM.chat does (content parts, tool calls, tools, template
variables), --chat and --chat-template-kwargs; results on stdout leave in prompt order as prompts finish;
SIGTERM keeps the finished results as Ctrl-C does, with exit code 143."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from model_optimizer import SamplingParams
from model_optimizer.cli.generate import Results, Terminated
from model_optimizer.cli.main import main
from model_optimizer.common.processes import sigterm_raises
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput

SMALL = ["--temperature", "0", "--ignore-eos", "--kv-cache-memory", str(1 << 22), "--max-tokens", "2"]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
CONVERSATION = [
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
VARIABLE_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{{ flavour | default('plain') }}{% endif %}"
)


def _generate(model, *args) -> int:
    return main(["generate", "--model", str(model), *SMALL, *args])


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_messages_line_with_parts_tool_calls_and_tools_renders_as_llm_chat(tiny_model, tmp_path, capsys, qwen3_llm):
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(json.dumps({"messages": CONVERSATION, "tools": TOOLS}) + "\n")
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--output", "-") == 0
    [row] = _rows(capsys.readouterr().out)
    [expected] = qwen3_llm.chat(CONVERSATION, SamplingParams(max_tokens=1), use_tqdm=False, tools=TOOLS)
    assert row["prompt"] == expected.prompt and row["prompt_token_ids"] == expected.prompt_token_ids
    assert "sunny" in row["prompt"]


def test_a_messages_line_may_continue_the_final_message(tiny_model, tmp_path, capsys, qwen3_llm):
    messages = [{"role": "user", "content": "Count"}, {"role": "assistant", "content": "one, two,"}]
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(json.dumps({"messages": messages, "continue_final_message": True}) + "\n")
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(prompts), "--output", "-") == 0
    [row] = _rows(capsys.readouterr().out)
    [expected] = qwen3_llm.chat(
        messages, SamplingParams(max_tokens=1), False, add_generation_prompt=False, continue_final_message=True
    )
    assert row["prompt"] == expected.prompt and row["prompt"].endswith("one, two,")


@pytest.fixture(scope="module")
def variable_template_model(tiny_model, tmp_path_factory):
    """The tiny Qwen3 whose chat template prints the `flavour` variable after the assistant turn opens."""
    out = tmp_path_factory.mktemp("variable_template") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "chat_template.jinja").write_text(VARIABLE_TEMPLATE)
    return out


def test_chat_sends_each_prompt_as_a_user_message_with_the_template_kwargs(variable_template_model, tmp_path, capsys):
    prompts = tmp_path / "in.jsonl"
    line = {"messages": [{"role": "user", "content": "b"}], "chat_template_kwargs": {"flavour": "own"}}
    prompts.write_text(json.dumps(line) + "\n")
    args = ["--prompt", "a", "--chat", "--chat-template-kwargs", '{"flavour": "salty"}', "--output", "-"]
    assert _generate(variable_template_model, *args, "--prompts-file", str(prompts)) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows[0]["prompt"] == "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nsalty"
    assert rows[1]["prompt"] == "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\nown"  # the line's own wins


def test_template_kwargs_naming_the_renderings_own_arguments_are_refused(tiny_model, tmp_path, capsys):
    prompts = tmp_path / "in.jsonl"
    line = {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"add_generation_prompt": False}}
    prompts.write_text(json.dumps(line) + "\n")
    assert _generate(tiny_model("qwen3"), "--prompts-file", str(prompts)) == 2
    assert f"{prompts}:1: chat_template_kwargs may not set add_generation_prompt" in capsys.readouterr().err


def test_chat_template_kwargs_must_be_a_json_object(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--prompt", "hi", "--chat-template-kwargs", "[1]"])
    assert exc.value.code == 2 and "must be a JSON object" in capsys.readouterr().err


def _output(index: int) -> RequestOutput:
    completion = CompletionOutput(0, f"text {index}", [index], None, "length")
    return RequestOutput(str(index), f"prompt {index}", [index], [completion], True)


@pytest.mark.parametrize("output", [None, "-"])
def test_results_on_stdout_leave_in_prompt_order_as_soon_as_the_ones_before_have(capsys, output):
    results = Results(output, type("Llm", (), {"tokenizer": None})(), ("p0", "p1", "p2"), [SamplingParams()] * 3)
    results.add(1, _output(1))
    assert capsys.readouterr().out == ""  # prompt 0 has not finished: 1 waits for it
    results.add(0, _output(0))
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and "text 0" in printed[0] and "text 1" in printed[1]
    results.add(2, _output(2))
    assert "text 2" in capsys.readouterr().out
    assert results.close() == "their results were printed" and capsys.readouterr().out == ""  # nothing twice


def test_after_an_interrupt_the_finished_results_past_a_gap_are_printed_once(capsys):
    results = Results("-", type("Llm", (), {"tokenizer": None})(), ("p0", "p1", "p2"), [SamplingParams()] * 3)
    results.add(0, _output(0))
    results.add(2, _output(2))
    results.close()
    assert [r["prompt_index"] for r in _rows(capsys.readouterr().out)] == [0, 2]


def test_a_file_output_is_written_whole_at_the_end(tmp_path, capsys):
    path = tmp_path / "out.jsonl"
    results = Results(str(path), type("Llm", (), {"tokenizer": None})(), ("p0", "p1"), [SamplingParams()] * 2)
    results.add(1, _output(1))
    results.add(0, _output(0))
    assert not path.exists() and capsys.readouterr().out == ""
    assert results.close() == f"their results are in {path}"
    assert [r["prompt_index"] for r in _rows(path.read_text())] == [0, 1]


def test_sigterm_is_raised_as_terminated_inside_and_restored_after():
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)  # os.kill runs the handler before it returns
    assert signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.slow
def test_sigterm_during_generation_keeps_the_finished_results_and_exits_143(tiny_model, tmp_path):
    prompts = tmp_path / "in.jsonl"
    rows = [{"prompt_token_ids": [5, 6], "max_tokens": 1}] + [{"prompt_token_ids": [5 + i, 7]} for i in range(499)]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MOPT_DEBUG", None)
    args = ["--prompts-file", str(prompts), "--output", str(out), "--max-tokens", "None", "--ignore-eos"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", "generate", "--model", str(tiny_model("qwen3")), *args]
        + ["--max-num-seqs", "4", "--kv-cache-memory", str(1 << 22)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines = []
    for line in proc.stderr:  # waits for the event: the first prompt has finished
        lines.append(line)
        if "1/500 prompts done" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=600)
    err = "".join(lines) + err
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("mopt generate: terminated (SIGTERM); ")
    results = _rows(out.read_text())
    assert 1 <= len(results) < 500 and results[0]["prompt_index"] == 0
