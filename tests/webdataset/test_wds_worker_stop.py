"""A DataLoader worker whose read raises is gone promptly once the error reaches the caller.

NOTE [ workers stop with the error ] (``_loader.py``): torch's re-raise leaves its
iterator in a reference cycle, the garbage collector closed the index queues before the
iterator's ``__del__`` could tell the workers to stop, and each worker waited out torch's
5 s join (then was terminated); while the error was held (as ``pytest.raises`` holds it)
the worker kept running. Here real workers (fork and spawn) read from moto's S3, the GCS
emulator (every shard GET answering 503, ``retries=0``) and an HTTP server on 127.0.0.1
(the shards deleted after indexing: 404), and each worker process (its pid noted by
``worker_init_fn``) must be gone within ``BOUND`` seconds of the error reaching the
caller; the same after a normal end and after a ``break``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import time
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from gcs_server import GCSServer
from http_server import ShardServer
from s3_server import S3Server
from wds_helpers import COUNTS, PATTERN, TOTAL, make

from detsamplers.loader import WebDataLoader

#: Seconds a worker may take to be gone (main: over 5 s, then terminated by torch).
BOUND = 3.0
NAMES = [f"data-{i:06d}.tar" for i in range(len(COUNTS))]

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def note_pid(folder: str, worker_id: int) -> None:
    """``worker_init_fn``: leave a file named by this worker's pid in ``folder``."""
    Path(folder, str(os.getpid())).touch()


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def seconds_until_gone(pids: list[int]) -> float:
    """Seconds until every process of ``pids`` is gone (at most ``2 * BOUND``)."""
    start = time.monotonic()
    while any(alive(pid) for pid in pids) and time.monotonic() - start < 2 * BOUND:
        time.sleep(0.02)
    return time.monotonic() - start


def loader_of(
    url: str, options: dict[str, Any], tmp_path: Path, context: str, *, repeat: bool = True
) -> WebDataLoader:
    pids = tmp_path / "pids"
    pids.mkdir()
    source = make(
        url,
        index_dir=str(tmp_path / "index"),
        storage_options=options,
        retries=0,
        timeout=5.0,
        repeat=repeat,
    )
    return WebDataLoader(
        source,
        2,
        multiprocessing_context=context,
        timeout=60,
        worker_init_fn=functools.partial(note_pid, str(pids)),
    )


def workers_of(tmp_path: Path) -> list[int]:
    pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
    assert pids  # the workers started
    return pids


def assert_gone_after_error(loader: WebDataLoader, folder: str, tmp_path: Path) -> None:
    with pytest.raises(OSError, match=rf"shard '{folder}/data-0000\d\d\.tar' failed 1 times"):
        for _ in loader:
            pass
    # The error is still held here (as a REPL's or a trainer's handler would hold it).
    assert seconds_until_gone(workers_of(tmp_path)) < BOUND


def s3_url(s3: S3Server, shards: str, bucket: str) -> str:
    s3.create_bucket(bucket)
    for name in NAMES:
        s3.put(bucket, f"s/{name}", (Path(shards).parent / name).read_bytes())
    return f"s3://{bucket}/s/{PATTERN}"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_an_s3_worker_whose_read_raises_is_gone_within_the_bound(
    s3: S3Server, shards: str, tmp_path: Path, context: str
) -> None:
    url = s3_url(s3, shards, f"stop-{context}")
    loader = loader_of(url, s3.options, tmp_path, context)
    for name in NAMES:
        s3.fail_503[f"s/{name}"] = 100
    assert_gone_after_error(loader, f"s3://stop-{context}/s", tmp_path)


def test_an_s3_worker_is_gone_within_the_bound_after_a_normal_end(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    url = s3_url(s3, shards, "stop-end")
    loader = loader_of(url, s3.options, tmp_path, "fork", repeat=False)
    assert sum(len(batch) for batch in loader) == TOTAL  # one pass, then StopIteration
    assert seconds_until_gone(workers_of(tmp_path)) < BOUND


def test_an_s3_worker_is_gone_within_the_bound_after_a_break(
    s3: S3Server, shards: str, tmp_path: Path
) -> None:
    loader = loader_of(s3_url(s3, shards, "stop-break"), s3.options, tmp_path, "fork")
    batches = iter(loader)
    assert [len(batch) for batch in islice(batches, 3)] == [2, 2, 2]
    batches.close()  # what a ``break`` out of the loop does once the iterator is dropped
    assert seconds_until_gone(workers_of(tmp_path)) < BOUND


def test_a_gcs_worker_whose_read_raises_is_gone_within_the_bound(
    gcs: GCSServer, shards: str, tmp_path: Path
) -> None:
    gcs.create_bucket("stopping")
    for name in NAMES:
        gcs.put("stopping", f"s/{name}", (Path(shards).parent / name).read_bytes())
    loader = loader_of(f"gs://stopping/s/{PATTERN}", gcs.options, tmp_path, "fork")
    for name in NAMES:
        gcs.fail_503[f"s/{name}"] = 100
    assert_gone_after_error(loader, "gs://stopping/s", tmp_path)


@pytest.mark.servers
def test_an_http_worker_whose_read_raises_is_gone_within_the_bound(
    shards: str, tmp_path: Path
) -> None:
    root = tmp_path / "served"
    shutil.copytree(Path(shards).parent, root / "s", ignore=shutil.ignore_patterns("*.json"))
    server = ShardServer(root)
    try:
        loader = loader_of(f"{server.url}/s/{PATTERN}", {}, tmp_path, "fork")
        for name in NAMES:
            (root / "s" / name).unlink()  # indexed, then gone: every GET answers 404
        with pytest.raises(OSError, match=rf"{re.escape(server.url)}/s/data-0000\d\d\.tar"):
            for _ in loader:
                pass
        assert seconds_until_gone(workers_of(tmp_path)) < BOUND
    finally:
        server.close()
