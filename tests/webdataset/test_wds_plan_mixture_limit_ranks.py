"""The mixture plan under a ``cache_limit``: 2 ranks a node, a schedule and resumes, against nginx.

The sets, the server and the limit of ``test_wds_plan_mixture_limit.py`` (its ``served``
fixture and its ``tolerance``), with what a real job adds: two ranks a node pinning into
the node's one folder, a batch-size schedule with one switch (new loaders at the switch,
the same folders), and a resume mid-pass on another world size, from new folders (cold)
or the run's (warm). Each rank iterates ``iter(mix)`` of a real :class:`WebDatasetMix`
(prefetch threads), the ranks stepped in turn one batch each, and nginx's log counts the
shard bytes and GETs of each pass (NOTE [ mixture plan pins ]).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from nginx_server import Nginx
from test_wds_plan_mixture_limit import (
    BATCH,
    PASS,
    PREFETCH,
    SETTLE,
    STEP,
    WEIGHTS,
    _per_node,
    served,
    tolerance,
)

from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.mix._plan_mixture import plan_mixture

__all__ = ["served"]  # the fixture, shared with test_wds_plan_mixture_limit.py


def run_stretch(
    nginx: Nginx,
    urls: list[str],
    index: str,
    folder: Path,
    cluster: tuple[int, int],
    segments: list[tuple[int, int]],
    end: int,
    **options: Any,
) -> tuple[list[tuple[int, int]], list[WebDatasetMix]]:
    """Every rank's batches of ``[segments[0][0], end)`` through ``iter``; nginx per pass.

    ``segments`` is the schedule ``[(from_position, size), ...]``: each segment's loaders
    are built at its first position with its size (as a trial does after a switch) and
    closed at its end; rank ``r`` pins into ``folder / f"node{r // per_node}"``. nginx is
    counted per pass of ``PASS`` positions; the walks pin past the end for ``SETTLE``.
    """
    nodes, per_node = cluster
    world = nodes * per_node
    ends = [a for a, _ in segments[1:]] + [end]
    got: list[tuple[int, int]] = []
    mixes: list[WebDatasetMix] = []
    mark, pass_ = nginx.mark(), segments[0][0] // PASS
    for (low, size), high in zip(segments, ends, strict=True):
        common: dict[str, Any] = {
            "seed": 7,
            "batch_size": size,
            "world_size": world,
            "skip_samples": low,
        }
        common.update(index_dir=index, decode=(), collate_fn=list, prefetch=PREFETCH, **options)
        built = [
            WebDatasetMix(
                urls,
                WEIGHTS,
                rank=rank,
                cache_dir=str(folder / f"node{rank // per_node}"),
                **common,
            )
            for rank in range(world)
        ]
        mixes += built
        iterators = [iter(mix) for mix in built]
        try:
            for at in range(low, high, size * world):
                if at // PASS > pass_:  # a new pass: count the one before
                    got.append(nginx.served(mark))
                    mark, pass_ = nginx.mark(), at // PASS
                for iterator in iterators:
                    assert len(next(iterator)) == size
                    time.sleep(STEP)  # a training step
            if high == end:
                time.sleep(SETTLE)  # the walks pin past the end (NOTE [ mixture plan pins ])
        finally:
            for iterator in iterators:
                iterator.close()  # type: ignore[attr-defined]
    got.append(nginx.served(mark))
    return got, mixes


def _check(
    planned: list[Any], served_: list[tuple[int, int]], mixes: list[WebDatasetMix], largest: int
) -> None:
    """The plan's GETs and bytes of each pass against nginx's, within ``tolerance``."""
    slack = tolerance(mixes)
    for pass_, (sent, gets) in enumerate(served_):
        gets_ = sum(n.shard_requests[pass_] for n in planned)
        bytes_ = sum(n.shard_bytes[pass_] for n in planned)
        assert abs(gets_ - gets) <= slack, (pass_, gets_, gets, slack)
        assert abs(bytes_ - sent) <= slack * largest, (pass_, bytes_, sent, slack)
    assert sum(g for _, g in served_) > 0


def _per_node_stats(mixes: list[WebDatasetMix], per_node: int, attr: str) -> list[int]:
    """A cache statistic summed over each node's ranks (each rank has its cache object)."""
    out: dict[int, int] = {}
    for mix in mixes:
        assert mix.cache is not None
        node = mix.rank // per_node
        out[node] = out.get(node, 0) + getattr(mix.cache.stats, attr)
    return [out[n] for n in sorted(out)]


RUNS = [
    pytest.param(nodes, parts, schedule, id=f"{nodes}node-2ranks-parts{parts}-{name}")
    for nodes in (1, 2)
    for parts in (0, 12)
    for name, schedule in (("b8", [(0, BATCH)]), ("switch", [(0, BATCH), (PASS // 2, 4)]))
]


@pytest.mark.servers
@pytest.mark.parametrize("nodes,parts,schedule", RUNS)
def test_two_ranks_a_node_under_a_limit_download_per_pass_what_the_plan_walks(
    served: tuple[Nginx, list[str], str, int],
    tmp_path: Path,
    nodes: int,
    parts: int,
    schedule: list[tuple[int, int]],
) -> None:
    nginx, urls, index, largest = served
    limit = 3 * largest
    order = {"parts": parts, "shuffle_shards": True}
    plan = plan_mixture(
        urls, WEIGHTS, nodes=nodes, ranks_per_node=2, batch_size=schedule, seed=7,
        index_dir=index, epochs=2, cache_limit=limit, prefetch=PREFETCH, **order,
    )  # fmt: skip
    assert plan.method.endswith("pins replayed in lockstep")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the folder's growth: compared below
        served_, mixes = run_stretch(
            nginx, urls, index, tmp_path, (nodes, 2), schedule, 2 * PASS, cache_limit=limit,
            **order,
        )  # fmt: skip
    _check(plan.nodes, served_, mixes, largest)
    evicted = sum(_per_node_stats(mixes, 2, "evicted"))
    planned = sum(n.evictions for n in plan.nodes)
    assert abs(planned - evicted) <= tolerance(mixes) and (evicted > 0 or parts > 0)
    over = _per_node_stats(mixes, 2, "over_limit")
    assert [bool(line) for line in _per_node(plan)] == [n > 0 for n in over]


RESUMES = [
    pytest.param(parts, warm, id=f"parts{parts}-{'warm' if warm else 'cold'}")
    for parts in (0, 12)
    for warm in (False, True)
]


@pytest.mark.servers
@pytest.mark.parametrize("parts,warm", RESUMES)
def test_a_limited_resume_mid_pass_on_another_world_size_downloads_what_the_plan_says(
    served: tuple[Nginx, list[str], str, int], tmp_path: Path, parts: int, warm: bool
) -> None:
    """A run on 1 node of 2 ranks, resumed at 384 (mid-pass) on 2 nodes of 2 ranks."""
    nginx, urls, index, largest = served
    limit, at = 3 * largest, PASS // 2
    order = {"parts": parts, "shuffle_shards": True}
    plan = plan_mixture(
        urls, WEIGHTS, nodes=1, ranks_per_node=2, batch_size=BATCH, seed=7, index_dir=index,
        cache_limit=limit, prefetch=PREFETCH, resume_at=at, resume_nodes=2, **order,
    )  # fmt: skip
    assert plan.resume is not None and plan.resume_warm is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if warm:  # the run reads up to the resume through node 0's folder, its walks settled
            run_stretch(nginx, urls, index, tmp_path, (1, 2), [(0, BATCH)], at, cache_limit=limit,
                        **order)  # fmt: skip
        folder = tmp_path if warm else tmp_path / "cold"
        served_, mixes = run_stretch(
            nginx, urls, index, folder, (2, 2), [(at, BATCH)], PASS, cache_limit=limit, **order
        )
    expected = plan.resume_warm if warm else plan.resume
    _check(expected, served_, mixes, largest)
    evicted = sum(_per_node_stats(mixes, 2, "evicted"))
    planned = sum(n.evictions for n in expected)
    assert abs(planned - evicted) <= tolerance(mixes)
    over = _per_node_stats(mixes, 2, "over_limit")
    assert [n.high_water > limit for n in expected] == [n > 0 for n in over]
