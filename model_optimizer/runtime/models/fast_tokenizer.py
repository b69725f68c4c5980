"""FastTokenizer: a model folder's tokenizer.json through the `tokenizers` library alone.

Importing transformers costs seconds (it pulls scikit-learn and torch.distributed; README
"Start-up"), which `mopt serve` paid only to wrap a tokenizer.json that the Rust library
loads in milliseconds. This class gives exactly what the engine, server, embedder, bench and quant
code use of transformers' tokenizer, with transformers' results (tests/runtime/models/test_fast_tokenizer.py
compares them): encode/decode with and without special tokens, the named special tokens, the
vocabulary, token strings, `__call__` for the embedder and calibration, and chat templates
(chat_render.py).

`open_fast_tokenizer` returns None with a reason whenever the folder holds something this class
does not reproduce (no tokenizer.json, a tokenizer class that rebuilds the pipeline, settings that
change behaviour, special tokens transformers would have to add); the caller then falls back to
AutoTokenizer, so an unusual tokenizer costs start-up time, never correctness.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from model_optimizer.runtime.models.chat_render import render_chat

GIL_FREE_CHARS = 1 << 16
"""Texts of this many characters or more are encoded with the GIL released (FastTokenizer.encode): the
HTTP frontend encodes in a worker thread beside its event loop."""
SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""The named special tokens, in transformers' order (its `special_tokens_map` and template variables)."""

SAME_PIPELINE_CLASSES = frozenset(
    {
        None,
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
        "Qwen2Tokenizer",
        "Qwen2TokenizerFast",
        "BertTokenizer",
        "BertTokenizerFast",
    }
)
"""tokenizer_class values whose transformers tokenizer runs the tokenizer.json pipeline unchanged
(the Qwen2 and BERT classes rebuild it, identically for their own files: the equivalence tests
cover both); any other class falls back to transformers."""

INERT_KEYS = frozenset(
    {
        *SPECIAL_TOKEN_NAMES,
        "added_tokens_decoder",
        "additional_special_tokens",
        "extra_special_tokens",
        "backend",
        "chat_template",
        "clean_up_tokenization_spaces",
        "errors",
        "model_max_length",
        "model_input_names",
        "name_or_path",
        "padding_side",
        "truncation_side",
        "processor_class",
        "tokenizer_class",
        "add_prefix_space",
        "split_special_tokens",
        "do_lower_case",
        "tokenize_chinese_chars",
        "strip_accents",
        "do_basic_tokenize",
        "never_split",
        "use_default_system_prompt",
        "spaces_between_special_tokens",
        "max_length",
        "stride",
        "truncation_strategy",
        "pad_to_multiple_of",
        "pad_token_type_id",
        "is_local",
        "vocab_file",
        "merges_file",
        "tokenizer_file",
    }
)
"""tokenizer_config.json keys this class honours or that do not change encode/decode/templates;
any other key (auto_map, add_prefix_space, legacy, ...) falls back to transformers."""


def open_fast_tokenizer(path: Path) -> tuple[FastTokenizer | None, str]:
    """(tokenizer, "") when this folder's tokenizer is reproduced exactly, else (None, why not)."""
    file = path / "tokenizer.json"
    if not file.is_file():
        return None, "no tokenizer.json"
    config = _read_json(path / "tokenizer_config.json")
    if config is None:
        return None, "no readable tokenizer_config.json"
    for name, value in (_read_json(path / "special_tokens_map.json") or {}).items():
        config.setdefault(name, value)
    reason = _unsupported(path, config)
    if reason:
        return None, reason
    from tokenizers import Tokenizer

    try:
        backend = Tokenizer.from_file(str(file))
    except Exception as exc:  # noqa: BLE001 - transformers will report what is wrong with the file
        return None, f"tokenizers cannot read tokenizer.json ({exc})"
    tokenizer = FastTokenizer(path, backend, config)
    missing = [t for t in tokenizer.special_tokens_map.values() if backend.token_to_id(t) is None]
    if missing:
        return None, f"special tokens {missing} are not in the vocabulary (transformers adds them)"
    if tokenizer.clean_up_tokenization_spaces and type(backend.model).__name__ != "BPE":
        return None, "clean_up_tokenization_spaces on a non-BPE tokenizer"
    return tokenizer, ""


class FastTokenizer:
    """What this code base uses of transformers' tokenizer, on a `tokenizers.Tokenizer`.

    `backend_tokenizer` runs with truncation and padding off, as transformers' encode does per
    call (a tokenizer.json may carry both: all-MiniLM-L6-v2's pads and cuts every text to 128)."""

    is_fast = True

    def __init__(self, path: Path, backend: Any, config: dict[str, Any]) -> None:
        self.name_or_path = str(path)
        self._path = path
        self.backend_tokenizer = backend
        backend.no_truncation()
        backend.no_padding()
        self.init_kwargs = config
        self._special = {name: _content(config.get(name)) for name in SPECIAL_TOKEN_NAMES}
        extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
        self.extra_special_tokens = [_content(t) for t in extra] if isinstance(extra, list) else []
        self.model_max_length = int(config.get("model_max_length") or 1e30)
        self.truncation_side = config.get("truncation_side", "right")
        self.padding_side = config.get("padding_side", "right")
        self.clean_up_tokenization_spaces = bool(config.get("clean_up_tokenization_spaces", False))
        self.chat_template = _chat_template(path, config)

    # -- special tokens ---------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        """bos_token ... mask_token and their *_id: None when the tokenizer has none."""
        special = self.__dict__.get("_special", {})
        if name in SPECIAL_TOKEN_NAMES:
            return special.get(name)
        if name.endswith("_id") and name[:-3] in SPECIAL_TOKEN_NAMES:
            token = special.get(name[:-3])
            return None if token is None else self.backend_tokenizer.token_to_id(token)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {name: token for name, token in self._special.items() if token is not None}

    @property
    def all_special_tokens(self) -> list[str]:
        tokens = [*self.special_tokens_map.values(), *self.extra_special_tokens]
        return list(dict.fromkeys(tokens))

    @property
    def all_special_ids(self) -> list[int]:
        return [self.backend_tokenizer.token_to_id(t) for t in self.all_special_tokens]

    # -- vocabulary -------------------------------------------------------------------------------

    def get_vocab(self) -> dict[str, int]:
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    @property
    def vocab_size(self) -> int:
        """The base vocabulary, without added tokens (transformers' meaning)."""
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=False)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | list[str] | None:
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | None | list[int | None]:
        if isinstance(tokens, str):
            return self.backend_tokenizer.token_to_id(tokens)
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """Token strings back to text through the tokenizer's decoder (byte-level, WordPiece ##, ...)."""
        decoder = self.backend_tokenizer.decoder
        return decoder.decode(tokens) if decoder is not None else " ".join(tokens)

    # -- encode / decode --------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """The text's token ids. A long text goes through `encode_batch_fast`, which releases the GIL while
        it encodes (`encode` holds it: 8 MB of text froze a server's other requests for ~5 s) and skips the
        offsets; the ids are the same."""
        if len(text) < GIL_FREE_CHARS:
            return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        return self.backend_tokenizer.encode_batch_fast([text], add_special_tokens=add_special_tokens)[0].ids

    def __call__(
        self,
        text: str | list[str],
        add_special_tokens: bool = True,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> dict[str, Any]:
        """{"input_ids": ids or a list of them}, cut to `max_length` (special tokens kept) with truncation."""
        texts = [text] if isinstance(text, str) else list(text)
        encodings = self.backend_tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        ids = []
        for encoding in encodings:
            if truncation and max_length is not None:
                room = max_length - (
                    self.backend_tokenizer.num_special_tokens_to_add(False) if add_special_tokens else 0
                )
                if room < 0:
                    raise ValueError(f"max_length {max_length} leaves no room after the special tokens")
                encoding.truncate(room, direction=self.truncation_side)
            ids.append(self.backend_tokenizer.post_process(encoding).ids if add_special_tokens else encoding.ids)
        return {"input_ids": ids[0] if isinstance(text, str) else ids}

    def decode(self, token_ids: int | list[int], skip_special_tokens: bool = False, **_: Any) -> str:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        return self.backend_tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = False) -> list[str]:
        return [self.decode(s, skip_special_tokens=skip_special_tokens) for s in sequences]

    # -- chat template ----------------------------------------------------------------------------

    def apply_chat_template(
        self,
        conversation: list[Any],
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **kwargs: Any,
    ) -> str | list[int]:
        """The conversation rendered as transformers renders it; token ids unless `tokenize=False`."""
        template = chat_template or self.chat_template
        if not template:
            raise ValueError("this tokenizer has no chat template; pass chat_template")
        for unsupported in ("continue_final_message", "return_assistant_tokens_mask", "sanitize_control_tokens"):
            if kwargs.get(unsupported):
                raise ValueError(f"{unsupported} needs transformers' tokenizer")
        for ignored in ("return_dict", "tokenizer_kwargs", "padding", "truncation", "max_length", "return_tensors"):
            kwargs.pop(ignored, None)
        kwargs.pop("continue_final_message", None)
        variables = {**self.special_tokens_map, **kwargs}
        text = render_chat(template, conversation, variables, add_generation_prompt, tools, documents)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    # -- files ------------------------------------------------------------------------------------

    def save_pretrained(self, directory: str | Path) -> tuple[str, ...]:
        """Copy the tokenizer files this tokenizer was read from (they are its whole definition)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        saved = []
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            if (self._path / name).is_file():
                shutil.copyfile(self._path / name, out / name)
                saved.append(str(out / name))
        return tuple(saved)

    def __repr__(self) -> str:
        return f"FastTokenizer({self.name_or_path!r}, vocab={len(self)}, special={self.special_tokens_map})"


def _unsupported(path: Path, config: dict[str, Any]) -> str:
    """Why transformers would behave differently from FastTokenizer on this folder; "" when it would not."""
    tokenizer_class = config.get("tokenizer_class")
    if tokenizer_class not in SAME_PIPELINE_CLASSES:
        return f"tokenizer_class {tokenizer_class}"
    unknown = sorted(set(config) - INERT_KEYS)
    if unknown:
        return f"tokenizer_config.json settings {unknown}"
    if config.get("split_special_tokens"):
        return "split_special_tokens"
    if "add_prefix_space" in config and (config["add_prefix_space"] or _adds_prefix_space(path / "tokenizer.json")):
        return "add_prefix_space (transformers rebuilds the pre-tokenizer with it)"
    for name in ("add_bos_token", "add_eos_token"):
        if name in config:  # transformers' handling differs by class and version: let it decide
            return name
    bert_defaults = {
        "tokenize_chinese_chars": True,
        "strip_accents": None,
        "do_basic_tokenize": True,
        "never_split": None,
    }
    if any(k in config and config[k] != v for k, v in bert_defaults.items()):
        return "non-default BERT pre-tokenizer settings"
    if (path / "additional_chat_templates").is_dir() or not isinstance(
        config.get("chat_template", ""), (str, type(None))
    ):
        return "several named chat templates"
    for name in (*SPECIAL_TOKEN_NAMES, "extra_special_tokens", "additional_special_tokens"):
        if name in config and not _plain_token(config[name], allow_list=name.endswith("special_tokens")):
            return f"{name} is not a plain token"
    return ""


def _plain_token(value: Any, allow_list: bool = False) -> bool:
    """A token as a string (or AddedToken dict) without lstrip/rstrip/single_word tweaks; lists when allowed."""
    if allow_list and isinstance(value, list):
        return all(_plain_token(v) for v in value)
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return not (value.get("lstrip") or value.get("rstrip") or value.get("single_word"))
    return False


def _adds_prefix_space(file: Path) -> bool:
    """Whether the tokenizer.json's pre-tokenizer puts a space before the text (ByteLevel or Metaspace)."""

    def adds(spec: Any) -> bool:
        if not isinstance(spec, dict):
            return False
        if spec.get("add_prefix_space") or spec.get("prepend_scheme") in ("always", "first"):
            return True
        return any(adds(s) for s in spec.get("pretokenizers") or [])

    return adds(json.loads(file.read_text(encoding="utf-8")).get("pre_tokenizer"))


def _content(token: Any) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _chat_template(path: Path, config: dict[str, Any]) -> str | None:
    """chat_template.jinja beside the tokenizer wins over tokenizer_config.json's (transformers' order)."""
    file = path / "chat_template.jinja"
    return file.read_text(encoding="utf-8") if file.is_file() else config.get("chat_template")


def _read_json(file: Path) -> dict[str, Any] | None:
    if not file.is_file():
        return {} if file.name == "special_tokens_map.json" else None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
