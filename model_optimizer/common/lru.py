"""A least-recently-used cache bounded by its entries' count and by their total size."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most `max_entries` entries whose sizes (`size_of(key)`) add up to at most `max_size`; the least
    recently used go first. An entry larger than `max_size` alone is not kept. None stands for a missing
    entry, so None is no value to keep."""

    def __init__(self, max_entries: int, max_size: int, size_of: Callable[[K], int]) -> None:
        self.max_entries = max_entries
        self.max_size = max_size
        self._size_of = size_of
        self._entries: OrderedDict[K, V] = OrderedDict()
        self.size = 0
        """The entries' sizes added up."""

    def get(self, key: K) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` under `key` (replacing what was there), the least recently used going past a bound."""
        self.pop(key)
        size = self._size_of(key)
        if size > self.max_size:
            return
        self._entries[key] = value
        self.size += size
        while len(self._entries) > self.max_entries or self.size > self.max_size:
            old, _ = self._entries.popitem(last=False)
            self.size -= self._size_of(old)

    def pop(self, key: K, only: V | None = None) -> V | None:
        """Drop `key`'s entry and give its value (None when there is none); `only`: only if its value is that
        object."""
        value = self._entries.get(key)
        if value is None or (only is not None and value is not only):
            return None
        del self._entries[key]
        self.size -= self._size_of(key)
        return value

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._entries)
