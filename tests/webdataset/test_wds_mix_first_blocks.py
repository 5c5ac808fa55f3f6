"""A mixture's resume over HTTP fetches the first blocks of every set's shards at once.

NOTE [ first blocks of a batch ]: the first batch after a resume opens a shard (or more)
in each set it draws from. Each set's reader reads its own samples, so fetched set by
set, a mixture of S sets waited S round trips before its first batch. The server here
delays every shard GET by ``SLOW`` seconds and counts the most in flight at once.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from http_server import SLOW, ShardServer
from wds_helpers import COUNTS, ids, label

from detsamplers.loader import WebDatasetMix

#: The session's 7 shards (wds_helpers.COUNTS) as three sets.
SETS = [[0, 1], [2, 3], [4, 5, 6]]
STARTS = list(itertools.accumulate([0, *COUNTS]))


def shard_of(value: int) -> int:
    """The shard holding the sample labelled ``value`` (labels count samples in URL order)."""
    return next(s for s in range(len(COUNTS)) if value < STARTS[s + 1])


def mixture(urls: list[list[str]], **kwargs: Any) -> WebDatasetMix:
    options: dict[str, Any] = {"seed": 0, "batch_size": 8, "decode": (), "map": label}
    return WebDatasetMix(urls, [0.4, 0.3, 0.3], **{**options, **kwargs})


# One shard open per set, and several (the block shuffle: each set's ShardReaders).
@pytest.mark.parametrize("block", [0, 2])
def test_a_mixtures_resume_fetches_the_first_blocks_of_every_set_at_once(
    shards: str, server: ShardServer, tmp_path: Path, block: int
) -> None:
    names = [[f"data-{s:06d}.tar" for s in part] for part in SETS]
    local = [[str(Path(shards).parent / n) for n in part] for part in names]
    on_disk = mixture(local, shuffle_block_shards=block)
    # A position deep in an epoch whose batch reads from each set, from two shards of one
    # set with the block shuffle.
    for position in range(100, 1000, 8):
        on_disk.load_state_dict({**on_disk.state_dict(), "position": position})
        expected = ids(next(iter(on_disk)))
        read = {shard_of(v) for v in expected}
        if all(read & set(p) for p in SETS) and len(read) == len(SETS) + (block > 0):
            break
    else:
        raise AssertionError("no batch reads from each set")
    remote = mixture(
        [[f"{server.url}/s/{n}" for n in part] for part in names],
        index_dir=str(tmp_path / "cache"),
        shuffle_block_shards=block,
    )
    remote.load_state_dict({**remote.state_dict(), "position": position})
    server.reset()
    server.slow = {f"s/data-{s:06d}.tar" for s in range(len(COUNTS))}
    started = time.perf_counter()
    assert ids(next(iter(remote))) == expected
    took = time.perf_counter() - started
    asked = {name for _, name in server.served.requests}
    assert asked == {f"s/data-{s:06d}.tar" for s in read}
    # One round trip for the three sets: their first GETs were in flight together.
    assert server.served.most_at_once == len(read), (server.served.requests, took / SLOW)
