"""The run plan against a real nginx: its shard bytes and GETs are what the access log counts.

Each node is a cache folder of its own; its ranks are built in one process and share it, as
the ranks of a node do (``test_wds_cache.py`` does the same). The 16 shards (about 200 KB
each, under ``read_ahead``) are served by the session's nginx (``conftest.nginx_small``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from nginx_server import Nginx

from detsamplers.loader import WebDatasetSource, plan_run

SHARDS = 16

ORDERS: list[dict[str, Any]] = [
    {"parts": 0, "shuffle_shards": False},
    {"parts": 0, "shuffle_window": 4},
    {"parts": 8},
    {"parts": 8, "shuffle_block_shards": 2},
]


@pytest.fixture(scope="module")
def urls_and_index(
    nginx_small: tuple[Nginx, int], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Nginx, str, str]:
    nginx, _ = nginx_small
    urls = f"{nginx.url}/s/d-{{00..{SHARDS - 1:02d}}}.tar"
    index_dir = str(tmp_path_factory.mktemp("plan-index"))
    WebDatasetSource(urls, seed=0, batch_size=8, index_dir=index_dir, parts=0)  # index once
    return nginx, urls, index_dir


def _source(urls: str, index_dir: str, **options: Any) -> WebDatasetSource:
    return WebDatasetSource(
        urls, seed=5, batch_size=8, decode=(), collate_fn=list, index_dir=index_dir, **options
    )


@pytest.mark.parametrize("nodes,per_node", [(1, 1), (2, 1), (4, 1), (2, 2)])
@pytest.mark.parametrize("order", ORDERS, ids=["tar", "window", "parts", "parts-blocks"])
def test_an_epochs_planned_shard_bytes_and_gets_are_what_nginx_serves(
    urls_and_index: tuple[Nginx, str, str],
    tmp_path: Path,
    nodes: int,
    per_node: int,
    order: dict[str, Any],
) -> None:
    nginx, urls, index_dir = urls_and_index
    world = nodes * per_node
    plan = plan_run(
        urls, index_dir=index_dir, nodes=nodes, ranks_per_node=per_node, batch_size=8, seed=5,
        **order,
    )  # fmt: skip
    mark = nginx.mark()
    read = 0
    for rank in range(world):
        cache = tmp_path / f"node{rank // per_node}"
        source = _source(
            urls, index_dir, world_size=world, rank=rank, repeat=False, cache_dir=str(cache),
            **order,
        )  # fmt: skip
        read += sum(len(batch) for batch in source)
    sent, requests = nginx.served(mark)
    assert read == plan.samples
    assert sum(n.shard_bytes[0] for n in plan.nodes) == sent
    assert sum(n.shard_requests[0] for n in plan.nodes) == requests
    assert plan.nodes[0].index_requests == 0  # no set index: the indexes are in index_dir


def test_a_resume_on_another_world_size_downloads_the_planned_shards(
    urls_and_index: tuple[Nginx, str, str], tmp_path: Path
) -> None:
    nginx, urls, index_dir = urls_and_index
    options: dict[str, Any] = {"parts": 8}
    whole = _source(urls, index_dir, repeat=False, **options)
    total, step = whole.num_samples, 8 * 4  # the resume: 4 ranks, 2 a node
    at = total - step * (total // step // 2)  # the rest of the epoch is whole global batches
    plan = plan_run(
        urls, index_dir=index_dir, nodes=1, batch_size=8, seed=5, resume_at=at,
        resume_nodes=2, resume_ranks_per_node=2, **options,
    )  # fmt: skip
    assert plan.resume is not None
    mark = nginx.mark()
    for rank in range(4):
        source = _source(urls, index_dir, cache_dir=str(tmp_path / f"node{rank // 2}"), **options)
        source.load_state_dict({**source.state_dict(), "position": at})
        mine = source.for_rank(world_size=4, rank=rank, skip_samples=at)
        reader = mine._reader()  # the cached reader a rank builds, without its prefetch thread
        try:
            first = (at - mine.origin) // step
            for batch in range(first, first + (total - at) // step):
                mine.batch_at(batch, reader)
        finally:
            reader.close()
    sent, requests = nginx.served(mark)
    assert 0 < sent < whole_bytes(nginx)
    assert sum(n.shard_bytes[0] for n in plan.resume) == sent
    assert sum(n.shard_requests[0] for n in plan.resume) == requests


def whole_bytes(nginx: Nginx) -> int:
    return sum(p.stat().st_size for p in (nginx.root / "s").glob("*.tar"))
