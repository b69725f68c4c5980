"""`mopt bench` answers bad input with one `mopt bench: error:` line and exit code 2, before any request:
URLs that can never be reached, length specs that are not finite or absurdly long, trace files with
NaN or Infinity timestamps or a binary file. Each case once failed with a traceback, a misleading
message, or (an Infinity timestamp) a replay that never ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from model_optimizer.cli.main import main

REPO = Path(__file__).resolve().parents[3]
DEAD = "http://127.0.0.1:1"
"""Nothing listens on port 1: a request sent there fails at once (the cases below must not get that far)."""


def bench(capsys, tmp_path: Path, *flags: str) -> tuple[int, str]:
    code = main(["bench", "--model", "m", "--num-requests", "1", "--output-dir", str(tmp_path / "out"), *flags])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:99999", "port 99999, outside 1-65535"),  # was an OverflowError from connect()
        ("http://[::1", "is not a valid URL"),  # was httpx.InvalidURL
        ("http://:80", "has no host"),
    ],
)
def test_a_url_that_cannot_be_reached_is_refused(capsys, tmp_path, url, message):
    code, err = bench(capsys, tmp_path, "--base-url", url, "--prompt-len", "4", "--output-len", "2")
    assert code == 2 and err.startswith("mopt bench: error: base_url") and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flag", "spec"),
    [
        ("--prompt-len", "normal:1:inf"),  # was "negative dimensions are not allowed"
        ("--prompt-len", "normal:1e300:1"),
        ("--output-len", "hist:4=inf"),  # was "Probabilities contain NaN"
        ("--prompt-len", "4000000000"),  # was a 30 GiB MemoryError traceback
        ("--output-len", "99999999999999999999"),  # was an OverflowError traceback
    ],
)
def test_length_specs_must_be_finite_and_bounded(capsys, tmp_path, flag, spec):
    other = "--output-len" if flag == "--prompt-len" else "--prompt-len"
    code, err = bench(capsys, tmp_path, "--base-url", DEAD, flag, spec, other, "4")
    name = flag.removeprefix("--").replace("-", "_")
    assert code == 2 and f"mopt bench: error: {name} must be N" in err and "16,777,216" in err, err


def test_request_timeout_nan_is_refused_before_the_run(capsys, tmp_path):
    code, err = bench(capsys, tmp_path, "--base-url", DEAD, "--prompt-len", "4", "--request-timeout", "nan")
    assert code == 2 and "request_timeout must be positive, got nan" in err, err  # was "deadline must not be NaN"


def write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_trace_with_an_infinite_timestamp_is_refused_not_replayed_forever(tmp_path):
    """A real `mopt bench` process: before the check, the replay waited for the Infinity timestamp forever."""
    trace = write(
        tmp_path / "trace.jsonl",
        '{"timestamp": 0, "prompt_len": 4, "output_len": 2}\n{"timestamp": Infinity, "prompt_len": 4, "output_len": 2}\n',
    )
    argv = ["--base-url", DEAD, "--model", "m", "--dataset", "trace", "--dataset-path", str(trace)]
    proc = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "bench", *argv, "--load-mode", "trace"]
        + ["--output-dir", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"mopt bench: error: {trace}:2: needs a finite numeric 'timestamp', got inf"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"timestamp": NaN, "prompt_len": 4, "output_len": 2}\n', ":1: needs a finite numeric 'timestamp', got nan"),
        ('{"timestamp": 0, "prompt_len": 4000000000, "output_len": 2}\n', ":1: 'prompt_len' 4,000,000,000 is over"),
        (b"\xff\xfe\x00binary\n", " is not UTF-8 text (invalid start byte at byte 0)"),  # named no file before
    ],
)
def test_bad_trace_files_are_named_errors(capsys, tmp_path, content, message):
    trace = write(tmp_path / "trace.jsonl", content)
    code, err = bench(capsys, tmp_path, "--base-url", DEAD, "--dataset", "trace", "--dataset-path", str(trace))
    assert code == 2 and err.startswith(f"mopt bench: error: {trace}") and message in err, err


def test_a_dataset_path_that_is_a_folder_says_so(capsys, tmp_path):
    code, err = bench(capsys, tmp_path, "--base-url", DEAD, "--dataset", "trace", "--dataset-path", str(tmp_path))
    assert code == 2 and "is a folder" in err, err  # was "dataset file not found"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--temperature", "nan"], "--temperature must be a finite number >= 0, got nan"),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0, got -1.0"),
        (["--temperature", "inf"], "--temperature must be a finite number >= 0, got inf"),
        (["--logprobs", "-1"], "--logprobs must be an integer >= 0, got -1"),
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),  # was numpy's "expected non-negative integer"
        (["--random-vocab-size", "50"], "--random-vocab-size must be an integer > 100"),  # drew ids from [0, 50)
        (["--random-vocab-size", "100"], "--random-vocab-size must be an integer > 100"),
    ],
)
def test_request_values_every_server_refuses_are_refused_before_the_run(capsys, tmp_path, flags, message):
    """Each of these reached the server, which answered every request with HTTP 400."""
    code, err = bench(capsys, tmp_path, "--base-url", DEAD, "--prompt-len", "4", *flags)
    assert code == 2 and err.startswith(f"mopt bench: error: {message}"), err
    assert not (tmp_path / "out").exists()


def test_an_output_dir_that_cannot_be_a_folder_is_named(capsys, tmp_path):
    a_file = write(tmp_path / "a_file", "x")
    for output, message in [
        ("", "--output-dir is empty; give a folder"),  # wrote the run files into the current folder
        (str(a_file), f"--output-dir {a_file} is a file; give a folder"),  # was "[Errno 17] File exists"
        (str(a_file / "x"), f"--output-dir {a_file / 'x'} is inside {a_file}, which is a file"),
    ]:
        code = main(["bench", "--base-url", DEAD, "--model", "m", "--num-requests", "1", "--output-dir", output])
        err = capsys.readouterr().err
        assert code == 2 and err.strip() == f"mopt bench: error: {message}", err


def test_a_failure_before_any_run_leaves_no_empty_output_folder(capsys, tmp_path):
    """Without --model the bench asks the server for one before any run; when nothing answered, the folder it
    had made for the runs (and its parents) stayed behind, empty. A folder that was there before is kept."""
    kept = tmp_path / "kept"
    kept.mkdir()
    for output in (tmp_path / "new" / "out", kept):
        code = main(["bench", "--base-url", DEAD, "--num-requests", "1", "--output-dir", str(output)])
        err = capsys.readouterr().err
        assert code == 2 and f"GET {DEAD}/v1/models did not list one" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not any(kept.iterdir())


def test_an_http_error_is_one_line_with_the_status_url_and_the_servers_message(capsys, tmp_path):
    """httpx's text of an error status ("Client error '401 Unauthorized' for url ...") adds a second line, a
    link to MDN's page on the status, and dropped the server's OpenAI-style message."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from tests.optimizer.bench.stream_server import ServerThread

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        error = {"message": "Incorrect API key\nprovided", "type": "invalid_request_error"}
        return JSONResponse({"error": error}, status_code=401)

    with ServerThread(app) as server:
        refused = "was refused (HTTP 401 Unauthorized: Incorrect API key provided): check --api-key"
        for base_url, says in [
            (server.base_url, f"GET {server.base_url}/v1/models {refused} ($OPENAI_API_KEY) or --header"),
            # FastAPI's {"detail": "Not Found"}: said once
            (
                f"{server.base_url}/nope",
                f"no --model given and GET {server.base_url}/nope/v1/models did not list one (HTTP 404 Not Found)",
            ),
        ]:
            code = main(["bench", "--base-url", base_url, "--num-requests", "1", "--output-dir", str(tmp_path)])
            err = capsys.readouterr().err
            assert code == 2, err
            assert err == f"mopt bench: error: {says}\n"
