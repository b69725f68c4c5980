"""`mopt inspect --fix`: the engine's greedy output on the cleaned folder equals transformers' on the
original checkpoint (after the same LoRA merge and prefix strip); the input is never touched; the
output appears complete or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat

import pytest
import torch
from safetensors.torch import load_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from model_optimizer.model.inspect.fix import FixOptions, fix_checkpoint
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from tests.model.inspect import broken as b

NUM_NEW = 16


def hf_greedy(model, prompt: list[int]) -> list[int]:
    """Argmax one token at a time: no generate(), so no eos or pad handling can differ."""
    ids = torch.tensor([prompt])
    out = []
    with torch.no_grad():
        for _ in range(NUM_NEW):
            token = int(model(ids).logits[0, -1].argmax())
            out.append(token)
            ids = torch.cat([ids, torch.tensor([[token]])], dim=1)
    return out


def reference(pristine, edit) -> torch.nn.Module:
    """transformers' model of the pristine checkpoint with `edit` applied to its state dict."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(pristine), dtype=torch.float32, attn_implementation="eager").eval()
    model.load_state_dict(edit(model.state_dict()))
    return model


def engine_greedy(folder, prompts) -> list[list[int]]:
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24)
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=NUM_NEW, ignore_eos=True))
    return [o.outputs[0].token_ids for o in outs]


def prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 1000) for _ in range(n)] for n in (1, 7, 30)]


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.slow
def test_lora_prefix_optimizer_ema_fixed_matches_transformers(tiny_model, fresh, tmp_path):
    pristine = tiny_model("qwen3")
    folder = fresh("qwen3")
    factors = b.lora_factors(load_file(str(pristine / "model.safetensors")), rank=4)
    b.edit_tensors(folder, lambda sd: {**sd, **factors})
    b.edit_tensors(folder, b.add_ema)
    b.edit_tensors(folder, b.add_optimizer_state)
    b.edit_tensors(folder, b.add_prefix("_orig_mod."))
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8}))  # scale 2
    before = digest(folder)
    out = tmp_path / "clean"
    result = fix_checkpoint(folder, out, FixOptions(dtype="float32"))
    assert digest(folder) == before, "the input folder must not change"
    assert len(result.merged_lora) == 4 and result.dropped
    assert inspect_checkpoint(out).exit_code == 0
    batch = prompts(1)
    ref = reference(pristine, lambda sd: b.merged(sd, factors, scale=2.0))
    assert engine_greedy(out, batch) == [hf_greedy(ref, p) for p in batch]
    unmerged = reference(pristine, lambda sd: sd)
    assert [hf_greedy(unmerged, p) for p in batch] != [hf_greedy(ref, p) for p in batch], "the merge must matter"


def test_mixed_dtype_and_ddp_prefix_fixed_matches_transformers(tiny_model, fresh, tmp_path):
    pristine = tiny_model("llama3")
    folder = fresh("llama3")
    b.edit_tensors(folder, b.to_dtype(torch.bfloat16, "self_attn"))
    b.edit_tensors(folder, b.add_prefix("module."))
    out = tmp_path / "clean"
    fix_checkpoint(folder, out, FixOptions(dtype="float32"))
    assert {t.dtype for t in inspect_checkpoint(out).checkpoint.tensors} == {"F32"}
    batch = prompts(2)
    ref = reference(
        pristine, lambda sd: {k: v.to(torch.bfloat16).float() if "self_attn" in k else v for k, v in sd.items()}
    )
    assert engine_greedy(out, batch) == [hf_greedy(ref, p) for p in batch]


def test_cli_fix_aligns_tokens_vocab_and_adds_the_chat_template(tiny_model, fresh, tmp_path, capsys):
    pristine = tiny_model("qwen2")
    folder = fresh("qwen2")
    b.edit_tensors(folder, b.add_prefix("model."))  # model.model.layers...
    b.edit_json(folder / "config.json", vocab_size=4096, pad_token_id=2)
    b.edit_json(folder / "generation_config.json", eos_token_id=7)
    (folder / "chat_template.jinja").unlink()
    assert main(["inspect", str(folder), "--json"]) == 1
    capsys.readouterr()
    out = tmp_path / "clean"
    saved = os.umask(0o022)
    try:
        code = main(
            ["inspect", str(folder), "--fix", str(out), "--chat-template", "chatml", "--dtype", "float32", "--json"]
        )
    finally:
        os.umask(saved)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [out, *out.iterdir()]}
    assert modes.pop("clean") == 0o755 and set(modes.values()) == {0o644}, modes  # a server's own uid reads it
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, [f["title"] for f in doc["output"]["findings"] if f["severity"] != "ok"]
    assert {f["severity"] for f in doc["output"]["findings"]} == {"ok"}
    config = json.loads((out / "config.json").read_text())
    generation = json.loads((out / "generation_config.json").read_text())
    assert config["vocab_size"] == 1031 and config["eos_token_id"] == generation["eos_token_id"] == [7, 2]
    assert config["pad_token_id"] == generation["pad_token_id"] == 0
    from transformers import AutoTokenizer

    text = AutoTokenizer.from_pretrained(str(out)).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    batch = prompts(3)
    assert engine_greedy(out, batch) == [hf_greedy(reference(pristine, lambda sd: sd), p) for p in batch]


def test_failed_fix_leaves_no_output(fresh, tmp_path):
    folder = fresh("qwen3")
    b.edit_tensors(folder, lambda sd: {**sd, **{k: v for k, v in b.lora_factors(sd).items() if "lora_A" in k}})
    out = tmp_path / "clean"
    with pytest.raises(ValueError, match="only lora_A"):
        fix_checkpoint(folder, out, FixOptions())
    assert not out.exists() and not list(tmp_path.glob(".clean.*"))


def test_fix_refuses_an_existing_folder_and_the_input_itself(fresh, tmp_path):
    folder = fresh("qwen3")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        fix_checkpoint(folder, tmp_path / "taken", FixOptions())
    with pytest.raises(ValueError, match="outside the input"):
        fix_checkpoint(folder, folder / "sub", FixOptions())
    assert (tmp_path / "taken" / "x").read_text() == "keep me"


def test_a_second_fix_into_one_folder_is_refused_while_the_first_runs(fresh, tmp_path):
    from model_optimizer.common.fileio import run_lock

    folder = fresh("qwen3")
    out = tmp_path / "clean"
    with run_lock(tmp_path / ".clean.lock", out, "mopt inspect --fix"):  # the first run, holding it
        with pytest.raises(ValueError, match="--fix .*clean is being written by another mopt inspect --fix run"):
            fix_checkpoint(folder, out, FixOptions())
    assert not out.exists() and not list(tmp_path.glob(".clean*"))
    fix_checkpoint(folder, out, FixOptions())  # once it is done, the folder is free
    assert (out / "config.json").is_file() and not list(tmp_path.glob(".clean*"))


def test_fix_carries_code_and_tokenizers_but_no_original_weights(fresh, tmp_path):
    """--fix and `mopt quantize` carry the same files (fix.carried_files): custom code and any tokenizer
    format, never the original's weights in another framework's format or their index."""
    folder = fresh("qwen3")
    (folder / "modeling_custom.py").write_text("# a trust_remote_code model's code\n")
    (folder / "qwen.tiktoken").write_text("IQ== 0\n")
    for name in ("pytorch_model.bin.index.json", "tf_model.h5"):
        (folder / name).write_text("{}")
    fix_checkpoint(folder, tmp_path / "clean", FixOptions())
    names = {p.name for p in (tmp_path / "clean").iterdir()}
    assert {"modeling_custom.py", "qwen.tiktoken", "tokenizer.json"} <= names
    assert not names & {"pytorch_model.bin.index.json", "tf_model.h5"}
