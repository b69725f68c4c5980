"""POST /reset_prefix_cache under `mopt serve --api-server-count 2`: whichever frontend a reset reaches, the
one engine core forgets its cached prefixes and that frontend answers {"reset": true} (the core routes the
answer to the frontend that asked: sent to the other one, it would leave the caller waiting).

A client cannot choose the frontend that accepts its connection; the test sends each reset on a fresh
connection, looks up which frontend process holds the other end, and goes on until both have answered,
checking every answer and that the next identical prompt reports no cached tokens."""

from __future__ import annotations

import signal
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.runtime.server.test_process import launch
from tests.runtime.server.test_shutdown_signals import frontends_and_core

WAIT = 60.0
PROMPT = [(i * 37) % 900 + 5 for i in range(40)]
MAX_RESETS = 40
"""Resets sent before giving up on reaching both frontends (the kernel spreads connections over them:
one frontend missing them all has odds of 2 ** -39)."""


def cached_tokens(url: str) -> int:
    """The cached prompt tokens the usage of one completion of PROMPT reports."""
    body = {"prompt": PROMPT, "max_tokens": 2, "temperature": 0}
    r = httpx.post(url + "/v1/completions", json=body, timeout=WAIT)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def reset_and_answerer(url: str, frontends: list[int]) -> tuple[httpx.Response, int]:
    """POST /reset_prefix_cache on a new connection, and the pid of the frontend that accepted it (looked up
    while the connection is still open)."""
    port = urlsplit(url).port
    with httpx.Client(base_url=url, timeout=WAIT) as client:
        answer = client.post("/reset_prefix_cache")
        (local,) = [
            c.laddr.port
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        ]
        (pid,) = [
            p
            for p in frontends
            if any(c.raddr and c.raddr.port == local for c in psutil.Process(p).net_connections("tcp"))
        ]
    return answer, pid


@pytest.mark.slow
def test_a_reset_through_either_frontend_is_answered_and_applied(tiny_model):
    flags = ("--api-server-count", "2", "--enable-pause", "--enable-prompt-tokens-details")
    proc, url = launch(tiny_model("qwen3"), *flags)
    try:
        further, _ = frontends_and_core(proc, url)
        frontends, answered = [proc.pid, *further], set()
        for _ in range(MAX_RESETS):
            cached_tokens(url)
            assert cached_tokens(url) > 0  # the one core caches the prompt, whichever frontend sent it
            answer, pid = reset_and_answerer(url, frontends)
            assert (answer.status_code, answer.json()) == (200, {"reset": True})
            assert cached_tokens(url) == 0
            answered.add(pid)
            if len(answered) == len(frontends):
                break
        assert answered == set(frontends)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    finally:
        proc.kill()
