"""The mixture's plan against a real nginx: its shard bytes and GETs are what the log counts.

Two shard sets (12 and 9 shards of about 40 and 32 samples of 1-4 KB, 480 and 288 samples: a pass
is 768 positions, whole global batches on 1, 2 and 4 ranks) served by nginx on 127.0.0.1.
Each node is a cache folder of its own (one rank a node); each rank reads its batches of
the pass through the cached reader it builds, without its prefetch thread (which walks
past the pass), as ``test_wds_plan.py`` reads a resume.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from nginx_server import Nginx

from detsamplers.__main__ import main
from detsamplers.loader import WebDatasetMix
from detsamplers.loader._wds.mix._plan_mixture import plan_mixture

SETS = ((12, 480), (9, 288))  # shards, samples of each set
ORDERS: list[dict[str, Any]] = [
    {"parts": 12, "shuffle_shards": False},
    {"parts": 12, "shuffle_block_shards": 2},
    {"parts": [12, 0]},
    {"parts": 0},
]


def write_sets(root: Path) -> list[int]:
    rng = random.Random(2)
    for k, (shards, samples) in enumerate(SETS):
        (root / f"m{k}").mkdir(parents=True)
        mean = samples // shards
        counts = [rng.randint(mean - 8, mean + 8) for _ in range(shards - 1)]
        counts.append(samples - sum(counts))
        assert counts[-1] > 0
        label = k * 100_000
        for shard, count in enumerate(counts):
            with wds.TarWriter(str(root / f"m{k}" / f"d-{shard:02d}.tar")) as sink:
                for _ in range(count):
                    payload = rng.randbytes(rng.randint(1024, 4096))
                    sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})
                    label += 1
    return [samples for _, samples in SETS]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nginx, list[str], str]]:
    root = tmp_path_factory.mktemp("plan-mix-root")
    sizes = write_sets(root)
    nginx = Nginx(root, tmp_path_factory.mktemp("plan-mix-run"))
    try:
        urls = [f"{nginx.url}/m{k}/d-{{00..{n - 1:02d}}}.tar" for k, (n, _) in enumerate(SETS)]
        index = str(tmp_path_factory.mktemp("index"))
        WebDatasetMix(urls, sizes, seed=0, batch_size=1, index_dir=index)  # index once
        yield nginx, urls, index
    finally:
        nginx.close()


def run(
    urls: list[str], index: str, folder: Path, world: int, schedule: list[tuple[int, int]],
    **order: Any,
) -> None:  # fmt: skip
    """Each rank reads the pass's batches of each segment through its node's cache folder."""
    total = sum(samples for _, samples in SETS)
    ends = [*[a for a, _ in schedule[1:]], total]
    for (low, size), high in zip(schedule, ends, strict=True):
        grid = size * world
        for rank in range(world):
            mix = WebDatasetMix(
                urls, [n for _, n in SETS], seed=7, batch_size=size, world_size=world,
                rank=rank, skip_samples=low, index_dir=index, decode=(), collate_fn=list,
                cache_dir=str(folder / f"node{rank}"), **order,
            )  # fmt: skip
            reader = mix._reader()  # the cached reader a rank builds, without its prefetch
            try:
                first = (low - mix.origin) // grid
                for batch in range(first, first + (high - low) // grid):
                    assert len(mix.batch_at(batch, reader)) == size
            finally:
                reader.close()


@pytest.mark.servers
@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize("order", ORDERS, ids=["parts", "parts-blocks", "parts-one-set", "plain"])
def test_a_mixture_passes_planned_shard_bytes_and_gets_are_what_nginx_serves(
    served: tuple[Nginx, list[str], str], tmp_path: Path, nodes: int, order: dict[str, Any]
) -> None:
    nginx, urls, index = served
    plan = plan_mixture(
        urls, [n for _, n in SETS], nodes=nodes, batch_size=8, seed=7, index_dir=index, **order
    )
    mark = nginx.mark()
    run(urls, index, tmp_path, nodes, [(0, 8)], **order)
    sent, requests = nginx.served(mark)
    assert sum(n.shard_bytes[0] for n in plan.nodes) == sent > 0
    assert sum(n.shard_requests[0] for n in plan.nodes) == requests
    if order["parts"] == 12:  # each node's ranges of each set: the data once, about
        assert sent <= 1.05 * plan.dataset_bytes


@pytest.mark.servers
@pytest.mark.parametrize("nodes", [2, 4])
def test_a_batch_size_schedules_planned_bytes_and_gets_are_what_nginx_serves(
    served: tuple[Nginx, list[str], str], tmp_path: Path, nodes: int
) -> None:
    nginx, urls, index = served
    schedule = [(0, 8), (384, 4)]  # a switch at an optimizer step, as the trial makes it
    order = {"parts": 12, "shuffle_block_shards": 2}
    plan = plan_mixture(
        urls, [n for _, n in SETS], nodes=nodes, batch_size=schedule, seed=7, index_dir=index,
        epochs=2, **order,
    )  # fmt: skip
    mark = nginx.mark()
    run(urls, index, tmp_path, nodes, schedule, **order)
    sent, requests = nginx.served(mark)
    assert sum(n.shard_bytes[0] for n in plan.nodes) == sent > 0
    assert sum(n.shard_requests[0] for n in plan.nodes) == requests
    assert [n.shard_bytes[1] for n in plan.nodes] == [0] * nodes  # the second pass: cached


def test_a_schedule_out_of_order_is_refused_naming_the_segment(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"batch_size\[1\] should start at a later position"):
        plan_mixture(["a.tar", "b.tar"], [1, 1], nodes=1, batch_size=[(0, 8), (0, 4)])
    with pytest.raises(ValueError, match=r"batch_size\[0\] should start at start=5"):
        plan_mixture(["a.tar", "b.tar"], [1, 1], nodes=1, batch_size=[(0, 8)], start=5)
    with pytest.raises(TypeError, match=r"batch_size\[0\] should be a \(from_position, size\)"):
        plan_mixture(["a.tar", "b.tar"], [1, 1], nodes=1, batch_size=[8])


@pytest.mark.servers
def test_the_plan_command_with_weights_prints_the_mixtures_plan_as_json(
    served: tuple[Nginx, list[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, urls, index = served
    argv = ["plan", *urls, "--weights", "480", "288", "--nodes", "2", "--batch-size", "8"]
    argv += ["--parts", "12", "--seed", "7", "--index-dir", index, "--json"]
    argv += ["--batch-schedule", "0:8", "384:4", "--epochs", "2"]
    assert main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    plan = plan_mixture(
        urls, [480, 288], nodes=2, batch_size=[(0, 8), (384, 4)], seed=7, index_dir=index,
        parts=12, epochs=2,
    )  # fmt: skip
    assert got == json.loads(json.dumps(plan.as_dict()))
    with pytest.raises(SystemExit):
        main([*argv, "--set-index", "x.npz"])
    assert "--set-index should be given without URL patterns" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["plan", *urls, "--weights", "1", "1", "--nodes", "1", "--batch-size", "8",
              "--batch-schedule", "0-8"])  # fmt: skip
    assert "--batch-schedule should hold POSITION:SIZE pairs" in capsys.readouterr().err
