"""`mopt` itself: subcommands registered, version, and clear errors with exit code 2 (no tracebacks)."""

from __future__ import annotations

import json

import pytest

from model_optimizer.cli.main import main


def test_version_and_subcommands(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and "mopt 0.1.0" in capsys.readouterr().out
    assert main([]) == 0
    help_text = capsys.readouterr().out
    for command in ("generate", "serve", "bench", "doctor", "embed", "export-onnx"):
        assert command in help_text


def test_bad_input_is_a_clear_error(capsys, tmp_path):
    assert main(["generate", "--model", str(tmp_path / "missing"), "--prompt", "hi"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["generate", "--prompt", "hi", "--temperature", "-1"]) == 2
    assert "temperature must be a finite number >= 0" in capsys.readouterr().err


def test_generate_writes_jsonl(tiny_model, tmp_path):
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "hello", "max_tokens": 3}) + "\n" + json.dumps({"prompt_token_ids": [5, 6]}) + "\n"
    )
    out = tmp_path / "out.jsonl"
    rc = main(
        [
            "generate",
            "--model",
            str(tiny_model("qwen3")),
            "--prompts-file",
            str(prompts),
            "--output",
            str(out),
            "--max-tokens",
            "5",
            "--temperature",
            "0",
            "--ignore-eos",
            "--kv-cache-memory",
            str(1 << 22),
        ]
    )
    assert rc == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(r["outputs"][0]["token_ids"]) for r in rows] == [3, 5]
    assert rows[1]["prompt_token_ids"] == [5, 6]


def test_debug_flag_or_env_shows_the_traceback(capsys, tmp_path, monkeypatch):
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        main(["--debug", "generate", "--model", missing, "--prompt", "hi"])
    with pytest.raises(FileNotFoundError):
        main(["generate", "--debug", "--model", missing, "--prompt", "hi"])
    monkeypatch.setenv("MOPT_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(["generate", "--model", missing, "--prompt", "hi"])
    monkeypatch.setenv("MOPT_DEBUG", "0")
    assert main(["generate", "--model", missing, "--prompt", "hi"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mopt generate: error: model folder") and len(err.splitlines()) == 1


@pytest.mark.slow
def test_errors_in_a_real_process_are_one_line_unless_debug(tmp_path):
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "model_optimizer.cli.main", "generate", "--model", str(tmp_path / "missing")]
    env = {k: v for k, v in os.environ.items() if k != "MOPT_DEBUG"}
    plain = subprocess.run(command + ["--prompt", "hi"], capture_output=True, text=True, env=env, timeout=600)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().splitlines() == [
        f"mopt generate: error: model folder {tmp_path / 'missing'} does not "
        "exist (nor is it a Hub id such as Qwen/Qwen3-0.6B)"
    ]
    debug = subprocess.run(
        command + ["--prompt", "hi"], capture_output=True, text=True, env={**env, "MOPT_DEBUG": "1"}, timeout=600
    )
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "FileNotFoundError" in debug.stderr


@pytest.mark.parametrize("command", [["doctor"], ["inspect", "{model}"]])
def test_a_closed_pipe_exits_141_from_rich_tables_too(tiny_model, command):
    """`mopt doctor | head -1`: rich's console handles the broken pipe itself with exit 1, which doctor and
    inspect document as "warnings" / "an error finding"; like every other command, it is 141 (SIGPIPE)."""
    import os
    import subprocess
    import sys

    snapshot = os.path.join(os.path.dirname(__file__), "..", "environment", "fixtures", "h200_snapshot.json")
    argv = [a.format(model=tiny_model("qwen3")) for a in command]
    if command == ["doctor"]:
        argv += ["--snapshot", snapshot]
    env = {k: v for k, v in os.environ.items() if k != "MOPT_DEBUG"}
    env["COLUMNS"] = "200"
    cli = subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    # the reader goes away before the command writes (it imports for a second first): every write meets the
    # closed pipe. Reading a first line, as `head -1` does, left the exit code to a race: a report that fit
    # the pipe's buffer was written whole before the close, and the command exited 0.
    cli.stdout.close()
    stderr = cli.stderr.read().decode()
    assert cli.wait(timeout=600) == 141, stderr
    assert "Traceback" not in stderr
