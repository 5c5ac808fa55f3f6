"""The mixture's plan over set indexes against a real nginx (NOTE [ mixture plan set index ]).

The two shard sets of ``test_wds_plan_mixture.py``, each folder indexed as the docs say
(``python -m detsamplers index URLS --out FOLDER``: a set index and the shards' own index
files, served beside the shards). Each rank builds its ``WebDatasetMix`` over the URLs with
no ``index_dir``, so it fetches each folder's set index, then reads its batches of the pass
through its node's cache folder. The plan, from the URLs or from the two local set index
files, counts the same shard and set index bytes and GETs as nginx's log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from test_wds_plan_mixture import SETS, write_sets

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.index._set_index_file import SET_INDEX_NAME
from detsamplers.loader._wds.mix._plan_mixture import plan_mixture

WEIGHTS = [samples for _, samples in SETS]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, list[str], Path]]:
    root = tmp_path_factory.mktemp("plan-mix-set-root")
    write_sets(root)
    nginx = Nginx(root, tmp_path_factory.mktemp("plan-mix-set-run"))
    try:
        urls = [f"{nginx.url}/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, (n, _) in enumerate(SETS)]
        for k, url in enumerate(urls):
            assert main(["index", url, "--out", str(root / f"m{k}")]) == 0
        yield nginx, urls, root
    finally:
        nginx.close()


def _run(urls: list[str], folder: Path, world: int, **order: Any) -> None:
    """Each rank builds its mixture (fetching the set indexes) and reads its batches of the pass."""
    for rank in range(world):
        mix = WebDatasetMix(
            urls, WEIGHTS, seed=7, batch_size=8, world_size=world, rank=rank, decode=(),
            collate_fn=list, cache_dir=str(folder / f"node{rank}"), **order,
        )  # fmt: skip
        reader = mix._reader()  # the cached reader a rank builds, without its prefetch
        try:
            for batch in range(sum(WEIGHTS) // (8 * world)):
                assert len(mix.batch_at(batch, reader)) == 8
        finally:
            reader.close()


@pytest.mark.servers
@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("order", [{"parts": 12, "shuffle_block_shards": 2}, {"parts": 0}])
def test_a_mixture_over_set_indexes_plans_the_shard_and_index_bytes_and_gets_nginx_serves(
    indexed: tuple[Nginx, list[str], Path], tmp_path: Path, nodes: int, order: dict[str, Any]
) -> None:
    nginx, urls, root = indexed
    options: dict[str, Any] = {"nodes": nodes, "batch_size": 8, "seed": 7, **order}
    by_urls = plan_mixture(urls, WEIGHTS, **options)
    files = [root / f"m{k}" / SET_INDEX_NAME for k in range(len(SETS))]
    by_files = plan_mixture(None, WEIGHTS, set_index=[str(f) for f in files], **options)
    mark = nginx.mark()
    _run(urls, tmp_path, nodes, **order)
    sent, gets = nginx.served(mark)
    index_sent, index_gets = nginx.served(mark, suffix=SET_INDEX_NAME)
    assert nginx.served(mark, suffix=".index.npz") == (index_sent, index_gets)  # no shard's own
    assert index_gets == nodes * len(SETS)  # one a folder a rank
    assert index_sent == nodes * sum(f.stat().st_size for f in files)
    for plan in (by_urls, by_files):
        assert sum(n.shard_bytes[0] for n in plan.nodes) == sent > 0
        assert sum(n.shard_requests[0] for n in plan.nodes) == gets
        assert sum(n.index_bytes for n in plan.nodes) == index_sent
        assert sum(n.index_requests for n in plan.nodes) == index_gets
    assert [n.shard_bytes for n in by_files.nodes] == [n.shard_bytes for n in by_urls.nodes]


@pytest.mark.servers
@pytest.mark.parametrize("order", [{"parts": 12, "shuffle_block_shards": 2}, {"parts": 0}])
def test_a_resume_over_set_indexes_plans_each_resumed_ranks_index_fetch_nginx_serves(
    indexed: tuple[Nginx, list[str], Path], tmp_path: Path, order: dict[str, Any]
) -> None:
    """A run on 1 node of 2 ranks resumed mid-pass on 2 nodes of 2: four ranks build anew."""
    nginx, urls, root = indexed
    at = sum(WEIGHTS) // 2
    options: dict[str, Any] = {"nodes": 1, "ranks_per_node": 2, "batch_size": 8, "seed": 7}
    options.update(resume_at=at, resume_nodes=2, **order)
    files = [str(root / f"m{k}" / SET_INDEX_NAME) for k in range(len(SETS))]
    plans = [plan_mixture(urls, WEIGHTS, **options)]
    plans.append(plan_mixture(None, WEIGHTS, set_index=files, **options))
    mark = nginx.mark()
    for rank in range(4):  # the resumed ranks, each building its mixture at the resume
        mix = WebDatasetMix(
            urls, WEIGHTS, seed=7, batch_size=8, world_size=4, rank=rank, skip_samples=at,
            decode=(), collate_fn=list, cache_dir=str(tmp_path / f"node{rank // 2}"), **order,
        )  # fmt: skip
        reader = mix._reader()
        try:
            first = (at - mix.origin) // 32
            for batch in range(first, first + (sum(WEIGHTS) - at) // 32):
                assert len(mix.batch_at(batch, reader)) == 8
        finally:
            reader.close()
    index_sent, index_gets = nginx.served(mark, suffix=SET_INDEX_NAME)
    assert index_gets == 4 * len(SETS)  # one a folder a resumed rank
    sent, gets = nginx.served(mark)
    for plan in plans:
        assert plan.resume is not None and plan.resume_warm is not None
        for resume in (plan.resume, plan.resume_warm):
            assert [n.index_requests for n in resume] == [2 * len(SETS)] * 2
            assert sum(n.index_bytes for n in resume) == index_sent
            assert sum(n.index_requests for n in resume) == index_gets
        assert sum(n.shard_bytes[0] for n in plan.resume) == sent > 0  # cold folders
        assert sum(n.shard_requests[0] for n in plan.resume) == gets
        assert [n.index_requests for n in plan.nodes] == [2 * len(SETS)]  # the run's own


@pytest.mark.servers
@settings(max_examples=10, deadline=None)
@given(nodes=st.sampled_from([1, 2]), per_node=st.sampled_from([1, 2]), at=st.integers(0, 767))
def test_every_resumed_rank_fetches_each_folders_set_index_once_in_the_plan(
    indexed: tuple[Nginx, list[str], Path], nodes: int, per_node: int, at: int
) -> None:
    _, _, root = indexed
    files = [str(root / f"m{k}" / SET_INDEX_NAME) for k in range(len(SETS))]
    plan = plan_mixture(
        None, WEIGHTS, set_index=files, nodes=1, batch_size=2, resume_at=at,
        resume_nodes=nodes, resume_ranks_per_node=per_node,
    )  # fmt: skip
    sizes = sum(Path(f).stat().st_size for f in files)
    assert plan.resume is not None and plan.resume_warm is not None
    for resume in (plan.resume, plan.resume_warm):
        assert [(n.index_bytes, n.index_requests) for n in resume] == [
            (per_node * sizes, per_node * len(SETS))
        ] * nodes


def test_set_index_files_are_refused_beside_urls_or_as_one_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set_index should be given alone, but got urls"):
        plan_mixture(["a.tar"], [1], set_index=["x.npz"], nodes=1, batch_size=8)
    with pytest.raises(TypeError, match="set_index should be a list of set index files"):
        plan_mixture(None, [1], set_index="x.npz", nodes=1, batch_size=8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="set_index should hold one set index file per weight"):
        plan_mixture(None, [1, 1], set_index=["x.npz"], nodes=1, batch_size=8)
    with pytest.raises(FileNotFoundError, match="set_index should be an existing file"):
        plan_mixture(None, [1], set_index=[str(tmp_path / "none.npz")], nodes=1, batch_size=8)


@pytest.mark.servers
def test_the_plan_command_takes_a_set_index_file_per_set_with_weights(
    indexed: tuple[Nginx, list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, root = indexed
    files = [str(root / f"m{k}" / SET_INDEX_NAME) for k in range(len(SETS))]
    argv = ["plan", "--weights", *map(str, WEIGHTS), "--set-index", *files]
    argv += ["--nodes", "2", "--batch-size", "8", "--parts", "12", "--seed", "7", "--json"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    plan = plan_mixture(None, WEIGHTS, set_index=files, nodes=2, batch_size=8, parts=12, seed=7)
    assert got == json.loads(json.dumps(plan.as_dict()))
    assert got["nodes"][0]["index_requests"] == len(SETS)
    with pytest.raises(SystemExit):
        main(["plan", "--set-index", *files, "--nodes", "1", "--batch-size", "8"])
    assert "--set-index should be one file without --weights" in capsys.readouterr().err
    assert (
        main(["plan", "--set-index", files[0], "--nodes", "1", "--batch-size", "8", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["nodes"][0]["index_requests"] == 1  # one set
