"""Structured outputs on a real GPU: the fused kernel's mask against the torch path, a split launch that
never synchronizes, and constrained generation in bf16 with CUDA graphs, sync and async alike."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
from model_optimizer.runtime.layers.token_mask import TokenMask, allowed_tokens
from model_optimizer.runtime.structured import StructuredOutputs

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 9999},
        "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}, "minItems": 1, "maxItems": 5},
        "name": {"type": "string", "maxLength": 10},
    },
    "required": ["id", "tags", "name"],
    "additionalProperties": False,
}


def _random_mask(rows: int, vocab: int, generator: torch.Generator) -> TokenMask:
    words = (vocab + 31) // 32
    bitmask = torch.randint(-(2**31), 2**31 - 1, (rows, words), dtype=torch.int32, generator=generator)
    bitmask &= torch.randint(-(2**31), 2**31 - 1, (rows, words), dtype=torch.int32, generator=generator)  # 1/4 set
    index = torch.arange(rows, dtype=torch.int32)
    index[1::3] = -1  # every third row free
    return TokenMask(bitmask.cuda(), index.cuda())


def test_the_fused_kernel_masks_as_the_torch_path_does():
    """151,936-token bf16 logits, greedy: both paths take the argmax over the allowed tokens."""
    generator = torch.Generator().manual_seed(0)
    rows, vocab = 64, 151936
    logits = (torch.randn(rows, vocab, generator=generator) * 3).to(torch.bfloat16).cuda()
    mask = _random_mask(rows, vocab, generator)
    batch = [SamplingInput(SamplingParams(temperature=0), [1], []) for _ in range(rows)]
    fused = Sampler(torch.device("cuda"), fused=True).sample(logits, batch, mask)
    plain = Sampler(torch.device("cuda"), fused=False).sample(logits, batch, mask)
    assert torch.equal(fused.token_ids, plain.token_ids) and bool(fused.finite.all())
    assert bool(allowed_tokens(mask, vocab).gather(1, fused.token_ids[:, None]).all())
    sampled = [SamplingInput(SamplingParams(temperature=1.0), [1], []) for _ in range(rows)]
    drawn = Sampler(torch.device("cuda"), fused=True).sample(logits, sampled, mask).token_ids
    assert bool(allowed_tokens(mask, vocab).gather(1, drawn[:, None]).all())


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


def test_a_masked_step_queues_forward_mask_and_sampling_without_a_sync(model_dir):
    """The split launch the engine core runs for constrained rows: forward, the host's mask in pinned
    memory, its copy and the sampling, under sync debug mode "error" (any synchronizing call raises)."""
    llm = LLM(model_dir, dtype="bfloat16", gpu_memory_utilization=0.2, max_num_seqs=8)
    core = llm.engine.core
    llm.engine.add_request(
        "r", [5, 6, 7, 8], SamplingParams(max_tokens=8, structured_outputs=StructuredOutputs.json(SCHEMA))
    )
    while "r" in core.constrained.compiling:
        core._admit_compiled()
    out = core.scheduler.schedule()
    rows = core.constrained.masked_rows(core.scheduler, out)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        handle = llm.runner.launch(out, None, sample=False)
        mask = core.constrained.manager.fill(rows, llm.runner.token_mask_buffers)
        handle = llm.runner.sample(handle, mask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert llm.runner.masks._host[llm.runner.masks._parity].is_pinned()  # what the copy read from
    [token] = handle.wait()
    allowed = np.flatnonzero(np.unpackbits(mask.bitmask[0].view(np.uint8), bitorder="little"))
    assert token in set(allowed.tolist()) and len(allowed) < 1000


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_constrained_generation_with_cuda_graphs(model_dir, async_scheduling):
    llm = LLM(
        model_dir, dtype="bfloat16", gpu_memory_utilization=0.2, max_num_seqs=32, async_scheduling=async_scheduling
    )
    so = StructuredOutputs.json(SCHEMA)
    params = [
        SamplingParams(
            temperature=t, n=2, seed=i, max_tokens=120, structured_outputs=so if i % 3 else None, ignore_eos=i % 3 == 0
        )
        for i, t in enumerate([0.0, 1.0] * 12)
    ]
    outputs = llm.generate([[5 + i, 9, 11 * i % 900 + 3] for i in range(24)], params)
    for i, out in enumerate(outputs):
        for c in out.outputs:
            if i % 3:
                assert c.finish_reason == "stop"
                jsonschema.validate(json.loads(c.text), SCHEMA)
    assert llm.engine.stats().grammar_steps > 0


def test_masked_decode_batches_replay_a_masked_draw_graph_with_the_eager_tokens(model_dir):
    """Greedy and temperature rows under masks: each decode bucket's masked draw is captured once and
    replayed (the masks at fixed addresses); greedy tokens equal enforce_eager's, every document validates."""
    so = StructuredOutputs.json(SCHEMA)
    prompts = [[5 + i, 9, 11 * i % 900 + 3] for i in range(12)]
    greedy = SamplingParams(temperature=0, max_tokens=120, structured_outputs=so)
    outputs = {}
    for eager in (True, False):
        llm = LLM(model_dir, dtype="bfloat16", gpu_memory_utilization=0.2, max_num_seqs=16, enforce_eager=eager)
        outputs[eager] = [o.outputs[0].token_ids for o in llm.generate(prompts, greedy)]
    runner = llm.runner.decode_runner
    assert runner.masked_graphs and all(size in runner.sizes for size in runner.masked_graphs)
    assert outputs[False] == outputs[True]
    for tokens in outputs[False]:
        jsonschema.validate(json.loads(llm.tokenizer.decode(tokens, skip_special_tokens=True)), SCHEMA)
    captured = {size: id(graph) for size, (_, graph, _) in runner.masked_graphs.items()}
    hot = SamplingParams(temperature=1.0, max_tokens=120, structured_outputs=so)
    for out in llm.generate(prompts, hot):
        assert out.outputs[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.outputs[0].text), SCHEMA)
    again = {size: id(graph) for size, (_, graph, _) in runner.masked_graphs.items()}
    assert all(again[size] == graph for size, graph in captured.items())  # replayed, not captured again
