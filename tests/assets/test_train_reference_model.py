"""scripts/train_reference_model.py and scripts/install_reference_model.py end to end on the
CPU: a tiny model trained for a few steps on the small fixture corpus, installed, reloaded."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import load_script
from transformers import AutoModelForCausalLM, AutoTokenizer

TINY = [
    "--device",
    "cpu",
    "--sweep-steps",
    "2,3",
    "--batch-size",
    "2",
    "--seq-len",
    "32",
    "--num-layers",
    "1",
    "--hidden-size",
    "32",
    "--intermediate-size",
    "64",
    "--num-heads",
    "2",
    "--num-kv-heads",
    "1",
    "--head-dim",
    "16",
    "--warmup-steps",
    "1",
    "--log-every",
    "1",
    "--eval-every",
    "2",
    "--sample-tokens",
    "3",
    "--max-shard-size",
    "8KB",
]


@pytest.fixture(scope="module")
def run_dir(tokenized, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    rc = load_script("train_reference_model").main(
        [
            "--tokens-dir",
            str(tokenized["tokens"]),
            "--tokenizer-dir",
            str(tokenized["tokenizer"]),
            "--output-dir",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0
    return out


def test_metrics_report_sweep_perplexities_and_samples(run_dir):
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert [r["steps"] for r in metrics["runs"]] == [2, 3]
    assert metrics["best_run"]["val_loss"] == min(r["val_loss"] for r in metrics["runs"])
    assert metrics["unigram_val_perplexity"] > 1.0 and metrics["val_perplexity"] > 1.0
    ratio = metrics["val_perplexity"] / metrics["unigram_val_perplexity"]
    assert metrics["perplexity_ratio_to_unigram"] == pytest.approx(ratio, rel=1e-3)
    assert {(s["kind"], s["mode"]) for s in metrics["samples"]} == {
        ("text", "greedy"),
        ("text", "sampled"),
        ("chat", "greedy"),
        ("chat", "sampled"),
    }
    chat_prompt = next(s["prompt"] for s in metrics["samples"] if s["kind"] == "chat")
    assert chat_prompt.startswith("<|im_start|>user\n") and chat_prompt.endswith("<|im_start|>assistant\n")


def test_model_folder_is_sharded_bf16_qwen3(run_dir):
    folder = run_dir / "model"
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"] and config["torch_dtype"] == "bfloat16"
    assert config["tie_word_embeddings"] is True
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    generation = json.loads((folder / "generation_config.json").read_text())
    assert sorted(generation["eos_token_id"]) == [0, 2]


def test_install_merges_shards_and_writes_card(run_dir, tokenized, tmp_path):
    target = tmp_path / "asset"
    rc = load_script("install_reference_model").main(
        [
            "--from",
            str(run_dir),
            "--to",
            str(target),
            "--tokenizer-dir",
            str(tokenized["tokenizer"]),
            "--corpus-stats",
            str(tmp_path / "missing.json"),
        ]
    )
    assert rc == 0
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [
            "README.md",
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
            "training_metrics.json",
        ]
    )
    metrics = json.loads((run_dir / "metrics.json").read_text())
    card = (target / "README.md").read_text()
    assert f"| this model | {metrics['val_perplexity']} |" in card
    assert "TODO" in card  # corpus stats were not given, and the card says so
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    sharded = AutoModelForCausalLM.from_pretrained(str(run_dir / "model"))
    merged = AutoModelForCausalLM.from_pretrained(str(target))
    torch.testing.assert_close(merged(input_ids=ids).logits, sharded(input_ids=ids).logits, rtol=0, atol=0)
    tok = AutoTokenizer.from_pretrained(str(target))
    out = merged.generate(tok("The", return_tensors="pt").input_ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] >= 2


def test_install_rejects_a_folder_without_a_model(tmp_path, capsys):
    assert load_script("install_reference_model").main(["--from", str(tmp_path), "--to", str(tmp_path / "x")]) == 2
    assert "config.json" in capsys.readouterr().err


def test_missing_tokens_is_a_clear_error(tmp_path, capsys):
    rc = load_script("train_reference_model").main(
        ["--tokens-dir", str(tmp_path), "--output-dir", str(tmp_path), *TINY]
    )
    assert rc == 2
    assert "train_tokenizer.py" in capsys.readouterr().err


def test_bad_sweep_is_rejected():
    with pytest.raises(SystemExit) as exc:
        load_script("train_reference_model").main(["--sweep-steps", "0", *TINY[:2]])
    assert exc.value.code == 2
