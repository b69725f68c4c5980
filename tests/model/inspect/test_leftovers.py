"""Key classification: every training-leftover spelling we know, and PEFT's full layout end to end."""

from __future__ import annotations

import pytest

from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.leftovers import classify
from tests.model.inspect import broken as b

W = "model.layers.0.self_attn.q_proj.weight"


@pytest.mark.parametrize(
    ("name", "kind", "clean"),
    [
        (W, "weight", W),
        ("_orig_mod." + W, "weight", W),
        ("module._orig_mod." + W, "weight", W),
        ("model._orig_mod.layers.0.self_attn.q_proj.weight", "weight", W),
        ("model." + W, "weight", W),
        ("base_model.model." + W, "weight", W),
        ("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight", "weight", W),
        ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", "lora_A", W),
        ("model.layers.0.self_attn.q_proj.lora_B.weight", "lora_B", W),
        ("optimizer.state.3.exp_avg_sq", "optimizer", None),
        ("model.layers.0.mlp.up_proj.weight.exp_avg", "optimizer", None),
        ("ema.model.layers.0.mlp.up_proj.weight", "ema", None),
        ("model_ema." + W, "ema", None),
        ("lm_head.weight", "weight", "lm_head.weight"),
    ],
)
def test_classify(name, kind, clean):
    key = classify(name)
    assert (key.kind, key.clean) == (kind, clean)


def test_peft_layout_is_cleaned_to_what_the_engine_loads(fresh):
    """PEFT saves base weights under `base_model.model.` and `.base_layer`, adapters as `lora_A.default`."""
    folder = fresh("qwen3")

    def peft(sd):
        out = {}
        for k, v in sd.items():
            target = k.replace(".weight", ".base_layer.weight") if k.endswith(("q_proj.weight", "v_proj.weight")) else k
            out["base_model.model." + target] = v
        for k, v in b.lora_factors(sd).items():
            out["base_model.model." + k.replace(".weight", ".default.weight")] = v
        return out

    b.edit_tensors(folder, peft)
    report = inspect_checkpoint(folder)
    assert not report.raw_check.loads and report.clean_check.loads
    assert {"leftovers.prefix", "leftovers.lora"} <= {f.id for f in report.findings}
