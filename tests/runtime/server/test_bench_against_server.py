"""`mopt bench` end to end against our own server: the figures it reports agree with the server's."""

from __future__ import annotations

import json

import httpx
import pytest

from model_optimizer.cli.main import main
from tests.runtime.server.live import metric


@pytest.mark.slow
def test_bench_measures_our_server(server, tmp_path):
    before = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    rc = main(
        [
            "bench",
            "--base-url",
            server.url,
            "--output-dir",
            str(tmp_path),
            "--no-progress",
            "--prompt-len",
            "16",
            "--output-len",
            "8",
            "--num-requests",
            "12",
            "--concurrency",
            "4",
            "--random-vocab-size",
            "900",
        ]
    )  # the tiny model has about 1,000 tokens
    assert rc == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    result = json.loads(run.read_text())
    summary = result["summary"]
    assert summary["num_ok"] == 12 and summary["output_tokens"] == 12 * 8
    assert 0 < summary["ttft_ms"]["p50"] <= summary["e2e_ms"]["p50"]
    after = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    assert after - before == summary["output_tokens"]  # the server counted what the client measured
    assert result["config"]["client"]["model"] == "tiny"
    free = metric(httpx.get(f"{server.url}/metrics").text, "mopt:kv_cache_free_blocks")
    assert free == metric(httpx.get(f"{server.url}/metrics").text, "mopt:kv_cache_total_blocks")


@pytest.mark.slow
def test_default_prompt_ids_fit_the_served_vocabulary(server, tmp_path, capsys):
    # no --random-vocab-size: the ids must stay inside the tiny model's 1,032-token vocabulary
    # (before, the default drew up to 10,100 and every request failed with HTTP 400)
    rc = main(
        [
            "bench",
            "--base-url",
            server.url,
            "--output-dir",
            str(tmp_path),
            "--no-progress",
            "--prompt-len",
            "16",
            "--output-len",
            "2",
            "--num-requests",
            "6",
            "--concurrency",
            "3",
        ]
    )
    assert rc == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    result = json.loads(run.read_text())
    assert result["summary"]["num_ok"] == 6 and result["summary"]["errors"] == {}
    prompts = result["prompts"]
    # found through GET /v1/models: the server names the model folder as `root`, which holds tokenizer.json
    assert prompts["tokenizer"] == str(server.state.model.model_dir)
    assert "tokenizer" in prompts["vocab_source"]
    low, high = prompts["token_id_range"]
    assert high <= server.state.model.vocab_size
    assert f"random token ids in [{low}, {high})" in " ".join(capsys.readouterr().out.split())


def test_first_error_message_of_each_kind_is_shown_and_saved(server, tmp_path, capsys):
    # prompts longer than the server's max_model_len (128): every request gets HTTP 400
    rc = main(
        [
            "bench",
            "--base-url",
            server.url,
            "--output-dir",
            str(tmp_path),
            "--no-progress",
            "--prompt-len",
            "200",
            "--output-len",
            "2",
            "--num-requests",
            "3",
        ]
    )
    assert rc == 1
    out = " ".join(capsys.readouterr().out.split())  # undo the console's line wrapping
    assert "more than the server's max_model_len 128" in out  # warned before the run
    assert "http_400 x3" in out
    [run] = sorted(tmp_path.glob("run-*.json"))
    examples = json.loads(run.read_text())["summary"]["error_examples"]
    assert list(examples) == ["http_400"]
    assert "max_model_len" in examples["http_400"] and not examples["http_400"].startswith(
        "{"
    )  # the message, not the body
    assert "first http_400: " + " ".join(examples["http_400"].split()) in out


@pytest.mark.slow
def test_sweep_runs_send_fresh_prompts_and_a_repeat_is_flagged(server, tmp_path, capsys):
    flags = ["--base-url", server.url, "--no-progress", "--prompt-len", "48", "--output-len", "2", "--seed", "7"]
    sweep = tmp_path / "sweep"
    rc = main(
        [
            "bench",
            *flags,
            "--output-dir",
            str(sweep),
            "--load-mode",
            "sweep",
            "--num-requests",
            "4",
            "--sweep-num-rates",
            "1",
            "--sweep-max-concurrency",
            "4",
            "--sweep-arrival",
            "constant",
        ]
    )
    assert rc == 0
    runs = [json.loads(p.read_text()) for p in sorted(sweep.glob("run-*.json"))]
    assert len(runs) in (2, 3)  # the rate run only when saturation was faster than one at a time
    assert [r["config"]["workload"]["seed"] for r in runs] == [7, 8, 9][: len(runs)]
    # each run's prompts are new to the server: a later run does not find an earlier run's prompts cached
    assert all(r["server_metrics"].get("prefix_cache_hit_rate", 0.0) < 0.5 for r in runs)
    assert "prefix cache though the prompts share no prefix" not in " ".join(capsys.readouterr().out.split())
    # the same prompts again (same seed) are served from the cache, and the console says why
    assert main(["bench", *flags, "--output-dir", str(tmp_path / "again"), "--num-requests", "4"]) == 0
    [again] = [json.loads(p.read_text()) for p in (tmp_path / "again").glob("run-*.json")]
    assert again["server_metrics"]["prefix_cache_hit_rate"] > 0.5
    assert "prefix cache though the prompts share no prefix" in " ".join(capsys.readouterr().out.split())


def test_bench_sends_a_json_schema_with_each_request(server, tmp_path):
    """--json-schema: every request is constrained; the grammar ends each (finish "stop") before the
    requested length, and the server counts the steps that sampled with masks."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"n": {"enum": [1, 22, 333]}}, "required": ["n"]}))
    before = metric(httpx.get(f"{server.url}/metrics").text, "mopt:grammar_steps_total")
    args = ["bench", "--base-url", server.url, "--output-dir", str(tmp_path), "--no-progress", "--prompt-len", "8"]
    args += ["--output-len", "40", "--num-requests", "6", "--concurrency", "3", "--random-vocab-size", "900"]
    assert main([*args, "--endpoint", "chat", "--json-schema", str(schema)]) == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    result = json.loads(run.read_text())
    assert result["summary"]["num_ok"] == 6 and result["summary"]["output_tokens"] < 6 * 40
    assert result["config"]["client"]["json_schema"] == str(schema)
    exposition = httpx.get(f"{server.url}/metrics").text
    assert metric(exposition, "mopt:grammar_steps_total") > before
    assert metric(exposition, "mopt:grammar_wait_seconds_total") >= 0  # exported: structured.py reads it
    assert main([*args, "--json-schema", str(tmp_path / "missing.json")]) == 2


def test_bench_drives_the_responses_api(server, tmp_path):
    """--endpoint responses against our /v1/responses: ignore_eos (a vLLM extra) passes through, so every
    answer has its requested length, and the server counted what the client measured."""
    before = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    args = ["bench", "--base-url", server.url, "--output-dir", str(tmp_path), "--no-progress", "--prompt-len", "8"]
    args += ["--output-len", "6", "--num-requests", "4", "--concurrency", "2", "--endpoint", "responses"]
    assert main(args) == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    summary = json.loads(run.read_text())["summary"]
    assert summary["num_ok"] == 4 and summary["output_tokens"] == 4 * 6
    after = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    assert after - before == summary["output_tokens"]


def test_bench_sends_its_api_key_as_one_bearer_token(strict_server, tmp_path):
    """--api-key was read as a list (the server's flag of the same name takes several keys), so the header
    said `Bearer ['KEY']` and every request got 401."""
    from tests.runtime.server.conftest import API_KEY

    args = ["bench", "--base-url", strict_server.url, "--output-dir", str(tmp_path), "--no-progress"]
    args += ["--prompt-len", "8", "--output-len", "2", "--num-requests", "2", "--concurrency", "1"]
    args += ["--random-vocab-size", "900", "--api-key", API_KEY]
    assert main(args) == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    assert json.loads(run.read_text())["summary"]["num_ok"] == 2
