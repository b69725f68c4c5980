"""`mopt serve` with an address it cannot listen on: one line `mopt serve: error: ...` and exit code 2
before the model loads (uvicorn found out after the load, and exited with code 3 and a log line)."""

from __future__ import annotations

import socket

import pytest

from model_optimizer.runtime.server.frontends import listen, reserve
from tests.cli_errors import error_line


def test_a_port_in_use_is_one_error_naming_it(capsys):
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = error_line(["serve", "--host", "127.0.0.1", "--port", str(port)], capsys)
    assert line == f"mopt serve: error: cannot listen on 127.0.0.1:{port} (--host, --port): Address already in use"
    assert "loading model" not in capsys.readouterr().err


def test_a_host_that_does_not_resolve_is_one_error_naming_it(capsys):
    line = error_line(["serve", "--host", "no.such.host.invalid", "--port", "0"], capsys)
    assert line.startswith("mopt serve: error: --host 'no.such.host.invalid' is not an address or a name")


def test_an_address_not_on_this_machine_is_one_error(capsys):
    line = error_line(["serve", "--host", "192.0.2.1", "--port", "0"], capsys)  # TEST-NET-1: never local
    assert line.startswith("mopt serve: error: cannot listen on 192.0.2.1:0 (--host, --port): ")


def test_the_port_is_held_from_the_check_and_opened_after_the_load():
    """frontends.reserve binds (the port is ours while the model loads: no other server can bind it without
    SO_REUSEADDR) but connections are refused until `listen`, which the launcher calls after the load."""
    sock = reserve("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        with socket.socket() as client, pytest.raises(ConnectionRefusedError):
            client.connect(("127.0.0.1", port))
        listen(sock)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        sock.close()


def test_a_port_taken_while_the_model_loads_is_one_error_naming_it():
    sock = reserve("127.0.0.1", 0)
    port = sock.getsockname()[1]
    with sock, socket.socket() as thief:  # another server with SO_REUSEADDR may bind beside it and listen first
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind(("127.0.0.1", port))
        thief.listen()
        with pytest.raises(ValueError, match=rf"^cannot listen on 127\.0\.0\.1:{port}: .*while the model loaded"):
            listen(sock)
