"""On CUDA: the vectors `Embedder.encode` hands out per batch (what `mopt embed` writes as each batch
finishes) equal the call's own result, eager and with CUDA graph replays."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer.runtime.embed import Embedder
from model_optimizer.runtime.embed.jsonl_job import EmbedJob, JobConfig

TEXTS = [f"text {i} " * (1 + i % 9) for i in range(40)]


@pytest.mark.parametrize("cuda_graph_max_tokens", [0, 2048])
def test_per_batch_vectors_equal_the_call_result(tiny_model, cuda_graph_max_tokens):
    embedder = Embedder(tiny_model("qwen3"), device="cuda", dtype="bfloat16", max_num_seqs=4,
                        cuda_graph_max_tokens=cuda_graph_max_tokens)  # fmt: skip
    got = torch.full((len(TEXTS), 16), float("nan"))

    def on_batch(rows, vectors, num_tokens):
        assert vectors.device.type == "cpu" and vectors.dtype == torch.float32 and len(rows) == len(num_tokens)
        got[rows] = vectors

    result = embedder.encode(TEXTS, dimensions=16, on_batch=on_batch)
    assert torch.equal(got, result.embeddings)


def test_embed_job_writes_every_row_on_cuda(tiny_model, tmp_path):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    embedder = Embedder(tiny_model("qwen3"), device="cuda", max_num_seqs=4)
    assert EmbedJob(embedder, JobConfig(input=str(src), output=str(out), chunk_size=16)).run() == len(TEXTS)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == list(range(len(TEXTS)))
    assert json.loads((tmp_path / "out.jsonl.meta.json").read_text())["info"]["device"].startswith("cuda")
