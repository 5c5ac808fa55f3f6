"""A resume over HTTP with the set index: its requests (NOTE [ first blocks of a batch ])."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from http_server import ShardServer
from wds_helpers import COUNTS, PATTERN, TOTAL, ids, make

from detsamplers.__main__ import main
from detsamplers.loader._wds.index._set_index_file import SET_INDEX_NAME
from detsamplers.loader._wds.remote._remote_reads import _FIRST_BLOCK

FOLDER = "resumed"
NAMES = [f"data-{i:06d}.tar" for i in range(len(COUNTS))]


@pytest.fixture
def url(server: ShardServer, http_root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The shards in their own served folder, indexed as the docs say (the index command)."""
    folder = http_root / FOLDER
    if not (folder / SET_INDEX_NAME).exists():
        shutil.copytree(http_root / "s", folder, dirs_exist_ok=True)
        url = f"{server.url}/{FOLDER}/{PATTERN}"
        assert main(["index", url, "--out", str(folder)]) == 0
        capsys.readouterr()
    server.reset()
    return f"{server.url}/{FOLDER}/{PATTERN}"


def crossing(options: dict[str, Any], shards: str) -> int:
    """A position in epoch 3 whose batch of 8 reads from more than one shard."""
    source = make(shards, **options)
    for position in range(2 * TOTAL, 3 * TOTAL, 8):
        if len({s for s, _ in source.locate(range(position, position + 8))}) > 1:
            return position
    raise AssertionError("no batch crosses a shard")


# One shard open at a time, and several (the block shuffle, ShardReaders); with parts the
# node cache reads (NOTE [ shard cache ]).
@pytest.mark.parametrize("block", [0, 2])
def test_a_resume_asks_for_the_set_index_then_the_first_blocks_of_its_batchs_shards_at_once(
    server: ShardServer, url: str, shards: str, tmp_path: Path, block: int
) -> None:
    options: dict[str, Any] = {"batch_size": 8, "shuffle_block_shards": block}
    position = crossing(options, shards)
    local = make(shards, **options)
    local.load_state_dict({**local.state_dict(), "position": position})
    server.together = {f"{FOLDER}/{name}" for name in NAMES}
    source = make(url, index_dir=str(tmp_path / "cache"), **options)
    source.load_state_dict({**source.state_dict(), "position": position})
    assert ids(next(iter(source))) == ids(next(iter(local)))
    # One request for every index (its 206 also settles Range support: no HEAD), then one
    # ranged GET per shard of the batch, all in flight at once.
    requests = server.served.requests
    assert requests[0] == ("GET", f"{FOLDER}/{SET_INDEX_NAME}")
    assert (f"{FOLDER}/{SET_INDEX_NAME}", 206) in server.served.statuses
    located = source.locate(range(position, position + 8))
    read = sorted({s for s, _ in located})
    assert {r for r in requests[1:]} == {("GET", f"{FOLDER}/{NAMES[s]}") for s in read}
    assert len(read) > 1 and server.served.most_at_once > 1  # a sequential read: 1
    # Each shard's first is the block a first read of it fetches, from the tar header of its
    # first sample in the batch (checked: NOTE [ set index ]); in tar order the only one (the
    # block shuffle jumps within its shards).
    for shard in read:
        index = next(i for s, i in located if s == shard)
        members = source.shards[shard].members[index]
        first, last = members[0][1] - 512, members[-1][1] + members[-1][2]
        stop = min(source.shards[shard].size, max(last, first + _FIRST_BLOCK))
        ranges = server.served.ranges[f"{FOLDER}/{NAMES[shard]}"]
        assert ranges[0] == (first, stop)
        assert block or len(ranges) == 1


def test_a_server_that_ignores_range_requests_is_refused_though_it_sent_the_set_index(
    server: ShardServer, url: str, tmp_path: Path
) -> None:
    server.no_range = {f"{FOLDER}/{SET_INDEX_NAME}", *(f"{FOLDER}/{name}" for name in NAMES)}
    with pytest.raises(ValueError, match=r"data-000000\.tar': the server ignores Range requests"):
        make(url, index_dir=str(tmp_path / "cache"))
    assert server.served.requests == [
        ("GET", f"{FOLDER}/{SET_INDEX_NAME}"),  # a 200: Range support is still open
        ("HEAD", f"{FOLDER}/{NAMES[0]}"),
        ("GET", f"{FOLDER}/{NAMES[0]}"),
    ]


def test_a_resume_with_the_shards_own_index_files_sends_no_head(
    server: ShardServer, http_root: Path, shards: str, tmp_path: Path
) -> None:
    # The index files as the index command writes them (each records its shard's strong
    # ETag, which every read checks), without the set index: the index files, asked with
    # Range: bytes=0- (a 206 settles the host's Range support), then the range GETs.
    folder = http_root / "files-only"
    shutil.copytree(http_root / "s", folder, dirs_exist_ok=True)
    url = f"{server.url}/files-only/{PATTERN}"
    assert main(["index", url, "--out", str(folder)]) == 0
    (folder / SET_INDEX_NAME).unlink()
    options: dict[str, Any] = {"batch_size": 8}
    position = crossing(options, shards)
    local = make(shards, **options)
    local.load_state_dict({**local.state_dict(), "position": position})
    server.reset()
    source = make(url, index_dir=str(tmp_path / "cache"), **options)
    source.load_state_dict({**source.state_dict(), "position": position})
    assert ids(next(iter(source))) == ids(next(iter(local)))
    requests = server.served.requests
    assert [method for method, _ in requests if method != "GET"] == []
    index_gets = [name for _, name in requests if name.endswith(".index.npz")]
    wanted = [SET_INDEX_NAME] + [f"{name}.index.npz" for name in NAMES]  # the set's: 404
    assert sorted(index_gets) == sorted(f"files-only/{name}" for name in wanted)
    read = {s for s, _ in source.locate(range(position, position + 8))}
    shard_gets = [name for _, name in requests if name.endswith(".tar")]
    assert sorted(shard_gets) == [f"files-only/{NAMES[s]}" for s in sorted(read)]
