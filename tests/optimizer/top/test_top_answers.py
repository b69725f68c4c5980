"""`mopt top` against servers that answer but are no healthy engine, over real HTTP: another exporter,
an empty page, an error status, a redirect, an OpenAI base URL. Each is named for what it is, never
"unreachable", and `--once` exits 1 for all of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.top.render import plain_line, render
from model_optimizer.optimizer.top.view import ENGINE_METRICS, Monitor
from tests.optimizer.top.site import Answer, Site, once_json, once_text
from tests.optimizer.top.test_top import _text

DATA = Path(__file__).parent / "data"
VLLM = [(DATA / f"vllm_metrics_{i}.txt").read_text() for i in (0, 1)]
DCGM = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"} 87
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3"} 71234
"""


@pytest.mark.parametrize(("body", "found"), [("", "no metrics at all"), (DCGM, "DCGM_FI_DEV_FB_USED")])
def test_an_endpoint_without_engine_metrics_says_so_and_once_fails(capsys, body, found):
    """An empty 200 or the DCGM exporter showed as reachable with every value "-", and exit code 0."""
    with Site({"/metrics": Answer(200, [body])}) as site:
        code, view = once_json(capsys, site.url)
        text_code, text = once_text(capsys, site.url)
    assert code == 1 and text_code == 1
    assert view["state"] == "no_engine_metrics" and view["reachable"] is True
    assert "serves no mopt/vLLM engine metrics" in view["error"] and found in view["error"]
    assert all(name in view["error"] for name in ENGINE_METRICS)  # what it looked for
    assert "no engine metrics" in text and "unreachable" not in text


def test_an_openai_base_url_is_the_server(capsys):
    """--url http://host:port/v1 (the OpenAI base URL) gave "unreachable /metrics answered 404"."""
    with Site({"/metrics": Answer(200, list(VLLM))}) as site:
        code, view = once_json(capsys, site.url + "/v1/")
    assert code == 0 and view["state"] == "ok" and view["running"] == 14
    assert view["url"] == site.url  # the dashboard names the URL it polls


def test_a_404_is_an_error_answer_that_says_what_url_to_give(capsys):
    with Site({}) as site:
        code, view = once_json(capsys, site.url)
        _, text = once_text(capsys, site.url)
    assert code == 1 and view["state"] == "http_error" and view["reachable"] is True
    assert view["error"].startswith("/metrics answered 404 Not Found") and "--url takes its base URL" in view["error"]
    assert "error answer" in text and "unreachable" not in text


def test_a_401_points_to_the_api_key(capsys):
    with Site({"/metrics": Answer(401, ['{"error": "unauthorized"}'])}) as site:
        code, view = once_json(capsys, site.url)
        line = plain_line(Monitor(site.url, gpu=False).poll())
        _, refused = once_json(capsys, site.url, "--api-key", "sk-wrong")
    assert code == 1 and view["state"] == "http_error"
    assert "--api-key" in view["error"] and "MOPT_API_KEY" in view["error"]
    assert "error answer: /metrics answered 401" in line and "unreachable" not in line
    assert "refused the API key" in refused["error"]


def test_a_redirect_is_followed_and_named_when_it_leads_nowhere(capsys):
    with Site(
        {
            "/metrics": Answer(301, [""], {"Location": "/prometheus/metrics"}),
            "/prometheus/metrics": Answer(200, list(VLLM)),
        }
    ) as site:
        code, view = once_json(capsys, site.url)
    assert code == 0 and view["state"] == "ok" and view["running"] == 14
    with Site({"/metrics": Answer(301, [""], {"Location": "/login"})}) as site:
        code, view = once_json(capsys, site.url)
    assert code == 1 and "404" in view["error"] and f"redirected to {site.url}/login" in view["error"]


def test_once_promises_no_retry(capsys):
    """--once printed "retrying every interval ..." and exited."""
    code, text = once_text(capsys, "http://127.0.0.1:1")
    assert code == 1 and "unreachable" in text and "retrying" not in text
    view = Monitor("http://127.0.0.1:1", gpu=False).poll()
    assert "retrying every 2 s" in _text(render(view, 2.0))  # the watch does retry, and says how often


@pytest.mark.parametrize("source", ["flag", "env"])
def test_an_api_key_no_header_can_carry_is_refused_up_front(capsys, monkeypatch, source):
    """A non-ASCII key failed every poll as "unreachable 'ascii' codec can't encode ..."."""
    extra = ["--api-key", "sk-clé"] if source == "flag" else []
    if source == "env":
        monkeypatch.setenv("MOPT_API_KEY", "sk-clé")
    code = main(["top", "--url", "http://127.0.0.1:1", "--once", "--no-gpu", "--interval", "0.05", *extra])
    captured = capsys.readouterr()
    name = "--api-key" if source == "flag" else "MOPT_API_KEY"
    assert code == 2 and captured.out == ""
    assert captured.err == f"mopt top: error: {name} must be printable ASCII (an HTTP header carries it): " + (
        "character 6 is not\n"
    )
    assert "clé" not in captured.err  # a secret stays out of the message


def test_terminal_escapes_in_a_servers_text_are_shown_not_obeyed(capsys):
    """A page quoted in the error (here a line that is no Prometheus text) may hold ESC sequences."""
    with Site({"/metrics": Answer(200, ["\x1b[2J\x1b]0;pwned\x07 not metrics\n"])}) as site:
        code, view = once_json(capsys, site.url)
        text_code, text = once_text(capsys, site.url)
    assert code == 1 and text_code == 1 and view["state"] == "not_metrics"
    assert "\x1b" not in view["error"] and "\x07" not in view["error"] and "?[2J" in view["error"]
    assert "\x1b" not in text
