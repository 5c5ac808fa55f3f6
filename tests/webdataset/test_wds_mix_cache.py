"""A mixture of remote shard sets with parts over a real nginx: each shard's bytes once.

Two shard sets of 16 shards each (2-8 KB samples; 40 and 25 samples per shard) are served
by nginx on 127.0.0.1, whose access log counts ``$body_bytes_sent``. The ranks are built
in one process, as the ranks of a node are, and share one cache folder, or have one each.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from nginx_server import Nginx
from wds_helpers import run_two_agents, simulate

from detsamplers.loader import WebDatasetMix

SHARDS = 16
PER_SHARD = (40, 25)  # weights 640 : 400 = 8 : 5, a window of 13 positions


class Served:
    def __init__(self, nginx: Nginx, root: Path, index_dir: str) -> None:
        self.nginx, self.index_dir = nginx, index_dir
        self.urls = [f"{nginx.url}/m{k}/d-{{00..{SHARDS - 1:02d}}}.tar" for k in range(2)]
        self.bytes = sum(p.stat().st_size for p in root.glob("m*/*.tar"))
        self.sizes = [SHARDS * n for n in PER_SHARD]

    def make(self, **options: Any) -> WebDatasetMix:
        defaults: dict[str, Any] = {"seed": 0, "batch_size": 8, "decode": (), "map": _label}
        return WebDatasetMix(
            self.urls, self.sizes, index_dir=self.index_dir, **{**defaults, **options}
        )


def _label(sample: dict[str, Any]) -> int:
    return int(sample["cls"])


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("nginx-mix-root")
    rng = random.Random(0)
    for k, count in enumerate(PER_SHARD):
        (root / f"m{k}").mkdir()
        label = k * 100_000
        for shard in range(SHARDS):
            with wds.TarWriter(str(root / f"m{k}" / f"d-{shard:02d}.tar")) as sink:
                for _ in range(count):
                    payload = rng.randbytes(rng.randint(2048, 8192))
                    sink.write({"__key__": f"k{label:06d}", "bin": payload, "cls": label})
                    label += 1
    nginx = Nginx(root, tmp_path_factory.mktemp("nginx-mix-run"))
    try:
        out = Served(nginx, root, str(tmp_path_factory.mktemp("index")))
        out.make()  # index the shards once (cached in index_dir)
        yield out
    finally:
        nginx.close()


def read(served: Served, world: int, steps: int, **options: Any) -> list[int]:
    """Each rank's first ``steps`` batches of 8, the ranks one after the other."""
    labels: list[int] = []
    for rank in range(world):
        source = served.make(world_size=world, rank=rank, **options)
        iterator = iter(source)
        labels.extend(int(x) for _ in range(steps) for x in next(iterator))
        iterator.close()  # type: ignore[attr-defined]
    return labels


#: Positions read: one pass of both sets, less a margin that keeps every lane (and the
#: prefetch of one shard ahead) inside the first epoch of each set (NOTE [ mixture lanes ]).
MARGIN = 256


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("shuffle", [{}, {"shuffle_block_shards": 2}], ids=["tar", "shuffled"])
def test_a_mixture_epoch_on_one_node_with_parts_downloads_each_shard_once(
    served: Served, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    options = {"parts": 8, "cache_dir": str(tmp_path / "cache"), "prefetch": 1, **shuffle}
    steps = (sum(served.sizes) - MARGIN) // (8 * world)
    mark = served.nginx.mark()
    labels = read(served, world, steps, **options)
    sent, requests = served.nginx.served(mark)
    assert len(labels) == steps * 8 * world
    assert max(Counter(labels).values()) == 1  # no sample of the first epoch read twice
    assert sent <= 1.05 * served.bytes, (sent / served.bytes, requests)
    assert sent >= 0.75 * served.bytes  # nearly every shard was read, whole
    # Through the warm cache (new sources, as after a restart) nothing is sent.
    mark = served.nginx.mark()
    assert read(served, world, steps, **options) == labels
    assert served.nginx.served(mark) == (0, 0)


@pytest.mark.parametrize("world", [2, 4])
def test_with_a_cache_per_rank_each_rank_downloads_only_its_parts_of_each_set(
    served: Served, tmp_path: Path, world: int
) -> None:
    def per_rank(parts: int) -> list[list[int]]:
        held = []
        for rank in range(world):
            cache = tmp_path / f"p{parts}-r{rank}"
            source = served.make(
                world_size=world, rank=rank, parts=parts, cache_dir=str(cache), prefetch=1
            )
            iterator = iter(source)
            for _ in range((sum(served.sizes) - MARGIN) // (8 * world)):
                next(iterator)
            iterator.close()  # type: ignore[attr-defined]
            assert source.cache is not None
            present = [os.path.exists(source.cache.path(info)) for info in source.shards]
            held.append([sum(present[:SHARDS]), sum(present[SHARDS:])])
        return held

    # A rank's parts are one run of each set's epoch, whose two ends can fall inside a
    # shard, and the tail of each epoch (fewer than 8 samples) is shared.
    for counts in per_rank(8):
        assert all(n <= SHARDS // world + 3 for n in counts), counts
    # The plain order with a cache: every rank downloads nearly every shard of each set
    # (all but the last few of the epoch's order, before the margin).
    for counts in per_rank(0):
        assert all(n >= 0.75 * SHARDS for n in counts), counts


@pytest.mark.distributed
def test_two_torchrun_agents_with_a_cache_each_read_their_own_parts_of_each_set(
    served: Served, tmp_path: Path
) -> None:
    steps = (sum(served.sizes) - MARGIN) // (8 * 2)
    mark = served.nginx.mark()

    def node_args(node: int) -> list[str]:
        (tmp_path / f"out{node}").mkdir()
        return [
            f"--urls={served.urls[0]}", f"--urls={served.urls[1]}",
            "--sizes", *map(str, served.sizes), f"--steps={steps}",
            f"--cache={tmp_path / f'cache{node}'}", f"--out={tmp_path / f'out{node}'}",
            f"--index-dir={served.index_dir}",
        ]  # fmt: skip

    run_two_agents(tmp_path, "mix_two_nodes", node_args)
    sent, _ = served.nginx.served(mark)  # before the simulation below reads the shards
    assert sent <= 1.2 * served.bytes
    results = sorted(
        (
            json.loads(p.read_text())
            for n in range(2)
            for p in (tmp_path / f"out{n}").glob("*.json")
        ),
        key=lambda r: r["rank"],
    )
    assert len(results) == 2
    options = {"parts": 8, "shuffle_block_shards": 2}
    expected = [simulate(served.make(world_size=2, rank=r, **options), 0, steps) for r in range(2)]
    assert [r["labels"] for r in results] == [[x for b in e for x in b] for e in expected]
    for r in results:  # each node: its half of each set's shards, and its runs' edges
        held = [sum(r["present"][:SHARDS]), sum(r["present"][SHARDS:])]
        assert all(n <= SHARDS // 2 + 3 for n in held), held
