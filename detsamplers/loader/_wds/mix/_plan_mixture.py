"""``plan_mixture``: what a ``WebDatasetMix`` run downloads per node, with a batch-size schedule.

NOTE [ mixture plan ]
A mixture's order is a pure function of the position too (NOTE [ shard set mixture ]), so
the plan of a run (NOTE [ run plan ]) extends to it by running the mixture's own code in a
dry mode: :func:`plan_mixture` builds the :class:`WebDatasetMix` itself (its shards indexed
as the source indexes them, no cache folder; a local shard planned as if served), locates
every position of the run with its order (``LaneOrder`` with parts, else ``MixOrder``),
and takes each rank's partly read
shards from :func:`mixture_fetches`, the reader's own decision (NOTE [ mixture fetches ]).

- The run reads ``epochs`` passes of ``P = sum(N_k)`` positions from ``start``; pass ``e``
  is ``[start + e P, start + (e + 1) P)`` (with weights proportional to the sets' sizes,
  each set about once). ``RunPlan``'s lists hold one entry per pass.
- ``batch_size`` is an int or a schedule ``[(from_position, size), ...]``, the first from
  ``start``: each segment is read as the trial reads it after a switch, a loader built with
  ``skip_samples=from_position`` and the new size, so the grid's origin is ``from_position
  mod (size W)`` and rank ``r`` reads the positions ``≡ origin + r (mod W)`` of the
  segment. The origin decides which parts a rank reads, so a switch can move a node's
  byte ranges: the plan counts what the node's cache lacks, each segment's ranges written
  after what it holds (``ranged_cost``, NOTE [ planned fetches ]).
- A node's cache starts cold and keeps everything unless ``cache_limit`` is below its
  shards (then its readers' pins are replayed: NOTE [ mixture plan pins ]), and a resume
  on another cluster starts from cold or warm caches (NOTE [ mixture plan cache ]); a
  shard costs
  its whole download the first pass a rank of the node reads it whole, or the byte ranges
  its ranks read it by, less the bytes the node already holds. The first batch of each
  reader of a segment fetches its cold shards as ``first_batch_whole`` decides; a cold
  shard it does not choose has the batch's samples read by ranges of their own (bytes
  estimated from the shard's mean sample plus a tar header, as ``plan_run`` does), and is
  downloaded with the rest of the pass.

Exact (bytes and GETs of shards, against nginx's log) for one rank a node and for ranks of
a node that read disjoint shards; with several ranks a node reading one shard the
requests may differ by one a stretch (NOTE [ planned fetches ]). Every position is located,
a chunk at a time: the cost is linear in the positions planned (no closed form here).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ...._errors import check_int
from .._plan_fetches import Spans
from .._plan_inputs import Network, SyntheticShards
from .._plan_report import NodePlan, RunPlan
from ..order._rank_batches import rank_positions
from ..read._cache_reader import first_batch_whole
from ..read._node_cache import download_step
from ..read._pin_walk import BATCHES_AHEAD
from ..remote._remote_reads import make_options
from ._mixture_fetches import mixture_fetches
from ._plan_mixture_cache import (
    NodeCache,
    Phase,
    check_world,
    copy_caches,
    segments,
    settle_pass,
)
from ._plan_mixture_pins import PinnedCache, node_costs, replay_segment, warm_copies
from ._plan_mixture_sets import indexed_inputs, set_index_fetches
from ._plan_mixture_synthetic import FirstBatches, mixture_inputs

__all__ = ["plan_mixture"]

I64 = npt.NDArray[np.int64]
#: Positions located at once.
_CHUNK = 1 << 20
#: Bytes a ranged read of a shard's first sample adds: the tar header checked before it.
_HEADER = 512


def _length(span: tuple[int, int]) -> int:
    """A span's sort key: the largest first (as the reader pins a shard's ranges)."""
    return span[0] - span[1]


def _schedule(batch_size: Any, start: int) -> list[tuple[int, int]]:
    """``[(from_position, size), ...]`` from an int or a list of segments, checked."""
    if not isinstance(batch_size, list | tuple):
        return [(start, check_int("batch_size", batch_size, minimum=1))]
    out: list[tuple[int, int]] = []
    for i, segment in enumerate(batch_size):
        if not isinstance(segment, list | tuple) or len(segment) != 2:
            raise TypeError(
                f"batch_size[{i}] should be a (from_position, size) pair, but got {segment!r}; "
                f"pass batch_size=[({start}, 8), (100000, 16)] for example"
            )
        at = check_int(f"batch_size[{i}][0]", segment[0], minimum=0)
        size = check_int(f"batch_size[{i}][1]", segment[1], minimum=1)
        if (i == 0 and at != start) or (out and at <= out[-1][0]):
            raise ValueError(
                f"batch_size[{i}] should start at {'start=' + str(start) if i == 0 else 'a later position than the segment before'}"  # noqa: E501
                f", but got from_position={at}; list the segments in order, the first from start"
            )
        out.append((at, size))
    if not out:
        raise ValueError("batch_size should be a size or a non-empty list of segments, but got []")
    return out


def plan_mixture(
    urls: Sequence[str | Sequence[str]] | None,
    weights: Sequence[float],
    *,
    synthetic: Sequence[SyntheticShards] | None = None,
    set_index: Sequence[str | os.PathLike[str]] | None = None,
    nodes: int,
    ranks_per_node: int = 1,
    num_workers: int = 0,
    batch_size: int | Sequence[tuple[int, int]],
    seed: int = 0,
    window: int | None = None,
    curriculum: Sequence[tuple[int, Sequence[float]]] = (),
    shuffle_shards: bool = True,
    shuffle_window: int = 0,
    shuffle_block_shards: int = 0,
    parts: int | Sequence[int] = 0,
    cache_limit: int | None = None,
    epochs: int = 1,
    start: int = 0,
    resume_at: int | None = None,
    resume_nodes: int | None = None,
    resume_ranks_per_node: int | None = None,
    prefetch: int = 8,
    read_ahead: int = 4 << 20,
    network: Network | None = None,
    index_dir: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> RunPlan:
    """Plan a ``WebDatasetMix`` run through node caches (NOTE [ mixture plan ]).

    Args:
        urls: One shard set per component, as :class:`WebDatasetMix`'s (``None``: synthetic).
        weights: As :class:`WebDatasetMix`'s.
        synthetic: One :class:`SyntheticShards` per shard set instead of ``urls`` (NOTE
            [ synthetic mixture plan ]).
        set_index: One local ``detsamplers-set.index.npz`` per shard set instead of ``urls``
            (NOTE [ mixture plan set index ]).
        nodes: Nodes, each with one cache.
        ranks_per_node: Ranks on each node.
        num_workers: DataLoader workers per rank (each reader's first batch is fetched).
        batch_size: Samples per batch on each rank, or a schedule ``[(from_position,
            size), ...]``, the first from ``start``.
        seed: As the mixture's.
        window: As the mixture's.
        curriculum: As the mixture's.
        shuffle_shards: As the mixture's.
        shuffle_window: As the mixture's.
        shuffle_block_shards: As the mixture's.
        parts: As the mixture's (one for every set, or one per set).
        cache_limit: Bytes a node's cache may hold (``None``: no limit); at least the
            largest shard. Below a node's shards, the readers' pins are replayed (NOTE
            [ mixture plan pins ]).
        epochs: Passes of ``sum(N_k)`` positions the run reads, from ``start``.
        start: The global position the run starts at.
        resume_at: Plan a resume at this global position, to the end of its pass, on
            ``resume_nodes * resume_ranks_per_node`` ranks (default: the same cluster),
            from cold caches (``resume``) and warm ones (``resume_warm``).
        resume_nodes: Nodes of the resume.
        resume_ranks_per_node: Ranks per node of the resume.
        prefetch: As the mixture's (the first batch's whole-or-ranged choice).
        read_ahead: As the mixture's (the range of one download request).
        network: A :class:`Network`, for the first batch's time and the cost.
        index_dir: As the mixture's.
        storage_options: As the mixture's.

    Returns:
        A :class:`RunPlan`: per node, one entry per pass.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range (the message names it).

    Examples:
        >>> import os, tempfile, webdataset as wds
        >>> folder = tempfile.mkdtemp()
        >>> for name in "ab":
        ...     with wds.ShardWriter(os.path.join(folder, name + "-%d.tar"), maxcount=6,
        ...             verbose=0) as w:
        ...         for i in range(12):
        ...             w.write({"__key__": f"{name}{i}", "bin": bytes(1000)})
        >>> sets = [os.path.join(folder, n + "-{0..1}.tar") for n in "ab"]
        >>> plan = plan_mixture(sets, [1, 1], nodes=2, batch_size=4, parts=4, epochs=2)
        >>> [n.shard_bytes for n in plan.nodes]  # a shard of each set a node, then nothing
        [[40960, 0], [40960, 0]]
    """
    nodes = check_int("nodes", nodes, minimum=1)
    ranks_per_node = check_int("ranks_per_node", ranks_per_node, minimum=1)
    num_workers = check_int("num_workers", num_workers, minimum=0)
    epochs = check_int("epochs", epochs, minimum=1)
    start = check_int("start", start, minimum=0)
    prefetch = check_int("prefetch", prefetch, minimum=1)
    read_ahead = check_int("read_ahead", read_ahead, minimum=1)
    if network is not None and not isinstance(network, Network):
        raise TypeError(f"network should be a Network, but got {type(network).__name__}")
    schedule = _schedule(batch_size, start)
    world = run_world = nodes * ranks_per_node
    if set_index is None:
        urls, build = mixture_inputs(urls, synthetic, weights)
    elif urls is not None or synthetic is not None:
        raise ValueError(
            "set_index should be given alone, but got urls or synthetic too; pass one of them"
        )
    else:  # NOTE [ mixture plan set index ]
        urls, build, index_fetch = indexed_inputs(set_index, weights)
    mix = build(
        urls, weights, seed=seed, batch_size=schedule[0][1], world_size=world, window=window,
        curriculum=curriculum, shuffle_shards=shuffle_shards, shuffle_window=shuffle_window,
        shuffle_block_shards=shuffle_block_shards, index_dir=index_dir,
        storage_options=storage_options, parts=parts, cache_dir=False, skip_samples=start,
        prefetch=prefetch, read_ahead=read_ahead,
    )  # fmt: skip
    order = mix._order
    lanes = mix._lanes
    # A local shard (size -1) is planned as if served remotely: its file's size.
    infos = [
        info if info.size >= 0 else replace(info, size=os.path.getsize(info.path))
        for info in mix.shards
    ]
    sizes = np.asarray([info.size for info in infos], dtype=np.int64)
    counts = np.asarray([n for part in mix._mix_counts for n in part], dtype=np.int64)
    if set_index is None:  # each rank fetches each folder's set index once
        options = make_options(60.0, 5, read_ahead, storage_options)
        index_fetch = set_index_fetches([info.url for info in infos], options)
    step = download_step(read_ahead)
    whole = [((0, int(size)),) for size in sizes.tolist()]
    total = int(counts.sum())
    end = start + epochs * total
    check_world(mix.set_parts, world, "run's", "nodes * ranks_per_node")
    if cache_limit is not None:  # NOTE [ mixture plan pins ]
        cache_limit = check_int("cache_limit", cache_limit, minimum=1)
        if cache_limit < int(sizes.max()):
            raise ValueError(
                f"cache_limit should hold at least the largest shard, {int(sizes.max())} bytes, "
                f"but got cache_limit={cache_limit}; raise it (a few shards per reader at least)"
            )
    at = rn = rl = 0
    if resume_at is not None:  # NOTE [ mixture plan cache ]
        at = check_int("resume_at", resume_at, minimum=start)
        if at >= end:
            raise ValueError(
                f"resume_at should be a position of the run, in [{start}, {end}) (start + "
                f"epochs * {total}), but got resume_at={at}; pass an earlier position"
            )
        rn = check_int("resume_nodes", nodes if resume_nodes is None else resume_nodes, minimum=1)
        rl = ranks_per_node if resume_ranks_per_node is None else resume_ranks_per_node
        rl = check_int("resume_ranks_per_node", rl, minimum=1)
        check_world(mix.set_parts, rn * rl, "resume's", "resume_nodes * resume_ranks_per_node")
    cluster = (nodes, ranks_per_node)

    def planned(limit: int | None) -> tuple[list[NodePlan], list[list[NodePlan]]]:
        """The run's and the resumes' node plans, with caches that keep all, or ``limit``."""
        run = [NodePlan(n, [0] * epochs, [0] * epochs, [0] * epochs) for n in range(nodes)]
        for plan in run:
            plan.index_bytes, plan.index_requests = (n * ranks_per_node for n in index_fetch)
        resumes: list[list[NodePlan]] = []
        firsts = FirstBatches(nodes)  # the run's first batch (NOTE [ synthetic mixture plan ])
        caches: Any = [NodeCache(step) if limit is None else PinnedCache(limit) for _ in run]
        warm: list[Any] = []
        phases = [Phase(start, end, cluster, run, lambda: caches)]
        if resume_at is not None:  # NOTE [ mixture plan cache ]
            stop = start + ((at - start) // total + 1) * total
            resumes[:] = [
                [NodePlan(n, [0] * epochs, [0] * epochs, [0] * epochs) for n in range(rn)]
                for _ in range(2)
            ]
            for plan in resumes[0] + resumes[1]:  # each resumed rank builds its mixture anew
                plan.index_bytes, plan.index_requests = (n * rl for n in index_fetch)
            if limit is None:  # the run split at resume_at, the warm copy taken there
                cold: Any = lambda: copy_caches([], rn, step)  # noqa: E731
                hot: Any = lambda: copy_caches(caches, rn, step)  # noqa: E731
                phases = [Phase(start, at, cluster, run, lambda: caches)]
            else:  # the run's readers go on past resume_at: the copy is taken as they pass
                cold = lambda: warm_copies([], rn, limit)  # noqa: E731
                hot = lambda: warm or warm_copies([], rn, limit)  # noqa: E731
            phases += [
                Phase(at, stop, (rn, rl), resumes[0], resumed=True, caches=cold),
                Phase(at, stop, (rn, rl), resumes[1], resumed=True, caches=hot),
            ]
            if limit is None:
                phases.append(Phase(at, end, cluster, run, lambda: caches))

        def take() -> None:  # a warm resume's caches, once the run reached resume_at
            if not warm:
                warm[:] = warm_copies(caches, rn, limit or 0)

        for (low, size), high, phase, built in segments(schedule, end, phases):
            # the phase's cluster, caches and figures (the run's, or a resume's)
            nodes_, per_node, out = phase.nodes, phase.per_node, phase.out
            world, node_caches = nodes_ * per_node, phase.caches()
            grid = size * world
            origin = built % grid  # where the segment's loaders were built (a switch, a resume)
            fetches = [
                None
                if lanes is None
                else mixture_fetches(lanes.orders, lanes.offsets.tolist(), world, [r], origin)
                for r in range(world)
            ]

            def spans(rank: int, shard: int, fetches: list[Any] = fetches) -> Spans:
                mine = fetches[rank]
                got = None if mine is None else mine.byte_ranges(shard, infos[shard])
                return whole[shard] if got is None else tuple(sorted(got, key=_length))

            # The first batch of each reader (rank, worker) of the segment, caches as they are.
            batch = (low - origin) // grid
            # A run's first batch is whole even where a planned resume splits the run at it.
            cut = high if phase.resumed else min([a for a, _ in schedule if a > low] + [end])
            for node, cache in enumerate(node_caches if low == built else []):
                for rank in range(node * per_node, (node + 1) * per_node):
                    for worker in range(max(num_workers, 1)):
                        positions = rank_positions(batch + worker, size, world, rank, None, origin)
                        positions = positions[(positions >= low) & (positions < cut)]
                        shards, _ = order.locate(positions)
                        cold_ = [
                            s
                            for s in dict.fromkeys(shards.tolist())
                            if not cache.covers(s, spans(rank, s))
                        ]
                        fetched = fetches[rank]
                        partial = () if fetched is None else fetched.partial.keys()
                        chosen = first_batch_whole(
                            cold_, [int(sizes[s]) for s in cold_], prefetch, read_ahead, partial
                        )
                        for shard in cold_:
                            if shard in chosen:
                                if low == start and not phase.resumed:
                                    firsts.fetch(node, shard, spans(rank, shard))
                                continue
                            samples = int((shards == shard).sum())
                            mean = int(sizes[shard]) // max(int(counts[shard]), 1)
                            pass_ = min((int(positions[0]) - start) // total, epochs - 1)
                            out[node].shard_bytes[pass_] += samples * mean + _HEADER
                            out[node].shard_requests[pass_] += samples
                            if low == start and not phase.resumed:
                                firsts.read(node, samples, samples * mean + _HEADER)

            def writes_of(shard: int, ranks: list[int], spans: Any = spans) -> list[Spans]:
                writes = [spans(r, shard) for r in ranks]
                return [whole[shard]] if any(w == whole[shard] for w in writes) else writes

            def locate(p: I64) -> I64:
                return order.locate(p)[0]

            shape = (origin, grid, world, per_node)
            if limit is not None:  # NOTE [ mixture plan pins ]
                reach = (BATCHES_AHEAD + 1) * max(num_workers, 1) * grid  # the walk past the end
                cost = node_costs(
                    locate, (low, high), shape, nodes_, writes_of, step, _CHUNK,
                    reach if high == phase.high else 0,
                )  # fmt: skip
                snapshot = None if resume_at is None or phase.resumed else (at, take)
                replay_segment(
                    locate, cast(list[PinnedCache], node_caches), (low, high),
                    (origin, size, world, per_node),
                    (num_workers, prefetch), cost, out, (start, total, epochs), snapshot,
                    high == phase.high,
                )  # fmt: skip
                continue
            # Every position of the segment, located with the mixture's order, pass by pass.
            for pass_ in range(epochs):
                a = max(low, start + pass_ * total)
                b = min(high, start + (pass_ + 1) * total)
                got = settle_pass(locate, node_caches, (a, b), shape, writes_of, _CHUNK)
                for node, (shards_, bytes_, requests_) in enumerate(got):
                    out[node].shards[pass_] += shards_
                    out[node].shard_bytes[pass_] += bytes_
                    out[node].shard_requests[pass_] += requests_
        firsts.fill(run, step, network)
        for phase in {id(p.out): p for p in phases}.values():  # the run's two stretches: once
            for plan, cache in zip(phase.out, phase.caches(), strict=True):
                plan.high_water = max(plan.high_water, cache.high_water)
                plan.evictions += getattr(cache, "evictions", 0)
        return run, resumes

    run, resumes = planned(None)
    replayed = False
    if cache_limit is not None:  # replayed only when a node's shards exceed it
        highs = [n.high_water for n in run] + [n.high_water for r in resumes for n in r]
        if max(highs) > cache_limit:
            run, resumes = planned(cache_limit)
            replayed = True
    resume = warm = None
    if resume_at is not None:  # one entry: the rest of the pass of resume_at
        at_pass = (resume_at - start) // total
        resume, warm = [[_entry(p, at_pass) for p in plans] for plans in resumes]
    return RunPlan(
        world_size=run_world,
        epochs=epochs,
        samples=total,
        shard_count=len(mix.shards),
        dataset_bytes=int(sizes.sum()),
        method="mixture: located" + (", pins replayed in lockstep" if replayed else ""),
        nodes=run,
        order_bytes_per_rank=0,
        state_bytes_per_rank=len(json.dumps(mix.state_dict())),
        index_memory_per_rank=0,
        network=network,
        resume=resume,
        resume_warm=warm,
        cache_limit=cache_limit,
    )


def _entry(plan: NodePlan, index: int) -> NodePlan:
    """``plan`` with one entry, its ``index``-th (a resume's pass)."""
    return replace(
        plan,
        shards=[plan.shards[index]],
        shard_bytes=[plan.shard_bytes[index]],
        shard_requests=[plan.shard_requests[index]],
    )
