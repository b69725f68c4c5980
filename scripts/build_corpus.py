"""Build the plain-text training corpus for the reference model from the Python docs.

The source is the HTML of Debian's ``python3.11-doc`` package
(``apt-get install python3.11-doc``, files under ``/usr/share/doc/python3.11/html``).
Each HTML page is one document. Only the page's main body is kept (no navigation,
sidebars, scripts or footers); prose is reflowed into paragraphs and code blocks keep
their line breaks. Paragraphs seen before (anywhere in the corpus) are dropped, and a
fixed, seeded 2% of the documents is held out for validation.

Run::

    python scripts/build_corpus.py                      # writes .data/corpus/{train,val}.txt
    python scripts/build_corpus.py --html-dir DIR --out-dir DIR --val-fraction 0.02 --seed 0

Documents are separated in the output by a line holding only ``<|endoftext|>``.
Each documented function, method, class, exception or attribute also becomes a one-turn
chat (a question about it, answered with its signature and first paragraph), written to
``chat_train.jsonl`` / ``chat_val.jsonl``, so the model learns the ChatML format too.
The output is byte-for-byte reproducible for the same input and flags.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

DOC_SEPARATOR = "<|endoftext|>"
DEFAULT_HTML_DIR = Path("/usr/share/doc/python3.11/html")

# Pages that are indexes or tables of contents, not prose.
SKIPPED_PAGES = re.compile(r"(^|/)(genindex[^/]*|py-modindex|search|contents|download)\.html$")
SKIPPED_DIRS = ("_static/", "_sources/", "_images/", "_downloads/")

# Tags whose start or end closes the current paragraph.
BLOCK_TAGS = frozenset(
    "p div section h1 h2 h3 h4 h5 h6 li ul ol dl dt dd table tr td th thead tbody "
    "blockquote pre figure figcaption caption br hr".split()
)
# Tags whose whole content is dropped.
DROPPED_TAGS = frozenset(("script", "style", "head", "noscript", "template"))
VOID_TAGS = frozenset("br hr img input meta link area base col embed source track wbr".split())
# Paragraphs shorter than this are structure ("Note", "Parameters") and never deduplicated.
MIN_DEDUP_CHARS = 40


class MainTextParser(HTMLParser):
    """Collects the paragraphs inside Sphinx's ``<div class="body" role="main">``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._current: list[str] = []
        self._div_depth = 0
        self._body_depth: int | None = None  # div depth at which the main body opened
        self._dropped_depth = 0  # > 0 while inside a dropped tag or a permalink anchor
        self._pre_depth = 0
        self._block_tag = ""  # the tag that opened the current paragraph
        self._dl_kinds: list[str] = []  # "function", "method", ... for each open <dl>
        self._api: dict[str, str] | None = None  # API entry being read (id, kind, signature)
        self.api_entries: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        classes = (attr.get("class") or "").split()
        if tag == "div":
            self._div_depth += 1
            if self._body_depth is None and ("body" in classes or attr.get("role") == "main"):
                self._body_depth = self._div_depth
        if tag in VOID_TAGS:
            if tag in ("br", "hr") and self._in_body():
                self._break()
            return
        if tag in DROPPED_TAGS or (tag == "a" and "headerlink" in classes) or self._dropped_depth:
            self._dropped_depth += 1
            return
        if tag == "pre":
            self._break()
            self._pre_depth += 1
        elif tag in BLOCK_TAGS:
            self._break()
            self._block_tag = tag
        if tag == "dl":
            self._dl_kinds.append(classes[-1] if len(classes) > 1 and classes[0] == "py" else "")
        elif tag == "dt" and "sig-object" in classes and attr.get("id") and self._dl_kinds:
            self._api = {"id": attr["id"] or "", "kind": self._dl_kinds[-1]}

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID_TAGS:
            return
        if self._dropped_depth:
            self._dropped_depth -= 1
            return
        if tag == "pre":
            self._break()
            self._pre_depth = max(0, self._pre_depth - 1)
        elif tag in BLOCK_TAGS:
            self._break()
        if tag == "dl" and self._dl_kinds:
            self._dl_kinds.pop()
        if tag == "div":
            if self._body_depth == self._div_depth:
                self._break()
                self._body_depth = -1  # main body done; ignore the rest of the page
            self._div_depth -= 1

    def handle_data(self, data: str) -> None:
        if self._in_body() and not self._dropped_depth:
            self._current.append(data)

    def close(self) -> None:
        super().close()
        self._break()

    def _in_body(self) -> bool:
        return self._body_depth is not None and self._body_depth > 0

    def _break(self) -> None:
        """Ends the current paragraph, normalising its whitespace."""
        text = "".join(self._current)
        self._current = []
        if self._pre_depth:
            lines = [line.rstrip() for line in text.strip("\n").split("\n")]
            text = "\n".join(lines).strip("\n")
        else:
            text = " ".join(text.replace("\u00b6", "").split())  # drop stray permalink signs
        if text.strip():
            self.paragraphs.append(text)
            self._note_api_paragraph(text)

    def _note_api_paragraph(self, text: str) -> None:
        """Pairs an API signature (a ``<dt>``) with the first prose paragraph after it."""
        if self._api is None or not self._api["kind"]:
            self._api = None
        elif "signature" not in self._api:
            self._api["signature"] = text
        else:
            if self._block_tag == "p" and len(text) >= MIN_DEDUP_CHARS:
                self.api_entries.append({**self._api, "description": text})
            self._api = None


def parse_page(path: Path) -> MainTextParser:
    """Parses one Sphinx HTML page; the result holds its paragraphs and API entries."""
    parser = MainTextParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    parser.close()
    return parser


QUESTIONS = {
    "function": ("What does {name}() do?", "Explain the function {name}.", "How do I use {name}()?"),
    "method": ("What does the method {name}() do?", "Explain {name}()."),
    "class": ("What is the {name} class?", "Explain the class {name}."),
    "exception": ("When is {name} raised?", "What is the exception {name}?"),
    "data": ("What is {name}?",),
    "attribute": ("What is the attribute {name}?", "Explain {name}."),
}


def api_conversation(entry: dict[str, str]) -> dict[str, list[dict[str, str]]] | None:
    """Turns an API entry into a one-turn chat: a question about it and its description."""
    questions = QUESTIONS.get(entry["kind"])
    if questions is None:
        return None
    pick = int(hashlib.sha1(entry["id"].encode("utf-8")).hexdigest(), 16) % len(questions)
    question = questions[pick].format(name=entry["id"])
    answer = f"{entry['signature']}\n\n{entry['description']}"
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}


def list_pages(html_dir: Path) -> list[Path]:
    """All content pages under ``html_dir``, in a fixed (sorted) order."""
    if not html_dir.is_dir():
        raise ValueError(
            f"HTML folder {html_dir} does not exist; install it with "
            "`apt-get install python3.11-doc` or pass --html-dir"
        )
    pages = []
    for path in sorted(html_dir.rglob("*.html")):
        rel = path.relative_to(html_dir).as_posix()
        if rel.startswith(SKIPPED_DIRS) or SKIPPED_PAGES.search(rel):
            continue
        pages.append(path)
    if not pages:
        raise ValueError(f"no HTML pages found under {html_dir}")
    return pages


def split_pages(pages: list[Path], val_fraction: float, seed: int) -> tuple[list[Path], list[Path]]:
    """Deterministically picks ``val_fraction`` of the pages (at least one) for validation."""
    if not 0.0 < val_fraction < 0.5:
        raise ValueError(f"--val-fraction must be in (0, 0.5), got {val_fraction}")
    order = list(range(len(pages)))
    random.Random(seed).shuffle(order)
    num_val = max(1, round(val_fraction * len(pages)))
    val_ids = set(order[:num_val])
    train = [p for i, p in enumerate(pages) if i not in val_ids]
    val = [p for i, p in enumerate(pages) if i in val_ids]
    return train, val


@dataclass
class Deduplicator:
    """Drops paragraphs (of at least ``MIN_DEDUP_CHARS``) whose text was seen before."""

    seen: set[bytes] = field(default_factory=set)
    num_dropped: int = 0

    def keep(self, paragraph: str) -> bool:
        key_text = " ".join(paragraph.split()).lower()
        if len(key_text) < MIN_DEDUP_CHARS:
            return True
        key = hashlib.sha1(key_text.encode("utf-8")).digest()
        if key in self.seen:
            self.num_dropped += 1
            return False
        self.seen.add(key)
        return True


def build_split(pages: list[Path], dedup: Deduplicator) -> tuple[list[str], list[dict]]:
    """Turns pages into documents (paragraphs joined by blank lines, deduplicated) and chats."""
    from rich.progress import track

    documents, chats = [], []
    for path in track(pages, description="reading pages", transient=True):
        parsed = parse_page(path)
        paragraphs = [p for p in parsed.paragraphs if dedup.keep(p)]
        if paragraphs:
            documents.append("\n\n".join(paragraphs))
        chats.extend(c for c in map(api_conversation, parsed.api_entries) if c is not None)
    return documents, chats


def write_text_atomic(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def join_documents(documents: list[str]) -> str:
    return f"\n{DOC_SEPARATOR}\n".join(documents) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html-dir", type=Path, default=DEFAULT_HTML_DIR)
    parser.add_argument("--out-dir", type=Path, default=Path(".data/corpus"))
    parser.add_argument("--val-fraction", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        pages = list_pages(args.html_dir)
        train_pages, val_pages = split_pages(pages, args.val_fraction, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dedup = Deduplicator()
    train_docs, train_chats = build_split(train_pages, dedup)  # first: val never repeats train
    val_docs, val_chats = build_split(val_pages, dedup)
    train_text, val_text = join_documents(train_docs), join_documents(val_docs)
    write_text_atomic(args.out_dir / "train.txt", train_text)
    write_text_atomic(args.out_dir / "val.txt", val_text)
    for name, chats in (("chat_train.jsonl", train_chats), ("chat_val.jsonl", val_chats)):
        write_text_atomic(args.out_dir / name, "".join(json.dumps(c) + "\n" for c in chats))
    stats = {
        "html_dir": str(args.html_dir),
        "num_pages": len(pages),
        "num_train_documents": len(train_docs),
        "num_val_documents": len(val_docs),
        "val_pages": [p.relative_to(args.html_dir).as_posix() for p in val_pages],
        "num_duplicate_paragraphs_dropped": dedup.num_dropped,
        "num_train_chats": len(train_chats),
        "num_val_chats": len(val_chats),
        "train_chars": len(train_text),
        "val_chars": len(val_text),
        "seed": args.seed,
        "val_fraction": args.val_fraction,
    }
    write_text_atomic(args.out_dir / "stats.json", json.dumps(stats, indent=2) + "\n")
    print(json.dumps({k: v for k, v in stats.items() if k != "val_pages"}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
