"""A window shuffle over remote shards without the node cache (NOTE [ remote windows ]).

Each window of a remote shard is fetched whole through the shard's stream and kept, its tar
headers checked, instead of about one request a sample. Read over a real nginx on 127.0.0.1
serving shards of this module's own (so that one test may damage a copy), counting the
requests and bytes in nginx's log: the same records in the same order as on disk, with and
without workers, after a resume, and a damaged header refused by name; and a script that
ends mid-epoch over these shards exits without a traceback.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import webdataset as wds
from nginx_server import Nginx
from wds_helpers import label

from detsamplers.loader import WebDataLoader, WebDatasetSource
from detsamplers.loader._wds.index._index_shards import index_shards
from detsamplers.loader._wds.read import _shard_reader
from detsamplers.loader._wds.read._shard_reader import ShardReader
from detsamplers.loader._wds.remote._urls import expand_urls

pytestmark = pytest.mark.servers

# Windows of 64 samples of 3-9 KB (about 400 KB) are larger than a stream's first block (256
# KiB), so that reading their samples one by one misses the kept blocks, as with real shards.
SHARDS, PER_SHARD, WINDOW, BATCH = 4, 200, 64, 16
PATTERN = f"d-{{00..{SHARDS - 1:02d}}}.tar"


def write_shards(folder: Path) -> int:
    """``SHARDS`` shards of ``PER_SHARD`` samples (``bin``: 3-9 KB, ``cls``: a running label)."""
    folder.mkdir(parents=True)
    rng = random.Random(0)
    for shard in range(SHARDS):
        with wds.TarWriter(str(folder / f"d-{shard:02d}.tar")) as sink:
            for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
                payload = rng.randbytes(rng.randint(3 << 10, 9 << 10))
                sink.write({"__key__": f"k{i:05d}", "bin": payload, "cls": i})
    return SHARDS * PER_SHARD


class Served:
    """Shards on disk and the same files served by nginx (``url``), with their counts."""

    def __init__(self, root: Path, run: Path) -> None:
        self.total = write_shards(root / "s")
        self.root = root
        self.nginx = Nginx(root, run)
        self.files = sorted((root / "s").glob("*.tar"))
        self.bytes = sum(p.stat().st_size for p in self.files)
        self.index_dir = str(run / "index")

    def make(self, where: str, **options: Any) -> WebDatasetSource:
        urls = (
            f"{self.nginx.url}/s/{PATTERN}" if where == "nginx" else str(self.root / "s" / PATTERN)
        )
        base: dict[str, Any] = {"seed": 3, "batch_size": BATCH, "decode": (), "map": label}
        if where == "nginx":
            base["index_dir"] = self.index_dir
        return WebDatasetSource(urls, **{**base, "shuffle_window": WINDOW, **options})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    here = Served(tmp_path_factory.mktemp("remote-windows"), tmp_path_factory.mktemp("run"))
    try:
        yield here
    finally:
        here.nginx.close()


def labels(batches: Any) -> list[int]:
    return [int(x) for batch in batches for x in batch]


def windows(served: Served) -> int:
    counts = [len(info.keys) for info in index_shards([str(p) for p in served.files])]
    return sum(-(-count // WINDOW) for count in counts)


def test_an_epoch_fetches_each_window_once_not_a_request_a_sample(served: Served) -> None:
    local = labels(served.make("local", repeat=False))
    assert sorted(local) == list(range(served.total))
    served.make("nginx")  # index files built and cached before the count
    mark = served.nginx.mark()
    remote = labels(served.make("nginx", repeat=False))
    sent, requests = served.nginx.served(mark)
    assert remote == local
    # A request a window at most (a block may hold the next windows), against one request
    # for most samples before (about 0.7 a sample); each shard's bytes about once.
    assert requests <= windows(served) < served.total // 3
    assert sent <= 1.25 * served.bytes


def test_a_resume_reads_the_window_of_its_first_batch_in_one_request(served: Served) -> None:
    position = served.total + served.total // 2 + 3  # mid-epoch 2, not on a batch boundary
    first_two = {}
    for where in ("local", "nginx"):
        source = served.make(where)
        source.load_state_dict({**source.state_dict(), "position": position})
        mark = served.nginx.mark()
        iterator = iter(source)
        first_two[where] = labels([next(iterator), next(iterator)])
    sent, requests = served.nginx.served(mark)
    assert first_two["local"] == first_two["nginx"]
    largest = max(p.stat().st_size for p in served.files)
    # Two batches span at most two windows of two shards: a request each, at most a block.
    assert requests <= 2 and sent <= 2 * max(largest, 256 << 10)


@pytest.mark.parametrize("workers", [2])
def test_workers_read_the_same_records_each_fetching_the_windows_it_reads(
    served: Served, workers: int
) -> None:
    local = labels(served.make("local", repeat=False))
    served.make("nginx")
    mark = served.nginx.mark()
    loader = WebDataLoader(served.make("nginx", repeat=False), num_workers=workers)
    assert labels(loader) == local
    sent, requests = served.nginx.served(mark)
    # Each worker keeps its own window: a window is fetched by each worker that reads one of
    # its batches (NOTE [ remote windows ]), so at most ``workers`` times the single reader's.
    assert requests <= workers * windows(served)
    assert sent <= workers * 1.25 * served.bytes


def test_a_window_sample_is_the_sample_read_alone_without_a_local_path(served: Served) -> None:
    url = f"{served.nginx.url}/s/d-01.tar"
    shards = index_shards(expand_urls(url), served.index_dir)
    count = len(shards[0].keys)
    alone = ShardReader(shards)
    expected = [alone.read(0, i) for i in range(count)]
    alone.close()
    windowed = ShardReader(shards, window=WINDOW)
    order = [
        i
        for start in range(0, count, WINDOW)
        for i in reversed(range(start, min(count, start + WINDOW)))
    ]
    chunks = [order[i : i + BATCH] for i in range(0, count, BATCH)]
    got = [windowed.read_many([0] * len(chunk), chunk) for chunk in chunks]
    windowed.close()
    flat = [sample for batch in got for sample in batch]
    assert flat == [expected[i] for i in order]
    assert all("__local_path__" not in sample for sample in flat)
    with pytest.raises(IndexError, match=rf"sample {count} of {count} in shard '{url}'"):
        ShardReader(shards, window=WINDOW).read_many([0, 0], [0, count])


def test_a_window_too_large_to_keep_is_read_sample_by_sample(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = labels(served.make("local", repeat=False))
    served.make("nginx")
    monkeypatch.setattr(_shard_reader, "WINDOW_BYTES", 1)
    mark = served.nginx.mark()
    assert labels(served.make("nginx", repeat=False)) == local
    assert served.nginx.served(mark)[1] > windows(served)  # the reads before: per sample


def test_a_header_that_no_longer_matches_the_index_is_refused_by_name(
    served: Served, tmp_path: Path
) -> None:
    """A copy whose member name changed in place (same size and mtime, so the same ETag)."""
    root = tmp_path / "root"
    shutil.copytree(served.root / "s", root / "s")
    nginx = Nginx(root, tmp_path / "run")
    try:
        url = f"{nginx.url}/s/d-02.tar"
        source = WebDatasetSource(
            url, seed=0, batch_size=BATCH, decode=(), map=label, shuffle_window=WINDOW,
            index_dir=str(tmp_path / "index"), shuffle_shards=False, repeat=False,
        )  # fmt: skip
        shard = root / "s" / "d-02.tar"
        with tarfile.open(shard) as tar:
            # The ustar header of a member of the third window (a pax header may precede it).
            header = tar.getmembers()[2 * 2 * WINDOW].offset_data - 512
        stat = shard.stat()
        data = bytearray(shard.read_bytes())
        assert data[header : header + 1] == b"k"
        data[header] = ord("z")  # its name, in place: the same size
        shard.write_bytes(bytes(data))
        os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and mtime: the same ETag
        with pytest.raises(ValueError, match=r"d-02\.tar' does not hold"):
            labels(source)
    finally:
        nginx.close()


@pytest.mark.subprocess
@pytest.mark.parametrize("window", [0, WINDOW])
def test_a_script_that_ends_mid_epoch_exits_without_a_traceback(
    served: Served, window: int
) -> None:
    """Its reader is closed at interpreter exit, with a stream's prefetch thread alive (the
    shards are larger than a first block, so reading on starts one)."""
    script = (
        "import sys\n"
        "from detsamplers.loader import WebDatasetSource\n"
        "source = WebDatasetSource(sys.argv[1], seed=0, batch_size=16, decode=(),\n"
        "    shuffle_shards=False, shuffle_window=int(sys.argv[2]), index_dir=sys.argv[3])\n"
        "batches = iter(source)\n"
        "for _ in range(5):\n"
        "    next(batches)\n"
    )
    served.make("nginx")  # the index files, built here
    url = f"{served.nginx.url}/s/{PATTERN}"
    done = subprocess.run(
        [sys.executable, "-c", script, url, str(window), served.index_dir],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
