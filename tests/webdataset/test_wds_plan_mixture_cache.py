"""The mixture plan's resume against a real nginx and the real ``WebDatasetMix``.

Two shard sets (``test_wds_plan_mixture.write_sets``: 12 and 9 shards of 30-50 KB, a pass
of 768 positions) served by nginx on 127.0.0.1. Each node is a cache folder of its own
(one rank a node), without a limit (test_wds_plan_mixture_limit.py plans one: NOTE
[ mixture plan pins ]); each rank reads its batches through the cached reader it builds,
and nginx's log counts the shard bytes and GETs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from hypothesis import example, given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from test_wds_plan_mixture import SETS, write_sets

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.mix._plan_mixture import plan_mixture

WEIGHTS = [samples for _, samples in SETS]
PASS = sum(WEIGHTS)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, list[str], str]]:
    root = tmp_path_factory.mktemp("plan-cache-root")
    write_sets(root)
    nginx = Nginx(root, tmp_path_factory.mktemp("plan-cache-run"))
    try:
        urls = [f"{nginx.url}/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, (n, _) in enumerate(SETS)]
        index = str(tmp_path_factory.mktemp("index"))
        WebDatasetMix(urls, WEIGHTS, seed=0, batch_size=1, index_dir=index)  # index once
        yield nginx, urls, index
    finally:
        nginx.close()


def readers(
    urls: list[str], index: str, folders: list[Path], world: int, at: int, **options: Any
) -> list[tuple[WebDatasetMix, Any]]:
    """Each rank's loader built at ``at`` (a start or a resume) and its cached reader."""
    out = []
    for rank in range(world):
        mix = WebDatasetMix(
            urls, WEIGHTS, seed=7, batch_size=8, world_size=world, rank=rank, skip_samples=at,
            index_dir=index, decode=(), collate_fn=list, cache_dir=str(folders[rank]),
            **options,
        )  # fmt: skip
        out.append((mix, mix._reader()))  # the cached reader a rank builds, without its prefetch
    return out


def read(ranks: list[tuple[WebDatasetMix, Any]], low: int, high: int) -> int:
    """Every rank reads its batches of positions ``[low, high)``; the samples read."""
    got = 0
    for mix, reader in ranks:
        grid = 8 * mix.world_size
        first = (low - mix.origin) // grid
        for batch in range(first, first + (high - low) // grid):
            got += len(mix.batch_at(batch, reader))
    return got


def close(ranks: list[tuple[WebDatasetMix, Any]]) -> None:
    for _, reader in ranks:
        reader.close()


@pytest.mark.servers
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_resume_on_another_world_size_downloads_the_shards_the_plan_says(
    served: tuple[Nginx, list[str], str], tmp_path: Path, warm: bool
) -> None:
    nginx, urls, index = served
    order = {"parts": 12, "shuffle_block_shards": 2}
    at = PASS // 2  # whole global batches on 1 rank before and on 2 after
    plan = plan_mixture(
        urls, WEIGHTS, nodes=1, batch_size=8, seed=7, index_dir=index, resume_at=at,
        resume_nodes=2, **order,
    )  # fmt: skip
    assert plan.resume is not None and plan.resume_warm is not None
    folders = [tmp_path / "node0", tmp_path / "node1"]
    if warm:  # the run on one node reads up to the resume through node 0's folder
        run = readers(urls, index, folders[:1], 1, 0, **order)
        read(run, 0, at)
        close(run)
    cold = [tmp_path / "a", tmp_path / "b"]
    resumed = readers(urls, index, folders if warm else cold, 2, at, **order)
    mark = nginx.mark()
    try:
        assert read(resumed, at, PASS) == PASS - at
    finally:
        close(resumed)
    sent, requests = nginx.served(mark)
    expected = plan.resume_warm if warm else plan.resume
    assert sum(n.shard_bytes[0] for n in expected) == sent > 0
    assert sum(n.shard_requests[0] for n in expected) == requests
    shards = sum(mix.cache.stats.downloaded for mix, _ in resumed if mix.cache is not None)
    assert sum(n.shards[0] for n in expected) == shards
    if warm:  # node 0 holds its half already: it downloads less than node 1
        assert expected[0].shard_bytes[0] < expected[1].shard_bytes[0]


@pytest.fixture(scope="module")
def local_sets(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("plan-cache-local")
    for name, count in (("a", 36), ("b", 20)):
        with wds.ShardWriter(str(folder / f"{name}-%d.tar"), maxcount=4, verbose=0) as sink:
            for i in range(count):
                sink.write({"__key__": f"{name}{i}", "bin": bytes(500 + 300 * (i % 5))})
    return [str(folder / "a-{0..8}.tar"), str(folder / "b-{0..4}.tar")]


@settings(max_examples=25, deadline=None)
@given(
    nodes=st.sampled_from([1, 2]),
    parts=st.sampled_from([0, 4]),
    seed=st.integers(0, 50),
    resume_at=st.integers(0, 2 * 56 - 1),
    resume_nodes=st.sampled_from([1, 2]),
)
# A warm node that holds parts of a shard fetches each missing stretch by a request of its own,
# where a cold one downloads the shard whole in one: warm bytes are fewer, requests may be more.
@example(
    nodes=2, parts=4, seed=35, resume_at=105, resume_nodes=1
)  # 72,464 B in 6 GETs, cold 5 x 20,480 B
def test_planning_a_resume_leaves_the_runs_figures_and_a_warm_cache_downloads_no_more(
    local_sets: list[str], nodes: int, parts: int, seed: int, resume_at: int, resume_nodes: int
) -> None:
    options = {"nodes": nodes, "batch_size": 2, "seed": seed, "parts": parts, "epochs": 2}
    planned = plan_mixture(local_sets, [36, 20], resume_at=resume_at, resume_nodes=resume_nodes,
                           **options)  # fmt: skip
    alone = plan_mixture(local_sets, [36, 20], **options)
    assert alone.nodes == planned.nodes  # planning a resume leaves the run's figures alone
    assert alone.resume is None and alone.resume_warm is None
    assert planned.resume is not None and planned.resume_warm is not None
    assert len(planned.resume) == len(planned.resume_warm) == resume_nodes
    for cold, warm in zip(planned.resume, planned.resume_warm, strict=True):
        assert warm.shard_bytes[0] <= cold.shard_bytes[0]
        assert warm.shards[0] <= cold.shards[0]  # it downloads from no more shards


def test_bad_resume_points_and_world_sizes_are_refused_naming_the_argument(
    local_sets: list[str],
) -> None:
    options: dict[str, Any] = {"nodes": 2, "batch_size": 2, "parts": 4}
    with pytest.raises(
        ValueError, match=r"resume_at should be a position of the run, in \[0, 112\)"
    ):
        plan_mixture(local_sets, [36, 20], epochs=2, resume_at=112, **options)
    with pytest.raises(
        ValueError, match=r"parts should hold a part count the resume's world size 3"
    ):
        plan_mixture(local_sets, [36, 20], resume_at=8, resume_nodes=3, **options)
    with pytest.raises(ValueError, match=r"parts should hold a part count the run's world size 3"):
        plan_mixture(local_sets, [36, 20], **{**options, "nodes": 3})


@pytest.mark.servers
def test_the_plan_command_with_weights_takes_a_resume(
    served: tuple[Nginx, list[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    _, urls, index = served
    argv = ["plan", *urls, "--weights", *map(str, WEIGHTS), "--nodes", "1", "--batch-size", "8"]
    argv += ["--parts", "12", "--seed", "7", "--index-dir", index, "--epochs", "2"]
    argv += ["--resume-at", "384", "--resume-nodes", "2", "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    plan = plan_mixture(
        urls, WEIGHTS, nodes=1, batch_size=8, seed=7, index_dir=index, parts=12, epochs=2,
        resume_at=384, resume_nodes=2,
    )  # fmt: skip
    assert got == json.loads(json.dumps(plan.as_dict()))
    assert len(got["resume"]) == len(got["resume_warm"]) == 2
