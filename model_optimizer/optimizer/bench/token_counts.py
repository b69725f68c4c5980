"""Output tokens of answers that came without `usage`: counted with the tokenizer, as `vllm bench serve` does.

A streamed answer's own `usage` is exact; so are token ids or logprobs on every chunk. Without
either, the client kept the answer's text (chunks.count_tokens) and, after the run, off the event
loop that timed the chunks, the tokenizer (--tokenizer, or the one found from the server's model
`root`) counts it. With no tokenizer at all the count stays one token per chunk, an estimate that is
low whenever a server merges tokens into one chunk. Each record says which (`token_count_source`).
"""

from __future__ import annotations

from model_optimizer.optimizer.bench.chunks import chunk_token_counts
from model_optimizer.optimizer.bench.record import RequestRecord

EXACT_SOURCES = ("usage", "token_ids")
"""Sources whose counts are the server's own."""


def count_with_tokenizer(records: list[RequestRecord], tokenizer) -> None:
    """Count the kept text of each answer without usage with `tokenizer` (a `tokenizers.Tokenizer`, or
    None: the counts stay one per chunk); its tokens are spread over its chunks by text length, as the
    server's usage would be. The kept text is dropped either way."""
    for rec in records:
        if rec.output_text is None:
            continue
        if tokenizer is not None and rec.ok:
            total = len(tokenizer.encode(rec.output_text, add_special_tokens=False).ids)
            rec.chunk_tokens = chunk_token_counts([None] * len(rec.chunk_chars), rec.chunk_chars, total)
            rec.output_tokens = max(total, sum(rec.chunk_tokens))  # a token-carrying chunk holds one at least
            rec.token_count_source = "tokenizer"
        rec.output_text, rec.chunk_chars = None, []


def count_sources(records: list[RequestRecord]) -> dict[str, int]:
    """Successful generations per source of their output token counts (usage, token_ids, tokenizer, chunks)."""
    counts: dict[str, int] = {}
    for rec in records:
        if rec.ok and rec.token_count_source:
            counts[rec.token_count_source] = counts.get(rec.token_count_source, 0) + 1
    return counts


def estimated_sentence(sources: dict[str, int], tokenizer_path: str | None) -> str | None:
    """One warning when some counts are not the server's own, else None."""
    num_estimated = sum(n for source, n in sources.items() if source not in EXACT_SOURCES)
    if not num_estimated:
        return None
    total = sum(sources.values())
    if sources.get("chunks"):
        how = (
            f"{sources['chunks']} counted one token per chunk (no tokenizer: give --tokenizer for a count "
            "of their text; a server merging tokens into one chunk makes this low)"
        )
        if sources.get("tokenizer"):
            how += f", {sources['tokenizer']} with the tokenizer at {tokenizer_path}"
    else:
        how = f"counted with the tokenizer at {tokenizer_path}"
    return (
        f"{num_estimated} of {total} answers came without usage: their output tokens are estimated, {how}; "
        "token throughput and TPOT rest on these counts"
    )
