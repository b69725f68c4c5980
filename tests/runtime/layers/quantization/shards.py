"""What a loaded quantized model's layers multiply by, per checkpoint module name: shared by the layout tests."""

from __future__ import annotations

import torch

from model_optimizer.runtime.layers.quantization.attach import quantized_layers


def dequantized_shards(model) -> dict[str, torch.Tensor]:
    """Checkpoint module name -> the float weight our loaded layer multiplies by."""
    unstack = {(ours, shard): theirs for theirs, (ours, shard) in model.stacked_params.items()}
    result = {}
    for name, layer in quantized_layers(model):
        w = layer.quant_method.dequantize(layer)
        for shard, (start, size) in getattr(layer, "shard_offsets", {None: (0, layer.out_features)}).items():
            key = name
            if shard is not None:
                ours = next(o for (o, s) in unstack if s == shard and o in name + ".")
                key = (name + ".").replace(ours, unstack[(ours, shard)])[:-1]
            result[key] = w[start : start + size]
    return result
