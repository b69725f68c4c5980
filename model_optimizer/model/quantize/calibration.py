"""Calibration and evaluation text: token windows for AWQ's statistics and for the accuracy gate.

The built-in texts (`data/calibration.txt`, `data/evaluation.txt`) are Python standard-library
documentation (PSF license, as shipped with Python), the same kind of text the reference model was
trained on; the two files come from disjoint sets of modules, so evaluation never sees calibration
text. `build_builtin_texts` regenerates them (the module lists below fix their content).
"""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
CALIBRATION_MODULES = (
    "argparse",
    "collections",
    "functools",
    "itertools",
    "json",
    "os",
    "pathlib",
    "re",
    "string",
    "textwrap",
    "logging",
    "subprocess",
    "threading",
    "typing",
    "dataclasses",
    "datetime",
    "shutil",
    "tempfile",
    "csv",
    "sqlite3",
    "socket",
    "zipfile",
    "tarfile",
    "pickle",
    "copy",
    "heapq",
    "bisect",
    "random",
    "statistics",
    "decimal",
    "fractions",
    "enum",
    "contextlib",
    "inspect",
    "ast",
    "io",
    "struct",
    "codecs",
    "hashlib",
    "uuid",
    "calendar",
    "locale",
    "glob",
    "fnmatch",
    "configparser",
    "pprint",
    "weakref",
    "abc",
    "operator",
    "queue",
    "selectors",
    "base64",
    "html",
    "tokenize",
    "traceback",
    "warnings",
    "platform",
    "timeit",
    "difflib",
    "optparse",
    "shlex",
    "cmd",
    "gzip",
    "filecmp",
    "fileinput",
    "ipaddress",
    "graphlib",
    "concurrent.futures",
    "asyncio",
    "unittest",
    "email.message",
    "http.client",
    "urllib.request",
)
EVALUATION_MODULES = (
    "doctest",
    "pdb",
    "mailbox",
    "smtplib",
    "imaplib",
    "ftplib",
    "xmlrpc.client",
    "zlib",
    "bz2",
    "lzma",
    "secrets",
    "hmac",
    "numbers",
    "reprlib",
    "sched",
    "getopt",
    "gettext",
    "netrc",
    "stat",
    "array",
    "contextvars",
    "multiprocessing.pool",
    "dis",
    "symtable",
    "zipapp",
    "wave",
    "colorsys",
    "plistlib",
)
MAX_CHARS = {"calibration": 260_000, "evaluation": 90_000}


def module_text(name: str) -> str:
    """A module's documentation as plain text: its docstring, then each public member's signature and doc."""
    module = importlib.import_module(name)
    parts = [f"{name}\n\n{inspect.getdoc(module) or ''}"]
    for attr in sorted(vars(module)):
        obj = getattr(module, attr)
        if attr.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        doc = inspect.getdoc(obj)
        if not doc or not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        try:
            signature = str(inspect.signature(obj))
        except (TypeError, ValueError):
            signature = "(...)"
        parts.append(f"{name}.{attr}{signature}\n\n{doc}")
    return "\n\n".join(parts)


def build_builtin_texts(out_dir: Path = DATA_DIR) -> None:
    """Write data/calibration.txt and data/evaluation.txt (documents separated by form feeds)."""
    for split, modules in (("calibration", CALIBRATION_MODULES), ("evaluation", EVALUATION_MODULES)):
        docs, size = [], 0
        for name in modules:
            text = module_text(name)[:20_000]  # no single module dominates
            if size + len(text) > MAX_CHARS[split]:
                break
            docs.append(text)
            size += len(text)
        (out_dir / f"{split}.txt").write_text("\n\f\n".join(docs) + "\n", encoding="utf-8")


def read_documents(path: str | Path | None, split: str = "calibration") -> list[str]:
    """Documents of a .txt (separated by form feeds or blank-line runs of three) or .jsonl (a "text"
    field per line) file; None: the built-in text of `split`."""
    file = DATA_DIR / f"{split}.txt" if path is None else Path(path)
    if not file.is_file():
        raise ValueError(f"{split} file {file} does not exist")
    try:
        content = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{split} file {file} is not UTF-8 text (bad byte at offset {exc.start})") from None
    if file.suffix == ".jsonl":
        docs = []
        for number, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{file}:{number}: not JSON ({exc})") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f'{file}:{number}: expected an object with a "text" string')
            docs.append(record["text"])
    elif file.suffix in (".txt", ".md", ""):
        docs = [d for d in content.replace("\n\n\n\n", "\f").split("\f") if d.strip()]
    else:
        raise ValueError(f'{split} file {file} must be .txt or .jsonl (a "text" field per line)')
    if not docs:
        raise ValueError(f"{split} file {file} holds no text")
    return docs


def token_windows(tokenizer, docs: list[str], num_samples: int, seq_len: int) -> list[list[int]]:
    """Up to `num_samples` windows of `seq_len` tokens from the documents joined end to end; fewer
    (and never empty) when the text is short."""
    if num_samples <= 0 or seq_len <= 1:
        raise ValueError(f"need at least one sample of at least 2 tokens, got {num_samples} x {seq_len}")
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if len(ids) >= num_samples * seq_len:
            break
    if len(ids) < 2:
        raise ValueError("the calibration text tokenizes to fewer than 2 tokens")
    windows = [ids[i : i + seq_len] for i in range(0, min(len(ids), num_samples * seq_len), seq_len)]
    return [w for w in windows if len(w) > 1]
