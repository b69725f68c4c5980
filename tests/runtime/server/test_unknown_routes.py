"""A request for a path the server does not serve, or with a method its path does not take, gets the router's
404 or 405 in the OpenAI error shape whatever its body (form data, text, bad bytes, an encoding): the body
checks (415, UTF-8) belong to the routes that read a body. Every answer keeps the connection alive."""

from __future__ import annotations

import pytest

FORM = {"content-type": "application/x-www-form-urlencoded"}


def client_port(response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


@pytest.mark.parametrize(
    "method, path, content, headers, status",
    [
        ("POST", "/v1/nope", b"a=b", FORM, 404),
        ("POST", "/v1/nope", b'{"prompt": "\xff"}', {"content-type": "application/json"}, 404),
        ("PUT", "/v1/models", b"hello", {"content-type": "text/plain"}, 405),
        ("PATCH", "/v1/completions", b"x", {"content-type": "application/json", "content-encoding": "gzip"}, 405),
        ("POST", "/health", b"a=b", FORM, 405),
    ],
)
def test_an_unknown_route_or_method_is_404_or_405_whatever_the_body(client, method, path, content, headers, status):
    response = client.request(method, path, content=content, headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == status
    if status == 405:
        assert response.headers["allow"]


def test_errors_leave_the_connection_alive_for_the_next_request(client):
    first = client.post("/v1/nope", content=b"a=b", headers=FORM)
    answers = [
        client.post("/v1/completions", content=b"a=b", headers=FORM),  # a served route still checks the type: 415
        client.post("/v1/completions", content=b"{bad", headers={"content-type": "application/json"}),
        client.put("/v1/models", content=b"x", headers={"content-type": "text/plain"}),
        client.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 100_000}),
        client.post("/v1/completions", json={"model": "tiny", "prompt": [1, 2], "max_tokens": 2}),
    ]
    assert [a.status_code for a in answers] == [415, 400, 405, 400, 200]
    assert {client_port(a) for a in answers} == {client_port(first)}  # one connection throughout
