import pytest

from tests.optimizer.bench.stream_server import ServerThread, create_app

TTFT = 0.08
ITL = 0.02


@pytest.fixture(scope="session")
def server():
    """A real streaming server on 127.0.0.1 with known TTFT and inter-token delays."""
    with ServerThread(create_app(ttft=TTFT, itl=ITL)) as running:
        yield running


@pytest.fixture
def valve(server):
    """The server's valve, open and with no arrivals counted; opened again after the test."""
    valve = server.app.state.valve
    valve.open()
    valve.reset()
    yield valve
    valve.open()
