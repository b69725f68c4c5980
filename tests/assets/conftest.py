"""Shared fixtures for the reference-model tests: a small Sphinx-like HTML tree and the
corpus, tokenizer and token files the real scripts build from it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
ASSET_DIR = REPO / "model_optimizer" / "assets" / "pydoc-qwen3"


def load_script(name: str):
    """Imports ``scripts/<name>.py`` as a module (scripts/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PAGE = """<!DOCTYPE html>
<html><head><title>{title}</title><script>var navigation = "do not keep";</script>
<style>body {{ color: red; }}</style></head>
<body>
<div class="related" role="navigation"><ul><li><a href="index.html">index</a></li>
<li>next | previous | modules</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper">
<div class="body" role="main">
<section id="{slug}"><h1>The {title} module<a class="headerlink" href="#x" title="Permalink">\u00b6</a></h1>
<p>The <code>{slug}</code> module provides functions for working with {topic}. It is part of
   the standard library and needs no installation.</p>
<p>This shared paragraph is repeated on every page and must appear only once in the corpus.</p>
<dl class="py function">
<dt class="sig sig-object py" id="{slug}.process"><span class="sig-name">{slug}.process</span>(<em>data</em>, <em>strict=False</em>)<a class="headerlink" href="#p">\u00b6</a></dt>
<dd><p>Process <em>data</em> describing {topic} and return a new object with the result of the work.</p>
<p>Raise ValueError if the data is malformed.</p></dd></dl>
<div class="highlight-python3 notranslate"><div class="highlight"><pre><span></span><span class="kn">import</span> {slug}
<span class="k">def</span> <span class="nf">main</span>():
    <span class="k">return</span> {slug}.process([1, 2, 3])
</pre></div></div>
<p>Numbers like 3.14 and 2048 and words like caf\u00e9 appear in {topic} documentation too.</p>
</section></div></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><p>sidebar text</p></div>
</div>
<div class="footer">Copyright footer text.</div>
</body></html>
"""

TOPICS = [
    ("json", "JSON data"),
    ("csv", "comma separated files"),
    ("math", "numbers"),
    ("os", "the operating system"),
    ("re", "regular expressions"),
    ("time", "clocks"),
]


@pytest.fixture(scope="session")
def html_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("html")
    (root / "library").mkdir()
    for slug, topic in TOPICS:
        page = PAGE.format(title=slug.upper(), slug=slug, topic=topic)
        (root / "library" / f"{slug}.html").write_text(page, encoding="utf-8")
    (root / "genindex.html").write_text(PAGE.format(title="INDEX", slug="index", topic="x"))
    (root / "_static").mkdir()
    (root / "_static" / "ignored.html").write_text(PAGE.format(title="S", slug="s", topic="y"))
    return root


@pytest.fixture(scope="session")
def corpus_dir(html_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    rc = load_script("build_corpus").main(
        ["--html-dir", str(html_dir), "--out-dir", str(out), "--val-fraction", "0.2", "--seed", "0"]
    )
    assert rc == 0
    return out


@pytest.fixture(scope="session")
def tokenized(corpus_dir, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tok")
    paths = {"tokenizer": root / "tokenizer", "tokens": root / "tokens"}
    rc = load_script("train_tokenizer").main(
        [
            "--corpus-dir",
            str(corpus_dir),
            "--tokenizer-dir",
            str(paths["tokenizer"]),
            "--tokens-dir",
            str(paths["tokens"]),
            "--vocab-size",
            "320",
        ]
    )
    assert rc == 0
    return paths
