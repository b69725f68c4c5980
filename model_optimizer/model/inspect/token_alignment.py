"""The eos / bos / pad ids `--fix` writes, so config.json, generation_config.json and the tokenizer agree."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_optimizer.model.inspect.checkpoint import Checkpoint
from model_optimizer.model.inspect.rules_tokens import PAD_CANDIDATES, id_set


@dataclass
class TokenIds:
    eos: list[int] = field(default_factory=list)
    bos: int | None = None
    pad: int | None = None
    pad_token: str | None = None
    """The pad token's text when it changed (for tokenizer_config.json)."""
    notes: list[str] = field(default_factory=list)


def aligned_ids(ckpt: Checkpoint) -> TokenIds:
    """eos: the engine's ids plus the tokenizer's (chat turns end with it); bos and pad: the tokenizer's
    when it has one, else config.json's; a pad equal to the eos that ends examples moves to a distinct
    pad-like token."""
    config, gen, tok = ckpt.config, ckpt.generation_config or {}, ckpt.tokenizer
    ids = TokenIds()
    engine = gen.get("eos_token_id") if gen.get("eos_token_id") is not None else config.get("eos_token_id")
    ordered = list(engine) if isinstance(engine, list) else ([] if engine is None else [engine])
    tok_eos = tok.token_id("eos")
    if tok_eos is not None and tok_eos not in ordered:
        ordered.append(tok_eos)
        ids.notes.append(f"eos: added the tokenizer's {tok.special_tokens['eos']!r} ({tok_eos})")
    # "2", 3.5, true or null are no token ids (rules_generation.token_ids): int() made true token 1
    wrong = [i for i in ordered if not isinstance(i, int) or isinstance(i, bool)]
    if wrong:
        ids.notes.append(f"eos: dropped values that are not token ids: {wrong!r}")
    ids.eos = [i for i in ordered if i not in wrong]
    ids.bos = tok.token_id("bos") if tok.token_id("bos") is not None else _single(config.get("bos_token_id"))
    ids.pad = tok.token_id("pad") if tok.token_id("pad") is not None else _single(config.get("pad_token_id"))
    ends = [tok_eos] if tok_eos is not None else ids.eos  # the eos that ends examples (rules_tokens.pad_is_eos)
    if ids.pad is not None and ids.pad in ends:
        for text in PAD_CANDIDATES:
            candidate = tok.vocab.get(text)
            if candidate is not None and candidate not in ids.eos:
                ids.notes.append(f"pad: {ids.pad} was an eos id; now {text!r} ({candidate})")
                ids.pad, ids.pad_token = candidate, text
                break
        else:
            ids.notes.append(f"pad {ids.pad} equals an eos id and the vocabulary has no pad-like token to use instead")
    return ids


def _single(value: object) -> int | None:
    found = id_set(value)
    return min(found) if found else None


def apply_ids(config: dict, gen: dict | None, ids: TokenIds) -> None:
    """Write the aligned ids into config.json's and generation_config.json's dicts (in place)."""
    eos: int | list[int] = ids.eos[0] if len(ids.eos) == 1 else ids.eos
    for target in (config, gen):
        if target is None:
            continue
        if ids.eos:
            target["eos_token_id"] = eos
        if ids.bos is not None:
            target["bos_token_id"] = ids.bos
        if ids.pad is not None:
            target["pad_token_id"] = ids.pad
