"""One order wherever the shards live: the same files on disk, over nginx and in moto's S3.

NOTE [ parts chosen at load ]: the default order is one rule for every storage, and the node
cache (which only remote shards use) never changes it. Each test reads the same 16 shards
(682 samples of 2-8 KB) from a local folder, from nginx serving that folder and from a
bucket of moto's S3 server holding copies, and compares the records every rank reads.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from nginx_server import Nginx
from s3_server import S3Server
from wds_helpers import cached_shards, global_stream, label, member_bytes

from detsamplers.loader import WebDatasetSource
from detsamplers.loader._wds import _source_parts

PATTERN = "d-{00..15}.tar"
BATCH = 8


@dataclass
class Stores:
    """Where the same 16 shards live: a URL pattern per storage, and how to read each."""

    root: Path
    total: int
    nginx: Nginx
    s3: S3Server
    index_dir: str

    @property
    def bytes(self) -> int:
        """The shards' bytes, all 16 of them."""
        return sum(p.stat().st_size for p in self.root.glob("*.tar"))

    def urls(self, where: str) -> str:
        if where == "local":
            return str(self.root / PATTERN)
        if where == "nginx":
            return f"{self.nginx.url}/s/{PATTERN}"
        return f"s3://one-order/s/{PATTERN}"

    def make(self, where: str, **options: Any) -> WebDatasetSource:
        base: dict[str, Any] = {"seed": 5, "batch_size": BATCH, "decode": (), "map": label}
        if where != "local":
            base["index_dir"] = self.index_dir
        if where == "s3":
            base["storage_options"] = self.s3.options
        return WebDatasetSource(self.urls(where), **{**base, **options})


@pytest.fixture(scope="module")
def stores(
    nginx_small: tuple[Nginx, int],
    tmp_path_factory: pytest.TempPathFactory,
    s3_session: S3Server,
) -> Stores:
    nginx, total = nginx_small  # the session's nginx of 16 shards (conftest.py)
    root = nginx.root
    s3_session.create_bucket("one-order")
    for shard in sorted((root / "s").glob("*.tar")):
        s3_session.put("one-order", f"s/{shard.name}", shard.read_bytes())
    return Stores(root / "s", total, nginx, s3_session, str(tmp_path_factory.mktemp("index")))


def epoch(stores: Stores, where: str, world_size: int, **options: Any) -> list[int]:
    """Every rank's first pass, reassembled into the global stream of labels."""
    sources = [
        stores.make(where, world_size=world_size, rank=r, repeat=False, **options)
        for r in range(world_size)
    ]
    steps = -(-stores.total // (BATCH * world_size))
    return global_stream(sources, 0, steps)


def cached_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.tar")) if folder.exists() else []


SHUFFLES = {
    "tar order": {"shuffle_shards": False},
    "shards shuffled": {},
    "window": {"shuffle_window": 8},
    "block": {"shuffle_block_shards": 2},
}


# One rank, and several ranks whose batches do not divide the epoch (682 samples, batches of 8):
# world size 2 took the same path as 3 (every rank reads by ranges, a short last step).
@pytest.mark.parametrize("shuffle", list(SHUFFLES), ids=list(SHUFFLES))
@pytest.mark.parametrize("world_size", [1, 3])
def test_by_default_the_same_files_give_the_same_stream_on_disk_over_nginx_and_in_s3(
    stores: Stores,
    world_size: int,
    shuffle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    options = SHUFFLES[shuffle]
    streams = {where: epoch(stores, where, world_size, **options) for where in ("local", "nginx")}
    streams["s3"] = epoch(stores, "s3", world_size, **options)
    assert streams["local"] == streams["nginx"] == streams["s3"]
    assert sorted(streams["local"]) == list(range(stores.total))  # each record once
    # The default downloads nothing whole: no shard in the default cache folder.
    assert cached_files(tmp_path / "xdg") == []


def test_explicit_parts_give_one_stream_whether_shards_are_cached_read_by_ranges_or_local(
    stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    options = {"parts": 24, "shuffle_block_shards": 2}
    local = epoch(stores, "local", 2, **options)
    assert sorted(local) == list(range(stores.total))
    mark = stores.nginx.mark()
    assert epoch(stores, "nginx", 2, **options) == local  # the default cache folder
    cached_bytes = stores.nginx.served(mark)[0]
    # Each shard in the cache, whole or as the ranges its ranks read (NOTE [ node fetches ]).
    assert len(cached_shards(tmp_path / "xdg")) == 16
    mark = stores.nginx.mark()
    assert epoch(stores, "nginx", 2, cache_dir=False, **options) == local
    ranged_bytes = stores.nginx.served(mark)[0]
    data = member_bytes(stores.root.glob("*.tar"))
    assert data <= cached_bytes <= stores.bytes  # one node: every sample's bytes once
    assert ranged_bytes >= data  # by ranges each rank reads its own, in blocks
    assert epoch(stores, "s3", 2, cache_dir=str(tmp_path / "own"), **options) == local
    assert len(cached_shards(tmp_path / "own")) == 16


def test_the_default_cache_folder_is_announced_once_with_its_limit_and_how_to_change_it(
    stores: Stores,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(_source_parts, "_announced", set())
    caplog.set_level(logging.WARNING, logger="detsamplers.loader")
    stores.make("nginx")  # the plain order: no cache, nothing said
    stores.make("local", parts=24)  # local shards are read in place
    stores.make("nginx", parts=24, cache_dir=str(tmp_path / "own"))  # a folder of one's own
    stores.make("nginx", parts=24, cache_dir=False)
    assert caplog.records == []
    first = stores.make("nginx", parts=24)
    stores.make("s3", parts=24)  # the same folder: said once per process
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    folder = os.path.join(str(tmp_path / "xdg"), "detsamplers", "shards")
    assert first.cache is not None and str(first.cache.folder) == folder
    assert folder in message and "at most 64 GiB" in message
    assert "cache_dir=False" in message and "cache_limit=" in message
    stores.make("nginx", parts=24, cache_limit=1 << 30, cache_dir=None)
    assert len(caplog.records) == 1


def test_cache_dir_takes_a_folder_false_or_none_and_names_anything_else(stores: Stores) -> None:
    for bad in (True, 0, b"/tmp", ["/tmp"]):
        with pytest.raises(
            TypeError, match=r"cache_dir should be a folder \(a str or an os.PathLike\), False"
        ):
            stores.make("local", cache_dir=bad)
    assert stores.make("nginx", parts=24, cache_dir=False).cache is None


def test_what_the_first_batch_of_a_resume_downloads_with_and_without_the_cache(
    stores: Stores, tmp_path: Path
) -> None:
    """Over nginx, resumed mid-epoch 2: the default reads a block of the batch's one or two
    shards; a node's warm cache reads nothing; a new node's cache downloads the shards of
    its parts the first batch needs, whole, while it prefetches those of the next ones."""
    position = stores.total + stores.total // 2
    largest = max(p.stat().st_size for p in stores.root.glob("*.tar"))

    def first_batch(**options: Any) -> tuple[list[int], int, int]:
        source = stores.make("nginx", **options)
        source.load_state_dict({**source.state_dict(), "position": position})
        mark = stores.nginx.mark()
        batch = [int(x) for x in next(iter(source))]
        sent, requests = stores.nginx.served(mark)
        return batch, sent, requests

    default, sent, requests = first_batch(shuffle_shards=True)
    assert len(default) == BATCH and requests <= 2 and sent <= 2 * largest
    warm = str(tmp_path / "warm")
    for _ in stores.make("nginx", parts=24, cache_dir=warm, repeat=False):
        pass  # an epoch read on this node fills its cache
    cached, sent, requests = first_batch(parts=24, cache_dir=warm)
    assert (len(cached), sent, requests) == (BATCH, 0, 0)
    cold, sent, requests = first_batch(parts=24, cache_dir=str(tmp_path / "cold"))
    # Its shards (one a sample at most) and, by the time it is counted, some of the
    # ``prefetch`` (default 8) shards of the batches after it.
    assert cold == cached and 0 < requests <= BATCH + 8 and sent <= (BATCH + 8) * largest
