"""LruCache: least recently used out first, bounded by count and by total size."""

from __future__ import annotations

from model_optimizer.common.lru import LruCache


def test_entries_go_least_recently_used_first_by_count_and_by_size():
    cache: LruCache[str, int] = LruCache(max_entries=3, max_size=10, size_of=len)
    for key in ("a", "bb", "ccc"):
        cache.put(key, len(key))
    assert cache.get("a") == 1  # now the most recently used
    cache.put("dd", 2)  # a fourth entry: "bb" goes
    assert cache.get("bb") is None and len(cache) == 3 and cache.size == 6
    cache.put("eeeee", 5)  # 11 characters: "ccc" goes, then the count is fine
    assert cache.get("ccc") is None and cache.size == 8 and len(cache) == 3
    cache.put("x" * 11, 0)  # larger than the bound alone: not kept, nothing else dropped
    assert cache.get("x" * 11) is None and len(cache) == 3
    cache.put("a", 9)  # a key put again is replaced, counted once
    assert cache.get("a") == 9 and cache.size == 8
    assert cache.pop("a", only=10) is None and cache.get("a") == 9  # another value: kept
    assert cache.pop("a") == 9 and cache.size == 7
    cache.clear()
    assert len(cache) == 0 and cache.size == 0
