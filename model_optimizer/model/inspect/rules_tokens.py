"""Findings about tokens: tokenizer, chat template, eos/bos/pad agreement, vocabulary vs embedding,
special tokens, and the context length."""

from __future__ import annotations

from model_optimizer.environment.findings import Finding
from model_optimizer.model.inspect.context import InspectContext
from model_optimizer.model.inspect.leftovers import classify
from model_optimizer.model.inspect.tokenizer_files import VOCABULARY_SOURCES
from model_optimizer.runtime.models.chat_templates import family_template, shipped_templates
from model_optimizer.runtime.models.model_config import context_length as served_length
from model_optimizer.runtime.models.tokenizer import has_tokenizer_files

PAD_CANDIDATES = ("<pad>", "<|pad|>", "[PAD]", "<|finetune_right_pad_id|>", "<|endoftext|>", "<unk>")
"""Tokens --fix may make the pad token when pad equals eos, first present wins."""


def id_set(value: object) -> set[int]:
    if value is None:
        return set()
    values = value if isinstance(value, list) else [value]
    return {int(v) for v in values if isinstance(v, int) and not isinstance(v, bool)}


def sources(ctx: InspectContext, role: str) -> dict[str, set[int]]:
    """The ids each file gives a role; files that do not set it are left out."""
    ckpt, key = ctx.checkpoint, f"{role}_token_id"
    found = {}
    if ckpt.config.get(key) is not None:
        found["config.json"] = id_set(ckpt.config.get(key))
    if ckpt.generation_config and ckpt.generation_config.get(key) is not None:
        found["generation_config.json"] = id_set(ckpt.generation_config.get(key))
    token_id = ckpt.tokenizer.token_id(role)
    if token_id is not None:
        found["tokenizer"] = {token_id}
    return found


def config_eos(ctx: InspectContext) -> set[int]:
    """The ids transformers' generate stops on: generation_config.json's, else config.json's."""
    found = sources(ctx, "eos")
    return next((found[name] for name in ("generation_config.json", "config.json") if name in found), set())


def engine_eos(ctx: InspectContext) -> set[int]:
    """The engine's rule (llm.eos_token_ids), vLLM's: config_eos and the tokenizer's eos."""
    return config_eos(ctx) | sources(ctx, "eos").get("tokenizer", set())


def _describe(found: dict[str, set[int]]) -> str:
    return "; ".join(f"{name}: {sorted(ids)}" for name, ids in found.items())


def tokenizer(ctx: InspectContext) -> list[Finding]:
    tok = ctx.checkpoint.tokenizer
    if tok.present:
        size = f"{len(tok.vocab):,} tokens" if tok.vocab_read else f"vocabulary in {tok.vocabulary_file}"
        return [Finding("tokenizer.present", "ok", f"tokenizer: {size} ({', '.join(tok.files)})")]
    if has_tokenizer_files(ctx.checkpoint.folder):
        return [no_vocabulary(ctx)]
    only = f" (only {', '.join(tok.files)})" if tok.files else ""
    return [
        Finding(
            "tokenizer.missing",
            "warn",
            f"no tokenizer in the folder{only}: no {tok.missing_file}",
            f"Only token-id prompts work; text prompts and the chat endpoint need a tokenizer ({VOCABULARY_SOURCES}).",
            {
                "any": [
                    "Copy tokenizer.json and tokenizer_config.json from the base model",
                    "or serve with --tokenizer DIR",
                ]
            },
        )
    ]


def no_vocabulary(ctx: InspectContext) -> Finding:
    """Tokenizer files the engine tries to load (runtime/models/tokenizer.has_tokenizer_files) with no
    vocabulary among them: its load fails, so unlike a folder with no tokenizer at all (token-id prompts
    still work) nothing starts."""
    tok = ctx.checkpoint.tokenizer
    return Finding(
        "tokenizer.no_vocabulary",
        "error",
        f"tokenizer files without a vocabulary: {', '.join(tok.files)}, but no {tok.missing_file}",
        f"The engine fails to load this tokenizer (no usable tokenizer), so generate, serve and quantize stop "
        f"before the first prompt; a tokenizer needs {VOCABULARY_SOURCES}.",
        {"any": [f"Copy {tok.missing_file} from the base model", "or serve with --tokenizer DIR"]},
        {"missing": tok.missing_file, "files": tok.files},
    )


def chat_template(ctx: InspectContext) -> list[Finding]:
    tok = ctx.checkpoint.tokenizer
    if not tok.present or ctx.encoder:  # an encoder embeds text as given
        return []
    if tok.chat_template and tok.chat_template.strip():
        return [Finding("chat_template.present", "ok", f"chat template from {tok.chat_template_source}")]
    family = family_template(ctx.checkpoint.config)
    fix = ctx.fix_command("--chat-template", family or "FILE.jinja")
    named = (
        f"; the {ctx.checkpoint.config.get('model_type')} family uses our shipped '{family}' template" if family else ""
    )
    return [
        Finding(
            "chat_template.missing",
            "warn",
            "no chat template" + (" (empty)" if tok.chat_template is not None else "") + named,
            "/v1/chat/completions needs one to turn messages into a prompt; completions still work. "
            f"Shipped templates: {', '.join(shipped_templates())}.",
            {"any": [fix]},
            {"family_template": family},
        )
    ]


def eos(ctx: InspectContext) -> list[Finding]:
    if ctx.encoder:  # nothing is generated, so nothing has to stop
        return []
    found, engine = sources(ctx, "eos"), engine_eos(ctx)
    if not engine:
        return [
            Finding(
                "tokens.eos_missing",
                "error",
                "no eos token id in config.json, generation_config.json or the tokenizer",
                "Generation would only stop at max_tokens.",
                {"any": ["Set eos_token_id in generation_config.json"]},
            )
        ]
    tokenizer_eos, generation_eos = found.get("tokenizer", set()), config_eos(ctx)
    if generation_eos and tokenizer_eos - generation_eos:
        return [
            Finding(
                "tokens.eos_disagree",
                "warn",
                f"the tokenizer's eos {sorted(tokenizer_eos)} is not an eos id of the generation config "
                f"({_describe(found)})",
                "Chat templates end each turn with the tokenizer's eos. This engine and vLLM stop on it too, but "
                "transformers' generate (and tools that read generation_config.json) stop only on the config's ids, "
                "so their replies run on to max_tokens.",
                {"any": [ctx.fix_command()]},
                {"sources": {k: sorted(v) for k, v in found.items()}},
            )
        ]
    config_json_eos = found.get("config.json", set())
    if config_json_eos - engine:
        # generation_config.json adding stop ids to config.json's is how most chat models ship (Qwen2.5,
        # Llama 3): only an id of config.json's the engine does not stop on is a disagreement
        return [
            Finding(
                "tokens.eos_disagree",
                "warn",
                f"config.json's eos {sorted(config_json_eos - engine)} is not an eos id of the engine ({_describe(found)})",
                "The engine uses generation_config.json's; tools that read config.json stop elsewhere.",
                {"any": [ctx.fix_command()]},
                {"sources": {k: sorted(v) for k, v in found.items()}},
            )
        ]
    return [Finding("tokens.eos", "ok", f"eos ids {sorted(engine)} agree ({_describe(found)})")]


def bos_pad(ctx: InspectContext) -> list[Finding]:
    findings = []
    for role in ("bos", "pad"):
        found = sources(ctx, role)
        if len({frozenset(v) for v in found.values()}) > 1:
            findings.append(
                Finding(
                    f"tokens.{role}_disagree",
                    "warn",
                    f"{role} ids differ ({_describe(found)})",
                    "Tools disagree on which token " + ("starts a prompt." if role == "bos" else "pads a batch."),
                    {"any": [ctx.fix_command()]},
                    {"sources": {k: sorted(v) for k, v in found.items()}},
                )
            )
    findings.extend(pad_is_eos(ctx))
    return findings


def pad_is_eos(ctx: InspectContext) -> list[Finding]:
    """pad = the eos that ends training examples (the tokenizer's): a fine-tuning collator masks the pad
    positions out of the loss, and with them every eos. An extra stop id the engine also honours (Qwen's
    <|endoftext|> beside <|im_end|>) may well be the pad: nothing is trained to end with it."""
    found = sources(ctx, "pad")
    pad = set().union(*found.values()) if found else set()
    tokenizer_eos = ctx.checkpoint.tokenizer.token_id("eos")
    ends = {tokenizer_eos} if tokenizer_eos is not None else engine_eos(ctx)
    if not pad & ends:
        return []
    candidate = next(
        (t for t in PAD_CANDIDATES if ctx.checkpoint.tokenizer.vocab.get(t) not in (None, *engine_eos(ctx))), None
    )
    fix = (
        [ctx.fix_command()]  # --fix moves pad to `candidate` (token_alignment.aligned_ids)
        if candidate
        else ["Add a pad token to the tokenizer (e.g. <|pad|>) before fine-tuning; serving is not affected"]
    )
    return [
        Finding(
            "tokens.pad_is_eos",
            "warn",
            f"the pad token {sorted(pad & ends)} is also the eos token that ends each example",
            "A training-style setting: with pad = eos the eos positions are masked out of the loss, so a model "
            "fine-tuned this way may never learn to stop, and batch padding cannot be told from an end.",
            {"any": fix},
            {"pad": sorted(pad), "eos": sorted(ends), "pad_candidate": candidate},
        )
    ]


def embedding_rows(ctx: InspectContext) -> int | None:
    for info in ctx.checkpoint.tensors:
        key = classify(info.name)
        if key.kind == "weight" and key.clean in ("model.embed_tokens.weight",) and info.shape:
            return info.shape[0]
    return None


def vocab(ctx: InspectContext) -> list[Finding]:
    rows, config_vocab = embedding_rows(ctx), ctx.checkpoint.config.get("vocab_size")
    tok_len = ctx.checkpoint.tokenizer.vocab_len if ctx.checkpoint.tokenizer.vocab else None
    findings = []
    details = {"embedding_rows": rows, "config_vocab_size": config_vocab, "tokenizer_ids": tok_len}
    if rows is not None and config_vocab is not None and rows != config_vocab:
        findings.append(
            Finding(
                "vocab.config_rows",
                "error",
                f"config.json vocab_size {config_vocab} but the embedding has {rows} rows",
                "The engine builds its embedding from vocab_size, so the weights do not fit.",
                {"any": [ctx.fix_command()]},
                details,
            )
        )
    if rows is not None and tok_len is not None and tok_len > rows:
        findings.append(
            Finding(
                "vocab.tokenizer_larger",
                "error",
                f"the tokenizer has ids up to {tok_len - 1} but the embedding only {rows} rows",
                "A prompt with one of the extra tokens indexes past the embedding: a crash (device-side assert on a GPU).",
                {
                    "any": [
                        "Resize the embedding and lm_head to the tokenizer (transformers: model.resize_token_embeddings(len(tokenizer))) and fine-tune the new rows"
                    ]
                },
                details,
            )
        )
    ids = set().union(
        *(set().union(*sources(ctx, role).values()) for role in ("bos", "eos", "pad") if sources(ctx, role))
    )
    beyond = sorted(i for i in ids if rows is not None and i >= rows)
    if beyond:
        findings.append(
            Finding(
                "vocab.special_id_range",
                "error",
                f"special token ids {beyond} are beyond the embedding's {rows} rows",
                "Those ids cannot be embedded or sampled.",
                {"any": ["Correct the ids in config.json / generation_config.json"]},
                details,
            )
        )
    if not findings and rows is not None:
        spare = f", {rows - tok_len} spare rows" if tok_len is not None and rows > tok_len else ""
        findings.append(
            Finding("vocab.fits", "ok", f"vocabulary fits the embedding ({rows:,} rows{spare})", details=details)
        )
    return findings


def special_tokens(ctx: InspectContext) -> list[Finding]:
    tok = ctx.checkpoint.tokenizer
    if not tok.vocab_read:  # tokenizer.model's tokens are not read: absent from `vocab` says nothing
        return []
    absent = {role: text for role, text in tok.special_tokens.items() if text is not None and text not in tok.vocab}
    absent.update({f"extra {text}": text for text in tok.extra_special_tokens if text not in tok.vocab})
    if not absent:
        return []
    severity = "error" if "eos" in absent else "warn"
    listed = ", ".join(f"{role} {text!r}" for role, text in absent.items())
    return [
        Finding(
            "tokens.special_absent",
            severity,
            f"special tokens absent from the vocabulary: {listed}",
            "The tokenizer would split them into pieces or fail; an absent eos is never generated, so generation never stops.",
            {
                "any": [
                    "Add them to tokenizer.json's added_tokens, or correct tokenizer_config.json to tokens the vocabulary has"
                ]
            },
            {"absent": absent},
        )
    ]


def context_length(ctx: InspectContext) -> list[Finding]:
    config = ctx.checkpoint.config
    if not isinstance(config.get("max_position_embeddings"), int):
        return []
    max_pos = served_length(config)  # the engine's rule: YaRN stretches it
    if ctx.max_model_len is not None and ctx.max_model_len > max_pos:
        return [
            Finding(
                "context.too_long",
                "error",
                f"requested context {ctx.max_model_len:,} exceeds max_position_embeddings {max_pos:,}",
                "Positions past the trained range have no rotary table: the engine refuses this max_model_len.",
                {
                    "any": [
                        f"Serve with --max-model-len {max_pos}",
                        "or use a checkpoint trained (or rope-scaled) for the longer context",
                    ]
                },
                {"max_model_len": ctx.max_model_len, "max_position_embeddings": max_pos},
            )
        ]
    return [
        Finding(
            "context.fits",
            "ok",
            f"max_position_embeddings {max_pos:,}"
            + (f" covers the requested {ctx.max_model_len:,}" if ctx.max_model_len else ""),
        )
    ]


RULES = (tokenizer, chat_template, eos, bos_pad, vocab, special_tokens, context_length)
