"""The plan under a ``cache_limit`` against nginx with DataLoader workers: ``WebDataLoader``.

The user's path: each rank iterates a ``WebDataLoader`` with ``num_workers=2`` over a
``WebDatasetSource`` with ``cache_limit``; each worker process has its own reader,
prefetch thread and pins, and a node's workers share one cache folder. One rank a node
(the nodes' folders are apart, so ranks run one after the other), 1 and 2 nodes, a limit of
a few shards, exactly two epochs of batches, then the loader is closed. The plan
(``plan_run(num_workers=2)``) replays each worker as a reader of every second batch
(NOTE [ planned pins ]); when a worker fetches a shard is timing, which bounds the gap:
see :func:`_bound`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from nginx_server import Nginx
from test_wds_plan_pins import PREFETCH, _tolerance, served_set

from detsamplers.loader import WebDataLoader, WebDatasetSource, plan_run

pytestmark = pytest.mark.servers
__all__ = ["served_set"]  # the module's nginx, used as a fixture here

WORKERS = 2
#: Batches torch's DataLoader has each worker build ahead of the one handed out.
PREFETCH_FACTOR = 2


def _bound(readers: int, batch_shards: int) -> tuple[int, int]:
    """Shards the served run may download fewer and more than the plan.

    As with one reader a rank (``_tolerance`` of ``test_wds_plan_pins.py``), per reader; and
    more: at the end each worker has built up to ``PREFETCH_FACTOR`` batches past the two
    epochs, each up to ``batch_shards`` new shards, which the plan, stopping at the end,
    does not count.
    """
    fewer, more = _tolerance(readers, batch_shards)
    return fewer, more + readers * PREFETCH_FACTOR * batch_shards


def _run(urls: str, index_dir: str, folder: Path, nodes: int, **options: Any) -> int:
    """Two epochs of every rank's batches through its loader; the most shards in a batch."""
    batch_shards = 0
    for rank in range(nodes):
        source = WebDatasetSource(
            urls, seed=5, batch_size=8, decode=(), collate_fn=list, index_dir=index_dir,
            cache_dir=str(folder / f"node-{rank}"), world_size=nodes, rank=rank,
            prefetch=PREFETCH, **options,
        )  # fmt: skip
        steps = 2 * (source.num_samples // (8 * nodes))
        loader = WebDataLoader(source, num_workers=WORKERS)
        iterator = iter(loader)
        try:
            for _ in range(steps):
                batch = next(iterator)
                batch_shards = max(batch_shards, len({s["__url__"] for s in batch}))
        finally:
            iterator.close()  # type: ignore[attr-defined]
    return batch_shards


@pytest.mark.parametrize("nodes", [1, 2])
@pytest.mark.parametrize("parts", [0, 4])
@pytest.mark.parametrize("limit_shards", [4, 16])
def test_a_limited_cache_with_two_workers_downloads_what_the_plan_replays_within_the_bound(
    served_set: tuple[Nginx, str, str, int], tmp_path: Path, nodes: int, parts: int,
    limit_shards: int,
) -> None:  # fmt: skip
    nginx, urls, index_dir, largest = served_set
    limit = limit_shards * largest
    plan = plan_run(
        urls, index_dir=index_dir, nodes=nodes, batch_size=8, seed=5, parts=parts,
        cache_limit=limit, epochs=2, prefetch=PREFETCH, num_workers=WORKERS,
    )  # fmt: skip
    mark = nginx.mark()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a folder past the limit: not tested here
        batch_shards = _run(urls, index_dir, tmp_path, nodes, parts=parts, cache_limit=limit)
    sent, gets = nginx.served(mark)
    planned_gets = sum(sum(n.shard_requests) for n in plan.nodes)
    planned_bytes = sum(sum(n.shard_bytes) for n in plan.nodes)
    assert sum(n.evictions for n in plan.nodes) > 0  # the limit is reached
    fewer, more = _bound(nodes * WORKERS, batch_shards)
    assert planned_gets - fewer <= gets <= planned_gets + more
    assert planned_bytes - fewer * largest <= sent <= planned_bytes + more * largest
