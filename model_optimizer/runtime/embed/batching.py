"""Group inputs into forward passes by a token budget, as their token ids arrive chunk by chunk."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Batch:
    """Sequences for one forward pass, laid end to end in this order."""

    rows: list[int] = field(default_factory=list)
    """Input positions in the call: where each sequence's vector goes."""
    token_ids: list[list[int]] = field(default_factory=list)
    num_tokens: int = 0


class Batcher:
    """Packs sequences end to end into batches of at most `max_num_seqs` sequences and
    `max_num_batched_tokens` tokens; a sequence longer than the budget gets a batch of its own.

    Each chunk's sequences go in longest first, so a batch holds alike lengths, which is what the
    attention's padded fallback pays for (chunks themselves arrive longest first)."""

    def __init__(self, max_num_batched_tokens: int, max_num_seqs: int) -> None:
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self._open = Batch()

    def add(self, rows: list[int], token_ids: list[list[int]]) -> list[Batch]:
        """Take a chunk of sequences; return the batches it filled (the last one stays open)."""
        full = []
        for k in sorted(range(len(rows)), key=lambda k: len(token_ids[k]), reverse=True):
            n = len(token_ids[k])
            batch = self._open
            if batch.rows and (
                batch.num_tokens + n > self.max_num_batched_tokens or len(batch.rows) == self.max_num_seqs
            ):
                full.append(batch)
                batch = self._open = Batch()
            batch.rows.append(rows[k])
            batch.token_ids.append(token_ids[k])
            batch.num_tokens += n
        return full

    def flush(self) -> list[Batch]:
        """The open batch, if it holds anything."""
        batch, self._open = self._open, Batch()
        return [batch] if batch.rows else []
