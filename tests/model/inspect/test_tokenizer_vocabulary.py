"""A tokenizer counts as present only with a vocabulary: the files that merely configure one
(tokenizer_config.json, a chat template) are named as what they are, with the severity of the engine's
own failure, and every vocabulary format (tokenizer.model, *.tiktoken) is listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.tokenizer_files import read_tokenizer
from model_optimizer.runtime.models.tokenizer import load_tokenizer


def _by_id(report):
    return {f.id: f for f in report.findings}


def _keep_only(folder: Path, *names: str) -> None:
    """Delete every tokenizer file of the tiny checkpoint but `names`."""
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if name not in names:
            (folder / name).unlink()


def test_tokenizer_config_alone_is_an_error_naming_the_missing_vocabulary(fresh):
    """The reviewer's folder: tokenizer_config.json and no tokenizer.json. Inspect said 'ok'; the engine
    then failed to load any tokenizer, so generate, serve and quantize stopped."""
    folder = fresh("qwen3")
    _keep_only(folder, "tokenizer_config.json")
    with pytest.raises(FileNotFoundError, match="no usable tokenizer"):
        load_tokenizer(folder, required=False)  # the engine tries, and fails
    report = inspect_checkpoint(folder)
    found = _by_id(report)
    assert "tokenizer.present" not in found and report.exit_code == 1
    finding = found["tokenizer.no_vocabulary"]
    assert finding.severity == "error" and "no tokenizer.json" in finding.title
    assert "tokenizer_config.json" in finding.title and finding.details["missing"] == "tokenizer.json"


def test_a_chat_template_alone_is_no_tokenizer_and_the_engine_runs_without_one(fresh):
    folder = fresh("qwen3")
    _keep_only(folder, "chat_template.jinja")
    assert load_tokenizer(folder, required=False) is None  # token-id prompts only: a warning, not an error
    found = _by_id(inspect_checkpoint(folder))
    finding = found["tokenizer.missing"]
    assert finding.severity == "warn" and "(only chat_template.jinja): no tokenizer.json" in finding.title
    assert not {"tokenizer.present", "chat_template.present"} & set(found)


def test_vocab_json_needs_its_merges(fresh):
    folder = fresh("qwen3")
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    _keep_only(folder, "tokenizer_config.json")
    (folder / "vocab.json").write_text(json.dumps(vocab))
    facts = read_tokenizer(folder)
    assert not facts.present and facts.missing_file == "merges.txt"
    assert "no merges.txt" in _by_id(inspect_checkpoint(folder))["tokenizer.no_vocabulary"].title
    (folder / "merges.txt").write_text("#version: 0.2\n")
    facts = read_tokenizer(folder)
    assert facts.present and facts.vocabulary_file == "vocab.json" and "merges.txt" in facts.files


@pytest.mark.parametrize("vocabulary", ["tokenizer.model", "qwen.tiktoken"])
def test_sentencepiece_and_tiktoken_vocabularies_are_listed_and_count(fresh, vocabulary):
    """tokenizer.model was not even listed; neither it nor a *.tiktoken counted as a vocabulary. Their
    tokens are not read here, so no token is reported absent from them."""
    folder = fresh("qwen3")
    _keep_only(folder, "tokenizer_config.json", "chat_template.jinja")
    (folder / vocabulary).write_bytes(b"\x0a\x05<unk>")  # never parsed: only its presence counts
    report = inspect_checkpoint(folder)
    found = _by_id(report)
    assert found["tokenizer.present"].severity == "ok" and vocabulary in found["tokenizer.present"].title
    assert "tokens.special_absent" not in found and report.exit_code == 0


def test_tokenizer_model_beside_tokenizer_json_is_listed(fresh):
    folder = fresh("qwen3")
    (folder / "tokenizer.model").write_bytes(b"\x0a\x05<unk>")
    facts = read_tokenizer(folder)
    assert facts.vocabulary_file == "tokenizer.json" and "tokenizer.model" in facts.files
