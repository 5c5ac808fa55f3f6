"""The plan under a ``cache_limit`` against a real nginx, through the real iteration path.

48 small shards (``write_small_samples``: 30-50 samples of 2-8 KB, each one GET), more
than any working set here. Each rank iterates ``iter(source)`` with its prefetch thread
(``prefetch=2``, ``repeat=True``) for exactly two epochs of batches, then the iterator is
closed; the ranks of a node share one cache folder and are stepped in turn, one batch
each (the lockstep NOTE [ planned pins ] models). The plan replays the readers' pins dry;
what it cannot know is timing, which bounds the gap (derived in :func:`_tolerance`).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nginx_server import Nginx
from wds_helpers import write_small_samples

from detsamplers.loader import WebDatasetSource, plan_run

pytestmark = pytest.mark.servers

SHARDS = 48
PREFETCH = 2
#: Downloads a reader's prefetch walk keeps in flight (``_DOWNLOADS`` capped by ``prefetch``).
IN_FLIGHT = min(4, PREFETCH)


@pytest.fixture(scope="module")
def served_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, str, str, int]]:
    root = tmp_path_factory.mktemp("pins-root")
    write_small_samples(root / "s", SHARDS)
    nginx = Nginx(root, tmp_path_factory.mktemp("pins-run"))
    try:
        urls = f"{nginx.url}/s/d-{{00..{SHARDS - 1}}}.tar"
        index_dir = str(tmp_path_factory.mktemp("pins-index"))
        WebDatasetSource(urls, seed=0, batch_size=8, index_dir=index_dir, parts=0)
        largest = max(p.stat().st_size for p in (root / "s").glob("*.tar"))
        yield nginx, urls, index_dir, largest
    finally:
        nginx.close()


def _folder_bytes(folder: Path) -> int:
    total = 0
    for entry in os.scandir(folder):
        if entry.name.endswith((".tar", ".part")):
            with contextlib.suppress(FileNotFoundError):  # evicted meanwhile
                total += entry.stat().st_size
    return total


def _tolerance(readers: int, batch_shards: int) -> tuple[int, int]:
    """Shards the served run may download fewer and more than the plan.

    The run reads the plan's batches, no fewer (:func:`_run`). More: each reader's walk
    may pin, past the run's last batch, up to ``prefetch - 1`` shards plus one batch's
    new shards (it walks a batch while fewer than ``prefetch`` lie beyond the next one),
    which the plan, stopping at the end, does not count. Either way: a reader's walk has
    up to ``IN_FLIGHT`` downloads at once, each evicting against a folder without the
    others' bytes, so up to that many victims a reader differ from the lockstep replay's.
    Nothing else makes the run download fewer: a run that stopped two batches short of
    the plan's end (``2 * (N // 8W)`` instead of ``ceil(2N / 8W)``) downloaded those
    batches' shards only when its walk reached them before the close, and so served up to
    4 GETs fewer under load (96 where the plan said 99), past this bound.
    """
    fewer = readers * IN_FLIGHT
    return fewer, fewer + readers * (PREFETCH - 1 + batch_shards)


def _run(
    urls: str, index_dir: str, folder: Path, nodes: int, per_node: int, **options: Any
) -> tuple[list[WebDatasetSource], int, int]:
    """Two epochs of every rank's batches, stepped in turn; the most distinct shards in one
    batch, and the largest a node's folder was seen between batches.

    As many batches as the plan reads: through the end of the second epoch, the last one
    straddling it (``plan_run`` replays ``ceil(2N / 8W)`` batches a rank).
    """
    world = nodes * per_node
    sources = [
        WebDatasetSource(
            urls,
            seed=5,
            batch_size=8,
            decode=(),
            collate_fn=list,
            index_dir=index_dir,
            cache_dir=str(folder / f"node-{rank // per_node}"),
            world_size=world,
            rank=rank,
            prefetch=PREFETCH,
            **options,
        )
        for rank in range(world)
    ]
    steps = -(-2 * sources[0].num_samples // (8 * world))
    iterators = [iter(source) for source in sources]
    batch_shards, high = 0, 0
    try:
        for _ in range(steps):
            for iterator in iterators:
                batch = next(iterator)
                batch_shards = max(batch_shards, len({s["__url__"] for s in batch}))
            high = max([high] + [_folder_bytes(folder / f"node-{n}") for n in range(nodes)])
    finally:
        for iterator in iterators:
            iterator.close()
    return sources, batch_shards, high


@pytest.mark.parametrize("nodes,per_node", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("limit_shards", [2, 12], ids=["below-working-set", "above-working-set"])
@pytest.mark.parametrize("parts", [0, 4])
def test_a_limited_cache_downloads_what_the_plan_replays_within_the_timing_tolerance(
    served_set: tuple[Nginx, str, str, int],
    tmp_path: Path,
    nodes: int,
    per_node: int,
    limit_shards: int,
    parts: int,
) -> None:
    nginx, urls, index_dir, largest = served_set
    limit = limit_shards * largest
    plan = plan_run(
        urls, index_dir=index_dir, nodes=nodes, ranks_per_node=per_node, batch_size=8, seed=5,
        parts=parts, cache_limit=limit, epochs=2, prefetch=PREFETCH,
    )  # fmt: skip
    mark = nginx.mark()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the folder's growth: tested below
        sources, batch_shards, high = _run(
            urls, index_dir, tmp_path, nodes, per_node, parts=parts, cache_limit=limit
        )
    sent, gets = nginx.served(mark)
    planned_gets = sum(sum(n.shard_requests) for n in plan.nodes)
    planned_bytes = sum(sum(n.shard_bytes) for n in plan.nodes)
    assert sum(n.evictions for n in plan.nodes) > 0  # the limit is reached
    fewer, more = _tolerance(nodes * per_node, batch_shards)
    assert planned_gets - fewer <= gets <= planned_gets + more
    assert planned_bytes - fewer * largest <= sent <= planned_bytes + more * largest
    # the folder: over the limit by the pinned working set, and by downloads in flight
    planned_high = max(n.high_water for n in plan.nodes)
    in_flight = per_node * IN_FLIGHT * largest
    assert abs(high - planned_high) <= in_flight
    assert high <= max(limit, planned_high) + in_flight
    grows = planned_high > limit
    assert grows == (limit_shards == 2)
    assert bool(plan.over_limit()) == grows
    assert ("exceeds cache_limit" in plan.table()) == grows
    assert (sum(s.cache.stats.over_limit for s in sources if s.cache) > 0) >= grows


def test_a_limit_below_a_batchs_working_set_warns_once_naming_the_folder(
    served_set: tuple[Nginx, str, str, int], tmp_path: Path
) -> None:
    _, urls, index_dir, largest = served_set
    with pytest.warns(UserWarning, match="cache_limit=") as caught:
        sources, _, _ = _run(urls, index_dir, tmp_path, 1, 1, parts=4, cache_limit=largest)
    mine = [w for w in caught if "cache_limit=" in str(w.message)]
    assert len(mine) == 1
    folder = str(tmp_path / "node-0")
    text = str(mine[0].message)
    assert repr(folder) in text and f"cache_limit={largest} " in text
    assert "docs/webdataset-locality.md" in text and "working set" in text
    cache = sources[0].cache
    assert cache is not None and cache.stats.over_limit > 1  # counted each time, warned once


def test_a_roomy_limit_never_warns(served_set: tuple[Nginx, str, str, int], tmp_path: Path) -> None:
    _, urls, index_dir, largest = served_set
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sources, _, _ = _run(urls, index_dir, tmp_path, 1, 1, parts=4, cache_limit=SHARDS * largest)
    assert not [w for w in caught if "cache_limit=" in str(w.message)]
    cache = sources[0].cache
    assert cache is not None and cache.stats.over_limit == 0 and cache.stats.downloaded == SHARDS
