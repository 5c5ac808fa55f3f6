"""The mixture plan under a ``cache_limit`` against a real nginx, through ``iter()`` of the mix.

Two shard sets (``test_wds_plan_mixture.write_sets``: 12 and 9 shards of 30-50 KB, a pass
of 768 positions) served by nginx on 127.0.0.1. Each node is a cache folder of its own
with a limit of a few shards; each rank iterates ``iter(mix)`` of a real
:class:`WebDatasetMix` with its prefetch thread (``prefetch=2``) for two passes of
batches, the ranks stepped in turn one batch each, each read once the walks have pinned
as far as their rules let them (the lockstep NOTE [ planned pins ] models), and nginx's
log counts the shard bytes and GETs of each pass. The plan walks the same readers dry
(NOTE [ mixture plan pins ]).
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from test_wds_plan_mixture import SETS, write_sets

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.mix._mixture_fetches import mixture_fetches
from detsamplers.loader._wds.mix._plan_mixture import plan_mixture
from detsamplers.loader._wds.read._cache_reader import CachedReader
from detsamplers.loader._wds.read._pin_walk import walk_waits

WEIGHTS = [samples for _, samples in SETS]
PASS = sum(WEIGHTS)
PREFETCH = 2
BATCH = 8
#: Downloads a reader's walk keeps in flight (``_DOWNLOADS`` capped by ``prefetch``).
IN_FLIGHT = min(4, PREFETCH)
#: Seconds a training step takes between batches (the prefetch works meanwhile).
STEP = 0.02
#: Seconds the walks are given to pin past the last batch before the count.
SETTLE = 0.5
#: Seconds a walk may take to reach where its rules stop it (a hung walk fails the test).
WALK_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, list[str], str, int]]:
    root = tmp_path_factory.mktemp("plan-limit-root")
    write_sets(root)
    nginx = Nginx(root, tmp_path_factory.mktemp("plan-limit-run"))
    try:
        urls = [f"{nginx.url}/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, (n, _) in enumerate(SETS)]
        index = str(tmp_path_factory.mktemp("index"))
        WebDatasetMix(urls, WEIGHTS, seed=0, batch_size=1, index_dir=index)  # index once
        largest = max(p.stat().st_size for p in root.glob("m*/*.tar"))
        yield nginx, urls, index, largest
    finally:
        nginx.close()


@contextmanager
def followed() -> Iterator[list[CachedReader]]:
    """The cached readers whose prefetch walk starts meanwhile (for :func:`settle`)."""
    readers: list[CachedReader] = []
    follow = CachedReader.follow

    def record(reader: CachedReader, plan: Iterator[Sequence[int]]) -> None:
        readers.append(reader)
        follow(reader, plan)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CachedReader, "follow", record)
        yield readers


def _walked_out(reader: CachedReader) -> bool:
    """Whether ``reader``'s walk has pinned as far as its rules let it, every download landed."""
    with reader.lock:
        thread = reader.thread
        if reader.closed or thread is None or not thread.is_alive():
            return True
        if reader.fetching:
            return False
        return walk_waits(reader.walked + 1, reader.done, reader._ahead(), reader.prefetch)


def settle(readers: Sequence[CachedReader]) -> None:
    """Wait until every reader's walk is where the plan's lockstep puts it before a read.

    The plan replays the readers in lockstep: before each read every walk has pinned as far
    as the rules let it and its downloads have landed (NOTE [ planned pins ]). A training
    step of fixed length gives the walk that time on an idle machine only: under load the
    walk lags, a read releases shards the walk would have kept pinned, and on a folder past
    its limit each such release costs a download later (measured: 35 to 77 GETs a pass
    where the plan says 56, 2 nodes, ``parts=12``, load 12 to 14). So the run waits for the
    walks, as the plan assumes, and the gap left is the one the tolerance counts.
    """
    end = time.monotonic() + WALK_TIMEOUT
    while not all(_walked_out(reader) for reader in readers):
        assert time.monotonic() < end, "a prefetch walk did not reach its rules' stop"
        time.sleep(0.002)


def run_passes(
    nginx: Nginx,
    urls: list[str],
    index: str,
    folder: Path,
    nodes: int,
    step: float = STEP,
    **options: Any,
) -> tuple[list[tuple[int, int]], list[WebDatasetMix]]:
    """Two passes of every rank's batches through ``iter``; nginx's bytes and GETs per pass."""
    mixes = [
        WebDatasetMix(
            urls,
            WEIGHTS,
            seed=7,
            batch_size=BATCH,
            world_size=nodes,
            rank=rank,
            index_dir=index,
            decode=(),
            collate_fn=list,
            cache_dir=str(folder / f"node{rank}"),
            prefetch=PREFETCH,
            **options,
        )
        for rank in range(nodes)  # one rank a node
    ]
    iterators = [iter(mix) for mix in mixes]
    got = []
    with followed() as readers:  # each rank's reader, once its first batch starts its walk
        try:
            for pass_ in range(2):
                mark = nginx.mark()
                for _ in range(PASS // (BATCH * nodes)):
                    for iterator in iterators:
                        settle(readers)  # every walk where the lockstep puts it
                        assert len(next(iterator)) == BATCH
                        time.sleep(step)  # a training step
                if pass_ == 1:  # the walks pin past the last batch (NOTE [ mixture plan pins ])
                    settle(readers)
                got.append(nginx.served(mark))
        finally:
            for iterator in iterators:
                iterator.close()  # type: ignore[attr-defined]
    return got, mixes


#: The cases whose victims timing decides (``nodes, parts, shuffle``): bounded to a band below.
BANDED = [(1, 12, True), (1, 12, False), (2, 12, False)]
CASES = [
    pytest.param(
        nodes, parts, shuffle, 3, id=f"{nodes}node-parts{parts}-{'shuf' if shuffle else 'plain'}"
    )
    for nodes in (1, 2)
    for parts in (0, 12)
    for shuffle in (True, False)
    if (nodes, parts, shuffle) not in BANDED  # timing decides their victims: a band, below
]
# a roomier limit: evictions, but the working set fits (no over-limit either side)
CASES.append(pytest.param(2, 0, True, 8, id="2node-parts0-shuf-roomy"))


def tolerance(mixes: list[WebDatasetMix]) -> int:
    """GETs a pass of the served run may differ from the plan by (the plan is exact without).

    The plan's readers walk as far as the rules let them before each read, downloads take no
    time and end in the order they start (NOTE [ planned pins ]); the run waits for its
    walks to get there before each read (:func:`settle`: without it, a walk lagging under
    load made a pass 21 GETs fewer and 33 more). Two things only timing still decides: a
    reader's walk keeps up to ``IN_FLIGHT`` downloads at once, each evicting against a
    folder without the others' bytes, so up to that many victims a reader may differ (each
    one download more or fewer; with parts, a partly read shard is several range files the
    folder evicts one by one); and a batch that found a shard its walk had not pinned yet (a
    *wait*, which the cache counts) pins it itself and releases it at once, so the walk pins
    it again later: up to one more download, and one victim changed. A shard a node reads in
    part is several range files: the plan pins them as one entry with the shard, the reader
    pins the largest so and the others when a batch reads them, so each such shard may move
    one victim a pass. Measured (docs/plan.md): with whole shards every pass was exact; with
    ranges within 5 GETs.
    """
    waits = sum(m.cache.stats.waits for m in mixes if m.cache is not None)
    ranged = 0
    for mix in mixes:
        lanes = mix._lanes
        if lanes is not None:
            got = mixture_fetches(lanes.orders, lanes.offsets.tolist(), mix.world_size, [mix.rank])
            ranged += 0 if got is None else len(got.partial)
    return len(mixes) * IN_FLIGHT + 2 * waits + ranged


@pytest.mark.servers
@pytest.mark.parametrize("nodes,parts,shuffle,shards", CASES)
def test_a_limited_mixture_downloads_per_pass_what_the_plan_walks(
    served: tuple[Nginx, list[str], str, int],
    tmp_path: Path,
    nodes: int,
    parts: int,
    shuffle: bool,
    shards: int,
) -> None:
    nginx, urls, index, largest = served
    limit = shards * largest  # a few shards: below every node's share
    order = {"parts": parts, "shuffle_shards": shuffle}
    plan = plan_mixture(
        urls, WEIGHTS, nodes=nodes, batch_size=BATCH, seed=7, index_dir=index, epochs=2,
        cache_limit=limit, prefetch=PREFETCH, **order,
    )  # fmt: skip
    assert plan.method.endswith("pins replayed in lockstep")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the folder's growth: compared below
        served_, mixes = run_passes(nginx, urls, index, tmp_path, nodes, cache_limit=limit, **order)
    slack = tolerance(mixes)
    for pass_, (sent, gets) in enumerate(served_):
        planned = sum(n.shard_requests[pass_] for n in plan.nodes)
        assert abs(planned - gets) <= slack, (pass_, planned, gets, slack)
        planned_bytes = sum(n.shard_bytes[pass_] for n in plan.nodes)
        assert abs(planned_bytes - sent) <= slack * largest  # a GET: at most a shard
    assert sum(g for _, g in served_) > 0
    evicted = sum(m.cache.stats.evicted for m in mixes if m.cache is not None)
    planned_evictions = sum(n.evictions for n in plan.nodes)
    assert abs(planned_evictions - evicted) <= slack
    # a plan of one or two evictions (parts=12 on two nodes) may meet a run of none
    assert evicted > 0 or planned_evictions <= slack
    over = [m.cache.stats.over_limit for m in mixes if m.cache is not None]
    assert [bool(line) for line in _per_node(plan)] == [n > 0 for n in over]
    assert bool(plan.over_limit()) == (shards == 3)


@pytest.mark.servers
@pytest.mark.parametrize(
    "nodes,shuffle",
    [(nodes, shuffle) for nodes, _, shuffle in BANDED],
    ids=[f"{nodes}node-{'shuf' if shuffle else 'plain'}" for nodes, _, shuffle in BANDED],
)
def test_ranks_reading_many_shards_by_ranges_past_their_limit_download_near_the_plan(
    served: tuple[Nginx, list[str], str, int], tmp_path: Path, nodes: int, shuffle: bool
) -> None:
    """``parts=12``: each node pins many shards' range files at once against a limit of 3.

    The folder is over its limit from the first batches on, each of a node's range files
    is a victim candidate of its own, and which of them a download evicts depends on when
    the prefetch thread ran against the training step. Measured over runs (docs/plan.md):
    one rank's served passes were 6% below to 25% above the plan; two nodes in tar order,
    though every walk had pinned as far as its rules let it before each read, 45 to 54
    GETs of a planned 56 on an idle machine and 53 to 59 with three busy processes beside
    (24 runs). This bounds that band; a plan that kept every shard (nothing downloaded in
    the second pass) falls outside it.
    """
    nginx, urls, index, largest = served
    limit = 3 * largest
    order = {"parts": 12, "shuffle_shards": shuffle}
    plan = plan_mixture(
        urls, WEIGHTS, nodes=nodes, batch_size=BATCH, seed=7, index_dir=index, epochs=2,
        cache_limit=limit, prefetch=PREFETCH, **order,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the folder's growth: compared below
        served_, mixes = run_passes(nginx, urls, index, tmp_path, nodes, cache_limit=limit, **order)
    for pass_, (_, gets) in enumerate(served_):
        planned = sum(n.shard_requests[pass_] for n in plan.nodes)
        assert 0.7 * planned <= gets <= 1.4 * planned, (pass_, planned, gets)
    over = [m.cache.stats.over_limit for m in mixes if m.cache is not None]
    assert plan.over_limit() and [bool(line) for line in _per_node(plan)] == [n > 0 for n in over]


def _per_node(plan: Any) -> list[str]:
    lines = plan.over_limit()
    return [next((x for x in lines if x.startswith(f"node {n.node}:")), "") for n in plan.nodes]


def test_the_plan_command_with_weights_takes_a_cache_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = _local_sets(tmp_path, shards=32)  # more than the walk pins (prefetch=8)
    argv = ["plan", *sets, "--weights", "288", "160", "--nodes", "2", "--batch-size", "2"]
    argv += ["--epochs", "2", "--cache-limit", str(2 * _largest(sets)), "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    plan = plan_mixture(
        sets, [288, 160], nodes=2, batch_size=2, epochs=2, cache_limit=2 * _largest(sets)
    )
    assert got == json.loads(json.dumps(plan.as_dict()))
    assert (
        got["cache_limit"] == 2 * _largest(sets) and sum(n["evictions"] for n in got["nodes"]) > 0
    )


def _local_sets(folder: Path, shards: int = 4) -> list[str]:
    """Two local sets of ``shards`` shards (9 and 5 samples of 1000 to 1300 bytes each)."""
    for name, count in (("a", 9), ("b", 5)):
        for shard in range(shards):
            with wds.TarWriter(str(folder / f"{name}-{shard}.tar")) as sink:
                for i in range(count):
                    sink.write({"__key__": f"{name}{shard}-{i}", "bin": bytes(1000 + 100 * shard)})
    return [str(folder / f"{name}-{{0..{shards - 1}}}.tar") for name in "ab"]


def _largest(sets: list[str]) -> int:
    return max(os.path.getsize(p) for p in Path(sets[0]).parent.glob("[ab]-*.tar"))


@pytest.fixture(scope="module")
def local_sets(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return _local_sets(tmp_path_factory.mktemp("limit-sets"))


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.sampled_from([1, 2]),
    parts=st.sampled_from([0, 4]),
    shuffle=st.booleans(),
    seed=st.integers(0, 50),
    schedule=st.sampled_from([2, [(0, 2), (30, 4)]]),
    resume_at=st.none() | st.integers(0, 2 * 56 - 1),
    above=st.integers(0, 40000),
)
def test_a_cache_limit_at_or_above_the_data_leaves_the_plan_unlimited(
    local_sets: list[str],
    nodes: int,
    parts: int,
    shuffle: bool,
    seed: int,
    schedule: Any,
    resume_at: int | None,
    above: int,
) -> None:
    options = {"nodes": nodes, "batch_size": schedule, "seed": seed, "parts": parts}
    options.update(shuffle_shards=shuffle, epochs=2, resume_at=resume_at)
    free = plan_mixture(local_sets, [36, 20], **options)
    limit = free.dataset_bytes + above
    limited = plan_mixture(local_sets, [36, 20], cache_limit=limit, **options)
    assert (limited.nodes, limited.resume, limited.resume_warm) == (
        free.nodes,
        free.resume,
        free.resume_warm,
    )
    assert limited.method == free.method and limited.over_limit() == []


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.sampled_from([1, 2]),
    parts=st.sampled_from([0, 4]),
    seed=st.integers(0, 50),
    shards=st.integers(1, 8),
)
def test_a_limit_below_a_nodes_shards_downloads_no_less_and_resumes_leave_the_run_alone(
    local_sets: list[str], nodes: int, parts: int, seed: int, shards: int
) -> None:
    options = {"nodes": nodes, "batch_size": 2, "seed": seed, "parts": parts, "epochs": 2}
    free = plan_mixture(local_sets, [36, 20], **options)
    limit = shards * _largest(local_sets)
    limited = plan_mixture(local_sets, [36, 20], cache_limit=limit, **options)
    resumed = plan_mixture(
        local_sets, [36, 20], cache_limit=limit, resume_at=60, resume_nodes=2, **options
    )
    assert resumed.nodes == limited.nodes  # planning a resume leaves the run's figures alone
    assert resumed.resume is not None and resumed.resume_warm is not None
    for cold, warm in zip(resumed.resume, resumed.resume_warm, strict=True):
        assert warm.shard_bytes[0] <= cold.shard_bytes[0]
    for a, b in zip(free.nodes, limited.nodes, strict=True):
        assert sum(b.shard_bytes) >= sum(a.shard_bytes)
        assert b.shards[0] >= a.shards[0]


def test_a_mixture_cache_limit_below_the_largest_shard_is_refused_naming_it(
    local_sets: list[str],
) -> None:
    largest = _largest(local_sets)
    with pytest.raises(ValueError, match=r"cache_limit should hold at least the largest shard"):
        plan_mixture(local_sets, [36, 20], nodes=1, batch_size=2, cache_limit=largest - 1)
    with pytest.raises(TypeError, match=r"cache_limit should be"):
        plan_mixture(local_sets, [36, 20], nodes=1, batch_size=2, cache_limit="1GB")  # type: ignore[arg-type]
