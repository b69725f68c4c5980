"""`mopt bench` against servers that differ from vLLM: no usage, headers and extra body, an unknown
model, a refused key, a stream answered as plain JSON; and prompts of exact token length."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

import model_optimizer
from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench import progress
from model_optimizer.optimizer.bench.prompts import PromptMaker
from model_optimizer.optimizer.bench.report import load_runs
from model_optimizer.optimizer.bench.stopping import FAIL_FAST_REQUESTS
from tests.optimizer.bench.bench_fake_server import WORDS, create_fake_app
from tests.optimizer.bench.stream_server import ServerThread

TOKENIZER = str(Path(model_optimizer.__file__).parent / "assets" / "pydoc-qwen3")
"""A real tokenizer shipped with the package (the built-in model's)."""


@pytest.fixture(scope="module")
def fake():
    """The fake server; GET /v1/models names the tokenizer folder as the model's root, as vLLM does."""
    with ServerThread(create_fake_app(root=TOKENIZER)) as running:
        yield running


def bench(base_url: str, out: Path, *flags: str) -> int:
    base = ["bench", "--base-url", base_url, "--output-dir", str(out), "--no-progress", "--prompt-len", "8"]
    return main([*base, "--output-len", "4", *flags])


def tokens(text: str) -> int:
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(f"{TOKENIZER}/tokenizer.json").encode(text, add_special_tokens=False).ids)


def test_answers_without_usage_are_counted_with_the_tokenizer(fake, tmp_path, capsys):
    # the tokenizer is found through the model's root in GET /v1/models
    assert bench(f"{fake.base_url}/m/nousage,multi", tmp_path, "--num-requests", "3", "--concurrency", "3") == 0
    [run] = load_runs(tmp_path)
    expected = tokens(WORDS * 4)
    assert expected != 4  # the chunks alone would say 4
    assert [r["output_tokens"] for r in run["requests"]] == [expected] * 3
    assert {r["token_count_source"] for r in run["requests"]} == {"tokenizer"}
    assert all(sum(r["chunk_tokens"]) == expected for r in run["requests"])
    assert run["summary"]["output_tokens_from"] == {"tokenizer": 3}
    rows = list(csv.DictReader(open(Path(run["path"]).with_suffix(".requests.csv"))))
    assert {row["token_count_source"] for row in rows} == {"tokenizer"}
    assert next(csv.DictReader(open(tmp_path / "summary.csv")))["output_tokens_from"] == "tokenizer:3"
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("3 of 3 answers came without usage") == 1 and f"the tokenizer at {TOKENIZER}" in out


def test_without_usage_nor_tokenizer_counts_chunks_and_says_so(tmp_path, capsys):
    with ServerThread(create_fake_app(root=None)) as plain:
        flags = (
            "--load-mode",
            "sweep",
            "--num-requests",
            "2",
            "--sweep-num-rates",
            "1",
            "--sweep-max-concurrency",
            "2",
        )
        assert bench(f"{plain.base_url}/m/nousage,multi", tmp_path, *flags) in (0, 1)
    runs = load_runs(tmp_path)
    assert len(runs) >= 2
    assert all(r["summary"]["output_tokens_from"] == {"chunks": 2} for r in runs)
    assert all(req["output_tokens"] == 4 for r in runs for req in r["requests"])
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("answers came without usage") == 1  # once per benchmark, not per run
    assert "give --tokenizer" in out


def test_usage_is_the_count_when_the_server_sends_it(fake, tmp_path, capsys):
    assert bench(f"{fake.base_url}/m/multi", tmp_path, "--num-requests", "2") == 0
    [run] = load_runs(tmp_path)
    assert run["summary"]["output_tokens_from"] == {"usage": 2} and run["summary"]["output_tokens"] == 16
    assert "without usage" not in capsys.readouterr().out


def test_headers_and_extra_body_reach_the_server_and_secrets_are_masked(fake, tmp_path):
    fake.app.state.seen.clear()
    fake.app.state.models_headers.clear()
    flags = ["--num-requests", "2", "--header", "X-Route=blue", "--header", "X-Api-Token=s3cret"]
    assert bench(fake.base_url, tmp_path, *flags, "--extra-body", '{"top_k": 5, "max_tokens": 2}') == 0
    assert fake.app.state.models_headers[0]["x-route"] == "blue"
    for headers, body in fake.app.state.seen:
        assert headers["x-route"] == "blue" and headers["x-api-token"] == "s3cret"
        assert body["top_k"] == 5 and body["max_tokens"] == 2  # the extra body's keys win
    [run] = load_runs(tmp_path)
    client = run["config"]["client"]
    assert client["header"] == ["X-Route=blue", "X-Api-Token=***"]
    assert client["extra_body"] == '{"top_k": 5, "max_tokens": 2}'
    assert "s3cret" not in Path(run["path"]).read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--extra-body", "{top_k: 5}"], "--extra-body is not valid JSON"),
        (["--extra-body", "[1, 2]"], "--extra-body must be a JSON object"),
        (["--header", "NoEquals"], "--header takes KEY=VALUE"),
    ],
)
def test_bad_header_or_extra_body_is_a_clear_error(fake, tmp_path, capsys, flags, message):
    assert bench(fake.base_url, tmp_path, *flags) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("run-*"))


def test_a_model_the_server_does_not_serve_is_refused_before_any_request(fake, tmp_path, capsys):
    fake.app.state.seen.clear()
    assert bench(fake.base_url, tmp_path, "--model", "nope", "--num-requests", "50") == 2
    err = capsys.readouterr().err
    assert "--model 'nope' is not served at" in err and "lists 'fake-model'" in err
    assert fake.app.state.seen == [] and not list(tmp_path.glob("run-*"))


def test_a_refused_model_list_is_a_clear_error(fake, tmp_path, capsys):
    assert bench(f"{fake.base_url}/m/deny-models", tmp_path, "--model", "fake-model") == 2
    assert "was refused (HTTP 401" in capsys.readouterr().err


def test_requests_all_refused_stop_the_run_early(fake, tmp_path, capsys):
    fake.app.state.seen.clear()
    rc = bench(f"{fake.base_url}/m/401", tmp_path, "--num-requests", "200", "--concurrency", "1")
    assert rc == 1
    assert len(fake.app.state.seen) == FAIL_FAST_REQUESTS  # one at a time: not one more was sent
    [run] = load_runs(tmp_path)
    assert run["interrupted"] is True and "all failed with http_401" in run["stop_reason"]
    assert run["summary"]["errors"] == {"http_401": FAIL_FAST_REQUESTS}
    err = capsys.readouterr().err
    assert "all failed with http_401" in err and "Incorrect API key" in err


def test_a_stream_answered_as_plain_json_names_the_content_type(fake, tmp_path):
    assert bench(f"{fake.base_url}/m/json", tmp_path, "--num-requests", "2") == 1
    [run] = load_runs(tmp_path)
    assert run["summary"]["errors"] == {"malformed_stream": 2}
    assert "Content-Type application/json" in run["summary"]["error_examples"]["malformed_stream"]


def test_plain_progress_lines_when_not_on_a_terminal(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.05)
    with ServerThread(create_fake_app(itl=0.1)) as slow:
        base = ["bench", "--base-url", slow.base_url, "--output-dir", str(tmp_path), "--prompt-len", "8"]
        assert main([*base, "--output-len", "4", "--num-requests", "2"]) == 0
    out = capsys.readouterr().out
    assert "concurrency 1: " in out and " of 2 requests" in out  # a plain line, no bar


@pytest.mark.filterwarnings("error::UserWarning")  # matplotlib's "No artists with labels found"
def test_a_run_where_every_request_failed_draws_its_report_without_warnings(tmp_path):
    from tests.optimizer.bench.stream_server import create_app

    with ServerThread(create_app(ttft=0.0, itl=0.0)) as server:  # "broken": a first token, then bad JSON
        assert bench(server.base_url, tmp_path, "--model", "broken", "--num-requests", "2") == 1
    assert (tmp_path / "report.html").exists()


def test_text_prompts_have_the_exact_token_length():
    maker = PromptMaker(np.random.default_rng(0), None, TOKENIZER)
    for n in (1, 2, 3, 5, 8, 16, 64, 200):
        for _ in range(25):
            text, count = maker.text(n)
            assert count == n and tokens(text) == n
    assert maker.num_inexact == 0


def test_a_tokenizer_that_cannot_be_matched_is_counted_not_claimed():
    class Stubborn:
        """Every text encodes to one token more than it was made of."""

        def decode(self, ids):
            return " ".join(map(str, ids))

        def encode(self, text, add_special_tokens=False):
            return type("E", (), {"ids": [0] * (len(text.split()) + 1)})()

    maker = PromptMaker(np.random.default_rng(0), 1000)
    maker.tokenizer, maker._words = Stubborn(), []
    text, count = maker.text(5)
    assert count != 5 and maker.num_inexact == 1
    assert json.dumps(text)  # still a prompt to send
