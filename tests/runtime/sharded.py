"""What the sharded-model tests run on each rank: load a tiny checkpoint and run one prefill.

Kept apart from the test modules so every rank process imports only this (and the package), and so
the tp=1 reference runs the very same code in the test process.
"""

from __future__ import annotations

PROMPTS = [[5, 17, 300, 1023, 2, 64, 900], [1, 1030, 7, 8, 1000]]
"""Two prompts side by side; ids near the top of the vocabulary land in the last rank's block."""
BLOCK_SIZE = 4


def prefill_logits(
    model_dir: str,
    quantization: str | None = None,
    prompts: list[list[int]] = PROMPTS,
    device_type: str = "cpu",
    dtype: str = "float32",
):
    """Logits (tokens, vocab) of a prefill of `prompts` (on the CPU through the reference attention;
    with device_type "cuda" on this rank's GPU), with scratch KV caches sized from the model's local KV
    head count, as the runner sizes them. Returned on the CPU."""
    import torch

    from model_optimizer.runtime.distributed import get_tp
    from model_optimizer.runtime.layers.attention import AttentionMetadata
    from model_optimizer.runtime.models.loader import load_model

    device = torch.device("cuda", get_tp().rank) if device_type == "cuda" else torch.device("cpu")
    model = load_model(model_dir, dtype, device, quantization=quantization)
    args = model.args
    lengths = [len(p) for p in prompts]
    vocab = args.vocab_size
    token_ids = torch.tensor([t % vocab for p in prompts for t in p], dtype=torch.int64, device=device)
    positions = torch.cat([torch.arange(n) for n in lengths]).to(device)
    num_blocks = sum(-(-n // BLOCK_SIZE) for n in lengths)
    shape = (2, num_blocks, BLOCK_SIZE, model.local_num_kv_heads, args.head_dim)
    dtype = next(model.parameters()).dtype
    caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(args.num_layers)]
    meta = AttentionMetadata.for_prefill(lengths, BLOCK_SIZE, caches, device)
    with torch.inference_mode():
        return model.compute_logits(model(token_ids, positions, meta)).float().cpu()
