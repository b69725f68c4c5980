"""`mopt top` against a live server of ours, against recorded vLLM /metrics replayed over real HTTP, and
against a server that goes away."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.top.metrics import Scrape, quantile
from model_optimizer.optimizer.top.render import plain_line, render
from model_optimizer.optimizer.top.view import Monitor, View, build_view
from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.top.site import replaying
from tests.runtime.server.live import start_server

REPO = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parent / "data"
VLLM = [(DATA / f"vllm_metrics_{i}.txt").read_text() for i in (0, 1)]


@pytest.fixture
def replay():
    server = replaying(VLLM)
    yield server
    server.stop()


def _once(capsys, url: str, *extra: str) -> tuple[int, dict]:
    code = main(["top", "--url", url, "--once", "--json", "--interval", "0.05", "--no-gpu", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_vllm_metrics_replayed(replay, capsys):
    code, view = _once(capsys, replay.url)
    assert code == 0 and view["state"] == "ok" and view["reachable"]
    assert view["models"] == ["meta-llama/Llama-3.1-8B-Instruct"]
    assert view["running"] == 14 and view["waiting"] == 5 and view["kv_cache_usage"] == pytest.approx(0.47)
    assert view["requests_finished"] == 48  # (425 + 21 + 2) - (380 + 18 + 2)
    assert view["request_rate"] > 0 and view["generation_tokens_per_s"] > 0
    assert view["preemptions"] == 9 and view["preemptions_in_window"] == 2
    assert view["prefix_hit_rate"] == pytest.approx(24000 / 30000)  # hits and queries in the window
    ttft = view["latency"]["ttft"]
    assert ttft["window"] is True
    # the 50 requests of the window were slow (about 0.6 s): the window's p50 says so, all-time p50 would not
    assert 0.25 < ttft["p50"] <= 1.0
    assert view["latency"]["tpot"]["p50"] < 0.1
    assert view["errors_by_status"] == {"4xx": 8}


def test_live_server_of_ours(tiny_model, capsys):
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=8)
    live = start_server(llm, ServerConfig(served_model_name="tiny"))
    try:
        for _ in range(2):
            r = httpx.post(
                f"{live.url}/v1/completions", json={"prompt": "top", "max_tokens": 3, "ignore_eos": True}, timeout=60
            )
            assert r.status_code == 200
        httpx.post(f"{live.url}/v1/completions", json={"prompt": "x", "max_tokens": -1})
        code, view = _once(capsys, live.url)
        assert code == 0 and view["reachable"] and view["models"] == ["tiny"]
        assert view["running"] == 0 and view["waiting"] == 0
        assert view["latency"]["ttft"]["window"] is False  # nothing finished between the two scrapes
        assert view["latency"]["ttft"]["p50"] is not None and view["latency"]["e2e"]["p99"] is not None
        assert view["errors_by_status"].get("400", 0) >= 1
        monitor = Monitor(live.url, gpu=False)
        monitor.poll()
        httpx.post(
            f"{live.url}/v1/completions", json={"prompt": "again", "max_tokens": 2, "ignore_eos": True}, timeout=60
        )
        view = monitor.poll()
        assert view.requests_finished == 1 and view.latency["ttft"]["window"] is True
        assert render(view) is not None
    finally:
        live.stop()


def test_metrics_auth_needs_the_key(tiny_model, capsys):
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=8)
    live = start_server(llm, ServerConfig(api_key="sk-top", metrics_auth=True))
    try:
        code, view = _once(capsys, live.url)
        assert code == 1 and view["state"] == "http_error" and "401" in view["error"] and "--api-key" in view["error"]
        code, view = _once(capsys, live.url, "--api-key", "sk-top")
        assert code == 0 and view["reachable"]
    finally:
        live.stop()


def test_a_server_that_goes_away_shows_unreachable_and_polling_goes_on(capsys):
    server = replaying(VLLM)
    monitor = Monitor(server.url, timeout=30, gpu=False)  # a stopped server refuses at once: no wait
    assert monitor.poll().reachable
    server.stop()
    views = [monitor.poll() for _ in range(3)]
    assert all(v.state == "unreachable" and not v.reachable and v.error for v in views)
    assert "unreachable" in _text(render(views[-1]))
    revived = replaying(VLLM[1:])
    try:
        monitor.url = revived.url  # the same Monitor keeps going once a server answers again
        view = monitor.poll()
        assert view.reachable and view.window_s is None  # no deltas across the gap
    finally:
        revived.stop()


def test_dashboard_text_shows_the_numbers():
    cur, prev = Scrape.parse(VLLM[1], 10.0), Scrape.parse(VLLM[0], 0.0)
    text = _text(
        render(
            build_view(
                "http://x",
                cur,
                prev,
                gpus=[
                    {
                        "index": 0,
                        "utilization": 87,
                        "memory_used": 70 * 2**30,
                        "memory_total": 141 * 2**30,
                        "power_w": 512.0,
                        "temperature_c": 61,
                    }
                ],
            )
        )
    )
    for expected in (
        "[meta-llama/Llama-3.1-8B-Instruct]",
        "running",
        "14",
        "waiting",
        "4.80",
        "TTFT",
        "window",
        "4xx: 8",
        "GPU 0  util 87%",
        "512 W",
    ):
        assert expected in text, expected


def test_gpus_are_read_only_for_a_server_on_this_machine():
    assert Monitor("http://127.0.0.1:8000").gpu and Monitor("http://localhost:8000/").gpu
    assert not Monitor("http://10.1.2.3:8000").gpu and not Monitor("http://gpu-node.example:8000").gpu
    assert not Monitor("http://127.0.0.1:8000", gpu=False).gpu


def test_quantile_interpolates_inside_the_bucket():
    assert quantile(0.5, {0.1: 0.0, 0.2: 10.0, float("inf"): 10.0}) == pytest.approx(0.15)
    assert quantile(0.99, {1.0: 0.0, float("inf"): 5.0}) == 1.0  # beyond the last finite bound
    assert quantile(0.5, {1.0: 0.0, float("inf"): 0.0}) is None


def test_bad_flags_are_clear_errors(capsys):
    assert main(["top", "--json"]) == 2
    assert "use it with --once" in capsys.readouterr().err
    assert main(["top", "--interval", "0", "--once"]) == 2


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def _top_process(url: str) -> subprocess.Popen:
    """A real `mopt top` whose stdout is a pipe, as under `| head` or `| tee`."""
    argv = [sys.executable, "-m", "model_optimizer.cli.main", "top", "--url", url, "--interval", "0.05", "--no-gpu"]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_pipe_gets_one_plain_line_per_scrape_and_head_ends_it(replay):
    """rich's Live wrote only its last frame, at exit, into a pipe: `mopt top | head -3` never ended."""
    top = _top_process(replay.url)
    try:
        lines = [top.stdout.readline() for _ in range(3)]
        top.stdout.close()  # what head does once it has its lines
        code = top.wait(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
    # the first scrape has no rates yet; the later ones are the second recording's numbers
    assert " running=12 waiting=3 requests/s=- " in lines[0], lines
    assert all(" running=14 waiting=5 " in line and "kv_cache=47.0%" in line for line in lines[1:]), lines
    assert "ttft_p99=" in lines[1] and "errors=4xx:8" in lines[1]
    assert code == 141  # 128 + SIGPIPE, as other commands end under `| head`


def test_ctrl_c_exits_130_as_every_command_does(replay):
    top = _top_process(replay.url)
    try:
        assert "running=" in top.stdout.readline()
        top.send_signal(signal.SIGINT)
        _, err = top.communicate(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
            top.wait()
    assert top.returncode == 130 and err.strip() == "mopt top: interrupted", err


def test_plain_line_of_an_unreachable_server_says_why():
    line = plain_line(View(url="http://x", state="unreachable", error="connection refused"))
    assert line.endswith(" unreachable: connection refused")
