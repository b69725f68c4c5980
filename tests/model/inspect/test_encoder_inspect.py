"""`mopt inspect` on an encoder (BERT family, served for embeddings): its keys are checked the way the
embedding engine loads them, and the generation rules (rope, eos, chat template) stay silent."""

from __future__ import annotations

import json

import pytest

from model_optimizer.cli.main import main
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.runtime.embed import Embedder
from tests.model.inspect import broken as b
from tests.tiny_checkpoints import build_encoder, minilm_or_tiny_encoder

GENERATION_RULES = ("rope.", "tokens.eos", "chat_template.", "model.architecture")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return build_encoder(tmp_path_factory.mktemp("encoder") / "bert")


def _ids(report) -> dict[str, str]:
    return {f.id: f.severity for f in report.findings}


def test_a_sound_encoder_passes_with_its_keys_checked(encoder):
    report = inspect_checkpoint(encoder)
    ids = _ids(report)
    assert report.exit_code == 0, report.findings
    assert ids["model.encoder"] == "ok" and ids["weights.consumed"] == "ok"
    assert not [i for i in ids if i.startswith(GENERATION_RULES)]
    assert report.raw_check.model_class == "BertModel" and not report.raw_check.missing
    assert "embeddings.position_ids" in report.raw_check.skipped or not any(
        t.name.endswith("position_ids") for t in report.checkpoint.tensors
    )


def test_the_real_minilm_passes_from_the_command_line(tmp_path, capsys):
    folder = minilm_or_tiny_encoder(tmp_path)  # its int64 position_ids buffer is no quantized weight
    assert main(["inspect", str(folder), "--json"]) == 0
    assert '"model.encoder"' in capsys.readouterr().out


@pytest.mark.parametrize(
    "edit,finding",
    [
        (
            lambda sd: {k: v for k, v in sd.items() if k != "encoder.layer.0.attention.self.query.weight"},
            "weights.missing",
        ),
        (lambda sd: {**sd, "encoder.layer.0.extra.weight": sd["pooler.dense.weight"].clone()}, "leftovers.unconsumed"),
    ],
)
def test_a_broken_encoder_is_an_error_the_embedding_loader_agrees_with(encoder, tmp_path, edit, finding):
    folder = b.copy_model(encoder, tmp_path / "bert")
    b.edit_tensors(folder, edit)
    report = inspect_checkpoint(folder)
    assert _ids(report)[finding] == "error" and report.exit_code == 1
    with pytest.raises(ValueError):
        Embedder(str(folder), device="cpu")


def test_a_prefixed_masked_lm_checkpoint_loads_as_the_engine_reads_it(encoder, tmp_path):
    folder = b.copy_model(encoder, tmp_path / "bert")
    b.edit_tensors(folder, b.add_prefix("bert."))
    b.edit_json(folder / "config.json", architectures=["BertForMaskedLM"])
    report = inspect_checkpoint(folder)
    assert report.exit_code == 0, report.findings
    assert _ids(report)["weights.consumed"] == "ok"


def test_fix_drops_what_the_encoder_does_not_take_and_the_result_embeds_the_same(encoder, tmp_path):
    from model_optimizer.model.inspect.fix import FixOptions, fix_checkpoint

    folder = b.copy_model(encoder, tmp_path / "bert")
    b.edit_tensors(folder, lambda sd: {**sd, "encoder.layer.0.extra.weight": sd["pooler.dense.weight"].clone()})
    fixed = tmp_path / "fixed"
    fix_checkpoint(folder, fixed, FixOptions())
    assert inspect_checkpoint(fixed).exit_code == 0
    text = ["a short text to embed"]
    assert Embedder(str(fixed), device="cpu").embed(text) == Embedder(str(encoder), device="cpu").embed(text)


def test_an_encoder_named_by_model_type_alone_is_an_encoder(encoder, tmp_path):
    """Older BERT folders have no 'architectures', only model_type; the engine loads them as BertModel."""
    folder = b.copy_model(encoder, tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    config.pop("architectures")
    (folder / "config.json").write_text(json.dumps(config))
    report = inspect_checkpoint(folder)
    assert report.exit_code == 0, report.findings
    assert "BertModel" in {f.id: f for f in report.findings}["model.encoder"].title
    Embedder(str(folder), device="cpu")  # the engine agrees
