"""A mixture's plan from synthetic shard sets, and its first batch's bytes, requests and time.

NOTE [ synthetic mixture plan ]
A mixture's plan (NOTE [ mixture plan ]) runs the mixture's own code, so a mixture of shard
sets not written yet is planned by building a real :class:`WebDatasetMix` whose shards
are described instead of indexed: one :class:`SyntheticShards` a set (NOTE [ plan inputs ]),
its shards named ``synthetic-<set>-<shard>.tar``, each shard's ``ShardInfo`` the single
source's assumed layout (``samples_per_shard`` equal samples back to back, no end blocks).
``_SyntheticMix`` differs from the mixture in one hook only, ``_index``, which returns
these infos: the order, the lanes, the parts, ``mixture_fetches`` and the state are the
mixture's. So a synthetic mixture's plan equals the plan of real shards of those sizes
and counts (a test writes them): the same shards and GETs per node, and the same bytes for
the shards downloaded whole; a shard read in part by byte ranges may differ by up to its
512-byte end-of-archive block, which the assumed layout spreads over the samples.

The first batch of a run (the first batch of each reader, rank and DataLoader worker, of the
first segment, caches cold) is what the mixture's plan decides with ``first_batch_whole``:
the shards chosen are fetched whole (or, if the rank reads them in part, as its ranges,
written after one another over the node's readers: ``ranged_cost``), the others' samples
by ranges of their own. :class:`FirstBatches` adds these up per node, and the single
source's ``_first`` turns them into seconds with the same model: ``rtt + requests /
requests_per_second + bytes / bandwidth``. The cost is ``RunPlan.cost``, as for a single
source.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .._plan import _first
from .._plan_fetches import Spans, ranged_cost
from .._plan_inputs import Network, SyntheticShards
from .._plan_report import NodePlan
from ..shard._shard_info import ShardInfo
from ._webdataset_mix import WebDatasetMix

__all__ = ["FirstBatches", "mixture_inputs"]


class _SyntheticMix(WebDatasetMix):
    """A mixture whose shards are described, not indexed (NOTE [ synthetic mixture plan ])."""

    def __init__(self, described: dict[str, ShardInfo], *args: Any, **kwargs: Any) -> None:
        self._described = described
        super().__init__(*args, **kwargs)

    def _index(self, urls: list[str], index_dir: str | None, progress: bool) -> list[ShardInfo]:
        return [self._described[url] for url in urls]


def _described(sets: Sequence[SyntheticShards]) -> tuple[list[list[str]], dict[str, ShardInfo]]:
    """Each set's shard names, and each name's ``ShardInfo`` in the assumed layout."""
    names: list[list[str]] = []
    infos: dict[str, ShardInfo] = {}
    for k, description in enumerate(sets):
        sizes = description.sizes()
        assert sizes.info is not None
        names.append([])
        for shard in range(len(sizes.counts)):
            name = f"synthetic-{k}-{shard:06d}.tar"
            names[-1].append(name)
            infos[name] = replace(sizes.info(shard), url=name, path=name)
    return names, infos


def mixture_inputs(
    urls: Sequence[Any] | None, synthetic: Sequence[SyntheticShards] | None, weights: Any
) -> tuple[Sequence[Any], Callable[..., WebDatasetMix]]:
    """The shard sets and the mixture class a plan builds: ``urls``, or ``synthetic`` described.

    Examples:
        >>> sets, build = mixture_inputs(None, [SyntheticShards(2, 4096, 2)], [1])
        >>> sets
        [['synthetic-0-000000.tar', 'synthetic-0-000001.tar']]
        >>> mixture_inputs(None, [SyntheticShards(2, 4096, 2)], [1, 1])
        Traceback (most recent call last):
        ...
        ValueError: weights should have one weight per synthetic set (1), but got 2: ...
    """
    if synthetic is None:
        if urls is None:
            raise ValueError("plan_mixture needs urls or synthetic, but got neither of them")
        return urls, WebDatasetMix
    if urls is not None:
        raise ValueError(
            "synthetic should be given alone, but got urls too; pass one of urls or synthetic"
        )
    if isinstance(synthetic, SyntheticShards) or not isinstance(synthetic, Sequence):
        raise TypeError(
            f"synthetic should be a list of SyntheticShards, one per shard set, but got "
            f"{type(synthetic).__name__}; pass synthetic=[SyntheticShards(...), ...]"
        )
    if not synthetic:
        raise ValueError("synthetic should hold at least one shard set, but got synthetic=[]")
    for k, description in enumerate(synthetic):
        if not isinstance(description, SyntheticShards):
            raise TypeError(
                f"synthetic[{k}] should be a SyntheticShards, but got {type(description).__name__}"
            )
    listed = isinstance(weights, Sequence) and not isinstance(weights, str | bytes)
    if listed and len(weights) != len(synthetic):
        raise ValueError(
            f"weights should have one weight per synthetic set ({len(synthetic)}), but got "
            f"{len(weights)}: weights={list(weights)!r}; give one weight a set"
        )
    names, infos = _described(synthetic)
    return names, functools.partial(_SyntheticMix, infos)


class FirstBatches:
    """Each node's first batch: the shards its readers fetch whole or as ranges, and the rest.

    Examples:
        >>> firsts = FirstBatches(1)
        >>> firsts.fetch(0, 3, ((0, 100),))  # one reader fetches shard 3 whole
        >>> firsts.read(0, 2, 1000)  # another reads 2 samples by ranges: 2 requests
        >>> plan = NodePlan(0, [0], [0], [0])
        >>> firsts.fill([plan], step=64, network=Network(bandwidth=100.0, rtt=0.5,
        ...     requests_per_second=2.0))
        >>> plan.first_batch_bytes, plan.first_batch_requests, plan.first_batch_seconds
        (1100, 4, 13.5)
    """

    def __init__(self, nodes: int) -> None:
        self._writes: list[dict[int, list[Spans]]] = [{} for _ in range(nodes)]
        self._ranged = [[0, 0] for _ in range(nodes)]

    def fetch(self, node: int, shard: int, spans: Spans) -> None:
        """A reader of ``node`` fetches ``spans`` of ``shard`` (the whole shard: one span)."""
        self._writes[node].setdefault(shard, []).append(spans)

    def read(self, node: int, samples: int, sent: int) -> None:
        """A reader of ``node`` reads ``samples`` samples of a shard by ranges, ``sent`` bytes."""
        self._ranged[node][0] += sent
        self._ranged[node][1] += samples

    def fill(self, plans: list[NodePlan], step: int, network: Network | None) -> None:
        """Set each node's first batch bytes, requests and, with ``network``, seconds."""
        for node, plan in enumerate(plans):
            sent, requests = self._ranged[node]
            for writes in self._writes[node].values():
                got = ranged_cost(writes, step)
                sent, requests = sent + got[0], requests + got[1]
            # the ranged reads are in the pass's downloads already: add nothing to them
            _first(plan, (sent, requests, 0, 0), network)
