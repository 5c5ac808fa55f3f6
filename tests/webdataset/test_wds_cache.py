"""The node-local shard cache over a real nginx: each shard's bytes cross the network once.

16 shards of 2-8 KB samples are served by nginx on 127.0.0.1 (its access log counts
``$body_bytes_sent``); ranks are built in one process and share one cache folder, as the
ranks of a node do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nginx_server import Nginx
from wds_helpers import run_two_agents, simulate

from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.read import _node_cache
from detsamplers.loader._wds.read._node_cache import ShardCache, download_ranges, download_step
from detsamplers.loader._wds.remote._remote_reads import RemoteOptions
from detsamplers.loader._wds.shard._shard_info import ShardInfo

SHARDS = 16
few_workers = pytest.mark.filterwarnings("ignore:This DataLoader will create")


class Served:
    def __init__(self, nginx: Nginx, root: Path, total: int, index_dir: str) -> None:
        self.nginx, self.total, self.index_dir = nginx, total, index_dir
        self.urls = f"{nginx.url}/s/d-{{00..{SHARDS - 1:02d}}}.tar"
        self.bytes = sum(p.stat().st_size for p in (root / "s").glob("*.tar"))

    def make(self, **options: Any) -> WebDatasetSource:
        defaults: dict[str, Any] = {"seed": 0, "batch_size": 8, "decode": (), "map": _label}
        defaults["parts"] = 0  # the plain order unless a test passes parts
        return WebDatasetSource(self.urls, index_dir=self.index_dir, **{**defaults, **options})


def _label(sample: dict[str, Any]) -> int:
    return int(sample["cls"])


@pytest.fixture(scope="module")
def served(nginx_small: tuple[Nginx, int], tmp_path_factory: pytest.TempPathFactory) -> Served:
    nginx, total = nginx_small  # the session's nginx of SHARDS shards (conftest.py)
    out = Served(nginx, nginx.root, total, str(tmp_path_factory.mktemp("index")))
    out.make()  # index the shards once (cached in index_dir)
    return out


def one_epoch(served: Served, world: int, **options: Any) -> list[int]:
    labels: list[int] = []
    for rank in range(world):
        source = served.make(world_size=world, rank=rank, repeat=False, **options)
        labels.extend(int(x) for batch in source for x in batch)
    return labels


@pytest.mark.parametrize("world", [1, 2, 4])
@pytest.mark.parametrize("shuffle", [{}, {"shuffle_block_shards": 2}], ids=["tar", "shuffled"])
def test_an_epoch_on_one_node_downloads_each_shard_once_on_any_world_size(
    served: Served, tmp_path: Path, world: int, shuffle: dict[str, Any]
) -> None:
    options = {"parts": 48, "cache_dir": str(tmp_path / "cache"), **shuffle}
    mark = served.nginx.mark()
    labels = one_epoch(served, world, **options)
    sent, requests = served.nginx.served(mark)
    assert sorted(labels) == list(range(served.total))
    assert sent <= 1.05 * served.bytes, (sent / served.bytes, requests)
    # Every shard was read: whole, or the byte ranges of its ranks, which leave out at most
    # its tar end blocks (NOTE [ node fetches ]).
    assert sent >= 0.99 * served.bytes
    # A second epoch through the warm cache (new sources, as after a restart) sends nothing.
    mark = served.nginx.mark()
    assert sorted(one_epoch(served, world, **options)) == list(range(served.total))
    assert served.nginx.served(mark) == (0, 0)


def test_the_cache_gives_the_samples_the_range_reads_give_byte_for_byte(
    served: Served, tmp_path: Path
) -> None:
    plain = served.make(map=None, collate_fn=list, repeat=False, shuffle_block_shards=2)
    cached = served.make(
        map=None, collate_fn=list, repeat=False, shuffle_block_shards=2, cache_dir=str(tmp_path)
    )
    assert cached.cache is not None and plain.cache is None
    assert list(cached) == list(plain)


@few_workers
def test_dataloader_workers_share_the_cache_and_yield_the_simulated_batches(
    served: Served, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"parts": 48, "cache_dir": str(tmp_path), "world_size": 2}
    mark = served.nginx.mark()
    got = []
    for rank in range(2):
        loader = WebDataLoader(served.make(rank=rank, repeat=False, **options), num_workers=2)
        got.append([[int(x) for x in batch] for batch in loader])
    assert served.nginx.served(mark)[0] <= 1.05 * served.bytes
    expected = [simulate(served.make(rank=r, repeat=False, **options), 2, 10**6) for r in (0, 1)]
    assert got == expected


def test_a_limit_below_the_dataset_evicts_unpinned_shards_and_reads_stay_exact(
    served: Served, tmp_path: Path
) -> None:
    limit = served.bytes // 4
    options: dict[str, Any] = {"parts": 4, "cache_dir": str(tmp_path), "cache_limit": limit}
    source = served.make(repeat=False, prefetch=2, **options)
    assert sorted(int(x) for batch in source for x in batch) == list(range(served.total))
    assert source.cache is not None
    kept = sum(os.path.getsize(tmp_path / f) for f in os.listdir(tmp_path) if f.endswith(".tar"))
    assert kept <= limit + served.bytes // SHARDS * 8  # the limit, plus what was pinned last
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_a_resume_mid_epoch_downloads_only_the_shards_still_to_read(
    served: Served, tmp_path: Path
) -> None:
    options: dict[str, Any] = {"parts": 4, "cache_dir": str(tmp_path)}
    source = served.make(**options)
    whole = served.make(repeat=False, **options)
    steps = len(whole)
    state = {**source.state_dict(), "position": (steps // 2) * 8}
    resumed = served.make(**options)
    resumed.load_state_dict(state)
    mark = served.nginx.mark()
    iterator = iter(resumed)
    first = [int(x) for x in next(iterator)]
    assert first == [int(x) for x in whole.batch_at(steps // 2)]
    sent, _ = served.nginx.served(mark)
    assert 0 < sent < served.bytes  # the parts' later shards only, not the epoch's start


@pytest.mark.parametrize("world", [2, 4])
def test_with_a_cache_per_rank_each_rank_downloads_only_its_parts_shards(
    served: Served, tmp_path: Path, world: int
) -> None:
    def per_rank(parts: int) -> list[int]:
        shards = []
        for rank in range(world):
            cache = tmp_path / f"p{parts}-r{rank}"
            source = served.make(
                world_size=world, rank=rank, repeat=False, parts=parts, cache_dir=str(cache)
            )
            assert len([int(x) for batch in source for x in batch]) > 0
            shards.append(len([f for f in os.listdir(cache) if f.endswith(".tar")]))
        return shards

    # The tail (fewer than 48 samples, about one shard) is read by every rank, and a run's
    # two ends can each fall inside a shard.
    assert all(n <= SHARDS // world + 3 for n in per_rank(48))
    assert per_rank(0) == [SHARDS] * world  # the plain order: every rank reads every shard


def _launch_two_nodes(
    served: Served, tmp_path: Path, *options: str, static: bool = False
) -> list[dict[str, Any]]:
    """Two torchrun agents (a cache folder each) running ``two_nodes``; their results."""

    def node_args(node: int) -> list[str]:
        (tmp_path / f"out{node}").mkdir(exist_ok=True)
        return [
            f"--urls={served.urls}", f"--cache={tmp_path / f'cache{node}'}",
            f"--out={tmp_path / f'out{node}'}", f"--index-dir={served.index_dir}", *options,
        ]  # fmt: skip

    run_two_agents(tmp_path, "two_nodes", node_args, static=static)
    tag = next((o for o in options if o.startswith("--skip-samples=")), "=0").split("=")[1]
    results = [
        json.loads(path.read_text())
        for node in range(2)
        for path in (tmp_path / f"out{node}").glob(f"rank-*-from-{tag}.json")
    ]
    assert len(results) == 2
    return sorted(results, key=lambda r: str(r["cache"]))


# One pair of launches checks both laws: the first launch (epoch 1) reads each node's own
# parts, the relaunch on the same nodes (epoch 2) downloads nothing. (The c10d rendezvous of
# run_two_agents is launched by test_wds_mix_cache.py; parts that share a tail, in-process by
# test_with_a_cache_per_rank_each_rank_downloads_only_its_parts_shards.)
@pytest.mark.distributed
def test_two_torchrun_agents_read_their_own_parts_then_again_in_epoch_2_downloading_nothing(
    served: Served, tmp_path: Path
) -> None:
    # parts=22 divides the 682 samples, so no tail is shared (NOTE [ fixed part cover ]).
    assert served.total % 22 == 0
    mark = served.nginx.mark()
    first = _launch_two_nodes(served, tmp_path, "--parts=22", static=True)
    assert sorted(x for r in first for x in r["labels"]) == list(range(served.total))
    cached = [len([f for f in os.listdir(r["cache"]) if f.endswith(".tar")]) for r in first]
    assert all(n <= SHARDS // 2 + 3 for n in cached), cached  # each node: its half, and edges
    sent, _ = served.nginx.served(mark)
    assert sent <= served.bytes * (SHARDS + 6) / SHARDS
    mark = served.nginx.mark()
    steps = served.total // (2 * 8)
    later = (f"--skip-samples={served.total}", f"--steps={steps}")
    second = _launch_two_nodes(served, tmp_path, "--parts=22", *later, static=True)
    sent, _ = served.nginx.served(mark)
    assert sent == 0  # each node's epoch 2 is read from its own cache
    for one, two in zip(first, second, strict=True):
        assert one["rank"] == two["rank"]  # each node kept its rank (--node-rank)
        assert len(two["labels"]) == len(set(two["labels"])) == steps * 8
        assert set(two["labels"]) <= set(one["labels"])  # the same node: its own samples


def test_a_shard_rewritten_since_is_another_cache_entry_and_stale_temporaries_go(
    tmp_path: Path,
) -> None:
    cache = ShardCache(str(tmp_path), limit=1)
    info = ShardInfo("http://h/a.tar", "http://h/a.tar", (), [], size=10, version='"v1"')
    assert cache.path(info) == cache.path(ShardInfo(**{**info.__dict__}))
    assert cache.path(info) != cache.path(ShardInfo(**{**info.__dict__, "version": '"v2"'}))
    assert cache.path(info) != cache.path(ShardInfo(**{**info.__dict__, "size": 11}))
    stale, fresh = tmp_path / "x.tar.1.2.tmp", tmp_path / "y.tar.1.3.tmp"
    stale.write_bytes(b"half")
    fresh.write_bytes(b"half")
    os.utime(stale, (0, 0))
    cache._evict(0)
    assert not stale.exists() and fresh.exists()  # a running download's file is kept


def member_bytes(path: Path) -> int:
    """The bytes of a tar's members' data: what any reading of all its samples fetches."""
    with tarfile.open(path) as tar:
        return sum(m.size for m in tar.getmembers())


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.sampled_from([0, 4, 12, 48]),
    world=st.integers(1, 4),
    prefetch=st.integers(1, 8),
    limited=st.booleans(),
    shuffle=st.sampled_from([{}, {"shuffle_block_shards": 2}, {"shuffle_window": 5}]),
    seed=st.integers(0, 2**16),
)
def test_any_cache_setting_reads_the_stream_of_local_files_and_a_roomy_one_downloads_once(
    served: Served,
    tmp_path_factory: pytest.TempPathFactory,
    parts: int,
    world: int,
    prefetch: int,
    limited: bool,
    shuffle: dict[str, Any],
    seed: int,
) -> None:
    folder = str(tmp_path_factory.mktemp("cache"))
    limit = served.bytes // 3 if limited else None
    options: dict[str, Any] = {"parts": parts, "seed": seed, **shuffle}
    mark = served.nginx.mark()
    got = []
    for rank in range(world):
        common = {"world_size": world, "rank": rank, "repeat": False, **options}
        cached = served.make(cache_dir=folder, cache_limit=limit, prefetch=prefetch, **common)
        assert cached.cache is not None
        got.append([[int(x) for x in batch] for batch in cached])
    sent, _ = served.nginx.served(mark)
    if not limited:
        # Every member's data at least (ranges leave out end blocks and the padding between).
        needed = sum(member_bytes(path) for path in (served.nginx.root / "s").glob("d-*.tar"))
        assert needed <= sent <= 1.05 * served.bytes
    local = str(served.nginx.root / "s" / f"d-{{00..{SHARDS - 1:02d}}}.tar")
    for rank in range(world):  # the same shards read locally: the same batches
        plain = WebDatasetSource(
            local, batch_size=8, decode=(), map=_label, world_size=world, rank=rank,
            repeat=False, index_dir=served.index_dir, **options,
        )  # fmt: skip
        assert plain.cache is None
        assert [[int(x) for x in batch] for batch in plain] == got[rank]


def _regular_file(tmp_path: Path) -> str:
    (tmp_path / "file").write_bytes(b"x")
    return str(tmp_path / "file")


def _fifo(tmp_path: Path) -> str:
    os.mkfifo(tmp_path / "fifo")
    return str(tmp_path / "fifo")


def _symlink_to_a_file(tmp_path: Path) -> str:
    (tmp_path / "link").symlink_to(_regular_file(tmp_path))
    return str(tmp_path / "link")


def _under_a_file(tmp_path: Path) -> str:
    return os.path.join(_regular_file(tmp_path), "cache")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_regular_file, "a regular file"),
        (_fifo, r"a FIFO \(named pipe\)"),
        (_symlink_to_a_file, "a symlink to a regular file"),
        (_under_a_file, r"a folder this process can create, but got cache_dir='[^']+' \(Not a"),
    ],
    ids=["file", "fifo", "symlink-to-file", "under-a-file"],
)
def test_a_cache_dir_that_is_no_folder_is_refused_by_name_before_any_download(
    served: Served, tmp_path: Path, make: Any, said: str
) -> None:
    folder = make(tmp_path)
    mark = served.nginx.mark()
    with pytest.raises(
        ValueError, match=rf"^cache_dir should be .*{said}.*pass the path of a fold"
    ):
        served.make(parts=4, cache_dir=folder)
    assert served.nginx.served(mark)[0] == 0
    assert not os.path.isdir(folder)


@pytest.mark.subprocess
def test_a_cache_dir_the_process_cannot_write_is_refused_by_name() -> None:
    # Root writes anywhere: the check runs as "nobody" in a child, over a folder it cannot write
    # (in /tmp itself: pytest's own folders are closed to other users).
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        folder = os.path.join(top, "locked")
        os.mkdir(folder, 0o755)
        code = (
            "import os\n"
            "from detsamplers.loader._wds.read._node_cache import ShardCache\n"
            "os.setgid(65534); os.setuid(65534)  # after the imports: the venv is root's\n"
            "try:\n"
            f"    ShardCache({folder!r})\n"
            "except ValueError as exn:\n"
            "    print(exn)\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.stdout.startswith(
            f"cache_dir should be a folder this process can write, but got cache_dir='{folder}'"
        ), done
        assert not os.listdir(folder)


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 9 << 20), start=st.integers(0, 9 << 20), read_ahead=st.integers(1, 5 << 20)
)
def test_download_ranges_tile_the_bytes_asked_for_in_steps_of_at_least_a_mebibyte(
    size: int, start: int, read_ahead: int
) -> None:
    ranges = download_ranges(size, read_ahead, start)
    step = download_step(read_ahead)
    assert [low for low, _ in ranges] == list(range(start, size, step))
    assert all(high - low == min(step, size - low) for low, high in ranges)
    assert sum(high - low for low, high in ranges) == max(0, size - start)


@pytest.mark.parametrize("copied", [None, (1 << 20, 3 << 20)])
def test_a_download_requests_exactly_the_ranges_download_ranges_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copied: tuple[int, int] | None
) -> None:
    data = os.urandom((5 << 20) + 7)
    info = ShardInfo("http://h/a.tar", "http://h/a.tar", (), [], size=len(data), version='"v"')
    requested: list[tuple[int, int]] = []

    class Recorded:  # the remote shard, served from ``data``: what it was asked for recorded
        def __init__(self, *args: Any) -> None:
            del args

        def fetch(self, start: int, end: int) -> bytes:
            requested.append((start, end))
            return data[start:end]

        def fetch_to(self, start: int, end: int, file: Any) -> None:  # what a download calls
            file.write(self.fetch(start, end))

    monkeypatch.setattr(_node_cache, "RemoteShard", Recorded)
    cache = ShardCache(str(tmp_path / "c"), options=RemoteOptions(read_ahead=2 << 20))
    want = download_ranges(len(data), 2 << 20)
    if copied is not None:  # the folder holds a range of the shard: only the rest is fetched
        low, high = copied
        cache.ranges = True
        Path(cache.range_path(info, low, high)).write_bytes(data[low:high])
        want = download_ranges(low, 2 << 20) + download_ranges(len(data), 2 << 20, high)
    temporary = str(tmp_path / "t")
    cache._write(info, temporary)
    assert requested == want and Path(temporary).read_bytes() == data
