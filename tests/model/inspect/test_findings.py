"""`mopt inspect` on checkpoints broken in each way training leaves them: the right finding, its
severity and a fix; and inspect's load verdict agrees with the engine's loader on every one."""

from __future__ import annotations

import json

import pytest
import torch

from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.runtime.models.loader import load_model
from tests.model.inspect import broken as b


def _by_id(report):
    return {f.id: f for f in report.findings}


def _tokenizer_json_add(folder, content, token_id):
    data = json.loads((folder / "tokenizer.json").read_text())
    data["added_tokens"].append(
        {
            "id": token_id,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (folder / "tokenizer.json").write_text(json.dumps(data))


CASES = {
    # name: (tiny model, breaker, expected finding id, severity)
    "orig_mod": ("qwen3", lambda f: b.edit_tensors(f, b.add_prefix("_orig_mod.")), "leftovers.prefix", "error"),
    "ddp_module": ("llama3", lambda f: b.edit_tensors(f, b.add_prefix("module.")), "leftovers.prefix", "error"),
    "model_model": ("qwen2", lambda f: b.edit_tensors(f, b.add_prefix("model.")), "leftovers.prefix", "error"),
    "optimizer": ("qwen3", lambda f: b.edit_tensors(f, b.add_optimizer_state), "leftovers.optimizer_state", "error"),
    "ema": ("qwen3", lambda f: b.edit_tensors(f, b.add_ema), "leftovers.ema", "error"),
    "lora": ("qwen3", lambda f: b.edit_tensors(f, lambda sd: {**sd, **b.lora_factors(sd)}), "leftovers.lora", "error"),
    "fp32_linear": (
        "qwen3",
        lambda f: b.edit_tensors(f, b.to_dtype(torch.bfloat16, "self_attn")),
        "dtype.mixed",
        "warn",
    ),
    "no_chat_template": ("qwen3", lambda f: (f / "chat_template.jinja").unlink(), "chat_template.missing", "warn"),
    "eos_disagree": (
        "qwen3",
        lambda f: b.edit_json(f / "generation_config.json", eos_token_id=5),
        "tokens.eos_disagree",
        "warn",
    ),
    "pad_is_eos": ("qwen3", lambda f: b.edit_json(f / "config.json", pad_token_id=2), "tokens.pad_is_eos", "warn"),
    "pad_disagree": ("qwen3", lambda f: b.edit_json(f / "config.json", pad_token_id=7), "tokens.pad_disagree", "warn"),
    "tokenizer_larger": (
        "qwen3",
        lambda f: _tokenizer_json_add(f, "<|extra|>", 1100),
        "vocab.tokenizer_larger",
        "error",
    ),
    "config_vocab": ("qwen3", lambda f: b.edit_json(f / "config.json", vocab_size=2000), "vocab.config_rows", "error"),
    "special_absent": (
        "qwen3",
        lambda f: b.edit_json(f / "tokenizer_config.json", eos_token="<|nope|>"),
        "tokens.special_absent",
        "error",
    ),
    "rope_dynamic": (
        "qwen3",
        lambda f: b.edit_json(f / "config.json", rope_scaling={"rope_type": "dynamic", "factor": 4.0}),
        "rope.unsupported",
        "error",
    ),
    "architecture": (
        "qwen3",
        lambda f: b.edit_json(f / "config.json", architectures=["GPT2LMHeadModel"]),
        "model.architecture_unsupported",
        "error",
    ),
    "missing_weight": (
        "qwen3",
        lambda f: b.edit_tensors(f, lambda sd: {k: v for k, v in sd.items() if "layers.1.mlp.down" not in k}),
        "weights.missing",
        "error",
    ),
    "quantized": (
        "qwen3",
        lambda f: b.edit_json(f / "config.json", quantization_config={"quant_method": "awq", "bits": 4}),
        "quant.mismatch",
        "error",
    ),
    "quantized_unsupported": (
        "qwen3",
        lambda f: b.edit_json(f / "config.json", quantization_config={"quant_method": "gptq", "bits": 4}),
        "quant.unsupported",
        "error",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_checkpoint_is_reported_with_a_fix(fresh, case):
    model, breaker, finding_id, severity = CASES[case]
    folder = fresh(model)
    breaker(folder)
    report = inspect_checkpoint(folder)
    findings = _by_id(report)
    assert finding_id in findings, [f"{f.id}: {f.title}" for f in report.findings]
    assert findings[finding_id].severity == severity
    assert findings[finding_id].fix.get("any"), "every problem names its fix"
    assert report.exit_code == (1 if any(f.severity == "error" for f in report.findings) else 0)
    assert report.to_dict()["exit_code"] == report.exit_code


@pytest.mark.parametrize(
    "case",
    [
        "orig_mod",
        "ddp_module",
        "model_model",
        "optimizer",
        "ema",
        "lora",
        "config_vocab",
        "rope_dynamic",
        "architecture",
        "missing_weight",
        "fp32_linear",
    ],
)
def test_inspect_and_the_engine_loader_agree(fresh, case):
    model, breaker, _, _ = CASES[case]
    folder = fresh(model)
    breaker(folder)
    verdict = inspect_checkpoint(folder).raw_check.loads
    try:
        load_model(folder, "float32", torch.device("cpu"))
        loaded = True
    except (ValueError, KeyError):
        loaded = False
    assert verdict == loaded


def test_clean_checkpoints_pass(fresh):
    for name in ("qwen3", "llama3", "mistral", "qwen2"):
        report = inspect_checkpoint(fresh(name))
        assert report.exit_code == 0, [f"{f.id}: {f.title}" for f in report.findings if f.severity != "ok"]
        assert report.raw_check.loads
        assert report.census.total.params > 0


def test_fp32_norms_in_a_bf16_model_are_fine(fresh):
    folder = fresh("qwen3")
    b.edit_tensors(folder, lambda sd: {k: v if "norm" in k else v.to(torch.bfloat16) for k, v in sd.items()})
    findings = _by_id(inspect_checkpoint(folder))
    assert "dtype.mixed" not in findings
    assert findings["dtype.norms"].severity == "ok"


def test_chat_template_finding_names_the_family_template(fresh):
    folder = fresh("llama3")
    (folder / "chat_template.jinja").unlink()
    finding = _by_id(inspect_checkpoint(folder))["chat_template.missing"]
    assert finding.details["family_template"] == "llama3"
    assert "--chat-template llama3" in finding.fix["any"][0]


def test_context_longer_than_the_model_is_an_error(fresh):
    report = inspect_checkpoint(fresh("qwen3"), max_model_len=100_000)
    assert _by_id(report)["context.too_long"].severity == "error"
    assert report.exit_code == 1


def test_census_counts_kinds_and_dtypes(fresh):
    folder = fresh("llama3")
    b.edit_tensors(folder, b.to_dtype(torch.bfloat16, "mlp"))
    census = inspect_checkpoint(folder).census
    assert set(census.by_kind) == {"embedding", "attention", "mlp", "norm", "lm_head"}
    assert census.dtypes_by_kind["mlp"] == {"bfloat16": census.by_kind["mlp"].params}
    assert census.by_kind["mlp"].bytes == 2 * census.by_kind["mlp"].params
    assert census.total.bytes == sum(t.bytes for t in census.by_dtype.values())
    assert not census.tied_embeddings and census.lm_head_in_checkpoint


def _fix_commands(report) -> list[str]:
    return [c for f in report.findings for c in f.fix.get("any", []) if "--fix" in c]


def test_fix_closes_its_own_loop_for_junk_tensors(fresh, tmp_path):
    """A tensor no parameter takes is dropped by --fix, so following the advice once leaves nothing to fix."""
    import shlex

    from model_optimizer.cli.main import main

    folder = fresh("qwen3")
    b.edit_tensors(folder, lambda sd: {**b.add_optimizer_state(sd), "value_head.weight": torch.zeros(1, 64)})
    report = inspect_checkpoint(folder)
    found = _by_id(report)
    assert (
        found["leftovers.unconsumed"].severity == "error" and "value_head.weight" in found["leftovers.unconsumed"].title
    )
    assert report.exit_code == 1 and report.clean_check.loads
    (command,) = set(_fix_commands(report))
    argv = shlex.split(command)
    assert argv[:2] == ["mopt", "inspect"] and argv[3] == "--fix"
    out = tmp_path / "clean"
    assert main(["inspect", str(folder), "--fix", str(out)]) == 0
    after = inspect_checkpoint(out)
    assert after.exit_code == 0 and not _fix_commands(after), [f.title for f in after.findings if f.severity != "ok"]


def test_junk_is_not_dropped_from_a_checkpoint_of_another_model(fresh):
    folder = fresh("qwen3")
    b.edit_tensors(
        folder, lambda sd: {**{k: v for k, v in sd.items() if "layers.1.mlp" not in k}, "extra.weight": torch.zeros(2)}
    )
    report = inspect_checkpoint(folder)
    assert "leftovers.unconsumed" not in _by_id(report)  # parameters are missing: dropping would not make it load
    assert {"weights.unexpected", "weights.missing"} <= set(_by_id(report))


def test_pad_equal_to_eos_gets_fix_only_when_fix_can_move_it(fresh):
    folder = fresh("qwen3")
    b.edit_json(folder / "tokenizer_config.json", pad_token="<|im_end|>")  # pad = the eos that ends examples
    found = _by_id(inspect_checkpoint(folder))["tokens.pad_is_eos"]
    assert found.details["pad_candidate"] == "<|endoftext|>" and "--fix" in found.fix["any"][0]
    b.edit_json(folder / "generation_config.json", eos_token_id=[2, 0])  # now every pad-like token stops generation
    found = _by_id(inspect_checkpoint(folder))["tokens.pad_is_eos"]
    assert found.details["pad_candidate"] is None and not any("--fix" in c for c in found.fix["any"])


def test_an_extra_stop_id_may_be_the_pad_and_config_may_list_fewer_eos(fresh):
    """How Qwen2.5 and Llama 3 ship: generation_config.json adds stop ids to config.json's, and the pad is
    one of the extra ones (<|endoftext|>), not the eos that ends chat turns."""
    folder = fresh("qwen3")
    b.edit_json(folder / "generation_config.json", eos_token_id=[2, 0], pad_token_id=0)
    b.edit_json(folder / "config.json", eos_token_id=2, pad_token_id=0)
    report = inspect_checkpoint(folder)
    assert report.exit_code == 0
    assert not {"tokens.eos_disagree", "tokens.pad_is_eos"} & set(_by_id(report))
    b.edit_json(folder / "config.json", eos_token_id=9)  # an id the engine does not stop on: still reported
    assert _by_id(inspect_checkpoint(folder))["tokens.eos_disagree"].severity == "warn"


def test_the_built_in_model_passes_its_own_inspection(capsys):
    from model_optimizer.assets import REFERENCE_MODEL_DIR
    from model_optimizer.cli.main import main
    from model_optimizer.model.inspect.context import clean_copy_path

    report = inspect_checkpoint(REFERENCE_MODEL_DIR)
    assert report.exit_code == 0 and {f.severity for f in report.findings} == {"ok"}, [
        f.title for f in report.findings if f.severity != "ok"
    ]
    assert main(["inspect", str(REFERENCE_MODEL_DIR)]) == 0
    capsys.readouterr()
    # advice never writes into the installed package: a clean copy of the built-in model goes to the cwd
    assert clean_copy_path(REFERENCE_MODEL_DIR) == __import__("pathlib").Path("pydoc-qwen3-clean")


def test_a_tensor_of_the_wrong_shape_is_not_also_missing(fresh):
    """config.json's hidden size disagrees with the weights: each such tensor is named once, as misshapen
    (it was also listed under weights.missing, which sent users looking for absent shards)."""
    folder = fresh("qwen3")
    hidden = json.loads((folder / "config.json").read_text())["hidden_size"]
    b.edit_json(folder / "config.json", hidden_size=hidden * 2)
    report = inspect_checkpoint(folder)
    findings = _by_id(report)
    assert "weights.shape" in findings and "weights.missing" not in findings, list(findings)
    check = report.raw_check
    assert check.misshapen and not check.missing and not check.loads


def test_gemma3_without_the_tie_key_is_tied_as_the_engine_ties_it(fresh):
    """Gemma 3's config class ties lm_head to the embedding by default, and so does the engine's model:
    the census read config.json's missing key as False and said 'tied embeddings: no'."""
    from transformers import AutoConfig

    folder = fresh("gemma3")
    b.edit_json(folder / "config.json", tie_word_embeddings=None)  # the key removed, as many configs ship
    assert AutoConfig.from_pretrained(folder).tie_word_embeddings  # transformers' reading of the same file
    report = inspect_checkpoint(folder)
    assert report.raw_check.tied_embeddings and report.census.tied_embeddings
    assert report.to_dict()["census"]["tied_embeddings"] and not report.census.lm_head_in_checkpoint
    assert report.raw_check.loads
