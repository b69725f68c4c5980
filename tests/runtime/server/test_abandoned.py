"""Abandoned work leaves at once: a client that sent many prompts with many completions each and went
away has every one of its sequences, siblings included, out of the engine before the next step runs.

The engine is held (its step gate) the whole time, so nothing of it can finish on its own: what leaves,
leaves because of the abort, on any machine. With the gate open, "before the next step" holds because
the frontend tells the core in one command (the core applies a command whole, between two steps)."""

from __future__ import annotations

import json
import socket

import pytest

from model_optimizer import LLM
from model_optimizer.runtime.engine.messages import CoreAbort
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server, wait_for

NUM_PROMPTS, N = 64, 16
WAIT = 120.0  # seconds; only a bound on a hang


@pytest.fixture(scope="module")
def roomy(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=2048, max_num_seqs=256)
    live = start_server(llm, ServerConfig(served_model_name="tiny", max_n=N, max_prompts=NUM_PROMPTS))
    yield live
    live.stop()


@pytest.mark.slow
def test_a_client_gone_takes_all_its_sequences_out_before_the_next_step(roomy, monkeypatch):
    engine = roomy.state.engine
    gate = engine.gate
    aborts: list[list[str]] = []
    send = engine.client.send

    def recording_send(command):  # the real client still gets every command
        if isinstance(command, CoreAbort):
            aborts.append(list(command.request_ids))
        send(command)

    monkeypatch.setattr(engine.client, "send", recording_send)
    prompts = [[5 + i, 6, 7, 8] for i in range(NUM_PROMPTS)]
    body = {"model": "tiny", "prompt": prompts, "n": N, "max_tokens": 100, "ignore_eos": True, "stream": True}
    with gate.held():
        assert gate.wait_parked(WAIT)
        steps = gate.num_steps
        host, port = roomy.url.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)))
        payload = json.dumps(body).encode()
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        # every sequence queued in the core, none run (held)
        wait_for(lambda: engine.stats.num_waiting + engine.stats.num_running == NUM_PROMPTS * N, "all queued", WAIT)
        sock.close()  # the client is gone
        wait_for(lambda: engine.num_in_flight == 0, "the frontend dropped every request", WAIT)
        assert gate.wait_parked(WAIT)  # the aborts are applied, still without a step
        stats = engine.stats
        assert stats.num_waiting == 0 and stats.num_running == 0
        assert stats.num_free_blocks == stats.num_blocks
        assert gate.num_steps == steps  # no step was needed for any of it
    assert len(aborts) == 1 and len(set(aborts[0])) == NUM_PROMPTS  # every prompt in one command
    # the admission is released when the response's cleanup runs, which may come after the abort
    wait_for(lambda: roomy.state.num_admitted == 0, "the admission released", WAIT)
