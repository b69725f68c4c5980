"""Read a tokenizer folder's facts from its files (no transformers, no tokenizer object): the
vocabulary, the special tokens by role, and the chat template, wherever transformers 4 or 5 put it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.common.fileio import read_json

ROLES = ("bos", "eos", "pad", "unk")
READ_VOCABULARIES = ("tokenizer.json", "vocab.json", "vocab.txt")
"""Vocabulary files read here (token -> id); tokenizer.model and *.tiktoken are binary or need their
tokenizer's own library: they count as a vocabulary, but their tokens are not read."""
VOCABULARY_SOURCES = "tokenizer.json, vocab.json + merges.txt, vocab.txt, tokenizer.model or a *.tiktoken file"
"""What a folder needs for a tokenizer to be built at all (tokenizer_config.json alone only configures one)."""


@dataclass
class TokenizerFacts:
    """What the checks need to know about a tokenizer."""

    files: list[str] = field(default_factory=list)
    """Tokenizer files found in the folder."""
    vocabulary_file: str | None = None
    """The file the tokenizer's vocabulary comes from; None: there is none, and no tokenizer can be built."""
    vocab: dict[str, int] = field(default_factory=dict)
    """Token -> id, the model vocabulary plus added tokens."""
    special_tokens: dict[str, str | None] = field(default_factory=dict)
    """Role (bos, eos, pad, unk) -> token text, from tokenizer_config.json / special_tokens_map.json."""
    extra_special_tokens: list[str] = field(default_factory=list)
    chat_template: str | None = None
    chat_template_source: str | None = None
    """The file the template came from."""

    @property
    def present(self) -> bool:
        """A tokenizer can be built: the folder has a vocabulary, not just its settings or chat template."""
        return self.vocabulary_file is not None

    @property
    def vocab_read(self) -> bool:
        """`vocab` holds the whole vocabulary, not only the added tokens of tokenizer_config.json."""
        return self.vocabulary_file in READ_VOCABULARIES

    @property
    def missing_file(self) -> str | None:
        """The file whose absence leaves the folder without a vocabulary; None when it has one."""
        if self.present:
            return None
        return "merges.txt" if "vocab.json" in self.files else "tokenizer.json"

    @property
    def vocab_len(self) -> int:
        """Ids the tokenizer can emit: one past the largest id (ids need not be dense)."""
        return max(self.vocab.values(), default=-1) + 1

    def token_id(self, role: str) -> int | None:
        token = self.special_tokens.get(role)
        return None if token is None else self.vocab.get(token)


def read_tokenizer(folder: Path) -> TokenizerFacts:
    facts = TokenizerFacts()
    config = _json_if(folder / "tokenizer_config.json", facts)
    special_map = _json_if(folder / "special_tokens_map.json", facts)
    _read_vocabulary(folder, facts)
    with _malformed(folder / "tokenizer_config.json", "its added_tokens_decoder and special tokens"):
        for token_id, entry in (config.get("added_tokens_decoder") or {}).items():
            facts.vocab.setdefault(str(entry.get("content")), int(token_id))
        for role in ROLES:
            key = f"{role}_token"
            value = config.get(key, special_map.get(key))
            facts.special_tokens[role] = _token_text(value)
        extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
        facts.extra_special_tokens = [
            t for t in (_token_text(x) for x in (extra.values() if isinstance(extra, dict) else extra)) if t
        ]
    facts.chat_template, facts.chat_template_source = _chat_template(folder, config, facts)
    return facts


def _read_vocabulary(folder: Path, facts: TokenizerFacts) -> None:
    """The first vocabulary of tokenizer.json, vocab.json (a BPE one needs merges.txt beside it), vocab.txt;
    else tokenizer.model (sentencepiece) or a *.tiktoken file, listed but not read."""
    tokenizer = _json_if(folder / "tokenizer.json", facts)
    if tokenizer:
        facts.vocabulary_file = "tokenizer.json"
        with _malformed(folder / "tokenizer.json", "its model.vocab and added_tokens"):
            facts.vocab = _tokenizer_json_vocab(tokenizer)
    elif (folder / "vocab.json").is_file():
        facts.files.append("vocab.json")
        with _malformed(folder / "vocab.json", "an object of token -> id"):
            facts.vocab = {str(k): int(v) for k, v in read_json(folder / "vocab.json").items()}
        if (folder / "merges.txt").is_file():
            facts.files.append("merges.txt")
            facts.vocabulary_file = "vocab.json"
    elif (folder / "vocab.txt").is_file():
        facts.files.append("vocab.txt")
        facts.vocabulary_file = "vocab.txt"
        with _malformed(folder / "vocab.txt", "UTF-8 text, one token a line"):
            lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
        facts.vocab = {line.rstrip("\n"): i for i, line in enumerate(lines)}
    unread = [p.name for p in [folder / "tokenizer.model", *sorted(folder.glob("*.tiktoken"))] if p.is_file()]
    facts.files.extend(unread)
    if facts.vocabulary_file is None and unread:
        facts.vocabulary_file = unread[0]


@contextmanager
def _malformed(path: Path, expected: str) -> Iterator[None]:
    """A file of the wrong shape (a list where an object belongs, an id that is not a number) is the
    user's file to repair: a ValueError naming it, not a traceback from deep in the parsing."""
    try:
        yield
    except (AttributeError, TypeError, ValueError, KeyError, IndexError) as exc:
        raise ValueError(f"{path} is malformed: expected {expected} ({type(exc).__name__}: {exc})") from None


def _json_if(path: Path, facts: TokenizerFacts) -> dict:
    if not path.is_file():
        return {}
    facts.files.append(path.name)
    value = read_json(path)
    if not isinstance(value, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return value


def _tokenizer_json_vocab(data: dict) -> dict[str, int]:
    """tokenizers' tokenizer.json: BPE and WordPiece keep a dict, Unigram a list of [piece, score]."""
    model_vocab = (data.get("model") or {}).get("vocab") or {}
    if isinstance(model_vocab, list):
        vocab = {str(entry[0]): i for i, entry in enumerate(model_vocab)}
    else:
        vocab = {str(k): int(v) for k, v in model_vocab.items()}
    for entry in data.get("added_tokens") or []:
        vocab[str(entry.get("content"))] = int(entry.get("id"))
    return vocab


def _token_text(value: object) -> str | None:
    """Special tokens are saved as a string or as an AddedToken dict with 'content'."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _chat_template(folder: Path, config: dict, facts: TokenizerFacts) -> tuple[str | None, str | None]:
    """transformers 5 writes chat_template.jinja; older saves keep it in tokenizer_config.json
    (a string, or a list of named templates of which 'default' is used) or chat_template.json."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        facts.files.append(jinja.name)
        with _malformed(jinja, "UTF-8 text"):
            return jinja.read_text(encoding="utf-8"), jinja.name
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str):
        return template, "tokenizer_config.json"
    path = folder / "chat_template.json"
    if path.is_file():
        facts.files.append(path.name)
        try:
            value = json.loads(path.read_text()).get("chat_template")
        except (json.JSONDecodeError, AttributeError):
            raise ValueError(f"{path} must be a JSON object with a 'chat_template' string") from None
        return (value, path.name) if isinstance(value, str) else (None, None)
    return None, None
