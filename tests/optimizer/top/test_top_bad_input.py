"""`mopt top` refuses an --interval it cannot sleep and a --url that can never answer with one error line
and exit code 2, instead of a traceback or a dashboard saying "unreachable"."""

from __future__ import annotations

import json

import pytest

from model_optimizer.cli.main import main

DEAD = "http://127.0.0.1:1"


@pytest.mark.parametrize("interval", ["nan", "inf", "1e10"])
def test_interval_must_be_finite_and_sleepable(capsys, interval):
    """nan failed in time.sleep naming no flag; inf and 1e10 were an OverflowError traceback (against a live
    server; against a dead one --once ended with exit 1 without trying)."""
    code = main(["top", "--url", DEAD, "--once", "--no-gpu", "--interval", interval])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("mopt top: error: --interval must be > 0 and at most 86400"), err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:8000", "must start with http:// or https://"),
        ("http://127.0.0.1:99999", "port 99999, outside 1-65535"),
    ],
)
def test_a_url_that_can_never_answer_is_an_input_error(capsys, url, message):
    code = main(["top", "--url", url, "--once", "--no-gpu", "--interval", "0.05"])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.startswith("mopt top: error: --url") and message in captured.err
    assert "unreachable" not in captured.out


def test_a_server_whose_metrics_are_no_prometheus_text_is_named_briefly(capsys):
    """A page that is no exposition text (an HTML error page, say) was quoted whole by the parser."""
    from tests.optimizer.top.site import replaying

    server = replaying(["<html>" + "x" * 5000 + "</html>\n"])
    try:
        code = main(["top", "--url", server.url, "--once", "--json", "--no-gpu", "--interval", "0.05"])
    finally:
        server.stop()
    view = json.loads(capsys.readouterr().out)
    assert code == 1 and view["state"] == "not_metrics" and view["reachable"]  # it answered, with no metrics
    assert view["error"].startswith("/metrics is not Prometheus text: ") and len(view["error"]) <= 200
