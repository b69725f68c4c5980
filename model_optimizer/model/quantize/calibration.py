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
MIN_CALIB_TOKENS = 8_192
"""Fewest calibration tokens worth AWQ's search: 16 windows of 512, an eighth of the default 128 x 512
(AutoAWQ's defaults too). AWQ scales each input channel by its mean activation over these
tokens and picks the scale that best keeps each layer's output on them; from one short passage the scales
fit that passage, not what the model will be given. Below it `mopt quantize` warns; it still runs."""
MIN_EVAL_TOKENS = 2_048
"""Fewest held-out tokens whose accuracy figures mean something: top-1 agreement is a share of tokens, and
over 2,048 its standard error is at most 1.1 points (sqrt(0.25 / 2048); more in truth, as neighbouring tokens
are not independent), against the few points a --min-top1 limit is set to catch; over a handful of tokens one
token moves it by tens of points, and perplexity and KL are as noisy. The default is 32 x 512. Below it
`mopt quantize` warns; it still runs."""
_AMOUNTS = {  # per split: what its tokens are for, the fewest meaningful, and the flags that give more
    "calibration": ("AWQ's scales", MIN_CALIB_TOKENS, ("--calib", "--num-calib-samples", "--calib-seq-len")),
    "evaluation": ("the accuracy figures", MIN_EVAL_TOKENS, ("--eval-text", "--num-eval-samples", "--eval-seq-len")),
}


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


def token_windows(
    tokenizer, docs: list[str], num_samples: int, seq_len: int, split: str = "calibration"
) -> list[list[int]]:
    """Up to `num_samples` windows of `seq_len` tokens from the documents joined end to end; fewer
    (and never empty) when the text is short. `split` ("calibration" or "evaluation", as read_documents
    takes it) names the text, and its flag, when it is too short to make one window."""
    if num_samples <= 0 or seq_len <= 1:
        raise ValueError(f"need at least one sample of at least 2 tokens, got {num_samples} x {seq_len}")
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
        if len(ids) >= num_samples * seq_len:
            break
    if len(ids) < 2:
        text_flag = _AMOUNTS[split][2][0]
        raise ValueError(f"the {split} text ({text_flag}) tokenizes to fewer than 2 tokens")
    windows = [ids[i : i + seq_len] for i in range(0, min(len(ids), num_samples * seq_len), seq_len)]
    return [w for w in windows if len(w) > 1]


def too_little_text(split: str, windows: list[list[int]], num_samples: int, seq_len: int) -> str | None:
    """A warning when the token windows of `split` (from token_windows with `num_samples` x `seq_len`) hold
    fewer than its minimum (MIN_CALIB_TOKENS, MIN_EVAL_TOKENS), naming what limited them: the text, or
    the windows asked for. None when there are enough."""
    purpose, minimum, (text_flag, samples_flag, len_flag) = _AMOUNTS[split]
    num_tokens = sum(map(len, windows))
    if num_tokens >= minimum:
        return None
    if num_tokens < num_samples * seq_len:  # token_windows ran out of text before filling the windows
        cause = f"the {split} text ({text_flag}) is only {num_tokens:,} tokens"
        remedy = f"give a longer {text_flag} file"
    else:
        cause = f"{samples_flag} {num_samples} x {len_flag} {seq_len} take only {num_tokens:,} {split} tokens"
        remedy = f"raise {samples_flag} or {len_flag}"
    return f"{cause}, too few for {purpose} to be meaningful: {minimum:,} or more are recommended ({remedy})"
