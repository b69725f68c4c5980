"""LogprobList: the logprobs of consecutive tokens as flat columns, read as a list of Logprob.

A frontend gets each step's logprobs as flat arrays (messages.LogprobColumns) and a server turns them
into JSON. Building a Logprob and its `top` dict per token in between, only to take them apart again,
was most of what `logprobs: 5` cost a frontend per token; so a completion's logprobs stay columns
(slices of the step's arrays, joined as they accumulate) until whoever reads them: the server's JSON
builders read the columns (server/logprobs.py), and a caller of the offline API, who indexes or iterates
them, gets Logprob objects made on access (equal to those it got before). Token texts (decoded_token) are
likewise made on access: the list holds only how to name ids (`texts`), set when it is handed out.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import overload

from model_optimizer.runtime.sampler_output import Logprob, TokenText, texts_of


class LogprobList(Sequence[Logprob]):
    """Per token: the chosen id, its logprob and rank, and how many alternatives it has in the flat
    `top_ids` / `top_logprobs` (most likely first, as the sampler's top-k leaves them); `texts` names the
    ids of the Logprob objects it makes (their decoded_token), None for a request that does not detokenize."""

    __slots__ = ("token_ids", "logprobs", "ranks", "num_top", "top_ids", "top_logprobs", "texts")

    def __init__(
        self,
        token_ids: array | None = None,
        logprobs: array | None = None,
        ranks: array | None = None,
        num_top: array | None = None,
        top_ids: array | None = None,
        top_logprobs: array | None = None,
        texts: TokenText | None = None,
    ) -> None:
        self.token_ids = array("i") if token_ids is None else token_ids
        self.logprobs = array("d") if logprobs is None else logprobs
        self.ranks = array("i") if ranks is None else ranks
        self.num_top = array("i") if num_top is None else num_top
        self.top_ids = array("i") if top_ids is None else top_ids
        self.top_logprobs = array("d") if top_logprobs is None else top_logprobs
        self.texts = texts

    @classmethod
    def of(cls, logprobs: Iterable[Logprob]) -> LogprobList:
        """Columns of Logprob objects (their `top` in its order), named as the first named one is."""
        out = cls()
        for lp in logprobs:
            out.append(lp)
        return out

    def append(self, lp: Logprob) -> None:
        if self.texts is None:
            self.texts = lp.texts
        self.token_ids.append(lp.token_id)
        self.logprobs.append(lp.logprob)
        self.ranks.append(lp.rank)
        self.num_top.append(len(lp.top))
        self.top_ids.extend(lp.top.keys())
        self.top_logprobs.extend(lp.top.values())

    def extend(self, other: Iterable[Logprob]) -> None:
        if not isinstance(other, LogprobList):
            for lp in other:
                self.append(lp)
            return
        if self.texts is None:
            self.texts = other.texts
        self.token_ids += other.token_ids
        self.logprobs += other.logprobs
        self.ranks += other.ranks
        self.num_top += other.num_top
        self.top_ids += other.top_ids
        self.top_logprobs += other.top_logprobs

    def copy(self) -> LogprobList:
        return LogprobList(*(array(c.typecode, c) for c in self._columns()), texts=self.texts)

    def _columns(self) -> tuple[array, ...]:
        return self.token_ids, self.logprobs, self.ranks, self.num_top, self.top_ids, self.top_logprobs

    def __len__(self) -> int:
        return len(self.token_ids)

    @overload
    def __getitem__(self, index: int) -> Logprob: ...

    @overload
    def __getitem__(self, index: slice) -> LogprobList: ...

    def __getitem__(self, index: int | slice) -> Logprob | LogprobList:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return LogprobList.of(self[i] for i in range(start, stop, step))
            stop = max(stop, start)
            a = sum(islice(self.num_top, start))
            b = a + sum(islice(self.num_top, start, stop))
            return LogprobList(
                self.token_ids[start:stop],
                self.logprobs[start:stop],
                self.ranks[start:stop],
                self.num_top[start:stop],
                self.top_ids[a:b],
                self.top_logprobs[a:b],
                self.texts,
            )
        i = range(len(self))[index]  # IndexError as a list's
        a = sum(islice(self.num_top, i))
        return self._logprob(i, a)

    def _logprob(self, i: int, a: int) -> Logprob:
        b = a + self.num_top[i]
        top = dict(zip(self.top_ids[a:b], self.top_logprobs[a:b]))
        return Logprob(self.token_ids[i], self.logprobs[i], self.ranks[i], top, self.texts)

    def __iter__(self) -> Iterator[Logprob]:
        a = 0
        for i, n in enumerate(self.num_top):
            yield self._logprob(i, a)
            a += n

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LogprobList | list | tuple):
            return len(self) == len(other) and all(x == y for x, y in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - mutable, as a list

    def __add__(self, other: Iterable[Logprob]) -> LogprobList:
        out = LogprobList()
        out.extend(self)
        out.extend(other)
        return out

    def __radd__(self, other: Iterable[Logprob]) -> LogprobList:
        out = LogprobList.of(other)
        out.extend(self)
        return out

    def __repr__(self) -> str:
        return f"LogprobList({list(self)!r})"

    def __reduce__(self) -> tuple:
        texts = None if self.texts is None else texts_of(self.texts, [*self.token_ids, *self.top_ids])
        return LogprobList, (*self._columns(), texts)


def join_logprobs(parts: list[Sequence[Logprob]]) -> Sequence[Logprob]:
    """Consecutive runs of one completion's logprobs as one (a new object: the parts are left as they were)."""
    if all(isinstance(p, LogprobList) for p in parts):
        out = LogprobList()
        for part in parts:
            out.extend(part)
        return out
    return [lp for part in parts for lp in part]
