"""The prefetch's pin rules and their dry replay (NOTE [ planned pins ]): laws, by hypothesis."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from detsamplers.loader._wds.read._node_cache import evict_until
from detsamplers.loader._wds.read._pin_walk import DryCache, DryReader, lockstep

batches = st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=4), min_size=1, max_size=40)
SIZE = 10


def _replay(
    readers: list[list[list[int]]], prefetch: int, limit: int | None
) -> tuple[DryCache, list[int], list[set[int]]]:
    """Replay ``readers`` on one cache; the downloads, and what was pinned at each download."""
    cache = DryCache(limit)
    got: list[int] = []
    pinned_then: list[set[int]] = []

    def downloaded(batch: int, shard: int) -> None:
        got.append(shard)
        pinned_then.append(set(cache.pins))

    dry = [DryReader(b, prefetch, cache, lambda s: SIZE, downloaded) for b in readers]
    lockstep(dry)
    return cache, got, pinned_then


@given(st.lists(batches, min_size=1, max_size=3), st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_without_a_limit_each_shard_downloads_once_and_only_the_last_batches_stay_pinned(
    readers: list[list[list[int]]], prefetch: int
) -> None:
    cache, got, _ = _replay(readers, prefetch, None)
    assert sorted(got) == sorted({s for r in readers for b in r for s in b})
    assert cache.evictions == 0 and cache.over_limit == 0
    # a shard is released once the walk is past its last batch: at the end, with no batch
    # left to walk, only the shards of each reader's last batch are still pinned (close)
    assert set(cache.pins) <= {s for r in readers for s in r[-1]}


@given(st.lists(batches, min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 6))
@settings(max_examples=200, deadline=None)
def test_the_folder_exceeds_the_limit_only_by_pinned_shards(
    readers: list[list[list[int]]], prefetch: int, limit_shards: int
) -> None:
    limit = limit_shards * SIZE
    cache, got, pinned_then = _replay(readers, prefetch, limit)
    assert cache.high_water <= max(limit, cache.working_set[1])
    assert (cache.high_water > limit) == (cache.over_limit > 0)
    # a shard downloads again only after an eviction
    assert len(got) - len(set(got)) <= cache.evictions
    # the shard downloaded is pinned then, and so is every shard a reader's batch needs
    assert all(shard in pins for shard, pins in zip(got, pinned_then, strict=True))


@given(
    st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=12),
    st.integers(0, 60),
    st.integers(1, 200),
)
def test_eviction_stops_once_the_download_fits_and_never_deletes_a_pinned_entry(
    entries: list[tuple[int, bool]], incoming: int, limit: int
) -> None:
    sizes = [(i, size) for i, (size, _) in enumerate(entries)]
    pinned = {i for i, (_, held) in enumerate(entries) if held}
    deleted: list[int] = []

    def delete(key: int) -> bool:
        if key in pinned:
            return False
        deleted.append(key)
        return True

    total = sum(size for _, size in sizes)
    left, count = evict_until(sizes, total, incoming, limit, delete)
    assert count == len(deleted) and not pinned & set(deleted)
    assert left == total - sum(sizes[i][1] for i in deleted)
    if deleted:  # each deletion was needed: the folder did not fit before the last one
        assert left + sizes[deleted[-1]][1] + incoming > limit
    unpinned_left = [i for i, _ in sizes if i not in pinned and i not in deleted]
    assert left + incoming <= limit or not unpinned_left
    # least recently used first: the deleted are the first unpinned entries
    assert deleted == [i for i, _ in sizes if i not in pinned][: len(deleted)]


class _CopyingCache(DryCache):
    """The first eviction walk: a copy of the whole folder at every download under a limit."""

    def _evict(self, size: int, limit: int) -> int:
        def delete(shard: int) -> bool:
            if self.pins.get(shard):
                return False
            del self.folder[shard]
            return True

        self.used, gone = evict_until(list(self.folder.items()), self.used, size, limit, delete)
        return gone


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 15), st.integers(1, 30)), max_size=80),
    st.integers(1, 120),
)
@settings(max_examples=300, deadline=None)
def test_walking_the_folder_from_its_head_evicts_what_copying_it_evicted(
    steps: list[tuple[bool, int, int]], limit: int
) -> None:
    walked, copied = DryCache(limit), _CopyingCache(limit)
    for pin, shard, size in steps:
        if pin:
            assert walked.pin(shard, size) == copied.pin(shard, size)
        elif walked.pins.get(shard):
            walked.unpin(shard)
            copied.unpin(shard)
        assert list(walked.folder.items()) == list(copied.folder.items())
        assert walked.pins == copied.pins
    figures = ("used", "high_water", "evictions", "over_limit", "pinned_bytes", "working_set")
    assert [getattr(walked, f) for f in figures] == [getattr(copied, f) for f in figures]
