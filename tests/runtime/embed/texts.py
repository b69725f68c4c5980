"""Varied test texts, made here (no dataset download): short, long, Unicode, punctuation, code, empty."""

from __future__ import annotations

import random

WORDS = (
    "the model reads every token once and returns one vector for the whole text while batches are packed "
    "by a token budget so that short and long inputs share a forward pass without padding waste"
).split()
FIXED = [
    "",
    "a",
    "?",
    "!!!",
    "...",
    "—",
    "() [] {} <> ;:,.",
    "@#$%^&*",
    "Hello, world!",
    "OK",
    "naïve café déjà vu",
    "日本語のテキストです。",
    "中文文本的嵌入",
    "한국어 텍스트",
    "Ελληνικά γράμματα",
    "русский текст для проверки",
    "emoji 😀🚀✨ mixed",
    "עברית מימין לשמאל",
    "العربية من اليمين",
    "Tiếng Việt có dấu",
    "def f(x):\n    return x * 2\n",
    "SELECT * FROM t WHERE id = 1;",
    "https://example.com/a?b=c&d=e",
    "tabs\tand\nnewlines\r\n",
    "   leading and trailing spaces   ",
    "UPPER CASE TEXT",
    "MiXeD CaSe",
    "1234567890",
    "3.14159 2.71828 1.41421",
    "e=mc^2",
]


def varied_texts(count: int = 220, seed: int = 0, max_words: int = 150) -> list[str]:
    rng = random.Random(seed)
    texts = list(FIXED)
    while len(texts) < count:
        n = rng.choice([1, 2, 5, 10, 20, 40, 80, max_words])
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, n))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words) + 1), rng.choice(FIXED[10:20]))
        if rng.random() < 0.3:
            words.append(rng.choice(["!", "?", ".", "...", ";"]))
        texts.append(" ".join(words))
    return texts
