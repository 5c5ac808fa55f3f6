"""``plan_run``: what a run downloads, per node and epoch, computed without reading a shard.

NOTE [ run plan ]
Every order of a ``WebDatasetSource`` is a pure function of the position (NOTE [ shard
stream order ]), so which shards each node reads in each epoch, and so what its cache
(NOTE [ shard cache ]) downloads, is computable from the shards' counts and sizes (NOTE
[ plan inputs ]) alone. The plan calls the reader's own code, in a dry mode:

- the order is the source's ``ShardOrder``, built with the source's arguments; rank ``r`` of
  ``W`` reads the positions ``o + k W + r`` (NOTE [ shard stream split ], ``o`` the grid's
  origin), node ``n`` the ranks ``[n L, (n + 1) L)``;
- a node's shards in an epoch are found one of three ways, all exact: with ``parts = C``
  that ``W`` divides (the fixed part cover), part ``u`` is read by rank ``(u - o) mod W``
  and covers slot ``sigma(u)`` of the run's fixed sequence (``PartDeal.slot``, NOTE [ fixed
  part cover ]), the same shards every epoch, plus the ``N mod C`` samples past ``C m``,
  located; without parts or a block shuffle, a shard's run of the epoch's sequence is read by a
  cyclic range of ranks, so of nodes (in closed form per shard); otherwise every
  position of the epoch is located, a chunk at a time
  (``ShardOrder.locate``). A property test checks the first two against the third;
- a shard the cache lacks is downloaded whole in the ranges of ``download_ranges`` (one
  request each), unless the node's ranks read it only in part (``node_fetches``, the
  reader's own decision): then its cost is the byte ranges the cache fetches (NOTE
  [ planned fetches ]); the first batch of each reader (a rank's DataLoader worker) after
  a start fetches its cold shards as ``first_batch_whole`` decides (those read in part as
  their ranges), the others' samples by ranges of their own (their bytes estimated from
  the shard's mean sample, plus the 512-byte header checked). :func:`fetch_plan` is the
  one place these bytes are counted, from each node's cost per shard;
- the cache starts cold on every node; a node's shards fit its ``cache_limit`` unless the
  limit is below them, then the plan replays, batch by batch, the pins of each reader's
  prefetch walk and the cache's eviction, which skips pinned shards (NOTE [ planned
  pins ]: the reader's and the cache's own rules, run dry, its readers in lockstep): a
  download counts in the epoch of the batch whose walk pinned it, and the folder's
  high-water mark exceeds the limit when the working set does. Without evictions the
  bytes and requests are exact; with them, the gaps docs/plan.md gives.

A resume at sample ``k`` on another cluster (``resume_at``) reads the rest of the epoch of
``k`` through cold caches: the plan counts its shards, bytes and first batch. With a
:class:`Network`, the first batch of a node takes ``rtt + requests / requests_per_second +
bytes / bandwidth`` (its readers' cold fetches, all at once), and the run costs
``bytes / 1e9 * price_per_gb + requests / 1000 * price_per_1000_gets``. Index memory per
rank is measured while indexing real inputs; the order's memory is the bytes of the
arrays a rank's ``ShardOrder`` holds after locating; the state's, its JSON.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._errors import check_bool, check_int
from ..._state import fingerprint
from ._plan_fetches import Spans, node_costs, ranged_cost, rank_spans
from ._plan_inputs import Network, ShardSizes, SyntheticShards, shard_sizes
from ._plan_report import NodePlan, RunPlan
from ._plan_sets import Cluster, epoch_sets, parts_sets
from ._source_state import STATE_VERSION, summarize_counts
from .order._rank_batches import rank_positions
from .order._shard_order import ShardOrder
from .read._cache_reader import first_batch_whole
from .read._node_cache import download_step
from .read._node_fetches import node_fetches
from .read._pin_walk import ChunkedBatches, DryCache, DryReader, lockstep
from .remote._remote_reads import make_options

__all__ = ["fetch_plan", "plan_run"]

I64 = npt.NDArray[np.int64]
#: Bytes a ranged read of a shard's first sample adds: the tar header checked before it.
_HEADER = 512


def fetch_plan(
    shards: I64,
    requests_per_shard: I64,
    sizes: I64,
    ranged: dict[int, tuple[int, int]] | None = None,
) -> tuple[int, int]:
    """Bytes and requests a node's cache spends downloading ``shards`` (NOTE [ run plan ]).

    The one place a plan counts what a download costs: a whole shard's size in the ranges
    of ``download_ranges`` (``requests_per_shard`` holds their count per shard), or, for a
    shard in ``ranged``, the bytes and requests of the ranges the node fetches of it (NOTE
    [ planned fetches ]).

    Examples:
        >>> fetch_plan(np.array([0, 2]), np.array([1, 1, 2]), np.array([10, 20, 30]))
        (40, 3)
        >>> fetch_plan(np.array([0, 2]), np.array([1, 1, 2]), np.array([10, 20, 30]), {2: (7, 1)})
        (17, 2)
    """
    sent, requests = int(sizes[shards].sum()), int(requests_per_shard[shards].sum())
    for shard in set(ranged or ()).intersection(shards.tolist()):
        assert ranged is not None
        sent += ranged[shard][0] - int(sizes[shard])
        requests += ranged[shard][1] - int(requests_per_shard[shard])
    return sent, requests


def _array_bytes(obj: Any, depth: int = 0) -> int:
    """Bytes of the numpy arrays ``obj`` holds, a few levels deep (an order's memory)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if depth > 4:
        return 0
    if isinstance(obj, dict):
        return sum(_array_bytes(v, depth + 1) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(_array_bytes(v, depth + 1) for v in obj)
    held = getattr(obj, "__dict__", None)
    if held is not None and type(obj).__module__.startswith("detsamplers"):
        return sum(_array_bytes(v, depth + 1) for k, v in held.items() if k != "_args")
    return 0


def _first_batches(
    order: ShardOrder,
    cluster: Cluster,
    workers: int,
    sizes: I64,
    counts: I64,
    requests_per_shard: I64,
    knobs: tuple[int, int],
    spans: list[dict[int, Spans]],
) -> list[tuple[int, int, int, int]]:
    """Each node's bytes and requests for its readers' first batches, caches cold.

    Per node: all the first batches' bytes and requests, then those of ranged reads (which
    add to the shards' whole downloads). ``spans``: each rank's byte ranges of the shards
    it reads in part (NOTE [ planned fetches ]).
    """
    prefetch, read_ahead = knobs
    batch = (cluster.start - cluster.origin) // (cluster.batch_size * cluster.world)
    readers = max(workers, 1)
    # every reader's first batch located at once: ``locate`` is a pure function of each position
    located, _ = order.locate(
        np.concatenate(
            [
                rank_positions(
                    batch + w, cluster.batch_size, cluster.world, r, None, cluster.origin
                )
                for r in range(cluster.world)
                for w in range(readers)
            ]
        )
    )
    firsts = located.reshape(cluster.world * readers, cluster.batch_size)
    out = []
    for node in range(cluster.nodes):
        whole: set[int] = set()
        writes: dict[int, list[Spans]] = {}
        ranged_bytes, ranged_requests = 0, 0
        for rank in range(node * cluster.per_node, (node + 1) * cluster.per_node):
            mine = spans[rank]
            for worker in range(readers):
                shards = firsts[rank * readers + worker]
                cold = list(dict.fromkeys(shards.tolist()))
                chosen = first_batch_whole(
                    cold, [int(sizes[s]) for s in cold], prefetch, read_ahead, mine.keys()
                )
                for shard in chosen:
                    if shard in mine:
                        writes.setdefault(shard, []).append(mine[shard])
                    else:
                        whole.add(shard)
                for shard in cold:
                    if shard not in chosen:
                        samples = int((shards == shard).sum())
                        mean = int(sizes[shard]) // max(int(counts[shard]), 1)
                        ranged_bytes += samples * mean + _HEADER
                        ranged_requests += samples
        got = fetch_plan(np.array(sorted(whole), dtype=np.int64), requests_per_shard, sizes)
        step = download_step(read_ahead)
        for shard, ranges in writes.items():
            if shard not in whole:  # else read whole by another reader of the node
                part = ranged_cost(ranges, step)
                got = (got[0] + part[0], got[1] + part[1])
        out.append((got[0] + ranged_bytes, got[1] + ranged_requests, ranged_bytes, ranged_requests))
    return out


#: One node's plan: its downloads per epoch, high-water mark, evictions, and the most
#: shards and bytes pinned at once (``(0, 0)`` when no limit is reached).
Replayed = tuple[list[I64], int, int, tuple[int, int]]


def _replay(epochs: list[I64], sizes: I64, ranged: dict[int, tuple[int, int]]) -> Replayed:
    """The shards a node's cache downloads each epoch with no eviction, and its high-water mark.

    ``epochs`` holds the node's shards per epoch; ``ranged``: the bytes the cache holds of
    the shards it fetches as ranges.
    """
    seen = np.zeros(len(sizes), dtype=bool)
    out: list[I64] = []
    for shards in epochs:
        new = shards[~seen[shards]]
        seen[new] = True
        out.append(new)
    held = int(sizes[seen].sum()) + sum(
        b - int(sizes[s]) for s, (b, _) in ranged.items() if seen[s]
    )
    return out, held, 0, (0, 0)


class _ReaderBatches(ChunkedBatches):
    """A rank's (or worker's) ``batches``, each its shards, located a chunk at a time."""

    def __init__(self, order: ShardOrder, cluster: Cluster, rank: int, batches: range) -> None:
        super().__init__(batches)
        self.order, self.cluster, self.rank = order, cluster, rank

    def locate_chunk(self, batches: range) -> list[list[int]]:
        c = self.cluster
        positions = np.concatenate(
            [rank_positions(b, c.batch_size, c.world, self.rank, None, c.origin) for b in batches]
        )
        located, _ = self.order.locate(positions)
        shards: list[list[int]] = located.reshape(len(batches), c.batch_size).tolist()
        return shards


def _replay_pins(
    order: ShardOrder,
    cluster: Cluster,
    epochs: range,
    total: int,
    limit: int,
    readers: tuple[int, int],
    sizes: I64,
    costs: list[dict[int, tuple[int, int]]],
) -> list[Replayed]:
    """Each node's plan under ``limit``: its readers' pins and its cache replayed dry.

    Every position of the run is located once (O(positions) time, memory a few chunks of
    batches per reader); ``readers`` is the DataLoader workers per rank (0: the main
    process) and ``prefetch`` (NOTE [ planned pins ]).
    """
    workers, prefetch = readers
    step, size = max(workers, 1), cluster.batch_size * cluster.world
    first = (cluster.start - cluster.origin) // size
    stop = -(-(epochs.stop * total - cluster.origin) // size)  # past the run's last batch
    out: list[Replayed] = []
    for node in range(cluster.nodes):
        cache = DryCache(limit)
        got: list[list[int]] = [[] for _ in epochs]

        def bytes_of(shard: int, cost: dict[int, tuple[int, int]] = costs[node]) -> int:
            return cost[shard][0] if shard in cost else int(sizes[shard])

        dry = []
        for rank in range(node * cluster.per_node, (node + 1) * cluster.per_node):
            for worker in range(step):
                mine = range(first + worker, stop, step)

                def downloaded(batch: int, shard: int, mine: range = mine, got: Any = got) -> None:
                    epoch = (cluster.origin + mine[batch] * size) // total
                    got[min(max(epoch - epochs.start, 0), len(epochs) - 1)].append(shard)

                batches = _ReaderBatches(order, cluster, rank, mine)
                dry.append(DryReader(batches, prefetch, cache, bytes_of, downloaded))
        lockstep(dry)
        downloads = [np.array(d, dtype=np.int64) for d in got]
        out.append((downloads, cache.high_water, cache.evictions, cache.working_set))
    return out


def _check_parts(parts: int, world: int, name: str) -> None:
    if parts > 1 and parts % world:
        raise ValueError(
            f"parts should be a multiple of the {name} world size {world} (nodes * "
            f"ranks_per_node), but got parts={parts}: every rank would read from every part; "
            f"pass a parts count that {world} divides"
        )


def _state_bytes(source: ShardSizes, config: dict[str, Any], position: int) -> int:
    """Bytes of a rank's resume state as JSON, as ``state_dict`` builds it."""
    count = len(source.counts)
    names = source.names or [f"shard-{i:06d}.tar" for i in range(min(count, 1))]
    state = {
        "version": STATE_VERSION,
        "position": position,
        "fingerprint": fingerprint([{"source": "webdataset", "shards": names, **config}]),
        "config": config,
        "counts": summarize_counts(source.counts.tolist()),
    }
    return len(json.dumps(state))


def plan_run(
    urls: str | Sequence[str] | None = None,
    *,
    set_index: str | os.PathLike[str] | None = None,
    synthetic: SyntheticShards | None = None,
    nodes: int,
    ranks_per_node: int = 1,
    num_workers: int = 0,
    batch_size: int,
    seed: int = 0,
    shuffle_shards: bool = True,
    shuffle_window: int = 0,
    shuffle_block_shards: int = 0,
    parts: int = 0,
    cache_limit: int | None = None,
    epochs: int = 1,
    start: int = 0,
    resume_at: int | None = None,
    resume_nodes: int | None = None,
    resume_ranks_per_node: int | None = None,
    prefetch: int = 8,
    read_ahead: int = 4 << 20,
    network: Network | None = None,
    index_dir: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> RunPlan:
    """Plan a ``WebDatasetSource`` run over remote shards through node caches (NOTE [ run plan ]).

    Per node and epoch: the shards, bytes and requests its cache downloads, the cache's
    high-water mark and evictions, the first batch's bytes and time, computed by the
    reader's own order and cache decisions without reading a shard.

    Args:
        urls: Shard paths or URLs (brace patterns too), indexed as the source indexes them.
        set_index: A local ``detsamplers-set.index.npz`` instead (or listing ``urls``).
        synthetic: A :class:`SyntheticShards` description instead.
        nodes: Nodes, each with one cache.
        ranks_per_node: Ranks on each node.
        num_workers: DataLoader workers per rank (each reader's first batch is fetched).
        batch_size: Samples per batch on each rank.
        seed: As the source's ``seed``.
        shuffle_shards: As the source's.
        shuffle_window: As the source's.
        shuffle_block_shards: As the source's.
        parts: As the source's ``parts`` (0: off); the world size must divide it.
        cache_limit: Bytes a node's cache may hold (``None``: no limit); at least the
            largest shard.
        epochs: Epochs the run reads, from ``start``.
        start: The global position the run starts at (``skip_samples``).
        resume_at: Plan a resume at this global position on ``resume_nodes *
            resume_ranks_per_node`` ranks (default: the same cluster), caches cold.
        resume_nodes: Nodes of the resume.
        resume_ranks_per_node: Ranks per node of the resume.
        prefetch: As the source's (the first batch's whole-or-ranged choice).
        read_ahead: As the source's (the range of one download request).
        network: A :class:`Network`, for times and costs.
        index_dir: As the source's, for ``urls``.
        storage_options: As the source's, for remote ``urls`` (an S3 endpoint, keys).
        progress: Show a progress bar while positions are located.

    Returns:
        A :class:`RunPlan`.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range (the message names it).

    Examples:
        >>> from detsamplers.loader import SyntheticShards, plan_run
        >>> plan = plan_run(synthetic=SyntheticShards(50, 1 << 20, 100), nodes=4,
        ...     batch_size=8, parts=16, epochs=2)
        >>> [n.shards for n in plan.nodes]  # per node, per epoch: the cache keeps them
        [[14, 0], [15, 0], [14, 0], [13, 0]]
        >>> egress = plan.as_dict()["totals"]["egress_over_dataset"]  # a cut shard: each node its
        >>> [round(x, 3) for x in egress]  # ranges, those less than RANGE_GAP apart as one
        [1.003, 0.0]
    """
    nodes = check_int("nodes", nodes, minimum=1)
    ranks_per_node = check_int("ranks_per_node", ranks_per_node, minimum=1)
    num_workers = check_int("num_workers", num_workers, minimum=0)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    shuffle_shards = check_bool("shuffle_shards", shuffle_shards)
    shuffle_window = check_int("shuffle_window", shuffle_window, minimum=0)
    shuffle_block_shards = check_int("shuffle_block_shards", shuffle_block_shards, minimum=0)
    if shuffle_window > 1 and shuffle_block_shards > 1:
        raise ValueError(
            f"shuffle_window and shuffle_block_shards should not both be on, but got "
            f"shuffle_window={shuffle_window} and shuffle_block_shards={shuffle_block_shards}"
        )
    parts = check_int("parts", parts, minimum=0)
    epochs = check_int("epochs", epochs, minimum=1)
    start = check_int("start", start, minimum=0)
    prefetch = check_int("prefetch", prefetch, minimum=1)
    read_ahead = check_int("read_ahead", read_ahead, minimum=1)
    check_bool("progress", progress)
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network should be a Network, but got {type(network).__name__}")
    world = nodes * ranks_per_node
    _check_parts(parts, world, "run's")
    resumed: tuple[int, int, int] | None = None
    if resume_at is not None:
        at = check_int("resume_at", resume_at, minimum=0)
        rn = check_int("resume_nodes", nodes if resume_nodes is None else resume_nodes, minimum=1)
        rl = ranks_per_node if resume_ranks_per_node is None else resume_ranks_per_node
        rl = check_int("resume_ranks_per_node", rl, minimum=1)
        _check_parts(parts, rn * rl, "resume's")
        resumed = (at, rn, rl)
    options = make_options(60.0, 5, read_ahead, storage_options)
    path = None if set_index is None else os.fspath(set_index)
    source = shard_sizes(urls, path, synthetic, index_dir, options)
    counts, sizes = source.counts, source.sizes
    total = int(counts.sum())
    if total == 0:
        raise ValueError(f"the shards should hold samples, but all {len(counts)} are empty")
    if cache_limit is not None:
        cache_limit = check_int("cache_limit", cache_limit, minimum=1)
        if cache_limit < int(sizes.max()):
            raise ValueError(
                f"cache_limit should hold at least the largest shard, {int(sizes.max())} bytes, "
                f"but got cache_limit={cache_limit}; raise it (a few shards per reader at least)"
            )
    requests_per_shard = -(-sizes // download_step(read_ahead))  # len(download_ranges(...))
    order = ShardOrder(
        counts.tolist(), seed, shuffle_shards, shuffle_window, shuffle_block_shards, parts, "run"
    )
    bar = None
    if progress:
        tqdm = importlib.import_module("tqdm").tqdm  # tqdm ships no type stubs
        bar = tqdm(total=total * epochs, unit="position", desc="plan", leave=False)
    knobs = (prefetch, read_ahead)
    cluster = Cluster(nodes, ranks_per_node, batch_size, start)
    first_epoch = start // total
    planned = range(first_epoch, first_epoch + epochs)
    spans, costs = _costs(order, cluster, planned, total, source, read_ahead)
    plans, method = _plan_epochs(order, cluster, planned, total, bar, sizes, costs)
    if cache_limit is not None and max(high for _, high, _, _ in plans) > cache_limit:
        readers = (num_workers, prefetch)
        plans = _replay_pins(order, cluster, planned, total, cache_limit, readers, sizes, costs)
        method = "located, pins replayed in lockstep (a model when evicting)"
    firsts = _first_batches(
        order, cluster, num_workers, sizes, counts, requests_per_shard, knobs, spans
    )
    out_nodes = []
    for node, (downloads, high, evicted, pinned) in enumerate(plans):
        plan = NodePlan(node, high_water=high, evictions=evicted)
        plan.working_set_shards, plan.working_set_bytes = pinned
        for shards in downloads:
            got = fetch_plan(shards, requests_per_shard, sizes, costs[node])
            plan.shards.append(len(shards))
            plan.shard_bytes.append(got[0])
            plan.shard_requests.append(got[1])
        _first(plan, firsts[node], network)
        plan.index_bytes = source.set_index_bytes * ranks_per_node
        plan.index_requests = source.set_index_files * ranks_per_node
        out_nodes.append(plan)
    resume = None
    if resumed is not None:
        at, rn, rl = resumed
        again = Cluster(rn, rl, batch_size, at)
        epoch = range(at // total, at // total + 1)
        spans, costs = _costs(order, again, epoch, total, source, read_ahead)
        sets, _ = _plan_epochs(order, again, epoch, total, bar, sizes, costs)
        firsts = _first_batches(
            order, again, num_workers, sizes, counts, requests_per_shard, knobs, spans
        )
        resume = []
        for node, (downloads, high, _, _) in enumerate(sets):
            got = fetch_plan(downloads[0], requests_per_shard, sizes, costs[node])
            plan = NodePlan(node, [len(downloads[0])], [got[0]], [got[1]], high_water=high)
            _first(plan, firsts[node], network)
            resume.append(plan)
    if bar is not None:
        bar.close()
    config: dict[str, Any] = {"seed": seed, "shuffle_shards": shuffle_shards}
    config.update(shuffle_window=shuffle_window, repeat=True, parts=parts, part_shards="run")
    rank_order = order.fork()  # what one rank holds once it has located a batch
    rank_order.locate(rank_positions(0, batch_size, world, 0, None, cluster.origin) + start)
    return RunPlan(
        world_size=world,
        epochs=epochs,
        samples=total,
        shard_count=len(counts),
        dataset_bytes=int(sizes.sum()),
        method=method,
        nodes=out_nodes,
        order_bytes_per_rank=_array_bytes(rank_order),
        state_bytes_per_rank=_state_bytes(source, config, start),
        index_memory_per_rank=source.index_memory,
        network=network,
        resume=resume,
        cache_limit=cache_limit,
    )


def _first(plan: NodePlan, first: tuple[int, int, int, int], network: Network | None) -> None:
    """Fill in a node's first batch, and add its ranged reads to the first epoch's downloads."""
    plan.first_batch_bytes, plan.first_batch_requests = first[0], first[1]
    plan.shard_bytes[0] += first[2]
    plan.shard_requests[0] += first[3]
    if network is not None:
        plan.first_batch_seconds = (
            network.rtt + first[1] / network.requests_per_second + first[0] / network.bandwidth
        )


def _plan_epochs(
    order: ShardOrder,
    cluster: Cluster,
    epochs: range,
    total: int,
    bar: Any,
    sizes: I64,
    costs: list[dict[int, tuple[int, int]]],
) -> tuple[list[Replayed], str]:
    """Each node's downloads per epoch and high-water mark with no limit, and how found.

    ``costs``: each node's bytes and requests of the shards it fetches as ranges.
    """
    per_node: list[list[I64]] = [[] for _ in range(cluster.nodes)]
    methods = set()
    for epoch in epochs:
        sets, method = epoch_sets(order, epoch, cluster, total, False, bar)
        methods.add(method)
        for node, shards in enumerate(sets):
            per_node[node].append(shards)
    out = [_replay(sets, sizes, cost) for sets, cost in zip(per_node, costs, strict=True)]
    return out, " + ".join(sorted(methods))


def _costs(
    order: ShardOrder,
    cluster: Cluster,
    epochs: range,
    total: int,
    source: ShardSizes,
    read_ahead: int,
) -> tuple[list[dict[int, Spans]], list[dict[int, tuple[int, int]]]]:
    """Each rank's byte ranges of the shards it reads in part, each node's cost per shard.

    ``node_fetches`` is called per rank as the source calls it (NOTE [ planned fetches ]).
    """
    world = cluster.world
    fetches = [node_fetches(order, world, [rank], cluster.origin) for rank in range(world)]
    spans = rank_spans(fetches, source.info)
    readers: list[set[int]] | None = None
    if cluster.per_node > 1 and total % world and any(spans):  # tail samples shared
        ranks = Cluster(world, 1, cluster.batch_size, cluster.start)
        readers = [set() for _ in range(world)]
        for epoch in epochs:
            for rank, shards in enumerate(parts_sets(order, epoch, ranks, total)):
                readers[rank].update(shards.tolist())
    return spans, node_costs(spans, readers, cluster.per_node, download_step(read_ahead))
